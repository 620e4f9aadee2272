//! The matmul on a [`Gpu`]: checks the views, turns the chosen tile into a configuration from
//! the pointers' alignment (config.rs) and launches it with its arguments. The tile is an
//! input: [`matmul`] takes the tuned one (tuning.rs) or the cost model's (selection.rs), and
//! [`matmul_with_tile`] the caller's.

use crate::cuda::{
    invalid, to_i32, to_i64, DevPtr, DeviceBuffer, Gpu, KernelArg, KernelError, LaunchDims,
};
use crate::matmul::config::{configure, MixedOutput};
use crate::matmul::problem::MatmulProblem;
use crate::matmul::selection::{
    rows_aligned, sm_count, split_k, split_k_partial_bytes, tiles_for, MatmulTile, Program,
};
use crate::matmul::tuning::{matmul_choice, MatmulStorage};
use crate::types::DType;
use std::sync::Mutex;

/// `c = epilogue(A · B)` for every (batch, head) of `p`; see [`MatmulProblem`]. A, B and
/// the bias hold `dtype`; with f16/bf16 operands, C and the residual may hold f32 (a
/// residual stream kept in f32: C and R f32 on [N, K] weights; or C f32 with the residual
/// in `dtype` and no activation, as the patch projection writes the stream's start). Runs on
/// the tile the tuning table holds for `p` on this device, else on the cost model's.
#[allow(clippy::too_many_arguments)]
pub fn matmul(
    gpu: &Gpu,
    dtype: DType,
    p: &MatmulProblem,
    a: DevPtr,
    b: DevPtr,
    bias: Option<DevPtr>,
    residual: Option<DevPtr>,
    c: DevPtr,
) -> Result<(), KernelError> {
    let storage = MatmulStorage {
        output: c.dtype,
        residual: residual.filter(|_| p.epilogue.residual).map(|r| r.dtype),
    };
    let (tile, _) = matmul_choice(gpu, dtype, p, storage)?;
    launch_with_tile(gpu, dtype, p, tile, a, b, bias, residual, c)
}

/// [`matmul`] with the tile shape forced instead of chosen: for tuning and for
/// benchmarks that compare tile shapes. `tile` must be one of [`tiles_for`]`(dtype)`.
/// f16/bf16 operands whose rows are not 16-byte aligned still run on the small tile.
#[allow(clippy::too_many_arguments)]
pub fn matmul_with_tile(
    gpu: &Gpu,
    dtype: DType,
    p: &MatmulProblem,
    tile: MatmulTile,
    a: DevPtr,
    b: DevPtr,
    bias: Option<DevPtr>,
    residual: Option<DevPtr>,
    c: DevPtr,
) -> Result<(), KernelError> {
    if !tiles_for(dtype).contains(&tile) {
        return Err(invalid!(
            "tile {} is not one of the {dtype} matmul tiles",
            tile.name()
        ));
    }
    if !tile.runs_on(gpu.compute_capability()) {
        let (major, minor) = gpu.compute_capability();
        return Err(invalid!(
            "tile {} needs an sm_90 GPU (wgmma); this one is sm_{major}{minor}",
            tile.name()
        ));
    }
    launch_with_tile(gpu, dtype, p, tile, a, b, bias, residual, c)
}

/// Split-K scratch of one Gpu (partial tiles, then per-tile counters kept at zero between
/// launches), allocated by the first split launch.
type SplitKScratch = Mutex<Option<(DeviceBuffer, DeviceBuffer)>>;

