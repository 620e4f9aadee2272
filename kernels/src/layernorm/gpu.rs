//! LayerNorm launcher: checks the operands, picks a row layout by shape and alignment.
//!
//! The output is stored in the run's dtype; the input may also be f32 (a half-precision run's
//! residual stream, see `runtime::plan`). gamma and beta are f32 in every run (layernorm.cu
//! says why).

use crate::cuda::{
    invalid, kernel_params, to_i32, ArchRequirement, DevPtr, E4m3Ptr, Gpu, Instantiation,
    KernelError, LaunchDims,
};
use crate::quantize::{E4M3_HEADER, FP8_K_MULTIPLE};
use crate::rows::{row_input_dtype, row_storage_name, widest, RowConfig, ROW_STORAGE};
use crate::types::DType;

const SOURCE: &str = include_str!("layernorm.cu");
/// layernorm.cu includes e4m3.cuh for its e4m3 entry point.
const HEADERS: &[(&str, &str)] = &[E4M3_HEADER];

kernel_params! {
    /// layernorm_rows's parameters.
    struct LayernormParams {
        x: const_ptr,
        gamma: const_ptr,
        beta: const_ptr,
        out: mut_ptr,
        rows: i32,
        cols: i32,
        eps: f32,
    }
}

fn instantiation(input: DType, dtype: DType, config: RowConfig) -> Instantiation {
    let mut template_args = vec![input.cuda_type().to_string(), dtype.cuda_type().to_string()];
    template_args.extend(config.template_args());
    let types = row_storage_name(input, dtype);
    Instantiation {
        name: format!("layernorm_{types}_{}", config.tag()),
        family: "layernorm",
        source: SOURCE,
        headers: HEADERS,
        function: "layernorm_rows",
        template_args,
        params: LayernormParams {
            x: DevPtr::of_type(input),
            gamma: DevPtr::of_type(DType::F32),
            beta: DevPtr::of_type(DType::F32),
            out: DevPtr::of_type(dtype),
            rows: 0,
            cols: 0,
            eps: 0.0,
        }
        .params(),
        block_threads: config.block_threads(),
        min_blocks_per_sm: 0,
        arch: ArchRequirement::AtLeast(7, 0),
    }
}

kernel_params! {
    /// layernorm_rows_e4m3's parameters.
    struct LayernormE4m3Params {
        x: const_ptr,
        gamma: const_ptr,
        beta: const_ptr,
        codes: mut_byte_ptr,
        scales: mut_ptr,
        rows: i32,
        cols: i32,
        eps: f32,
    }
}

kernel_params! {
    /// layernorm_rows_e4m3_static's parameters.
    struct LayernormE4m3StaticParams {
        x: const_ptr,
        gamma: const_ptr,
        beta: const_ptr,
        codes: mut_byte_ptr,
        scale: const_ptr,
        rows: i32,
        cols: i32,
        eps: f32,
    }
}

/// The e4m3 entry point for one layout: a scale a row (`layernorm_rows_e4m3`), or with
/// `static_scale` one calibrated scale for every row (`layernorm_rows_e4m3_static`).
fn e4m3_instantiation(input: DType, config: RowConfig, static_scale: bool) -> Instantiation {
    let mut template_args = vec![input.cuda_type().to_string()];
    template_args.extend(config.template_args());
    let (x, gamma, beta) = (
        DevPtr::of_type(input),
        DevPtr::of_type(DType::F32),
        DevPtr::of_type(DType::F32),
    );
    let scale = DevPtr::of_type(DType::F32);
    let (kind, function, params) = if static_scale {
        let params = LayernormE4m3StaticParams {
            x,
            gamma,
            beta,
            codes: 0,
            scale,
            rows: 0,
            cols: 0,
            eps: 0.0,
        };
        (
            "toe4m3static",
            "layernorm_rows_e4m3_static",
            params.params(),
        )
    } else {
        let params = LayernormE4m3Params {
            x,
            gamma,
            beta,
            codes: 0,
            scales: scale,
            rows: 0,
            cols: 0,
            eps: 0.0,
        };
        ("toe4m3", "layernorm_rows_e4m3", params.params())
    };
    Instantiation {
        name: format!("layernorm_{}{kind}_{}", input.name(), config.tag()),
        family: "layernorm",
        source: SOURCE,
        headers: HEADERS,
        function,
        template_args,
        params,
        block_threads: config.block_threads(),
        min_blocks_per_sm: 0,
        arch: crate::quantize::gpu::E4M3_ARCH,
    }
}

