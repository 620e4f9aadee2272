//! RMSNorm over the rows of a matrix: `out[r, :] = x[r, :] / sqrt(mean(x[r, :]²) + eps) *
//! weight`, the mean of squares in f32, as transformers' `Aimv2RMSNorm` (T5's LayerNorm: no
//! mean subtracted, no bias).
//!
//! - [`gpu::rmsnorm`]: rmsnorm.cu, layernorm's row layout (`crate::rows`): one warp (or a
//!   block) per row; the input may be the f32 residual stream of a half-precision run.
//! - [`cpu::rmsnorm`]: the CPU twin, one program per row.
//!
//! Tests: kernels/tests/gpu_kernels/rmsnorm.rs (`rmsnorm_matches_its_twin`,
//! `rmsnorm_in_place_matches_its_twin`); the twin against a float64 definition in cpu.rs.

pub mod cpu;
pub mod gpu;