/// The split-K scratch: device addresses of room for every partial tile this GPU can
/// have in flight and of one zeroed counter per SM (split-K runs only with fewer tiles
/// than SMs). Allocated once, outside any CUDA graph capture: the executor's eager
/// warm-up pass makes every launch its captured pass will.
fn split_k_scratch(gpu: &Gpu) -> Result<(u64, u64), KernelError> {
    let cell = gpu.family_state(|| -> SplitKScratch { Mutex::new(None) });
    let mut scratch = cell.lock().unwrap_or_else(|e| e.into_inner());
    if scratch.is_none() {
        let partials = gpu.alloc(split_k_partial_bytes(gpu.multiprocessors()))?;
        let counters = gpu.alloc(gpu.multiprocessors() as usize * 4)?;
        gpu.upload(&counters, 0, &vec![0u8; counters.len_bytes()])?;
        *scratch = Some((partials, counters));
    }
    let (partials, counters) = scratch.as_ref().expect("allocated above");
    Ok((partials.ptr, counters.ptr))
}

/// Checks every view's dtype and length against the problem; returns the bias and residual
/// the epilogue actually reads (`None` where the epilogue does not ask for one, even if given).
pub(crate) fn validate(
    dtype: DType,
    p: &MatmulProblem,
    a: DevPtr,
    b: DevPtr,
    bias: Option<DevPtr>,
    residual: Option<DevPtr>,
    c: DevPtr,
) -> Result<(Option<DevPtr>, Option<DevPtr>), KernelError> {
    let bias = if p.epilogue.bias { bias } else { None };
    let residual = if p.epilogue.residual { residual } else { None };
    for (what, view) in [("A", Some(a)), ("B", Some(b)), ("bias", bias)] {
        if let Some(view) = view {
            view.expect(&format!("matmul {what}"), dtype, 0)?;
        }
    }
    // C, and the residual, hold the operands' type, or f32 where MixedOutput allows it.
    let residual_dtype = residual.map_or(c.dtype, |r| r.dtype);
    if (residual_dtype, c.dtype) != (dtype, dtype) {
        let allowed = MixedOutput::of(dtype, residual_dtype, c.dtype)
            .is_some_and(|mixed| mixed.allows(p.epilogue.activation, p.b_layout));
        if !allowed {
            let residual_part = match residual {
                Some(r) => format!(", residual {}", r.dtype),
                None => String::new(),
            };
            return Err(invalid!(
                "matmul C holds {}{residual_part} with {dtype} operands, {:?} and B as {:?}: \
                 not a combination the kernels are built for",
                c.dtype,
                p.epilogue.activation,
                p.b_layout
            ));
        }
    }
    p.check_bounds(
        a.len,
        b.len,
        c.len,
        bias.map(|v| v.len),
        residual.map(|v| v.len),
    )
    .map_err(KernelError::InvalidArgument)?;
    Ok((bias, residual))
}

