//! What one fused attention computes: the shapes, the scale and the strided views of Q, K, V and O.

use crate::types::{DType, Operand};

/// Fused attention over strided heads: for every (batch, head),
/// `O = softmax(scale · Q·Kᵀ) · V`, the softmax over the keys, where Q, K, V and O are
/// `tokens x head_dim` matrices read and written through their views (so Q, K and V can be
/// read in place out of a fused QKV activation, and O written with heads side by side).
/// Self-attention: as many queries as keys (`tokens`).
///
/// With [`AttentionProblem::key_padding`], each batch item attends to its first `len[b]` keys
/// only, `len` an i32 buffer of `batch` lengths handed beside Q, K, V and O (read on the GPU
/// from device memory): the key padding mask of sequences padded at the end to a common
/// length (SigLIP 2's NaFlex images, each its own number of patches). Every query row,
/// padded ones included, attends to the valid keys, so every output row is finite, as
/// transformers' masked attention gives them. A length is clamped to `1..=tokens`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AttentionProblem {
    pub batch: usize,
    pub heads: usize,
    pub tokens: usize,
    pub head_dim: usize,
    pub scale: f32,
    /// The causal mask of a text tower (CLIP, SigLIP): query row i attends to keys 0..=i
    /// only, as if the scores of keys past i were -inf.
    pub causal: bool,
    /// Per-batch key lengths are given: keys at or past `len[b]` get -inf scores, and the
    /// key blocks wholly past it are skipped. Not with `causal`.
    pub key_padding: bool,
    pub q: Operand,
    pub k: Operand,
    pub v: Operand,
    pub o: Operand,
}

impl AttentionProblem {
    /// Attention as a ViT layer runs it: Q, K and V read in place out of one fused QKV
    /// activation `[batch, tokens, 3 · heads · head_dim]` (Q's heads, then K's, then V's), O
    /// written as `[batch, tokens, heads · head_dim]`, scale `1/√head_dim`.
    pub fn over_fused_qkv(
        batch: usize,
        heads: usize,
        tokens: usize,
        head_dim: usize,
        causal: bool,
    ) -> AttentionProblem {
        let hidden = heads * head_dim;
        let heads_at = |width: usize, column: usize| Operand {
            offset: column,
            row_stride: width,
            batch_stride: tokens * width,
            head_stride: head_dim,
        };
        AttentionProblem {
            batch,
            heads,
            tokens,
            head_dim,
            scale: 1.0 / (head_dim as f32).sqrt(),
            causal,
            key_padding: false,
            q: heads_at(3 * hidden, 0),
            k: heads_at(3 * hidden, hidden),
            v: heads_at(3 * hidden, 2 * hidden),
            o: heads_at(hidden, 0),
        }
    }

    /// Multiply-adds count two: Q·Kᵀ and P·V, each `tokens² · head_dim` per head, or
    /// `tokens · (tokens + 1) / 2 · head_dim` (the unmasked pairs) when causal.
    pub fn flops(&self) -> f64 {
        let t = self.tokens as f64;
        let pairs = if self.causal {
            t * (t + 1.0) / 2.0
        } else {
            t * t
        };
        4.0 * (self.batch * self.heads) as f64 * pairs * self.head_dim as f64
    }

    /// The mask options a kernel takes: the causal mask and the key padding mask are not
    /// combined (no model asks for both).
    pub fn check_masks(&self) -> Result<(), String> {
        if self.causal && self.key_padding {
            return Err(
                "attention with both the causal mask and per-batch key lengths is not \
                        built (no model asks for both)"
                    .into(),
            );
        }
        Ok(())
    }

    /// Checks that every view fits its buffer, so kernels can index without bounds checks.
    pub fn check_bounds(
        &self,
        q_len: usize,
        k_len: usize,
        v_len: usize,
        o_len: usize,
    ) -> Result<(), String> {
        let extent =
            |view: &Operand| view.extent(self.batch, self.heads, self.tokens, self.head_dim);
        for (name, view, have) in [
            ("Q", &self.q, q_len),
            ("K", &self.k, k_len),
            ("V", &self.v, v_len),
            ("O", &self.o, o_len),
        ] {
            let need = extent(view);
            if need > have {
                return Err(format!(
                    "attention operand {name} needs {need} elements, buffer has {have}"
                ));
            }
        }
        Ok(())
    }
}

/// The head dims the kernel is instantiated for: every multiple of 16 up to 128 (16 for the
/// small test fixtures). A multiple of 16 is what one m16n8k16 step of Q·Kᵀ takes; past 128
/// the output accumulator (head_dim / 2 registers per thread) and the Q fragments would
/// spill (128 already takes 243 registers on sm_90).
pub const ATTENTION_HEAD_DIMS: [usize; 8] = [16, 32, 48, 64, 80, 96, 112, 128];

/// Whether the fused kernel takes `dtype` and `head_dim`; the reason when it does not. What the
/// runtime asks before it fuses attention for a CUDA run.
pub fn fused_attention_support(dtype: DType, head_dim: usize) -> Result<(), String> {
    if dtype == DType::F32 {
        return Err("the fused attention kernel has no f32 variant (f16 and bf16 only)".into());
    }
    if !ATTENTION_HEAD_DIMS.contains(&head_dim) {
        return Err(format!(
            "the fused attention kernel takes head dims {ATTENTION_HEAD_DIMS:?}, not {head_dim}"
        ));
    }
    Ok(())
}

/// Whether every row a walk over (batch, heads, tokens) of `view` touches starts 16 bytes
/// after a 16-byte boundary: what the kernel's 16-byte copies need. Strides of dimensions of
/// extent 1 are never used, so they do not count.
pub fn attention_rows_aligned(
    base: u64,
    dtype: DType,
    view: &Operand,
    (batch, heads, tokens): (usize, usize, usize),
) -> bool {
    let size = dtype.size_bytes();
    let elements = 16 / size;
    (base + (view.offset * size) as u64).is_multiple_of(16)
        && (tokens <= 1 || view.row_stride.is_multiple_of(elements))
        && (batch <= 1 || view.batch_stride.is_multiple_of(elements))
        && (heads <= 1 || view.head_stride.is_multiple_of(elements))
}
