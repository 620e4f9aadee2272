//! LayerNorm launcher: checks the operands, picks a row layout by shape and alignment.
//!
//! The output is stored in the run's dtype; the input may also be f32 (a half-precision run's
//! residual stream, see `runtime::plan`). gamma and beta are f32 in every run (layernorm.cu
//! says why).

use crate::cuda::{
    invalid, kernel_params, to_i32, ArchRequirement, DevPtr, Gpu, Instantiation, KernelError,
    LaunchDims,
};
use crate::rows::{row_input_dtype, row_storage_name, widest, RowConfig, ROW_STORAGE};
use crate::types::DType;

const SOURCE: &str = include_str!("layernorm.cu");

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
        headers: &[],
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

pub(crate) fn instantiations() -> Vec<Instantiation> {
    ROW_STORAGE
        .into_iter()
        .flat_map(|(input, dtype)| {
            RowConfig::all(widest(input, dtype))
                .into_iter()
                .map(move |config| instantiation(input, dtype, config))
        })
        .collect()
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
    if cols == 0 {
        return Err(invalid!("layernorm over rows of 0 elements"));
    }
    if !(eps >= 0.0 && eps.is_finite()) {
        return Err(invalid!(
            "layernorm eps must be finite and not negative, got {eps}"
        ));
    }
    let elements = rows
        .checked_mul(cols)
        .ok_or_else(|| invalid!("layernorm {rows} x {cols} overflows"))?;
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
    // One block per ROWS rows, up to as many blocks as the GPU runs at once (a full SM's 2048
    // threads each): past that, each group walks several rows with the gamma and beta it
    // loaded once (layernorm.cu).
    let resident = gpu.multiprocessors() as usize * (2048 / config.block_threads() as usize).max(1);
    gpu.launch(
        &instantiation(input, dtype, config),
        LaunchDims {
            grid: (config.blocks(rows).min(resident) as u32, 1, 1),
            block: config.block_threads(),
            shared_bytes: 0,
            cluster: 1,
        },
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
