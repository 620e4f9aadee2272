//! AIMv2, Apple's vision encoders pre-trained by multimodal autoregression: transformers'
//! `Aimv2VisionModel` (`apple/aimv2-large-patch14-224`, `apple/aimv2-huge-patch14-448`,
//! `apple/aimv2-large-patch14-native` and their kin; model_type `aimv2_vision_model`). No CLS
//! token; the patch embedding goes through an RMSNorm before the positions are added (a
//! learned table, or with `is_native` a fixed 2-D sin-cos table for any grid); pre-norm blocks
//! of RMSNorms, attention and a SwiGLU MLP, their biases as `qkv_bias` (the attention's four
//! projections) and `mlp_bias` say; an RMSNorm on every token after them. With `use_head`,
//! `pooler_output` is an attention-pooling head: the learned `cls_token` is the query as it
//! is, keys and values are projected, and an output projection follows (no norm, no MLP).
//! Aimv2Model's LiT dual tower (model_type `aimv2`, also the checkpoints' earlier remote-code
//! format) and Aimv2TextModel are refused by name (`families::refused_model_type`).

use crate::config::{Fields, Mlp, ModelConfig, Norm, PositionSource};
use crate::rules::{
    ClassifierInput, ClassifierRules, ConfigFormat, Defaults, EmbeddingLayout, FamilyRules,
    LayerPart, ModelType, PoolerKind, QkvLayout, QueryTokenAttentionNames, TensorRules,
    TransformersConfig,
};
use vitrt_runtime::Activation;

pub(crate) const AIMV2: FamilyRules = FamilyRules {
    name: "AIMv2",
    config: ConfigFormat::Transformers(TransformersConfig {
        model_types: &[ModelType {
            name: "aimv2_vision_model",
            vision_config: false,
        }],
        defaults: Defaults {
            patch_size: 14,
            hidden_act: "silu",
            // `rms_norm_eps` (read_own_fields); AIMv2's configs have no layer_norm_eps.
            layer_norm_eps: 1e-5,
        },
        // Read with AIMv2's default, false, in read_own_fields.
        has_qkv_bias: true,
        read_mlp,
        read_own_fields,
    }),
    tensors: TensorRules {
        prefixes: &[""],
        patch_weight: "embeddings.patch_embed.weight",
        patch_bias: Some("embeddings.patch_embed.bias"),
        class_token: None,
        distillation_token: None,
        register_tokens: None,
        // Absent with is_native (`PositionSource::SinCos2d`).
        positions: Some("embeddings.position_embedding.weight"),
        embedding_layout: EmbeddingLayout::Unbatched,
        // The patch embedding's RMSNorm, before the positions (`positions_after_pre_norm`).
        pre_norm: Some("embeddings.rms_norm"),
        final_norm: Some("rms_norm"),
        layers: "encoder.layers.",
        layer_part,
        qkv: QkvLayout::Separate,
    },
    pooler: Some(PoolerKind::QueryTokenAttention(QueryTokenAttentionNames {
        base: "head",
        query_token: "cls_token",
        key: "k_proj",
        value: "v_proj",
        output: "output_proj",
    })),
    image_projection: None,
    // transformers has no AIMv2 classifier: no checkpoint holds one.
    classifier: ClassifierRules {
        name: "classifier",
        input: ClassifierInput::TokenMean,
        with_teacher: None,
    },
    // transformers adds a learned table as it is; other sizes are refused (model.rs).
    position_resampling: crate::rules::bicubic,
};

/// SwiGLU always: `intermediate_size` (transformers' default 2816) is the width of each of the
/// gate and up projections (Aimv2MLP).
fn read_mlp(fields: &Fields, _hidden_size: usize) -> Result<(usize, Mlp), String> {
    Ok((fields.int("intermediate_size", Some(2816))?, Mlp::SwiGlu))
}

/// RMSNorms with `rms_norm_eps`; the biases (`qkv_bias`, `mlp_bias`, false by default); the
/// head (`use_head`, true by default); where the positions come from (`is_native`).
fn read_own_fields(
    _model_type: &str,
    fields: &Fields,
    config: &mut ModelConfig,
) -> Result<(), String> {
    config.norm = Norm::Rms;
    config.layer_norm_eps = fields.positive_number("rms_norm_eps", 1e-5)? as f32;
    config.qkv_bias = fields.flag("qkv_bias", false)?;
    config.attention_output_bias = config.qkv_bias;
    config.mlp_bias = fields.flag("mlp_bias", false)?;
    config.vision_use_head = fields.flag("use_head", true)?;
    config.positions_after_pre_norm = true;
    if fields.flag("is_native", false)? {
        if !config.hidden_size.is_multiple_of(4) {
            return Err(format!(
                "is_native with hidden_size {}: the sin-cos position table needs a multiple \
                 of 4",
                config.hidden_size
            ));
        }
        config.positions = PositionSource::SinCos2d;
    }
    if config.hidden_act != Activation::Silu {
        return Err(format!(
            "hidden_act \"{}\": AIMv2's gated MLP is supported with silu (SwiGLU) only",
            config.hidden_act_name
        ));
    }
    Ok(())
}

/// The names of an AIMv2 block's weights.
fn layer_part(part: LayerPart) -> &'static [&'static str] {
    use LayerPart::*;
    match part {
        NormBefore => &["rms_norm1"],
        Query => &["attention.q_proj"],
        Key => &["attention.k_proj"],
        Value => &["attention.v_proj"],
        AttentionOutput => &["attention.out_proj"],
        NormAfter => &["rms_norm2"],
        SwiGluGate => &["ffn.gate_proj"],
        SwiGluUp => &["ffn.up_proj"],
        SwiGluOut => &["ffn.down_proj"],
        AttentionScale | Up | Down | SwiGluIn | MlpScale => &[],
    }
}
