//! Row normalisation to unit length: `out[r, :] = x[r, :] / ||x[r, :]||`, CLIP's and SigLIP's
//! image and text embeddings before their cosine similarities (zero-shot scores,
//! `vitrt embed --normalize`).
//!
//! - [`gpu::l2_normalize`]: normalize.cu, one warp per row; the input in the run's dtype or
//!   f32, the output in the run's dtype or f32.
//! - [`cpu::l2_normalize`]: the CPU twin, the same lane-strided sums and shuffle tree.
//!
//! Tests: kernels/tests/gpu_kernels/normalize.rs (`l2_normalize_matches_its_twin`). No bench case: one
//! row per image or label, microseconds.

pub mod cpu;
pub mod gpu;
