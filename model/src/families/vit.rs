//! ViT, the Vision Transformer as transformers implements it: `ViTModel` and
//! `ViTForImageClassification` (`google/vit-base-patch16-224` and its kin). A CLS token ahead
//! of the patches, a dense pooler with an activation, a classifier on the CLS token.

use super::{ConfigFormat, Defaults, FamilyRules, ModelType, TransformersConfig};
use crate::config::{Fields, ModelConfig};

pub(crate) const VIT: FamilyRules = FamilyRules {
    name: "ViT",
    config: ConfigFormat::Transformers(TransformersConfig {
        model_types: &[ModelType {
            name: "vit",
            vision_config: false,
        }],
        defaults: Defaults {
            patch_size: 16,
            hidden_act: "gelu",
            layer_norm_eps: 1e-12,
        },
        has_qkv_bias: true,
        read_mlp: super::read_standard_mlp,
        read_own_fields: read_pooler_act,
    }),
};

/// The pooler's activation (`pooler_act`, tanh by default): ViT's and DeiT's.
pub(super) fn read_pooler_act(
    _model_type: &str,
    fields: &Fields,
    config: &mut ModelConfig,
) -> Result<(), String> {
    (config.pooler_act, _) = fields.activation("pooler_act", "tanh")?;
    Ok(())
}
