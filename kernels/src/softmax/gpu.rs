//! Softmax launcher: checks the operands, then picks by shape, alignment and arch: the span
//! program (a warp per span of 16 bytes' worth of rows: short rows whose length is no whole
//! number of 16-byte vectors, on sm_80+) or a row layout shared with layernorm (`crate::rows`).
//! The causal softmax ([`softmax_causal`]) picks the same way among the same programs built
//! with the mask (`_causal` instantiations, one more argument: the query count). An f32 input
//! with an f16 or bf16 output (a bf16 run's unfused attention scores) takes the row program.

use crate::cuda::{
    invalid, kernel_params, to_i32, ArchRequirement, DevPtr, Gpu, Instantiation, KernelError,
    KernelParam, LaunchDims,
};
use crate::rows::{row_input_dtype, row_storage_name, RowConfig, ROW_STORAGE};
use crate::types::DType;

const SOURCE: &str = include_str!("softmax.cu");

/// Warps per block of the span program (softmax.cu, `softmax_spans`), one span each. Small
/// blocks let the scheduler fill SMs to the last warp: 16 blocks of 4 warps at 197 columns
/// (12.6 KB of shared memory each) make a full SM.
const SPAN_WARPS: u32 = 4;
/// The longest row the span program takes: 16 elements a lane (512). Its span, 8 KB, leaves
/// four warps' worth (32 KB) under the 48 KB of dynamic shared memory a launch gets by
/// default. Every count from 1 is instantiated: the kernel relies on the exact count.
const SPAN_MAX_PER_LANE: u32 = 16;
/// The span program copies with cp.async.
const SPAN_MIN_CC: (u32, u32) = (8, 0);

/// The span program's one meta-parameter besides the dtype (and the fixed [`SPAN_WARPS`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct SpanConfig {
    /// Elements of a row per lane: exactly ceil(cols / 32), which the kernel relies on (only
    /// a lane's last slot may fall past the row).
    pub per_lane: u32,
}

impl SpanConfig {
    /// The span program for rows of `cols` when it applies, on a device of compute capability
    /// `cc`: x and out 16-byte aligned (every span then starts aligned, see softmax.cu), and
    /// a row length that is not a whole number of 16-byte vectors (when it is, the row program
    /// already moves 16 bytes per access), of at most [`SPAN_MAX_PER_LANE`] elements a lane.
    pub fn select(
        dtype: DType,
        cols: usize,
        pointers: &[DevPtr],
        cc: (u32, u32),
    ) -> Option<SpanConfig> {
        if cc < SPAN_MIN_CC
            || cols.is_multiple_of(Self::rows_per_span(dtype))
            || !pointers.iter().all(|p| p.is_aligned(16))
        {
            return None;
        }
        let per_lane = cols.div_ceil(32) as u32;
        (per_lane <= SPAN_MAX_PER_LANE).then_some(SpanConfig { per_lane })
    }

    /// Rows per span: one 16-byte vector's worth of elements (also the elements of a vector).
    pub fn rows_per_span(dtype: DType) -> usize {
        16 / dtype.size_bytes()
    }

    pub fn block_threads(&self) -> u32 {
        32 * SPAN_WARPS
    }

    pub fn blocks(&self, dtype: DType, rows: usize) -> usize {
        rows.div_ceil(Self::rows_per_span(dtype))
            .div_ceil(SPAN_WARPS as usize)
    }

    /// Dynamic shared memory: a span, `cols` 16-byte vectors, per warp. At most 32 KB (512
    /// columns), under the 48 KB a launch gets without raising the limit.
    pub fn shared_bytes(&self, cols: usize) -> u32 {
        (SPAN_WARPS as usize * cols * 16) as u32
    }
}

kernel_params! {
    /// The programs' parameters (softmax_rows and softmax_spans take the same); the causal
    /// programs take the query count last.
    struct SoftmaxParams {
        x: const_ptr,
        out: mut_ptr,
        rows: i32,
        cols: i32,
        scale: f32,
        queries: optional_i32,
    }
}

