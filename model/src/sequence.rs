//! A config's sequence, as its family's rules make it: the tokens ahead of the patches, the
//! sequence length at any image size, and the work of one image's forward pass. Above the
//! families (it asks the registry), below everything that builds or times a graph.

use crate::config::{Mlp, ModelConfig, PrefixPositions};

impl ModelConfig {
    /// Tokens ahead of the patches: the CLS token (not in SigLIP, nor in timm's models with
    /// `class_token=False`), DeiT's distillation token, DINOv2's and timm's registers.
    pub fn prefix_tokens(&self) -> usize {
        let tensors = &self.family.rules().tensors;
        let registers = match tensors.register_tokens {
            Some(_) => self.num_register_tokens,
            None => 0,
        };
        usize::from(self.has_class_token())
            + usize::from(tensors.distillation_token.is_some())
            + registers
    }

    /// Whether token 0 is a CLS token.
    pub fn has_class_token(&self) -> bool {
        self.class_token && self.family.rules().tensors.class_token.is_some()
    }

    /// The prefix tokens that have rows in the position table (the first ones; the rest get
    /// zeros).
    pub fn positioned_prefix_tokens(&self) -> usize {
        let prefix = self.prefix_tokens();
        match self.prefix_positions {
            PrefixPositions::AllButRegisters => prefix - self.num_register_tokens.min(prefix),
            PrefixPositions::All => prefix,
            PrefixPositions::None => 0,
        }
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