#[allow(clippy::too_many_arguments)]
fn launch_with_tile(
    gpu: &Gpu,
    dtype: DType,
    p: &MatmulProblem,
    tile: MatmulTile,
    a: DevPtr,
    b: DevPtr,
    bias: Option<DevPtr>,
    residual: Option<DevPtr>,
    c: DevPtr,
) -> Result<(), KernelError> {
    let (bias, residual) = validate(dtype, p, a, b, bias, residual, c)?;
    if p.batch == 0 || p.heads == 0 || p.m == 0 || p.n == 0 {
        return Ok(());
    }

    let config = configure(dtype, p, tile, a, b, residual, c);
    let tile = config.tile;
    let extents = (p.batch, p.heads, p.m);
    let c_rows_aligned = rows_aligned(c.ptr, c.dtype.size_bytes(), &p.c, extents, 4);
    let r_rows_aligned =
        residual.is_none_or(|r| rows_aligned(r.ptr, r.dtype.size_bytes(), &p.r, extents, 4));
    let bias_aligned = bias.is_none_or(|v| v.is_aligned(4 * dtype.size_bytes() as u64));
    let vector_epilogue = c_rows_aligned && r_rows_aligned && bias_aligned;

    let programs = (p.batch as u64)
        .checked_mul(p.heads as u64)
        .and_then(|x| x.checked_mul(p.m.div_ceil(tile.block_m as usize) as u64))
        .and_then(|x| x.checked_mul(p.n.div_ceil(tile.block_n as usize) as u64))
        .filter(|&x| x <= i32::MAX as u64)
        .ok_or_else(|| {
            invalid!(
                "matmul {}x{}x{} over {}x{} matrices needs more than 2^31 programs",
                p.m,
                p.n,
                p.k,
                p.batch,
                p.heads
            )
        })?;

    if tile.program.uses_tma() {
        let size = dtype.size_bytes() as u64;
        let map = |ptr: u64, offset: usize, rows, row_stride, box_rows| {
            tensor_map(
                dtype,
                ptr + offset as u64 * size,
                rows,
                p.k,
                row_stride,
                box_rows,
            )
            .map(KernelArg::TensorMap)
        };
        let a_map = map(a.ptr, p.a.offset, p.m, p.a.row_stride, tile.block_m)?;
        let b_map = map(b.ptr, p.b.offset, p.n, p.b.row_stride, tile.block_n)?;
        let bias = KernelArg::Ptr(bias.map_or(0, |v| v.ptr));
        let (m, n, k) = (
            KernelArg::I32(to_i32(p.m, "matmul m")?),
            KernelArg::I32(to_i32(p.n, "matmul n")?),
            KernelArg::I32(to_i32(p.k, "matmul k")?),
        );
        let alpha = KernelArg::F32(p.epilogue.alpha);
        // C written through a tensor map of boxes of 64 columns x 128 rows.
        let c_map = || {
            tensor_map(
                dtype,
                c.ptr + p.c.offset as u64 * size,
                p.m,
                p.n,
                p.c.row_stride,
                tile.block_m,
            )
            .map(KernelArg::TensorMap)
        };
        let args = if config.pingpong_residual() && c.dtype != DType::F32 {
            // A 16-bit stream: R and C both through tensor maps, as C's layout.
            let r = residual.expect("a residual variant has R");
            let r_map = KernelArg::TensorMap(tensor_map(
                dtype,
                r.ptr + p.r.offset as u64 * size,
                p.m,
                p.n,
                p.r.row_stride,
                tile.block_m,
            )?);
            vec![a_map, b_map, r_map, c_map()?, bias, m, n, k, alpha]
        } else if config.pingpong_residual() {
            let (r, c_row_stride) = (residual.expect("a residual variant has R"), p.c.row_stride);
            // R is read through a tensor map of boxes of 32 columns x 128 rows.
            let r_map = KernelArg::TensorMap(tensor_map(
                DType::F32,
                r.ptr + p.r.offset as u64 * 4,
                p.m,
                p.n,
                p.r.row_stride,
                tile.block_m,
            )?);
            vec![
                a_map,
                b_map,
                r_map,
                bias,
                KernelArg::Ptr(c.ptr + p.c.offset as u64 * 4),
                KernelArg::I64(to_i64(c_row_stride)?),
                m,
                n,
                k,
                alpha,
            ]
        } else if tile.program == Program::TmaPingPong {
            vec![a_map, b_map, c_map()?, bias, m, n, k, alpha]
        } else {
            vec![
                a_map,
                b_map,
                bias,
                KernelArg::Ptr(residual.map_or(0, |v| v.ptr)),
                KernelArg::Ptr(c.ptr),
                m,
                n,
                k,
                KernelArg::I64(to_i64(p.c.offset)?),
                KernelArg::I64(to_i64(p.c.row_stride)?),
                KernelArg::I64(to_i64(p.r.offset)?),
                KernelArg::I64(to_i64(p.r.row_stride)?),
                alpha,
                KernelArg::I32(vector_epilogue as i32),
            ]
        };
        // Persistent: one CTA per SM, each walking the tiles in steps of the grid.
        let grid = programs.min(sm_count(gpu)? as u64);
        return gpu.launch(
            &config.instantiation(),
            LaunchDims {
                grid: (grid as u32, 1, 1),
                block: config.threads(),
                shared_bytes: config.shared_bytes(),
            },
            &args,
        );
    }
    let mut args = vec![
        KernelArg::Ptr(a.ptr),
        KernelArg::Ptr(b.ptr),
        KernelArg::Ptr(bias.map_or(0, |v| v.ptr)),
        KernelArg::Ptr(residual.map_or(0, |v| v.ptr)),
        KernelArg::Ptr(c.ptr),
        KernelArg::I32(to_i32(p.heads, "matmul heads")?),
        KernelArg::I32(to_i32(p.m, "matmul m")?),
        KernelArg::I32(to_i32(p.n, "matmul n")?),
        KernelArg::I32(to_i32(p.k, "matmul k")?),
    ];
    for view in [&p.a, &p.b, &p.c, &p.r] {
        for value in [
            view.offset,
            view.row_stride,
            view.batch_stride,
            view.head_stride,
        ] {
            args.push(KernelArg::I64(to_i64(value)?));
        }
    }
    args.push(KernelArg::F32(p.epilogue.alpha));
    args.push(KernelArg::I32(vector_epilogue as i32));
    // Hopper tiles never split (split_k takes the small mma.sync tile only), and their entry
    // point has no split parameters.
    let split = split_k(dtype, p, tile, programs, gpu.multiprocessors());
    if !tile.program.is_hopper() {
        let (partials, counters) = if split.splits > 1 {
            split_k_scratch(gpu)?
        } else {
            (0, 0)
        };
        args.extend([
            KernelArg::I32(split.splits as i32),
            KernelArg::I32(split.k as i32),
            KernelArg::Ptr(partials),
            KernelArg::Ptr(counters),
        ]);
    }

    gpu.launch(
        &config.instantiation(),
        LaunchDims {
            grid: ((programs * split.splits as u64) as u32, 1, 1),
            block: tile.threads(),
            shared_bytes: config.shared_bytes(),
        },
        &args,
    )
}

