//! The row gather launcher: one block per output row, threads striding across its columns.

use crate::cuda::{
    invalid, to_i64, ArchRequirement, DevPtr, Gpu, Instantiation, KernelArg, KernelError,
    KernelParam, LaunchDims, ParamKind,
};
use crate::types::DType;

const SOURCE: &str = include_str!("gather.cu");
const THREADS: u32 = 256;

fn gather_instantiation(dtype: DType) -> Instantiation {
    Instantiation {
        name: format!("gather_rows_{}", dtype.name()),
        family: "gather",
        source: SOURCE,
        headers: &[],
        function: "gather_rows_program",
        template_args: vec![dtype.cuda_type().into()],
        params: vec![
            KernelParam::new("src", ParamKind::ConstPtr(dtype)),
            KernelParam::new("out", ParamKind::MutPtr(dtype)),
            KernelParam::new("src_row_stride", ParamKind::I64),
            KernelParam::new("src_offset", ParamKind::I64),
            KernelParam::new("cols", ParamKind::I32),
        ],
        block_threads: THREADS,
        min_blocks_per_sm: 0,
        arch: ArchRequirement::AtLeast(7, 0),
    }
}

pub(crate) fn instantiations() -> Vec<Instantiation> {
    DType::ALL.into_iter().map(gather_instantiation).collect()
}

/// `out[r, :cols] = src[r * src_row_stride + src_offset ..][..cols]` for `r < rows`: the CLS
/// token of every sequence, say.
#[allow(clippy::too_many_arguments)]
pub fn gather_rows(
    gpu: &Gpu,
    dtype: DType,
    src: DevPtr,
    src_row_stride: usize,
    src_offset: usize,
    rows: usize,
    cols: usize,
    out: DevPtr,
) -> Result<(), KernelError> {
    if rows == 0 || cols == 0 {
        return Ok(());
    }
    src.expect(
        "gather source",
        dtype,
        (rows - 1) * src_row_stride + src_offset + cols,
    )?;
    out.expect("gather output", dtype, rows * cols)?;
    let blocks = u32::try_from(rows).map_err(|_| invalid!("gather of {rows} rows"))?;
    gpu.launch(
        &gather_instantiation(dtype),
        LaunchDims {
            grid: (blocks, 1, 1),
            block: THREADS,
            shared_bytes: 0,
        },
        &[
            KernelArg::Ptr(src.ptr),
            KernelArg::Ptr(out.ptr),
            KernelArg::I64(to_i64(src_row_stride)?),
            KernelArg::I64(to_i64(src_offset)?),
            KernelArg::I32(i32::try_from(cols).map_err(|_| invalid!("gather of {cols} columns"))?),
        ],
    )
}
