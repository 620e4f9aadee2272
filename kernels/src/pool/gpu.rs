//! The token-mean launcher: a block of threads per 256 columns of one image.

use crate::cuda::{
    invalid, kernel_params, to_i32, ArchRequirement, DevPtr, Gpu, Instantiation, KernelError,
    LaunchDims,
};
use crate::types::DType;

const SOURCE: &str = include_str!("pool.cu");
const THREADS: u32 = 256;

kernel_params! {
    /// token_mean_program's parameters.
    struct TokenMeanParams {
        x: const_ptr,
        out: mut_ptr,
        tokens: i32,
        start: i32,
        cols: i32,
    }
}

/// `input`: the tokens' type, `dtype` or f32 (a residual stream kept in f32).
fn token_mean_instantiation(input: DType, dtype: DType) -> Instantiation {
    let input_suffix = if input == dtype {
        String::new()
    } else {
        format!("_from_{}", input.name())
    };
    Instantiation {
        name: format!("token_mean_{}{input_suffix}", dtype.name()),
        family: "pool",
        source: SOURCE,
        headers: &[],
        function: "token_mean_program",
        template_args: vec![input.cuda_type().into(), dtype.cuda_type().into()],
        params: TokenMeanParams {
            x: DevPtr::of_type(input),
            out: DevPtr::of_type(dtype),
            tokens: 0,
            start: 0,
            cols: 0,
        }
        .params(),
        block_threads: THREADS,
        min_blocks_per_sm: 0,
        arch: ArchRequirement::AtLeast(7, 0),
    }
}

pub(crate) fn instantiations() -> Vec<Instantiation> {
    let mut all = Vec::new();
    for dtype in DType::ALL {
        all.push(token_mean_instantiation(dtype, dtype));
        if dtype != DType::F32 {
            all.push(token_mean_instantiation(DType::F32, dtype));
        }
    }
    all
}

/// `out[b, c] = mean(x[b, start..tokens, c])` for `x` `[batch, tokens, cols]` (as
/// `cpu::token_mean`); the output holds `dtype`, the input `dtype` or f32 (a residual stream
/// kept in f32).
#[allow(clippy::too_many_arguments)]
pub fn token_mean(
    gpu: &Gpu,
    dtype: DType,
    x: DevPtr,
    batch: usize,
    tokens: usize,
    start: usize,
    cols: usize,
    out: DevPtr,
) -> Result<(), KernelError> {
    if start >= tokens {
        return Err(invalid!(
            "token mean from token {start} of {tokens}: no token to average"
        ));
    }
    let elements = batch
        .checked_mul(tokens)
        .and_then(|n| n.checked_mul(cols))
        .ok_or_else(|| invalid!("token mean of {batch} x {tokens} x {cols} overflows"))?;
    let input = if x.dtype == DType::F32 {
        DType::F32
    } else {
        dtype
    };
    x.expect("token mean input", input, elements)?;
    out.expect("token mean output", dtype, batch * cols)?;
    if batch == 0 || cols == 0 {
        return Ok(());
    }
    let column_blocks = cols.div_ceil(THREADS as usize) as u32;
    let batch_blocks =
        u32::try_from(batch).map_err(|_| invalid!("token mean of {batch} images"))?;
    if batch_blocks > 65_535 {
        return Err(invalid!(
            "token mean of {batch} images: at most 65,535 a launch"
        ));
    }
    gpu.launch(
        &token_mean_instantiation(input, dtype),
        LaunchDims {
            grid: (column_blocks, batch_blocks, 1),
            block: THREADS,
            shared_bytes: 0,
            cluster: 1,
        },
        &TokenMeanParams {
            x,
            out,
            tokens: to_i32(tokens, "tokens")?,
            start: to_i32(start, "start token")?,
            cols: to_i32(cols, "columns")?,
        }
        .args(),
    )
}