/// A 2-D TMA tensor map over `rows` rows of `cols` elements starting at `base` (bytes),
/// rows `row_stride` elements apart, read in 128-byte-swizzled boxes of 64 x `box_rows`
/// (zero-filled past the edges).
fn tensor_map(
    dtype: DType,
    base: u64,
    rows: usize,
    cols: usize,
    row_stride: usize,
    box_rows: u32,
) -> Result<[u64; 16], KernelError> {
    use cudarc::driver::sys::{
        cuTensorMapEncodeTiled, CUtensorMap, CUtensorMapDataType, CUtensorMapFloatOOBfill,
        CUtensorMapInterleave, CUtensorMapL2promotion, CUtensorMapSwizzle,
    };
    let data_type = match dtype {
        DType::F16 => CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
        DType::BF16 => CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
        DType::F32 => CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_FLOAT32,
    };
    let size = dtype.size_bytes() as u64;
    let dims = [cols as u64, rows as u64];
    let strides = [row_stride as u64 * size];
    // One 128-byte swizzle row per box row.
    let boxes = [128 / size as u32, box_rows];
    let element_strides = [1u32, 1];
    let mut map = std::mem::MaybeUninit::<CUtensorMap>::zeroed();
    // SAFETY: every array has the rank's length (strides one less), and `map` is the output.
    let result = unsafe {
        cuTensorMapEncodeTiled(
            map.as_mut_ptr(),
            data_type,
            2,
            base as *mut std::ffi::c_void,
            dims.as_ptr(),
            strides.as_ptr(),
            boxes.as_ptr(),
            element_strides.as_ptr(),
            CUtensorMapInterleave::CU_TENSOR_MAP_INTERLEAVE_NONE,
            CUtensorMapSwizzle::CU_TENSOR_MAP_SWIZZLE_128B,
            CUtensorMapL2promotion::CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
            CUtensorMapFloatOOBfill::CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
        )
    };
    result
        .result()
        .map_err(|e| KernelError::driver("cuTensorMapEncodeTiled", e))?;
    // SAFETY: the driver wrote the map.
    Ok(unsafe { map.assume_init() }.opaque)
}
