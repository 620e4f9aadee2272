//! Activations as passes of their own: `out = act(x)` for graphs run without epilogue fusion,
//! and `out[r, c] = act(x[r, c] + bias[c])`, the bias and activation a GEMM without our fused
//! epilogue (cuBLAS) leaves to a separate pass. The formulas are [`crate::Activation::apply`]'s.
//!
//! - [`gpu::activation`], [`gpu::bias_activation`]: activation.cu.
//! - [`cpu::bias_activation`]: the CPU twin, one program per row (a standalone activation on the
//!   CPU is [`crate::Activation::apply`] per element).
//!
//! Tests: kernels/tests/gpu_kernels.rs (`bias_activation_matches_its_twin`). Bench: the cuBLAS
//! comparison of the `matmul` cases (src/cli/bench/measure.rs) times cuBLAS plus
//! [`gpu::bias_activation`].

pub mod cpu;
pub mod gpu;
