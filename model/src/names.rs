//! Where each tensor of a ViT-family checkpoint lives: the names each family's checkpoints
//! use on the Hub (and, where transformers 5 renamed them in memory, the new spelling too),
//! under the prefix the checkpoint's class puts in front of them.

use crate::config::{Family, Mlp, ModelConfig};
use vitrt_weights::Checkpoint;

/// One weight of an encoder block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LayerPart {
    NormBefore,
    Query,
    Key,
    Value,
    AttentionOutput,
    /// DINOv2's `layer_scale1.lambda1`.
    AttentionScale,
    NormAfter,
    /// fc1 (Standard MLP).
    Up,
    /// fc2 (Standard MLP).
    Down,
    /// SwiGLU: the gate and up projections stored as one `weights_in` tensor (the Hub's
    /// spelling) ...
    SwiGluIn,
    /// ... or as two (transformers 5's).
    SwiGluGate,
    SwiGluUp,
    /// SwiGLU's down projection.
    SwiGluOut,
    /// DINOv2's `layer_scale2.lambda1`.
    MlpScale,
}

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
        let candidates: &[&str] = match family {
            Family::Vit => &["vit.", ""],
            Family::Deit => &["deit.", ""],
            Family::Dinov2 => &["dinov2.", "dinov2_with_registers.", ""],
            Family::Clip | Family::Siglip => &["vision_model.", ""],
            Family::Timm => &[""],
        };
        candidates.iter().find_map(|prefix| {
            let names = TensorNames {
                family,
                prefix: prefix.to_string(),
            };
            checkpoint.contains(&names.patch_weight()).then_some(names)
        })
    }

    fn name(&self, suffix: &str) -> String {
        format!("{}{suffix}", self.prefix)
    }

    fn clip_like(&self) -> bool {
        matches!(self.family, Family::Clip | Family::Siglip)
    }

    pub fn patch_weight(&self) -> String {
        if self.family == Family::Timm {
            self.name("patch_embed.proj.weight")
        } else if self.clip_like() {
            self.name("embeddings.patch_embedding.weight")
        } else {
            self.name("embeddings.patch_embeddings.projection.weight")
        }
    }

    /// CLIP's patch projection has no bias.
    pub fn patch_bias(&self) -> Option<String> {
        match self.family {
            Family::Clip => None,
            Family::Siglip => Some(self.name("embeddings.patch_embedding.bias")),
            Family::Timm => Some(self.name("patch_embed.proj.bias")),
            _ => Some(self.name("embeddings.patch_embeddings.projection.bias")),
        }
    }

    /// The CLS token: `[1, 1, hidden]`, or `[hidden]` in CLIP; SigLIP has none.
    pub fn class_token(&self) -> Option<String> {
        match self.family {
            Family::Clip => Some(self.name("embeddings.class_embedding")),
            Family::Siglip => None,
            Family::Timm => Some(self.name("cls_token")),
            _ => Some(self.name("embeddings.cls_token")),
        }
    }

    pub fn distillation_token(&self) -> Option<String> {
        (self.family == Family::Deit).then(|| self.name("embeddings.distillation_token"))
    }

    pub fn register_tokens(&self, config: &ModelConfig) -> Option<String> {
        (config.num_register_tokens > 0).then(|| self.name("embeddings.register_tokens"))
    }

    /// The position table: `[1, T, hidden]`, or `[T, hidden]` in CLIP and SigLIP.
    pub fn positions(&self) -> String {
        if self.family == Family::Timm {
            self.name("pos_embed")
        } else if self.clip_like() {
            self.name("embeddings.position_embedding.weight")
        } else {
            self.name("embeddings.position_embeddings")
        }
    }

    /// CLIP's layernorm between the embeddings and the encoder (spelt `pre_layrnorm`).
    pub fn pre_norm(&self) -> Option<String> {
        (self.family == Family::Clip).then(|| self.name("pre_layrnorm"))
    }

    /// The layernorm after the encoder, applied to every token: `layernorm` (ViT, DeiT,
    /// DINOv2) or SigLIP's `post_layernorm`. CLIP's `post_layernorm` normalises the pooled
    /// token only: [`TensorNames::pooled_norm`].
    pub fn final_norm(&self) -> Option<String> {
        match self.family {
            Family::Clip => None,
            Family::Siglip => Some(self.name("post_layernorm")),
            Family::Timm => Some(self.name("norm")),
            _ => Some(self.name("layernorm")),
        }
    }

    pub fn pooled_norm(&self) -> Option<String> {
        (self.family == Family::Clip).then(|| self.name("post_layernorm"))
    }

    /// The candidate names of a block's weight (`.weight`, `.bias` or a bare parameter is up
    /// to the caller), most common first.
    /// What every encoder block's tensor names start with, before the block's index.
    fn layers_prefix(&self) -> String {
        if self.family == Family::Timm {
            self.name("blocks.")
        } else if self.clip_like() {
            self.name("encoder.layers.")
        } else {
            self.name("encoder.layer.")
        }
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

    pub fn layer(&self, layer: usize, part: LayerPart) -> Vec<String> {
        use LayerPart::*;
        let base = format!("{}{layer}.", self.layers_prefix());
        let suffixes: &[&str] = match (self.family, part) {
            (Family::Clip | Family::Siglip, NormBefore) => &["layer_norm1"],
            (Family::Clip | Family::Siglip, Query) => &["self_attn.q_proj"],
            (Family::Clip | Family::Siglip, Key) => &["self_attn.k_proj"],
            (Family::Clip | Family::Siglip, Value) => &["self_attn.v_proj"],
            (Family::Clip | Family::Siglip, AttentionOutput) => &["self_attn.out_proj"],
            (Family::Clip | Family::Siglip, NormAfter) => &["layer_norm2"],
            (Family::Clip | Family::Siglip | Family::Dinov2, Up) => &["mlp.fc1"],
            (Family::Clip | Family::Siglip | Family::Dinov2, Down) => &["mlp.fc2"],
            (Family::Vit | Family::Deit, NormBefore) => &["layernorm_before"],
            (Family::Vit | Family::Deit, NormAfter) => &["layernorm_after"],
            (Family::Vit | Family::Deit, Up) => &["intermediate.dense"],
            (Family::Vit | Family::Deit, Down) => &["output.dense"],
            (Family::Dinov2, NormBefore) => &["norm1"],
            (Family::Dinov2, NormAfter) => &["norm2"],
            (Family::Dinov2, AttentionScale) => &["layer_scale1.lambda1"],
            (Family::Dinov2, MlpScale) => &["layer_scale2.lambda1"],
            (Family::Dinov2, SwiGluIn) => &["mlp.weights_in"],
            (Family::Dinov2, SwiGluGate) => &["mlp.gate_proj"],
            (Family::Dinov2, SwiGluUp) => &["mlp.up_proj"],
            (Family::Dinov2, SwiGluOut) => &["mlp.weights_out", "mlp.down_proj"],
            (Family::Dinov2, Query) => &["attention.attention.query", "attention.q_proj"],
            (Family::Dinov2, Key) => &["attention.attention.key", "attention.k_proj"],
            (Family::Dinov2, Value) => &["attention.attention.value", "attention.v_proj"],
            (Family::Dinov2, AttentionOutput) => &["attention.output.dense", "attention.o_proj"],
            (Family::Timm, NormBefore) => &["norm1"],
            (Family::Timm, NormAfter) => &["norm2"],
            // Q, K and V are rows of one tensor (see `TensorNames::fused_qkv`).
            (Family::Timm, Query | Key | Value) => &["attn.qkv"],
            (Family::Timm, AttentionOutput) => &["attn.proj"],
            (Family::Timm, AttentionScale) => &["ls1.gamma"],
            (Family::Timm, MlpScale) => &["ls2.gamma"],
            (Family::Timm, Up) => &["mlp.fc1"],
            (Family::Timm, Down) => &["mlp.fc2"],
            (Family::Vit | Family::Deit, Query) => &["attention.attention.query"],
            (Family::Vit | Family::Deit, Key) => &["attention.attention.key"],
            (Family::Vit | Family::Deit, Value) => &["attention.attention.value"],
            (Family::Vit | Family::Deit, AttentionOutput) => &["attention.output.dense"],
            _ => &[],
        };
        suffixes.iter().map(|s| format!("{base}{s}")).collect()
    }

    /// Whether Q, K and V are stored as one tensor of 3·hidden rows, in that order (timm).
    pub fn fused_qkv(&self) -> bool {
        self.family == Family::Timm
    }

    /// The classifier's base name.
    pub fn classifier(&self) -> &'static str {
        if self.family == Family::Timm {
            "head"
        } else {
            "classifier"
        }
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
