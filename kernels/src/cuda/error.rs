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

    /// A wait (`call`) reported an error: a kernel's fault (an illegal address, a trap)
    /// surfaces at the next wait, not at its launch, and leaves the context unusable. Say so,
    /// with the last kernel queued before the wait (`last_kernel`), where the fault happened or
    /// after it.
    pub(crate) fn at_wait(call: &str, error: DriverError, last_kernel: &str) -> KernelError {
        use cudarc::driver::sys::CUresult as R;
        let faulted = matches!(
            error.0,
            R::CUDA_ERROR_ILLEGAL_ADDRESS
                | R::CUDA_ERROR_LAUNCH_FAILED
                | R::CUDA_ERROR_ILLEGAL_INSTRUCTION
                | R::CUDA_ERROR_MISALIGNED_ADDRESS
                | R::CUDA_ERROR_INVALID_ADDRESS_SPACE
                | R::CUDA_ERROR_INVALID_PC
                | R::CUDA_ERROR_HARDWARE_STACK_ERROR
                | R::CUDA_ERROR_ASSERT
                | R::CUDA_ERROR_LAUNCH_TIMEOUT
        );
        if !faulted {
            return KernelError::driver(call, error);
        }
        let last = if last_kernel.is_empty() {
            "no kernel of ours".to_string()
        } else {
            format!("kernel {last_kernel}")
        };
        KernelError::Cuda(format!(
            "a kernel failed while running ({:?}), at or before the last one queued, {last}; \
             the GPU context cannot be used again (CUDA_LAUNCH_BLOCKING=1 stops at the \
             faulting kernel)",
            error.0
        ))
    }
}

/// Shorthand for bad-argument errors built with `format!`.
macro_rules! invalid {
    ($($arg:tt)*) => {
        $crate::cuda::error::KernelError::InvalidArgument(format!($($arg)*))
    };
}
pub(crate) use invalid;