/// The e4m3 entry points' layouts: the vector ones of every input type (its operands are
/// 16-byte aligned, see [`layernorm_e4m3`]).
fn e4m3_configs(input: DType) -> impl Iterator<Item = RowConfig> {
    RowConfig::all(input)
        .into_iter()
        .filter(|config| config.vec > 1)
}

pub(crate) fn instantiations() -> Vec<Instantiation> {
    let stored = ROW_STORAGE.into_iter().flat_map(|(input, dtype)| {
        RowConfig::all(widest(input, dtype))
            .into_iter()
            .map(move |config| instantiation(input, dtype, config))
    });
    let e4m3 = DType::ALL.into_iter().flat_map(|input| {
        e4m3_configs(input).flat_map(move |config| {
            [false, true].map(|static_scale| e4m3_instantiation(input, config, static_scale))
        })
    });
    stored.chain(e4m3).collect()
}

/// Blocks for `rows` rows in the layout `config`: one block per ROWS rows, up to as many
/// blocks as the GPU runs at once (a full SM's 2048 threads each): past that, each group walks
/// several rows with the gamma and beta it loaded once (layernorm.cu).
fn grid_blocks(gpu: &Gpu, config: RowConfig, rows: usize) -> u32 {
    let resident = gpu.multiprocessors() as usize * (2048 / config.block_threads() as usize).max(1);
    config.blocks(rows).min(resident) as u32
}

/// The launch of `rows` rows in the layout `config` ([`grid_blocks`]).
fn row_dims(gpu: &Gpu, config: RowConfig, rows: usize) -> LaunchDims {
    LaunchDims {
        grid: (grid_blocks(gpu, config, rows), 1, 1),
        block: config.block_threads(),
        shared_bytes: 0,
        cluster: 1,
    }
}

/// Checks what both entry points share: eps, and rows x cols; returns rows · cols.
fn check_shape(rows: usize, cols: usize, eps: f32) -> Result<usize, KernelError> {
    if cols == 0 {
        return Err(invalid!("layernorm over rows of 0 elements"));
    }
    if !(eps >= 0.0 && eps.is_finite()) {
        return Err(invalid!(
            "layernorm eps must be finite and not negative, got {eps}"
        ));
    }
    rows.checked_mul(cols)
        .ok_or_else(|| invalid!("layernorm {rows} x {cols} overflows"))
}

/// `out[r, :] = (x[r, :] - mean) / sqrt(var + eps) * gamma + beta` for `rows` rows of
/// `cols`; statistics in fp32 (as `cpu::layernorm`). out holds `dtype`; x holds `dtype` or
/// f32; gamma and beta hold f32.
#[allow(clippy::too_many_arguments)]
pub fn layernorm(
    gpu: &Gpu,
    dtype: DType,
    x: DevPtr,
    gamma: DevPtr,
    beta: DevPtr,
    rows: usize,
    cols: usize,
    eps: f32,
    out: DevPtr,
) -> Result<(), KernelError> {
    if rows == 0 {
        return Ok(());
    }
    let elements = check_shape(rows, cols, eps)?;
    let input = row_input_dtype(x, dtype);
    x.expect("layernorm input", input, elements)?;
    out.expect("layernorm output", dtype, elements)?;
    gamma.expect("layernorm gamma", DType::F32, cols)?;
    beta.expect("layernorm beta", DType::F32, cols)?;
    let (rows_i32, cols_i32) = (
        to_i32(rows, "layernorm rows")?,
        to_i32(cols, "layernorm cols")?,
    );
    let config = RowConfig::select(widest(input, dtype), cols, &[x, gamma, beta, out]);
    gpu.launch(
        &instantiation(input, dtype, config),
        row_dims(gpu, config, rows),
        &LayernormParams {
            x,
            gamma,
            beta,
            out,
            rows: rows_i32,
            cols: cols_i32,
            eps,
        }
        .args(),
    )
}

/// [`layernorm`]'s rows as e4m3 codes and one f32 scale a row, the FP8 matmul's A written with
/// no pass of its own: `codes[r, :] = e4m3(y[r, :] · (1 / scales[r]))`, `scales[r] =
/// max(amax(y[r, :]) / 448, 1e-12)`, y the normalised row in f32 (`crate::quantize`'s per-row
/// quantisation). x holds f32, f16 or bf16; gamma and beta f32. Codes and scales are
/// `cpu::layernorm_e4m3`'s bit for bit, which adds each row's statistics in this program's
/// order: hence cols a multiple of 16 and every operand 16-byte aligned, so that the layout
/// is the vector one the twin assumes. Needs compute capability 8.9 or later.
#[allow(clippy::too_many_arguments)]
pub fn layernorm_e4m3(
    gpu: &Gpu,
    x: DevPtr,
    gamma: DevPtr,
    beta: DevPtr,
    rows: usize,
    cols: usize,
    eps: f32,
    codes: E4m3Ptr,
    scales: DevPtr,
) -> Result<(), KernelError> {
    check_e4m3_operands(x, gamma, beta, rows, cols, eps, codes)?;
    scales.expect("e4m3 layernorm scales", DType::F32, rows)?;
    if rows == 0 {
        return Ok(());
    }
    let config = RowConfig::for_alignment(x.dtype, cols, true);
    gpu.launch(
        &e4m3_instantiation(x.dtype, config, false),
        row_dims(gpu, config, rows),
        &LayernormE4m3Params {
            x,
            gamma,
            beta,
            codes: codes.ptr,
            scales,
            rows: to_i32(rows, "layernorm rows")?,
            cols: to_i32(cols, "layernorm cols")?,
            eps,
        }
        .args(),
    )
}

