//! Tensors, the graph of ops, fusion passes, the memory plan, the executor and its backends.
//! The runtime knows nothing of ViT: models describe themselves as a [`Graph`].

pub mod backend;
pub mod cost;
mod error;
pub mod executor;
pub mod fp8;
pub mod graph;
mod image_decode;
pub mod key_padding;
pub mod layernorm_fold;
pub mod lowering;
pub mod passes;
pub mod plan;

pub use backend::cpu::CpuBackend;
pub use backend::{
    Backend, Device, DeviceInput, HostStaging, MemoryAccount, PendingRead, TimelineSpan,
    TimelineStage,
};
pub use error::RuntimeError;
pub use executor::{
    EncodedParams, Executor, HostTensor, Marks, ParamStore, PendingOutputs, ReplayState,
};
pub use graph::{Fp8Io, Graph, HeadSlice, Op, ParamSource, ValueId, ValueKind};
pub use image_decode::DeviceDecode;
pub use key_padding::KeyPadding;
pub use plan::{Plan, Precision};
pub use vitrt_kernels::gather::EndToken;
pub use vitrt_kernels::rope::RopeGrid;
pub use vitrt_kernels::{Activation, DType, Epilogue, PixelBatch};

/// The image kernels' batch descriptions and CPU twins (JPEG entropy decoding, JPEG from
/// coefficients, PIL's resize), which the model's preprocessing fills and checks against.
pub mod image_kernels {
    pub use vitrt_kernels::{jpeg, jpeg_scan, resample};
}
