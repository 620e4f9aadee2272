//! RMSNorm launcher: checks the operands, picks a row layout by shape and alignment (the
//! layout layernorm uses, `crate::rows`).
//!
//! The output is stored in the run's dtype; the input may also be f32 (a half-precision run's
//! residual stream, see `runtime::plan`). The weight is f32 in every run, as layernorm's gamma.

use crate::cuda::{
    invalid, kernel_params, to_i32, ArchRequirement, DevPtr, Gpu, Instantiation, KernelError,
    LaunchDims,
};
use crate::rows::{row_input_dtype, row_storage_name, widest, RowConfig, ROW_STORAGE};
use crate::types::DType;

const SOURCE: &str = include_str!("rmsnorm.cu");

kernel_params! {
    /// rmsnorm_rows's parameters.
    struct RmsnormParams {
        x: const_ptr,
        weight: const_ptr,
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
        name: format!("rmsnorm_{types}_{}", config.tag()),
        family: "rmsnorm",
        source: SOURCE,
        headers: &[],
        function: "rmsnorm_rows",
        template_args,
        params: RmsnormParams {
            x: DevPtr::of_type(input),
            weight: DevPtr::of_type(DType::F32),
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

/// `out[r, :] = x[r, :] / sqrt(mean(x[r, :]²) + eps) * weight` for `rows` rows of `cols`;
/// the mean of squares in fp32 (as `cpu::rmsnorm`). out holds `dtype`; x holds `dtype` or
/// f32; weight holds f32. out may be x.
#[allow(clippy::too_many_arguments)]
pub fn rmsnorm(
    gpu: &Gpu,
    dtype: DType,
    x: DevPtr,
    weight: DevPtr,
    rows: usize,
    cols: usize,
    eps: f32,
    out: DevPtr,
) -> Result<(), KernelError> {
    if rows == 0 {
        return Ok(());
    }
    if cols == 0 {
        return Err(invalid!("rmsnorm over rows of 0 elements"));
    }
    if !(eps >= 0.0 && eps.is_finite()) {
        return Err(invalid!(
            "rmsnorm eps must be finite and not negative, got {eps}"
        ));
    }
    let elements = rows
        .checked_mul(cols)
        .ok_or_else(|| invalid!("rmsnorm {rows} x {cols} overflows"))?;
    let input = row_input_dtype(x, dtype);
    x.expect("rmsnorm input", input, elements)?;
    out.expect("rmsnorm output", dtype, elements)?;
    weight.expect("rmsnorm weight", DType::F32, cols)?;
    let (rows_i32, cols_i32) = (to_i32(rows, "rmsnorm rows")?, to_i32(cols, "rmsnorm cols")?);
    let config = RowConfig::select(widest(input, dtype), cols, &[x, weight, out]);
    // As layernorm's launcher: up to as many blocks as the GPU runs at once, each group then
    // walking several rows with the weights it loaded once.
    let resident = gpu.multiprocessors() as usize * (2048 / config.block_threads() as usize).max(1);
    gpu.launch(
        &instantiation(input, dtype, config),
        LaunchDims {
            grid: (config.blocks(rows).min(resident) as u32, 1, 1),
            block: config.block_threads(),
            shared_bytes: 0,
            cluster: 1,
        },
        &RmsnormParams {
            x,
            weight,
            out,
            rows: rows_i32,
            cols: cols_i32,
            eps,
        }
        .args(),
    )
}
