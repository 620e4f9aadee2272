//! CLIP, OpenAI's contrastive image-text model: the vision tower of `CLIPVisionModel`,
//! `CLIPVisionModelWithProjection`, `CLIPModel` and `CLIPForImageClassification`
//! (`openai/clip-vit-base-patch32` and its kin). A CLS token stored as a bare vector, a
//! layernorm before the encoder and one on the pooled CLS token only, a bias-free projection
//! into the embedding space, a classifier on the patch mean.

use super::{ConfigFormat, Defaults, FamilyRules, ModelType, TransformersConfig};

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
};
