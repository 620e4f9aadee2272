//! Element-wise add, `out = a + b` (the residual adds of a transformer block when they are not
//! fused into a matmul epilogue).
//!
//! - [`gpu::add`]: add.cu, 16-byte vectors where every pointer allows; a half-precision
//!   operand may be added into an f32 residual stream.
//! - [`cpu::add`]: the CPU twin, one program per chunk.
//!
//! Tests: kernels/tests/gpu_kernels/add.rs (`add_matches_its_twin_exactly`,
//! `add_into_an_f32_stream_matches_its_twin_exactly`). Bench case: `add` in
//! src/cli/bench/cases.rs.

pub mod cpu;
pub mod gpu;
