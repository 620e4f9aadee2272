//! A config's sequence, as its family's rules make it: the tokens ahead of the patches, the
//! sequence length at any image size, and the work of one image's forward pass. Above the
//! families (it asks the registry), below everything that builds or times a graph.

use crate::config::{Mlp, ModelConfig};

impl ModelConfig {
    /// Tokens ahead of the patches: the CLS token (not in SigLIP), DeiT's distillation token,
    /// DINOv2's registers.
    pub fn prefix_tokens(&self) -> usize {
        let tensors = &self.family.rules().tensors;
        let registers = match tensors.register_tokens {
            Some(_) => self.num_register_tokens,
            None => 0,
        };
        usize::from(tensors.class_token.is_some())
            + usize::from(tensors.distillation_token.is_some())
            + registers
    }

    /// Sequence length at the config's image size: the prefix tokens and the patches.
    pub fn tokens(&self) -> usize {
        self.tokens_at(self.image_size)
    }

    /// Sequence length for images of `(height, width)`.
    pub fn tokens_at(&self, (h, w): (usize, usize)) -> usize {
        self.prefix_tokens() + (h / self.patch_size) * (w / self.patch_size)
    }

    /// Multiply-adds ×2 of one image's forward pass through the encoder (no classifier).
    pub fn flops_per_image(&self) -> f64 {
        let (t, d, i) = (
            self.tokens() as f64,
            self.hidden_size as f64,
            self.intermediate_size as f64,
        );
        let patch = 2.0
            * self.num_patches() as f64
            * d
            * (self.num_channels * self.patch_size * self.patch_size) as f64;
        let mlp_matmuls = match self.mlp {
            Mlp::Standard => 2.0,
            Mlp::SwiGlu => 3.0,
        };
        let per_layer = 2.0 * t * d * 3.0 * d
            + 2.0 * 2.0 * t * t * d
            + 2.0 * t * d * d
            + mlp_matmuls * 2.0 * t * d * i;
        patch + self.num_hidden_layers as f64 * per_layer
    }
}
