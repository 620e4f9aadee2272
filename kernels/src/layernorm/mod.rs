//! LayerNorm over the rows of a matrix: `out[r, :] = (x[r, :] - mean) / sqrt(var + eps) *
//! gamma + beta`, biased variance, statistics in f32, as torch.nn.LayerNorm.
//!
//! - [`gpu::layernorm`]: layernorm.cu, one warp (or a block) per row with the row layout of
//!   `crate::rows`; the input may be the f32 residual stream of a half-precision run.
//! - [`cpu::layernorm`]: the CPU twin, one program per row.
//! - [`gpu::layernorm_e4m3`]: the same program writing e4m3 codes and a scale a row (the FP8
//!   matmul's A, quantised per row as `crate::quantize` does), and its twin
//!   [`cpu::layernorm_e4m3`], which adds in the program's order: the two agree bit for bit.
//!
//! Tests: kernels/tests/gpu_kernels/layernorm.rs (`layernorm_matches_its_twin`,
//! `layernorm_in_place_matches_its_twin`); the e4m3 output's in kernels/tests/gpu_quantize.rs.
//! Bench case: `layernorm` in src/cli/bench/cases.rs.

pub mod cpu;
pub mod gpu;
