//! A standalone activation and a strided row gather: small kernels for the parts of a graph
//! that fusion does not absorb.

use super::{
    to_i64, ArchRequirement, DevPtr, Gpu, Instantiation, KernelArg, KernelError, KernelParam,
    LaunchDims, ParamKind,
};
use crate::{Activation, DType};

const SOURCE: &str = include_str!("../../cuda/rows_gather.cu");
const THREADS: u32 = 256;

fn act_code(act: Activation) -> u32 {
    match act {
        Activation::None => 0,
        Activation::Gelu => 1,
        Activation::GeluTanh => 2,
        Activation::QuickGelu => 3,
        Activation::Relu => 4,
        Activation::Silu => 5,
    }
}

fn activation_instantiation(dtype: DType, act: Activation) -> Instantiation {
    Instantiation {
        name: format!("activation_{}_{}", act.short_name(), dtype.name()),
        family: "rows_gather",
        source: SOURCE,
        function: "activation_program",
        template_args: vec![dtype.cuda_type().into(), act_code(act).to_string()],
        params: vec![
            KernelParam::new("x", ParamKind::ConstPtr(dtype)),
            KernelParam::new("out", ParamKind::MutPtr(dtype)),
            KernelParam::new("n", ParamKind::I64),
        ],
        block_threads: THREADS,
        arch: ArchRequirement::AtLeast(7, 0),
    }
}

fn gather_instantiation(dtype: DType) -> Instantiation {
    Instantiation {
        name: format!("gather_rows_{}", dtype.name()),
        family: "rows_gather",
        source: SOURCE,
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
        arch: ArchRequirement::AtLeast(7, 0),
    }
}

pub(crate) fn instantiations() -> Vec<Instantiation> {
    let mut all = Vec::new();
    for dtype in DType::ALL {
        all.push(gather_instantiation(dtype));
        for act in Activation::ALL {
            all.push(activation_instantiation(dtype, act));
        }
    }
    all
}

pub(crate) fn launch_activation(
    gpu: &Gpu,
    dtype: DType,
    act: Activation,
    x: DevPtr,
    n: usize,
    out: DevPtr,
) -> Result<(), KernelError> {
    x.expect("activation input", dtype, n)?;
    out.expect("activation output", dtype, n)?;
    if n == 0 {
        return Ok(());
    }
    // Enough blocks to fill the machine; the loop covers the rest.
    let blocks = (n as u64).div_ceil(THREADS as u64).min(65_535) as u32;
    gpu.launch(
        &activation_instantiation(dtype, act),
        LaunchDims {
            grid: (blocks, 1, 1),
            block: THREADS,
            shared_bytes: 0,
        },
        &[
            KernelArg::Ptr(x.ptr),
            KernelArg::Ptr(out.ptr),
            KernelArg::I64(to_i64(n)?),
        ],
    )
}

/// `out[r, :cols] = src[r * src_row_stride + src_offset ..][..cols]` for `r < rows`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn launch_gather_rows(
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
    let blocks = u32::try_from(rows).map_err(|_| super::invalid!("gather of {rows} rows"))?;
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
            KernelArg::I32(
                i32::try_from(cols).map_err(|_| super::invalid!("gather of {cols} columns"))?,
            ),
        ],
    )
}

impl Gpu {
    /// `out = act(x)` element by element (graphs run without epilogue fusion need it).
    pub fn activation(
        &self,
        dtype: DType,
        act: Activation,
        x: DevPtr,
        n: usize,
        out: DevPtr,
    ) -> Result<(), KernelError> {
        launch_activation(self, dtype, act, x, n, out)
    }

    /// `out[r, :cols] = src[r * src_row_stride + src_offset ..][..cols]`: the CLS token of
    /// every sequence, say.
    #[allow(clippy::too_many_arguments)]
    pub fn gather_rows(
        &self,
        dtype: DType,
        src: DevPtr,
        src_row_stride: usize,
        src_offset: usize,
        rows: usize,
        cols: usize,
        out: DevPtr,
    ) -> Result<(), KernelError> {
        launch_gather_rows(
            self,
            dtype,
            src,
            src_row_stride,
            src_offset,
            rows,
            cols,
            out,
        )
    }
}
