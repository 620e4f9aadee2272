//! ViT, the Vision Transformer as transformers implements it: `ViTModel` and
//! `ViTForImageClassification` (`google/vit-base-patch16-224` and its kin). A CLS token ahead
//! of the patches, a dense pooler with an activation, a classifier on the CLS token.

use crate::config::{Fields, ModelConfig};
use crate::rules::{
    ClassifierInput, ClassifierRules, ConfigFormat, Defaults, EmbeddingLayout, FamilyRules,
    LayerPart, ModelType, PoolerKind, QkvLayout, TensorRules, TransformersConfig,
};

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
        read_mlp: crate::rules::read_standard_mlp,
        read_own_fields: read_pooler_act,
    }),
    tensors: TensorRules {
        prefixes: &["vit.", ""],
        patch_weight: "embeddings.patch_embeddings.projection.weight",
        patch_bias: Some("embeddings.patch_embeddings.projection.bias"),
        class_token: Some("embeddings.cls_token"),
        distillation_token: None,
        register_tokens: None,
        positions: Some("embeddings.position_embeddings"),
        embedding_layout: EmbeddingLayout::Batched,
        pre_norm: None,
        final_norm: Some("layernorm"),
        layers: "encoder.layer.",
        layer_part,
        qkv: QkvLayout::Separate,
    },
    pooler: Some(PoolerKind::Dense("pooler.dense")),
    image_projection: None,
    classifier: ClassifierRules {
        name: "classifier",
        input: ClassifierInput::ClassToken,
        with_teacher: None,
    },
    position_resampling: crate::rules::bicubic,
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

/// The names of a ViT block's weights: ViT's and DeiT's.
pub(super) fn layer_part(part: LayerPart) -> &'static [&'static str] {
    use LayerPart::*;
    match part {
        NormBefore => &["layernorm_before"],
        Query => &["attention.attention.query"],
        Key => &["attention.attention.key"],
        Value => &["attention.attention.value"],
        AttentionOutput => &["attention.output.dense"],
        NormAfter => &["layernorm_after"],
        Up => &["intermediate.dense"],
        Down => &["output.dense"],
        AttentionScale | MlpScale | SwiGluIn | SwiGluGate | SwiGluUp | SwiGluOut => &[],
    }
}
