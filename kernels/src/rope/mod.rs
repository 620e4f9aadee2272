//! Rotary position embeddings on a grid of patches (DINOv3's `DINOv3ViTRopePositionEmbedding`
//! and `apply_rotary_pos_emb`): each head's `head_dim` values of a patch token are rotated in
//! pairs (d, d + head_dim/2) by angles that depend on the patch's row and column; the tokens
//! ahead of the patches (CLS, registers) pass unchanged.
//!
//! For patch p = i·w + j of an h x w grid, with D = head_dim, F = D/4 frequencies
//! `inv_freq[f] = 1 / theta^(4f/D)` and the patch centre's coordinates in [-1, 1],
//! `y = 2(i + ½)/h − 1`, `x = 2(j + ½)/w − 1`, the angle of dimension d is
//! `2π · c · inv_freq[f]` with (c, f) = (y, d mod F) for d mod D/2 < F and (x, d mod F) after,
//! and `out[d] = q[d]·cos − q[d + D/2]·sin`, `out[d + D/2] = q[d + D/2]·cos + q[d]·sin`
//! (torch's `q·cos + rotate_half(q)·sin`). Every step is f32 as transformers computes the table
//! (in f32 whatever the model's dtype).
//!
//! - [`gpu::rope`]: rope.cu, a CTA a token: its angles made once, shared by every head.
//! - [`cpu::rope`]: the CPU twin.
//!
//! Tests: kernels/tests/gpu_kernels/rope.rs (`rope_matches_its_twin`).

pub mod cpu;
pub mod gpu;

/// Where the rotated tokens are and how their angles are made.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RopeGrid {
    /// Tokens ahead of the patches, left as they are.
    pub prefix_tokens: usize,
    /// The patch grid, rows by columns: the sequence is `prefix_tokens + rows · cols` long.
    pub rows: usize,
    pub cols: usize,
    /// The base period (`rope_theta`).
    pub theta: f32,
}

impl RopeGrid {
    /// The angle of dimension `d` (of `head_dim`) of patch `patch`, in f32 as transformers
    /// computes it.
    pub fn angle(&self, head_dim: usize, patch: usize, d: usize) -> f32 {
        let quarter = head_dim / 4;
        let j = d % (head_dim / 2);
        let (axis, f) = (j / quarter, j % quarter);
        let (index, extent) = if axis == 0 {
            (patch / self.cols, self.rows)
        } else {
            (patch % self.cols, self.cols)
        };
        let centre = (index as f32 + 0.5) / extent as f32;
        let coordinate = 2.0 * centre - 1.0;
        // torch.arange(0, 1, 4 / D) (f64 steps cast to f32), then theta ** that and 1 / it.
        let exponent = (f as f64 * (4.0 / head_dim as f64)) as f32;
        let inv_freq = 1.0 / self.theta.powf(exponent);
        (std::f32::consts::TAU * coordinate) * inv_freq
    }

    /// Checks the grid against a sequence of `tokens` and a head of `head_dim`.
    pub fn check(&self, tokens: usize, head_dim: usize) -> Result<(), String> {
        if head_dim == 0 || !head_dim.is_multiple_of(4) {
            return Err(format!(
                "rotary embeddings need a head dim divisible by 4, not {head_dim}"
            ));
        }
        let patches = self.rows.checked_mul(self.cols);
        if patches.and_then(|p| p.checked_add(self.prefix_tokens)) != Some(tokens) {
            return Err(format!(
                "rotary embeddings over {} prefix tokens and a {}x{} grid need {} tokens, not {tokens}",
                self.prefix_tokens,
                self.rows,
                self.cols,
                self.prefix_tokens as u128 + self.rows as u128 * self.cols as u128
            ));
        }
        if !(self.theta.is_finite() && self.theta > 0.0) {
            return Err(format!("rope_theta must be positive, not {}", self.theta));
        }
        Ok(())
    }
}
