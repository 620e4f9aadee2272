//! Activations as passes of their own: `out = act(x)` for graphs run without epilogue fusion,
//! and `out[r, c] = act(x[r, c] + bias[c])`, the bias and activation a GEMM without our fused
//! epilogue (cuBLAS) leaves to a separate pass. The formulas are [`crate::Activation::apply`]'s.
//! And SwiGLU's gate, `out[r, c] = silu(x[r, c]) · x[r, cols + c]`, between the two matmuls of
//! DINOv2-giant's MLP.
//!
//! - [`gpu::activation`], [`gpu::bias_activation`], [`gpu::swiglu`]: activation.cu.
//! - [`cpu::bias_activation`], [`cpu::swiglu`]: the CPU twins, one program per row (a
//!   standalone activation on the CPU is [`crate::Activation::apply`] per element).
//!
//! Tests: kernels/tests/gpu_kernels/activation.rs (`bias_activation_matches_its_twin`,
//! `swiglu_and_token_mean_match_their_twins`). Bench: the cuBLAS
//! comparison of the `matmul` cases (src/cli/bench/measure.rs) times cuBLAS plus
//! [`gpu::bias_activation`].

pub mod cpu;
pub mod gpu;
