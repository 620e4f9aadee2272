//! Everything that can go wrong between asking for a GPU and reading a result back.

use cudarc::driver::DriverError;

#[derive(Debug, thiserror::Error)]
pub enum KernelError {
    /// libcuda could not be loaded, or the driver would not initialise.
    #[error("no usable CUDA driver: {0}")]
    NoDriver(String),

    #[error("no CUDA device with ordinal {ordinal}: this machine has {count}")]
    NoDevice { ordinal: usize, count: usize },

    #[error("NVRTC (the CUDA run-time compiler) was not found: {0}")]
    NvrtcNotFound(String),

    #[error("CUDA headers (cuda_fp16.h, cuda_bf16.h) were not found: {0}")]
    HeadersNotFound(String),

    #[error("NVRTC could not compile kernel {kernel}:\n{log}")]
    Compile { kernel: String, log: String },

    #[error("out of GPU memory: asked for {requested} bytes, {free} bytes free")]
    OutOfMemory { requested: usize, free: usize },

    #[error("invalid argument: {0}")]
    InvalidArgument(String),

    #[error("CUDA error: {0}")]
    Cuda(String),

    /// Reading or writing a file of ours (the tuning table): the message names it.
    #[error("{0}")]
    File(String),
}

impl KernelError {
    /// A driver call failed: say which call, and what the driver said.
    pub(crate) fn driver(call: &str, error: DriverError) -> KernelError {
        KernelError::Cuda(format!("{call}: {error:?}"))
    }
}

/// Shorthand for bad-argument errors built with `format!`.
macro_rules! invalid {
    ($($arg:tt)*) => {
        $crate::cuda::KernelError::InvalidArgument(format!($($arg)*))
    };
}
pub(crate) use invalid;
