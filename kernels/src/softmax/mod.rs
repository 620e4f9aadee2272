//! Softmax over the rows of a matrix: `out[r, :] = softmax(scale * x[r, :])`, the row maximum
//! subtracted first, sums in f32.
//!
//! - [`gpu::softmax`]: softmax.cu, the row layout of `crate::rows` or, for short rows that
//!   are no whole number of 16-byte vectors, a warp per span of rows.
//! - [`cpu::softmax`]: the CPU twin, one program per row.
//! - [`gpu::softmax_causal`] and its twin [`cpu::softmax_causal`]: the causal mask of a text
//!   tower's unfused attention (row r is query `r % queries`; its columns past the query are
//!   exactly 0), the same programs built with the mask.
//!
//! Tests: kernels/tests/gpu_kernels/softmax.rs (`softmax_matches_its_twin`,
//! `softmax_in_place_matches_its_twin`, `causal_softmax_matches_its_twin`). Bench case:
//! `softmax` in src/cli/bench/cases.rs.

pub mod cpu;
pub mod gpu;