/// [`layernorm`]'s rows as e4m3 codes with one calibrated static `scale` (one f32 on the
/// device, read; positive and finite, which the device does not check):
/// `codes[r, :] = e4m3(y[r, :] · (1 / scale))`, the FP8 matmul's A with a per-tensor
/// activation scale. y and the operands' requirements as [`layernorm_e4m3`]'s; codes are
/// `cpu::layernorm_e4m3_static`'s bit for bit. Needs compute capability 8.9 or later.
#[allow(clippy::too_many_arguments)]
pub fn layernorm_e4m3_static(
    gpu: &Gpu,
    x: DevPtr,
    gamma: DevPtr,
    beta: DevPtr,
    rows: usize,
    cols: usize,
    eps: f32,
    codes: E4m3Ptr,
    scale: DevPtr,
) -> Result<(), KernelError> {
    check_e4m3_operands(x, gamma, beta, rows, cols, eps, codes)?;
    scale.expect("e4m3 layernorm static scale", DType::F32, 1)?;
    if rows == 0 {
        return Ok(());
    }
    let config = RowConfig::for_alignment(x.dtype, cols, true);
    gpu.launch(
        &e4m3_instantiation(x.dtype, config, true),
        row_dims(gpu, config, rows),
        &LayernormE4m3StaticParams {
            x,
            gamma,
            beta,
            codes: codes.ptr,
            scale,
            rows: to_i32(rows, "layernorm rows")?,
            cols: to_i32(cols, "layernorm cols")?,
            eps,
        }
        .args(),
    )
}

/// What both e4m3 entry points ask of their shape and operands: cols a multiple of 16, x,
/// gamma, beta and the codes of the sizes the shape needs, each 16-byte aligned.
fn check_e4m3_operands(
    x: DevPtr,
    gamma: DevPtr,
    beta: DevPtr,
    rows: usize,
    cols: usize,
    eps: f32,
    codes: E4m3Ptr,
) -> Result<(), KernelError> {
    let elements = check_shape(rows, cols, eps)?;
    if !cols.is_multiple_of(FP8_K_MULTIPLE) {
        return Err(invalid!(
            "an e4m3 layernorm needs rows of a multiple of {FP8_K_MULTIPLE} values (the FP8 \
             matmul's K); they have {cols}"
        ));
    }
    x.expect("e4m3 layernorm input", x.dtype, elements)?;
    gamma.expect("e4m3 layernorm gamma", DType::F32, cols)?;
    beta.expect("e4m3 layernorm beta", DType::F32, cols)?;
    if codes.len < elements {
        return Err(invalid!(
            "e4m3 layernorm codes need {elements} e4m3 elements, the view has {}",
            codes.len
        ));
    }
    let misaligned: Vec<&str> = [
        ("x", x.ptr),
        ("gamma", gamma.ptr),
        ("beta", beta.ptr),
        ("the codes", codes.ptr),
    ]
    .into_iter()
    .filter(|(_, address)| !address.is_multiple_of(16))
    .map(|(what, _)| what)
    .collect();
    if !misaligned.is_empty() {
        return Err(invalid!(
            "an e4m3 layernorm needs 16-byte aligned operands (its twin adds in the vector \
             layout's order); {} not",
            misaligned.join(", ")
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_e4m3_layout_the_launcher_picks_is_registered() {
        let registered = instantiations();
        let names: Vec<&str> = registered.iter().map(|i| i.name.as_str()).collect();
        for input in DType::ALL {
            for cols in (16..=20_000).step_by(16) {
                let config = RowConfig::for_alignment(input, cols, true);
                assert!(config.vec > 1);
                for name in [
                    e4m3_instantiation(input, config, false).name,
                    e4m3_instantiation(input, config, true).name,
                ] {
                    assert!(names.contains(&name.as_str()), "{name} is not registered");
                }
            }
        }
    }
}