/// The wrapper's parameters (x in `input`, out in `dtype`), `queries` with `causal`.
fn params(input: DType, dtype: DType, causal: bool) -> Vec<KernelParam> {
    SoftmaxParams {
        x: DevPtr::of_type(input),
        out: DevPtr::of_type(dtype),
        rows: 0,
        cols: 0,
        scale: 0.0,
        queries: causal.then_some(0),
    }
    .params()
}

/// The name suffix of the causal programs.
fn causal_suffix(causal: bool) -> &'static str {
    if causal {
        "_causal"
    } else {
        ""
    }
}

/// The row program reading `input` and writing `dtype`.
fn instantiation(input: DType, dtype: DType, config: RowConfig, causal: bool) -> Instantiation {
    let mut template_args = vec![input.cuda_type().to_string(), dtype.cuda_type().to_string()];
    template_args.extend(config.template_args());
    template_args.push(causal.to_string());
    let types = row_storage_name(input, dtype);
    Instantiation {
        name: format!("softmax_{types}_{}{}", config.tag(), causal_suffix(causal)),
        family: "softmax",
        source: SOURCE,
        headers: &[],
        function: "softmax_rows",
        template_args,
        params: params(input, dtype, causal),
        block_threads: config.block_threads(),
        min_blocks_per_sm: 0,
        arch: ArchRequirement::AtLeast(7, 0),
    }
}

fn span_instantiation(dtype: DType, config: SpanConfig, causal: bool) -> Instantiation {
    Instantiation {
        name: format!(
            "softmax_{}_span_l{}_w{SPAN_WARPS}{}",
            dtype.name(),
            config.per_lane,
            causal_suffix(causal)
        ),
        family: "softmax",
        source: SOURCE,
        headers: &[],
        function: "softmax_spans",
        template_args: vec![
            dtype.cuda_type().to_string(),
            config.per_lane.to_string(),
            SPAN_WARPS.to_string(),
            causal.to_string(),
        ],
        params: params(dtype, dtype, causal),
        block_threads: config.block_threads(),
        min_blocks_per_sm: 0,
        arch: ArchRequirement::AtLeast(SPAN_MIN_CC.0, SPAN_MIN_CC.1),
    }
}

/// Every program either launcher can pick, for every storage pair: non-causal, then causal
/// (the unfused attention of a text tower runs in any dtype, f32 included, and at any length).
/// The span program reads and writes one type.
pub(crate) fn instantiations() -> Vec<Instantiation> {
    [false, true]
        .into_iter()
        .flat_map(|causal| {
            ROW_STORAGE.into_iter().flat_map(move |(input, dtype)| {
                let spans = if input == dtype { SPAN_MAX_PER_LANE } else { 0 };
                RowConfig::all(input)
                    .into_iter()
                    .map(move |config| instantiation(input, dtype, config, causal))
                    .chain((1..=spans).map(move |per_lane| {
                        span_instantiation(dtype, SpanConfig { per_lane }, causal)
                    }))
            })
        })
        .collect()
}

/// `out[r, :] = softmax(scale * x[r, :])` for `rows` rows of `cols` (as `cpu::softmax`). out
/// holds `dtype`; x holds `dtype`, or f32 where `dtype` is f16 or bf16.
pub fn softmax(
    gpu: &Gpu,
    dtype: DType,
    x: DevPtr,
    rows: usize,
    cols: usize,
    scale: f32,
    out: DevPtr,
) -> Result<(), KernelError> {
    launch(gpu, dtype, x, rows, cols, scale, None, out)
}

/// The causal softmax of a text tower's unfused attention (as `cpu::softmax_causal`): `x`
/// holds the scores `[batch, heads, queries, keys]` as `rows = batch · heads · queries` rows
/// of `cols = keys = queries`, so row r belongs to query `q = r % queries`; its columns
/// `0..=q` get `softmax(scale * x[r, 0..=q])` and the columns past `q` exactly 0, whatever x
/// holds there (the masked scores need not be written, nor finite). In place (out = x) works
/// as for [`softmax`].
#[allow(clippy::too_many_arguments)]
pub fn softmax_causal(
    gpu: &Gpu,
    dtype: DType,
    x: DevPtr,
    rows: usize,
    cols: usize,
    queries: usize,
    scale: f32,
    out: DevPtr,
) -> Result<(), KernelError> {
    check_causal(rows, cols, queries)?;
    launch(gpu, dtype, x, rows, cols, scale, Some(queries), out)
}

