//! DeiT, the data-efficient image Transformer: `DeiTModel`, `DeiTForImageClassification` and
//! `DeiTForImageClassificationWithTeacher` (`facebook/deit-base-distilled-patch16-224` and
//! its kin). ViT's encoder and tensor names with a distillation token after the CLS token;
//! the distilled checkpoints classify with the mean of a head on each of the two tokens.

use crate::rules::{
    ClassifierInput, ClassifierRules, ConfigFormat, Defaults, EmbeddingLayout, FamilyRules,
    ModelType, PoolerKind, TensorRules, TransformersConfig,
};

pub(crate) const DEIT: FamilyRules = FamilyRules {
    name: "DeiT",
    config: ConfigFormat::Transformers(TransformersConfig {
        model_types: &[ModelType {
            name: "deit",
            vision_config: false,
        }],
        defaults: Defaults {
            patch_size: 16,
            hidden_act: "gelu",
            layer_norm_eps: 1e-12,
        },
        has_qkv_bias: true,
        read_mlp: crate::rules::read_standard_mlp,
        read_own_fields: super::vit::read_pooler_act,
    }),
    tensors: TensorRules {
        prefixes: &["deit.", ""],
        patch_weight: "embeddings.patch_embeddings.projection.weight",
        patch_bias: Some("embeddings.patch_embeddings.projection.bias"),
        class_token: Some("embeddings.cls_token"),
        distillation_token: Some("embeddings.distillation_token"),
        register_tokens: None,
        positions: "embeddings.position_embeddings",
        embedding_layout: EmbeddingLayout::Batched,
        pre_norm: None,
        final_norm: Some("layernorm"),
        layers: "encoder.layer.",
        layer_part: super::vit::layer_part,
        fused_qkv: false,
    },
    pooler: Some(PoolerKind::Dense("pooler.dense")),
    image_projection: None,
    classifier: ClassifierRules {
        name: "classifier",
        input: ClassifierInput::ClassToken,
        with_teacher: Some(["cls_classifier", "distillation_classifier"]),
    },
    position_resampling: crate::rules::bicubic,
};
