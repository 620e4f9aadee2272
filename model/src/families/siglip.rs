//! SigLIP, Google's image-text model trained with a sigmoid loss: the vision tower of
//! `SiglipVisionModel`, `SiglipModel` and `SiglipForImageClassification`
//! (`google/siglip-base-patch16-224`, `google/siglip-so400m-patch14-384` and their kin). No
//! CLS token; CLIP's encoder and tensor names, a layernorm on every token after it, an
//! attention-pooling head, a classifier on the mean of every token.

use super::{ConfigFormat, Defaults, FamilyRules, ModelType, TransformersConfig};
use crate::config::{Fields, ModelConfig};

pub(crate) const SIGLIP: FamilyRules = FamilyRules {
    name: "SigLIP",
    config: ConfigFormat::Transformers(TransformersConfig {
        model_types: &[
            ModelType {
                name: "siglip",
                vision_config: true,
            },
            ModelType {
                name: "siglip_vision_model",
                vision_config: false,
            },
        ],
        defaults: Defaults {
            patch_size: 16,
            hidden_act: "gelu_pytorch_tanh",
            layer_norm_eps: 1e-6,
        },
        has_qkv_bias: false,
        read_mlp: super::read_standard_mlp,
        read_own_fields,
    }),
};

/// Whether the attention-pooling head is part of the model (`vision_use_head`, true by
/// default).
fn read_own_fields(
    _model_type: &str,
    fields: &Fields,
    config: &mut ModelConfig,
) -> Result<(), String> {
    config.vision_use_head = fields.flag("vision_use_head", true)?;
    Ok(())
}
