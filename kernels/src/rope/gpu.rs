//! The rotary-embedding launcher (rope.cu).

use super::RopeGrid;
use crate::cuda::{
    invalid, kernel_params, to_i32, to_i64, ArchRequirement, DevPtr, Gpu, Instantiation,
    KernelError, LaunchDims,
};
use crate::types::DType;

const SOURCE: &str = include_str!("rope.cu");
const THREADS: u32 = 128;
/// rope.cu keeps a head's angles in shared memory: at most 128 pairs.
const MAX_HEAD_DIM: usize = 256;
/// CTAs, each taking rows in turn: enough to fill a GPU several times over.
const MAX_CTAS: u64 = 4096;

kernel_params! {
    /// rope_program's parameters.
    struct RopeParams {
        x: const_ptr,
        out: mut_ptr,
        rows: i64,
        tokens: i32,
        heads: i32,
        head_dim: i32,
        prefix_tokens: i32,
        grid_rows: i32,
        grid_cols: i32,
        theta: f32,
    }
}

fn instantiation(dtype: DType) -> Instantiation {
    Instantiation {
        name: format!("rope_{}", dtype.name()),
        family: "rope",
        source: SOURCE,
        headers: &[],
        function: "rope_program",
        template_args: vec![dtype.cuda_type().into()],
        params: RopeParams {
            x: DevPtr::of_type(dtype),
            out: DevPtr::of_type(dtype),
            rows: 0,
            tokens: 0,
            heads: 0,
            head_dim: 0,
            prefix_tokens: 0,
            grid_rows: 0,
            grid_cols: 0,
            theta: 0.0,
        }
        .params(),
        block_threads: THREADS,
        min_blocks_per_sm: 0,
        arch: ArchRequirement::AtLeast(7, 0),
    }
}

pub(crate) fn instantiations() -> Vec<Instantiation> {
    DType::ALL.into_iter().map(instantiation).collect()
}

/// `out` = `x` ([batch, tokens, heads · head_dim], `out` may be `x`) with every head of every
/// patch token rotated as [`super`] says; prefix tokens copied.
#[allow(clippy::too_many_arguments)]
pub fn rope(
    gpu: &Gpu,
    dtype: DType,
    x: DevPtr,
    batch: usize,
    tokens: usize,
    heads: usize,
    head_dim: usize,
    grid: &RopeGrid,
    out: DevPtr,
) -> Result<(), KernelError> {
    grid.check(tokens, head_dim)
        .map_err(KernelError::InvalidArgument)?;
    if head_dim > MAX_HEAD_DIM {
        return Err(invalid!(
            "rope takes head dims up to {MAX_HEAD_DIM}, not {head_dim}"
        ));
    }
    let n = batch
        .checked_mul(tokens)
        .and_then(|r| r.checked_mul(heads))
        .and_then(|r| r.checked_mul(head_dim))
        .ok_or_else(|| invalid!("rope over {batch} x {tokens} x {heads} x {head_dim} overflows"))?;
    x.expect("rope input", dtype, n)?;
    out.expect("rope output", dtype, n)?;
    if n == 0 {
        return Ok(());
    }
    let blocks = ((batch * tokens) as u64).min(MAX_CTAS) as u32;
    gpu.launch(
        &instantiation(dtype),
        LaunchDims {
            grid: (blocks, 1, 1),
            block: THREADS,
            shared_bytes: 0,
            cluster: 1,
        },
        &RopeParams {
            x,
            out,
            rows: to_i64(batch * tokens)?,
            tokens: to_i32(tokens, "rope tokens")?,
            heads: to_i32(heads, "rope heads")?,
            head_dim: to_i32(head_dim, "rope head dim")?,
            prefix_tokens: to_i32(grid.prefix_tokens, "rope prefix tokens")?,
            grid_rows: to_i32(grid.rows, "rope grid rows")?,
            grid_cols: to_i32(grid.cols, "rope grid columns")?,
            theta: grid.theta,
        }
        .args(),
    )
}
