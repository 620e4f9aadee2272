//! vitrt's kernels: CUDA C++ block programs compiled at run time by NVRTC, and a CPU twin of
//! each with the same signature and block decomposition.
//!
//! This crate knows nothing of graphs or models: it takes buffers, shapes and
//! meta-parameters, and computes.
//!
//! - [`cuda`]: the device layer: [`cuda::Gpu`] (device, memory, streams, launch, capture),
//!   NVRTC, the kernel caches and the instantiation vocabulary. It imports no family.
//! - One folder per kernel family: its CUDA source, `gpu` (the launcher, a free function taking
//!   `&Gpu`) and `cpu` (the twin, with the same name): [`layernorm`], [`rmsnorm`], [`softmax`], [`add`],
//!   [`activation`], [`gather`], [`pool`], [`normalize`], [`patchify`], [`pixels`], [`jpeg`], [`jpeg_scan`], [`resample`], [`attention`], [`matmul`] (one
//!   CUDA source a program), [`quantize`] (e4m3 codes and scales for the FP8 matmul).
//! - [`e4m3`]: the FP8 E4M3 codec of the FP8 matmul's operands, on the host.
//! - [`all_instantiations`]: every family's instantiations, what CI compiles.

pub mod activation;
pub mod add;
pub mod attention;
pub mod cuda;
pub mod e4m3;
pub mod gather;
pub mod jpeg;
pub mod jpeg_scan;
pub mod layernorm;
pub mod matmul;
pub mod normalize;
pub mod patchify;
pub mod pixels;
pub mod pool;
pub mod quantize;
mod registry;
pub mod resample;
pub mod rmsnorm;
pub mod rope;
pub(crate) mod rows;
pub mod softmax;
mod types;

pub use attention::AttentionProblem;
pub use matmul::{Epilogue, MatmulProblem, WeightLayout};
pub use pixels::PixelBatch;
pub use registry::all_instantiations;
pub use types::{Activation, DType, Operand};
