//! DINOv2, Meta's self-supervised ViT: `Dinov2Model`, `Dinov2ForImageClassification`, and the
//! same with registers (`Dinov2WithRegisters*`; `facebook/dinov2-base`,
//! `facebook/dinov2-with-registers-base` and their kin). Register tokens after the CLS token
//! (no position embedding of their own), a learned scale of each block's attention and MLP
//! outputs, a SwiGLU MLP in the giant model, a classifier on the CLS token and the patch mean.

use crate::config::{Fields, Mlp, ModelConfig};
use crate::positions::Resampling;
use crate::rules::{
    ClassifierInput, ClassifierRules, ConfigFormat, Defaults, EmbeddingLayout, FamilyRules,
    LayerPart, ModelType, PoolerKind, QkvLayout, TensorRules, TransformersConfig,
};

pub(crate) const DINOV2: FamilyRules = FamilyRules {
    name: "DINOv2",
    config: ConfigFormat::Transformers(TransformersConfig {
        model_types: &[
            ModelType {
                name: "dinov2",
                vision_config: false,
            },
            ModelType {
                name: "dinov2_with_registers",
                vision_config: false,
            },
        ],
        defaults: Defaults {
            patch_size: 14,
            hidden_act: "gelu",
            layer_norm_eps: 1e-6,
        },
        has_qkv_bias: true,
        read_mlp,
        read_own_fields,
    }),
    tensors: TensorRules {
        prefixes: &["dinov2.", "dinov2_with_registers.", ""],
        patch_weight: "embeddings.patch_embeddings.projection.weight",
        patch_bias: Some("embeddings.patch_embeddings.projection.bias"),
        class_token: Some("embeddings.cls_token"),
        distillation_token: None,
        register_tokens: Some("embeddings.register_tokens"),
        positions: Some("embeddings.position_embeddings"),
        embedding_layout: EmbeddingLayout::Batched,
        pre_norm: None,
        final_norm: Some("layernorm"),
        layers: "encoder.layer.",
        layer_part,
        qkv: QkvLayout::Separate,
    },
    pooler: Some(PoolerKind::ClassToken),
    image_projection: None,
    classifier: ClassifierRules {
        name: "classifier",
        input: ClassifierInput::ClassTokenAndPatchMean,
        with_teacher: None,
    },
    position_resampling,
};

/// DINOv2 sizes its MLP by `mlp_ratio`; SwiGLU (`use_swiglu_ffn`) keeps two thirds of it,
/// rounded up to a multiple of 8 (Dinov2SwiGLUFFN).
fn read_mlp(fields: &Fields, hidden_size: usize) -> Result<(usize, Mlp), String> {
    let use_swiglu = fields.flag("use_swiglu_ffn", false)?;
    let ratio = fields.positive_number("mlp_ratio", 4.0)?;
    let features = (hidden_size as f64 * ratio) as usize;
    Ok(if use_swiglu {
        (
            ((features as f64 * 2.0 / 3.0) as usize).div_ceil(8) * 8,
            Mlp::SwiGlu,
        )
    } else {
        (features, Mlp::Standard)
    })
}

/// The register tokens (`num_register_tokens`, 4 by default, in `dinov2_with_registers`), and
/// the layer scale every DINOv2 block has.
fn read_own_fields(
    model_type: &str,
    fields: &Fields,
    config: &mut ModelConfig,
) -> Result<(), String> {
    if model_type == "dinov2_with_registers" {
        config.num_register_tokens = fields.count("num_register_tokens", 4)?;
    }
    config.layer_scale = true;
    Ok(())
}

/// The names of a DINOv2 block's weights: the Hub's spelling, then transformers 5's.
fn layer_part(part: LayerPart) -> &'static [&'static str] {
    use LayerPart::*;
    match part {
        NormBefore => &["norm1"],
        Query => &["attention.attention.query", "attention.q_proj"],
        Key => &["attention.attention.key", "attention.k_proj"],
        Value => &["attention.attention.value", "attention.v_proj"],
        AttentionOutput => &["attention.output.dense", "attention.o_proj"],
        AttentionScale => &["layer_scale1.lambda1"],
        NormAfter => &["norm2"],
        Up => &["mlp.fc1"],
        Down => &["mlp.fc2"],
        SwiGluIn => &["mlp.weights_in"],
        SwiGluGate => &["mlp.gate_proj"],
        SwiGluUp => &["mlp.up_proj"],
        SwiGluOut => &["mlp.weights_out", "mlp.down_proj"],
        MlpScale => &["layer_scale2.lambda1"],
    }
}

/// DINOv2 with registers resamples its position table antialiased.
fn position_resampling(config: &ModelConfig) -> Resampling {
    if config.model_type == "dinov2_with_registers" {
        Resampling::BicubicAntialiased
    } else {
        Resampling::Bicubic
    }
}
