//! What one fused attention computes: the shapes, the scale and the strided views of Q, K, V and O.

use crate::types::Operand;

/// Fused attention over strided heads: for every (batch, head),
/// `O = softmax(scale · Q·Kᵀ) · V`, the softmax over the keys, where Q, K, V and O are
/// `tokens x head_dim` matrices read and written through their views (so Q, K and V can be
/// read in place out of a fused QKV activation, and O written with heads side by side).
/// Self-attention: as many queries as keys (`tokens`).
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
