//! Softmax launcher: checks the operands, picks a row layout by shape and alignment.

use super::rows::RowConfig;
use super::{
    invalid, to_i32, ArchRequirement, DevPtr, Gpu, Instantiation, KernelArg, KernelError,
    KernelParam, LaunchDims, ParamKind,
};
use crate::DType;

const SOURCE: &str = include_str!("../../cuda/softmax.cu");

fn instantiation(dtype: DType, config: RowConfig) -> Instantiation {
    let mut template_args = vec![dtype.cuda_type().to_string()];
    template_args.extend(config.template_args());
    Instantiation {
        name: format!("softmax_{}_{}", dtype.name(), config.tag()),
        family: "softmax",
        source: SOURCE,
        function: "softmax_rows",
        template_args,
        params: vec![
            KernelParam::new("x", ParamKind::ConstPtr(dtype)),
            KernelParam::new("out", ParamKind::MutPtr(dtype)),
            KernelParam::new("rows", ParamKind::I32),
            KernelParam::new("cols", ParamKind::I32),
            KernelParam::new("scale", ParamKind::F32),
        ],
        block_threads: config.block_threads(),
        min_blocks_per_sm: 0,
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

pub(crate) fn launch(
    gpu: &Gpu,
    dtype: DType,
    x: DevPtr,
    rows: usize,
    cols: usize,
    scale: f32,
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
    x.expect("softmax input", dtype, elements)?;
    out.expect("softmax output", dtype, elements)?;
    let (rows_i32, cols_i32) = (to_i32(rows, "softmax rows")?, to_i32(cols, "softmax cols")?);
    let config = RowConfig::select(dtype, cols, &[x, out]);
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
            KernelArg::Ptr(out.ptr),
            KernelArg::I32(rows_i32),
            KernelArg::I32(cols_i32),
            KernelArg::F32(scale),
        ],
    )
}
