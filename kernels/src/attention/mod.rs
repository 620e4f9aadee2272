//! Fused attention, `O = softmax(scale · Q·Kᵀ) · V` for every (batch, head), the softmax over
//! the keys, Q, K, V and O read and written through strided views ([`AttentionProblem`]).
//!
//! - [`gpu::attention`] (and [`gpu::attention_with_row_groups`]): attention.cu,
//!   FlashAttention-2 style, f16 and bf16, head dims [`gpu::ATTENTION_HEAD_DIMS`]; f32 has no
//!   fused kernel ([`gpu::fused_attention_support`]).
//! - [`cpu::attention`]: the CPU twin, the same online softmax over key blocks, in f32.
//!
//! Tests: kernels/tests/gpu_attention.rs. Bench case: `attention` in src/cli/bench/cases.rs.

pub mod cpu;
pub mod gpu;
mod problem;

pub use problem::AttentionProblem;
