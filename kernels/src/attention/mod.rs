//! Fused attention, `O = softmax(scale · Q·Kᵀ) · V` for every (batch, head), the softmax over
//! the keys, Q, K, V and O read and written through strided views ([`AttentionProblem`]).
//!
//! - [`gpu::attention`] (and [`gpu::attention_with_program`]), f16 and bf16, head dims
//!   [`gpu::ATTENTION_HEAD_DIMS`]; f32 has no fused kernel ([`gpu::fused_attention_support`]).
//!   Two programs ([`gpu::AttentionProgram`]): attention_wgmma.cu on Hopper (warpgroup MMAs,
//!   TMA loads, FlashAttention-3's order; not causal), taken where it was measured faster, and
//!   attention.cu (FlashAttention-2 style on mma.sync) everywhere else.
//! - [`cpu::attention`]: the CPU twin, the same online softmax over key blocks, in f32.
//!
//! With [`AttentionProblem::causal`] (text towers: query row i attends to keys 0..=i) both run
//! the causal mask: on the GPU the `_causal` instantiations of the same program, which skip
//! the key blocks past the rows.
//!
//! With [`AttentionProblem::key_padding`] (SigLIP 2's NaFlex: sequences padded at the end to a
//! common length) batch item b attends to its first `len[b]` keys, the lengths an i32 buffer
//! read by the kernels from device memory ([`gpu::attention_with_key_lengths`],
//! [`cpu::attention_with_key_lengths`]): both programs, every instantiation (a runtime
//! argument, null without the mask), key blocks wholly past the length skipped, scores past it
//! -inf in the block that holds it (the tail handling of a T that is not a multiple of the key
//! block, with the item's length for T), padded query rows still computed and finite.
//!
//! - problem.rs: what an attention computes ([`AttentionProblem`]), the head dims and dtypes
//!   the fused kernel takes and the alignment its copies need.
//! - program.rs: the two programs ([`gpu::AttentionProgram`]) and the shapes each takes.
//! - config.rs: one instantiation's meta-parameters, the program chosen for a problem on a
//!   GPU, and the instantiation NVRTC compiles (attention.cu or attention_wgmma.cu).
//! - launch.rs: the launch: checks, arguments (strides, or the Hopper program's tensor maps)
//!   and grid.
//! - gpu.rs: the entry points and every instantiation they can pick; cpu.rs: the twin;
//!   tests.rs: the selection's and the launcher's unit tests.
//!
//! Dependencies run one way: problem, program, config, launch, gpu.
//!
//! Tests: kernels/tests/gpu_attention.rs (every program on every case). Bench case: `attention`
//! in src/cli/bench/cases.rs (non-causal); the causal kernel at CLIP's text shapes:
//! `bench_causal_attention_at_clip_text_shapes`, and every program on the model families'
//! shapes against PyTorch's SDPA: `bench_attention_programs_at_model_shapes` (in
//! kernels/tests/gpu_attention.rs) with scripts/bench/bench_attention.py.

mod config;
pub mod cpu;
pub mod gpu;
mod launch;
mod problem;
mod program;
#[cfg(test)]
mod tests;

pub use problem::AttentionProblem;
