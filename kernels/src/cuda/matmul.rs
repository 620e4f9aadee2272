//! TEMPORARY: the matmul kernel is being written in parallel (kernels/cuda/matmul.cu and this
//! file will be replaced by it). Until then `Gpu::matmul` reports that it is not built, and
//! the registry holds no matmul instantiation.

use super::{DevPtr, Gpu, Instantiation, KernelError};
use crate::{DType, MatmulProblem};

#[allow(clippy::too_many_arguments)]
pub(crate) fn launch(
    _gpu: &Gpu,
    _dtype: DType,
    _problem: &MatmulProblem,
    _a: DevPtr,
    _b: DevPtr,
    _bias: Option<DevPtr>,
    _residual: Option<DevPtr>,
    _c: DevPtr,
) -> Result<(), KernelError> {
    Err(KernelError::InvalidArgument(
        "matmul kernel not built yet".into(),
    ))
}

pub(crate) fn instantiations() -> Vec<Instantiation> {
    Vec::new()
}
