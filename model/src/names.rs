//! Where each tensor of a ViT-family checkpoint lives: the names each family's checkpoints
//! use on the Hub (and, where transformers 5 renamed them in memory, the new spelling too;
//! each family's file in `families/` lists them), under the prefix the checkpoint's class puts
//! in front of them.

use crate::config::{Family, Mlp, ModelConfig};
use crate::rules::{EmbeddingLayout, LayerPart, QkvLayout, TensorRules};
use vitrt_weights::Checkpoint;

/// The names of one family's tensors in one checkpoint.
#[derive(Clone, Debug)]
pub struct TensorNames {
    pub family: Family,
    /// Put in front of every encoder tensor: "vit.", "deit.", "dinov2.",
    /// "dinov2_with_registers.", "vision_model.", or "" for the bare models of ViT, DeiT and
    /// DINOv2.
    pub prefix: String,
}

impl TensorNames {
    /// The prefix of the checkpoint's encoder tensors, found by looking for its patch
    /// projection; None when the checkpoint holds no such tensor under any prefix the family
    /// uses.
    pub fn find(family: Family, checkpoint: &Checkpoint) -> Option<TensorNames> {
        family.rules().tensors.prefixes.iter().find_map(|prefix| {
            let names = TensorNames {
                family,
                prefix: prefix.to_string(),
            };
            checkpoint.contains(&names.patch_weight()).then_some(names)
        })
    }

    /// The family's tensor names, without the prefix.
    fn rules(&self) -> &'static TensorRules {
        &self.family.rules().tensors
    }

    fn name(&self, suffix: &str) -> String {
        format!("{}{suffix}", self.prefix)
    }

    pub fn patch_weight(&self) -> String {
        self.name(self.rules().patch_weight)
    }

    /// None where the patch projection has no bias (CLIP).
    pub fn patch_bias(&self) -> Option<String> {
        self.rules().patch_bias.map(|suffix| self.name(suffix))
    }

    /// The CLS token (SigLIP has none), stored as the family's [`EmbeddingLayout`] says.
    pub fn class_token(&self) -> Option<String> {
        self.rules().class_token.map(|suffix| self.name(suffix))
    }

    pub fn distillation_token(&self) -> Option<String> {
        self.rules()
            .distillation_token
            .map(|suffix| self.name(suffix))
    }

    pub fn register_tokens(&self, config: &ModelConfig) -> Option<String> {
        let suffix = self.rules().register_tokens?;
        (config.num_register_tokens > 0).then(|| self.name(suffix))
    }

    /// The position table, stored as the family's [`EmbeddingLayout`] says, where the family
    /// has one.
    pub fn positions(&self) -> Option<String> {
        self.rules().positions.map(|name| self.name(name))
    }

    /// How the CLS token and the position table are stored.
    pub fn embedding_layout(&self) -> EmbeddingLayout {
        self.rules().embedding_layout
    }

    /// The layernorm between the embeddings and the encoder (CLIP's `pre_layrnorm`).
    pub fn pre_norm(&self) -> Option<String> {
        self.rules().pre_norm.map(|suffix| self.name(suffix))
    }

    /// The layernorm after the encoder, applied to every token: `layernorm` (ViT, DeiT,
    /// DINOv2), timm's `norm` or SigLIP's `post_layernorm`. CLIP's `post_layernorm`
    /// normalises the pooled token only: its pooler's.
    pub fn final_norm(&self) -> Option<String> {
        self.rules().final_norm.map(|suffix| self.name(suffix))
    }

    /// What every encoder block's tensor names start with, before the block's index.
    fn layers_prefix(&self) -> String {
        self.name(self.rules().layers)
    }

    /// How many encoder blocks the checkpoint holds tensors of: one more than the highest
    /// block index in its names (0 when none).
    pub fn layers_in(&self, checkpoint: &Checkpoint) -> usize {
        let prefix = self.layers_prefix();
        checkpoint
            .names()
            .iter()
            .filter_map(|name| name.strip_prefix(&prefix)?.split('.').next()?.parse().ok())
            .map(|index: usize| index.saturating_add(1))
            .max()
            .unwrap_or(0)
    }

    /// The candidate names of a block's weight (`.weight`, `.bias` or a bare parameter is up
    /// to the caller), most common first.
    pub fn layer(&self, layer: usize, part: LayerPart) -> Vec<String> {
        let base = format!("{}{layer}.", self.layers_prefix());
        let suffixes = (self.rules().layer_part)(part);
        suffixes.iter().map(|s| format!("{base}{s}")).collect()
    }

    /// How Q, K and V are stored: three tensors, or one of 3·hidden rows in that order
    /// (timm's `attn.qkv`, open_clip's `attn.in_proj_weight`).
    pub(crate) fn qkv(&self) -> QkvLayout {
        self.rules().qkv
    }

    /// The classifier's base name.
    pub fn classifier(&self) -> &'static str {
        self.family.rules().classifier.name
    }

    /// Whether blocks use the MLP `mlp`'s weights as this checkpoint stores them: for SwiGLU,
    /// whether the gate and up projections are one `weights_in` tensor.
    pub fn swiglu_fused(&self, checkpoint: &Checkpoint, mlp: Mlp) -> bool {
        mlp == Mlp::SwiGlu
            && self
                .layer(0, LayerPart::SwiGluIn)
                .iter()
                .any(|n| checkpoint.contains(&format!("{n}.weight")))
    }
}
