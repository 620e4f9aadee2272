//! vitrt's kernels: CUDA C++ block programs compiled at run time by NVRTC, and a CPU twin of
//! each with the same signature and block decomposition.
//!
//! This crate knows nothing of graphs or models: it takes buffers, shapes and
//! meta-parameters, and computes.

pub mod cpu;
pub mod cuda;
mod types;

pub use types::{
    Activation, AttentionProblem, DType, Epilogue, MatmulProblem, Operand, PixelBatch, WeightLayout,
};