/// The shape a causal softmax takes: square scores (as many keys as queries), whole
/// `[batch, heads]` matrices of rows.
fn check_causal(rows: usize, cols: usize, queries: usize) -> Result<(), KernelError> {
    if queries != cols {
        return Err(invalid!(
            "causal softmax: each row holds the scores of one query against every key, as \
             many keys as queries; got {cols} columns for {queries} queries"
        ));
    }
    if !rows.is_multiple_of(queries.max(1)) {
        return Err(invalid!(
            "causal softmax: {rows} rows are no whole number of [{queries} queries] matrices"
        ));
    }
    Ok(())
}

/// `queries`: `Some` for the causal programs.
#[allow(clippy::too_many_arguments)]
fn launch(
    gpu: &Gpu,
    dtype: DType,
    x: DevPtr,
    rows: usize,
    cols: usize,
    scale: f32,
    queries: Option<usize>,
    out: DevPtr,
) -> Result<(), KernelError> {
    if rows == 0 {
        return Ok(());
    }
    if cols == 0 {
        return Err(invalid!("softmax over rows of 0 elements"));
    }
    if !scale.is_finite() {
        return Err(invalid!("softmax scale must be finite, got {scale}"));
    }
    let elements = rows
        .checked_mul(cols)
        .ok_or_else(|| invalid!("softmax {rows} x {cols} overflows"))?;
    let input = row_input_dtype(x, dtype);
    x.expect("softmax input", input, elements)?;
    out.expect("softmax output", dtype, elements)?;
    let (rows_i32, cols_i32) = (to_i32(rows, "softmax rows")?, to_i32(cols, "softmax cols")?);
    let args = SoftmaxParams {
        x,
        out,
        rows: rows_i32,
        cols: cols_i32,
        scale,
        queries: queries.map(|q| to_i32(q, "softmax queries")).transpose()?,
    }
    .args();
    let causal = queries.is_some();
    let span = match input == dtype {
        true => SpanConfig::select(dtype, cols, &[x, out], gpu.compute_capability()),
        false => None,
    };
    if let Some(config) = span {
        return gpu.launch(
            &span_instantiation(dtype, config, causal),
            LaunchDims {
                grid: (config.blocks(dtype, rows) as u32, 1, 1),
                block: config.block_threads(),
                shared_bytes: config.shared_bytes(cols),
                cluster: 1,
            },
            &args,
        );
    }
    // The wider type's 16 bytes set the vector width.
    let config = RowConfig::select(input, cols, &[x, out]);
    gpu.launch(
        &instantiation(input, dtype, config, causal),
        LaunchDims {
            // One block per ROWS rows. A persistent grid (as many blocks as fit at once, each
            // walking rows) has no measurement taken alone on a GPU: open.
            grid: (config.blocks(rows) as u32, 1, 1),
            block: config.block_threads(),
            shared_bytes: 0,
            cluster: 1,
        },
        &args,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pointer(address: u64, dtype: DType) -> DevPtr {
        DevPtr {
            ptr: address,
            len: 0,
            dtype,
        }
    }

    const HOPPER: (u32, u32) = (9, 0);

    #[test]
    fn vit_attention_rows_take_the_span_program() {
        let (x, out) = (pointer(0x10000, DType::F16), pointer(0x20000, DType::F16));
        let config = SpanConfig::select(DType::F16, 197, &[x, out], HOPPER)
            .expect("f16 [151296, 197] with aligned operands takes the span program");
        assert_eq!(config.per_lane, 7);
        assert_eq!(config.blocks(DType::F16, 151_296), 151_296 / 8 / 4);
        assert_eq!(config.shared_bytes(197), 4 * 197 * 16);
        assert_eq!(
            span_instantiation(DType::F16, config, false).name,
            "softmax_f16_span_l7_w4"
        );
        // A batch-1 attention ([12 * 197, 197]) ends in a partial span of 4 rows.
        assert_eq!(
            config.blocks(DType::F16, 12 * 197),
            (12 * 197usize).div_ceil(8).div_ceil(4)
        );
    }

    #[test]
    fn span_program_only_where_it_applies() {
        let aligned = pointer(0x10000, DType::F16);
        let select =
            |dtype, cols, pointers: &[DevPtr], cc| SpanConfig::select(dtype, cols, pointers, cc);
        // Misaligned x or out: every span would start misaligned.
        for misaligned in [0x10002u64, 0x10008] {
            let odd = pointer(misaligned, DType::F16);
            assert_eq!(select(DType::F16, 197, &[odd, aligned], HOPPER), None);
            assert_eq!(select(DType::F16, 197, &[aligned, odd], HOPPER), None);
        }
        // Rows of whole 16-byte vectors: the row program's vectors already apply.
        for cols in [8, 64, 200, 768] {
            assert_eq!(select(DType::F16, cols, &[aligned, aligned], HOPPER), None);
        }
        let f32_aligned = pointer(0x10000, DType::F32);
        assert_eq!(select(DType::F32, 196, &[f32_aligned], HOPPER), None);
        assert!(select(DType::F32, 197, &[f32_aligned], HOPPER).is_some());
        assert!(select(DType::BF16, 250, &[aligned], HOPPER).is_some());
        // No cp.async before sm_80; rows too long to hold 16 a lane.
        assert_eq!(select(DType::F16, 197, &[aligned], (7, 5)), None);
        assert!(select(DType::F16, 197, &[aligned], (8, 0)).is_some());
        assert!(select(DType::F16, 511, &[aligned], HOPPER).is_some());
        assert_eq!(select(DType::F16, 513, &[aligned], HOPPER), None);
    }

    #[test]
    fn span_selection_covers_the_row_and_stays_in_the_registry() {
        let registered: Vec<String> = instantiations().into_iter().map(|i| i.name).collect();
        for dtype in DType::ALL {
            let aligned = pointer(0x10000, dtype);
            for cols in 1..=1100 {
                let Some(config) = SpanConfig::select(dtype, cols, &[aligned, aligned], HOPPER)
                else {
                    continue;
                };
                for causal in [false, true] {
                    let name = span_instantiation(dtype, config, causal).name;
                    assert!(registered.contains(&name), "{name} is not registered");
                }
                // Exactly the slots the row needs: the kernel masks only a lane's last one.
                let per_lane = config.per_lane as usize;
                assert!(
                    32 * (per_lane - 1) < cols && cols <= 32 * per_lane,
                    "{dtype} {cols}: {config:?}"
                );
                assert!(config.shared_bytes(cols) <= 48 * 1024);
            }
        }
    }

    #[test]
    fn causal_programs_are_registered_beside_the_others() {
        let registered = instantiations();
        let names: Vec<&str> = registered.iter().map(|i| i.name.as_str()).collect();
        for (input, dtype) in ROW_STORAGE {
            for config in RowConfig::all(input) {
                for causal in [false, true] {
                    let inst = instantiation(input, dtype, config, causal);
                    assert!(names.contains(&inst.name.as_str()), "{}", inst.name);
                    // The causal wrapper takes the query count last.
                    assert_eq!(inst.params.len(), if causal { 6 } else { 5 });
                    assert_eq!(inst.template_args.last().unwrap(), &causal.to_string());
                }
            }
        }
        assert_eq!(registered.len() % 2, 0);
        let causal = names.iter().filter(|n| n.ends_with("_causal")).count();
        assert_eq!(
            2 * causal,
            registered.len(),
            "one causal program for each other one"
        );
        // CLIP's 77 queries in bf16: the span program of 3 elements a lane, causal.
        let aligned = pointer(0x10000, DType::BF16);
        let config = SpanConfig::select(DType::BF16, 77, &[aligned, aligned], HOPPER).unwrap();
        assert_eq!(
            span_instantiation(DType::BF16, config, true).name,
            "softmax_bf16_span_l3_w4_causal"
        );
    }

    #[test]
    fn causal_shapes_are_checked() {
        assert!(check_causal(2 * 12 * 77, 77, 77).is_ok());
        assert!(check_causal(0, 5, 5).is_ok());
        let e = check_causal(77, 76, 77).unwrap_err().to_string();
        assert!(e.contains("76 columns for 77 queries"), "{e}");
        let e = check_causal(78, 77, 77).unwrap_err().to_string();
        assert!(e.contains("78 rows"), "{e}");
    }
}
