//! CLIP, OpenAI's contrastive image-text model: the vision tower of `CLIPVisionModel`,
//! `CLIPVisionModelWithProjection`, `CLIPModel` and `CLIPForImageClassification`
//! (`openai/clip-vit-base-patch32` and its kin). A CLS token stored as a bare vector, a
//! layernorm before the encoder and one on the pooled CLS token only, a bias-free projection
//! into the embedding space, a classifier on the patch mean.

use super::{
    ClassifierRules, ConfigFormat, Defaults, EmbeddingLayout, FamilyRules, ModelType, PoolerKind,
    TensorRules, TransformersConfig,
};
use crate::model::ClassifierInput;
use crate::names::LayerPart;

pub(crate) const CLIP: FamilyRules = FamilyRules {
    name: "CLIP",
    config: ConfigFormat::Transformers(TransformersConfig {
        model_types: &[
            ModelType {
                name: "clip",
                vision_config: true,
            },
            ModelType {
                name: "clip_vision_model",
                vision_config: false,
            },
        ],
        defaults: Defaults {
            patch_size: 32,
            hidden_act: "quick_gelu",
            layer_norm_eps: 1e-5,
        },
        has_qkv_bias: false,
        read_mlp: super::read_standard_mlp,
        read_own_fields: super::no_own_fields,
    }),
    tensors: TensorRules {
        prefixes: &["vision_model.", ""],
        patch_weight: "embeddings.patch_embedding.weight",
        patch_bias: None,
        class_token: Some("embeddings.class_embedding"),
        distillation_token: None,
        register_tokens: None,
        positions: "embeddings.position_embedding.weight",
        embedding_layout: EmbeddingLayout::Unbatched,
        // Spelt so in CLIP's checkpoints.
        pre_norm: Some("pre_layrnorm"),
        // CLIP's post_layernorm normalises the pooled token only.
        final_norm: None,
        layers: "encoder.layers.",
        layer_part,
        fused_qkv: false,
    },
    pooler: Some(PoolerKind::NormedClassToken("post_layernorm")),
    image_projection: Some("visual_projection"),
    classifier: ClassifierRules {
        name: "classifier",
        input: ClassifierInput::PatchMean,
        with_teacher: None,
    },
    position_resampling: super::bicubic,
};

/// The names of a CLIP block's weights: CLIP's and SigLIP's, vision and text towers alike.
pub(super) fn layer_part(part: LayerPart) -> &'static [&'static str] {
    use LayerPart::*;
    match part {
        NormBefore => &["layer_norm1"],
        Query => &["self_attn.q_proj"],
        Key => &["self_attn.k_proj"],
        Value => &["self_attn.v_proj"],
        AttentionOutput => &["self_attn.out_proj"],
        NormAfter => &["layer_norm2"],
        Up => &["mlp.fc1"],
        Down => &["mlp.fc2"],
        AttentionScale | MlpScale | SwiGluIn | SwiGluGate | SwiGluUp | SwiGluOut => &[],
    }
}
