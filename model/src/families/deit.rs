//! DeiT, the data-efficient image Transformer: `DeiTModel`, `DeiTForImageClassification` and
//! `DeiTForImageClassificationWithTeacher` (`facebook/deit-base-distilled-patch16-224` and
//! its kin). ViT's encoder and tensor names with a distillation token after the CLS token;
//! the distilled checkpoints classify with the mean of a head on each of the two tokens.

use super::vit::VIT;
use crate::rules::{
    ClassifierRules, ConfigFormat, Defaults, FamilyRules, ModelType, TensorRules,
    TransformersConfig,
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
    // ViT's tensors, pooler and classifier, with the distillation token and the teacher's
    // two heads.
    tensors: TensorRules {
        prefixes: &["deit.", ""],
        distillation_token: Some("embeddings.distillation_token"),
        ..VIT.tensors
    },
    classifier: ClassifierRules {
        with_teacher: Some(["cls_classifier", "distillation_classifier"]),
        ..VIT.classifier
    },
    ..VIT
};
