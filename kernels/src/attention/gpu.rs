//! The fused attention launcher, for f16 and bf16 storage and head dims that are multiples of 16
//! from 16 to 128 (ViT-B/16's 64, ViT-L's 64, ViT-H's 80, ...), with two programs:
//! - attention_wgmma.cu on Hopper (sm_90a), non-causal: both matrix products on warpgroup MMAs,
//!   one CTA per (batch, head, block of 64 query rows a warpgroup, or two such blocks in turn
//!   where every key fits its stages), or at head dims 96 and 128 a persistent grid of one CTA
//!   an SM taking those tiles in turn;
//! - attention.cu elsewhere and for the causal mask: FlashAttention-2 style on mma.sync, one
//!   CTA per (batch, head, block of 128 query rows; 64 for head dims above 64).
//!
//! f32 has no fused kernel: its attention runs unfused (the matmul's exact fp32 FMA path), and
//! the runtime asks [`fused_attention_support`] before it fuses.

use super::config::AttentionConfig;
use super::launch::launch;
use super::problem::AttentionProblem;
use crate::cuda::{DevPtr, Gpu, Instantiation, KernelError};
use crate::types::DType;

pub use super::problem::{attention_rows_aligned, fused_attention_support, ATTENTION_HEAD_DIMS};
pub use super::program::AttentionProgram;

/// Every instantiation [`launch`] and [`attention_with_program`] can pick: every program for
/// every head dim, dtype and mask it takes on a Hopper GPU (the mma.sync ones also run
/// elsewhere).
pub(crate) fn instantiations() -> Vec<Instantiation> {
    let mut all = Vec::new();
    for causal in [false, true] {
        for dtype in [DType::F16, DType::BF16] {
            for head_dim in ATTENTION_HEAD_DIMS {
                for program in AttentionProgram::all_for(head_dim, causal, (9, 0)) {
                    let config = AttentionConfig {
                        dtype,
                        head_dim: head_dim as u32,
                        program,
                        causal,
                    };
                    all.push(config.instantiation());
                }
            }
        }
    }
    all
}

/// Fused attention, `O = softmax(scale · Q·Kᵀ) · V` for every (batch, head) of `p`, in
/// f16 or bf16 with fp32 arithmetic (as `cpu::attention`; the probabilities enter P·V in
/// the storage type). Head dims: [`ATTENTION_HEAD_DIMS`]; every row 16-byte aligned. With
/// `p.causal`, query row i attends to keys 0..=i only (a text tower's causal mask). A problem
/// with `p.key_padding` takes [`attention_with_key_lengths`].
pub fn attention(
    gpu: &Gpu,
    dtype: DType,
    p: &AttentionProblem,
    q: DevPtr,
    k: DevPtr,
    v: DevPtr,
    o: DevPtr,
) -> Result<(), KernelError> {
    launch(gpu, dtype, p, None, q, k, v, o, None)
}

/// [`attention`] with the key padding mask (`p.key_padding`): batch item b attends to its
/// first `key_lengths[b]` keys (clamped to `1..=tokens`), the key blocks past them skipped.
/// `key_lengths` holds `p.batch` i32 values, read by the kernel from device memory (a view
/// of 4-byte elements typed F32: the device memory layer has no integer type). `program`
/// forces a program, as [`attention_with_program`] does. Not with `p.causal`.
#[allow(clippy::too_many_arguments)]
pub fn attention_with_key_lengths(
    gpu: &Gpu,
    dtype: DType,
    p: &AttentionProblem,
    program: Option<AttentionProgram>,
    q: DevPtr,
    k: DevPtr,
    v: DevPtr,
    o: DevPtr,
    key_lengths: DevPtr,
) -> Result<(), KernelError> {
    launch(gpu, dtype, p, program, q, k, v, o, Some(key_lengths))
}

/// [`attention`] with the program forced instead of chosen ([`AttentionProgram::all_for`]
/// lists those that can run a problem): for tests and benchmarks of every program.
#[allow(clippy::too_many_arguments)]
pub fn attention_with_program(
    gpu: &Gpu,
    dtype: DType,
    p: &AttentionProblem,
    program: AttentionProgram,
    q: DevPtr,
    k: DevPtr,
    v: DevPtr,
    o: DevPtr,
) -> Result<(), KernelError> {
    launch(gpu, dtype, p, Some(program), q, k, v, o, None)
}
