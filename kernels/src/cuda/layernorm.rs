//! LayerNorm launcher: checks the operands, picks a row layout by shape and alignment.

use super::rows::RowConfig;
use super::{
    invalid, to_i32, ArchRequirement, DevPtr, Gpu, Instantiation, KernelArg, KernelError,
    KernelParam, LaunchDims, ParamKind,
};
use crate::DType;

const SOURCE: &str = include_str!("../../cuda/layernorm.cu");

fn instantiation(dtype: DType, config: RowConfig) -> Instantiation {
    let mut template_args = vec![dtype.cuda_type().to_string()];
    template_args.extend(config.template_args());
    Instantiation {
        name: format!("layernorm_{}_{}", dtype.name(), config.tag()),
        family: "layernorm",
        source: SOURCE,
        function: "layernorm_rows",
        template_args,
        params: vec![
            KernelParam::new("x", ParamKind::ConstPtr(dtype)),
            KernelParam::new("gamma", ParamKind::ConstPtr(dtype)),
            KernelParam::new("beta", ParamKind::ConstPtr(dtype)),
            KernelParam::new("out", ParamKind::MutPtr(dtype)),
            KernelParam::new("rows", ParamKind::I32),
            KernelParam::new("cols", ParamKind::I32),
            KernelParam::new("eps", ParamKind::F32),
        ],
        block_threads: config.block_threads(),
        arch: ArchRequirement::AtLeast(7, 0),
    }
}

pub(crate) fn instantiations() -> Vec<Instantiation> {
    DType::ALL
        .into_iter()
        .flat_map(|dtype| {
            RowConfig::all(dtype)
                .into_iter()
                .map(move |config| instantiation(dtype, config))
        })
        .collect()
}

#[allow(clippy::too_many_arguments)]
pub(crate) fn launch(
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
    x.expect("layernorm input", dtype, elements)?;
    out.expect("layernorm output", dtype, elements)?;
    gamma.expect("layernorm gamma", dtype, cols)?;
    beta.expect("layernorm beta", dtype, cols)?;
    let (rows_i32, cols_i32) = (
        to_i32(rows, "layernorm rows")?,
        to_i32(cols, "layernorm cols")?,
    );
    let config = RowConfig::select(dtype, cols, &[x, gamma, beta, out]);
    gpu.launch(
        &instantiation(dtype, config),
        LaunchDims {
            // One block per ROWS rows. A persistent grid (as many blocks as fit at once, each
            // walking rows) was tried; its timings, like the first ones, were taken while other
            // tests shared the GPU and settle nothing: to be timed alone.
            grid: (config.blocks(rows) as u32, 1, 1),
            block: config.block_threads(),
            shared_bytes: 0,
        },
        &[
            KernelArg::Ptr(x.ptr),
            KernelArg::Ptr(gamma.ptr),
            KernelArg::Ptr(beta.ptr),
            KernelArg::Ptr(out.ptr),
            KernelArg::I32(rows_i32),
            KernelArg::I32(cols_i32),
            KernelArg::F32(eps),
        ],
    )
}
