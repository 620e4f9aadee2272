//! DINOv3, Meta's self-supervised ViT: transformers' `DINOv3ViTModel` (and its
//! `DINOv3ViTBackbone`'s tensors; `facebook/dinov3-vitb16-pretrain-lvd1689m` and its kin). No
//! position table: Q and K of the patch tokens are rotated by their position on the patch grid
//! (rotary embeddings, `rope_theta`), on any grid, square or not. Register tokens after the
//! CLS token, no bias on the key projection (`key_bias`), a learned scale of each block's
//! attention and MLP outputs, a gated MLP (SwiGLU) in the large sizes, and a pooler that is
//! the CLS token after the final layernorm.

use crate::config::{Fields, Mlp, ModelConfig};
use crate::positions::Resampling;
use crate::rules::{
    ClassifierInput, ClassifierRules, ConfigFormat, Defaults, EmbeddingLayout, FamilyRules,
    LayerPart, ModelType, PoolerKind, QkvLayout, TensorRules, TransformersConfig,
};
use vitrt_runtime::Activation;

pub(crate) const DINOV3: FamilyRules = FamilyRules {
    name: "DINOv3",
    config: ConfigFormat::Transformers(TransformersConfig {
        model_types: &[ModelType {
            name: "dinov3_vit",
            vision_config: false,
        }],
        defaults: Defaults {
            patch_size: 16,
            hidden_act: "gelu",
            layer_norm_eps: 1e-5,
        },
        // query_bias, key_bias and value_bias instead (read_own_fields).
        has_qkv_bias: false,
        read_mlp,
        read_own_fields,
    }),
    tensors: TensorRules {
        prefixes: &[""],
        patch_weight: "embeddings.patch_embeddings.weight",
        patch_bias: Some("embeddings.patch_embeddings.bias"),
        class_token: Some("embeddings.cls_token"),
        distillation_token: None,
        register_tokens: Some("embeddings.register_tokens"),
        positions: None,
        embedding_layout: EmbeddingLayout::Batched,
        pre_norm: None,
        final_norm: Some("norm"),
        layers: "layer.",
        layer_part,
        qkv: QkvLayout::Separate,
    },
    pooler: Some(PoolerKind::ClassToken),
    image_projection: None,
    // transformers has no DINOv3 classifier: no checkpoint holds one.
    classifier: ClassifierRules {
        name: "classifier",
        input: ClassifierInput::ClassToken,
        with_teacher: None,
    },
    position_resampling,
};

/// `intermediate_size` as it is (transformers' default 1536); `use_gated_mlp` makes it the
/// width of each of the gate and up projections (DINOv3ViTGatedMLP).
fn read_mlp(fields: &Fields, _hidden_size: usize) -> Result<(usize, Mlp), String> {
    let width = fields.int("intermediate_size", Some(1536))?;
    let mlp = if fields.flag("use_gated_mlp", false)? {
        Mlp::SwiGlu
    } else {
        Mlp::Standard
    };
    Ok((width, mlp))
}

/// The register tokens, the layer scale every block has, the rotary embeddings' base period,
/// and the biases: the key projection's may be absent, the others must be there.
fn read_own_fields(
    _model_type: &str,
    fields: &Fields,
    config: &mut ModelConfig,
) -> Result<(), String> {
    config.num_register_tokens = fields.count("num_register_tokens", 0)?;
    config.layer_scale = true;
    config.rope_theta = Some(fields.positive_number("rope_theta", 100.0)? as f32);
    config.key_bias = fields.flag("key_bias", false)?;
    for (field, what) in [
        ("query_bias", "the query projection"),
        ("value_bias", "the value projection"),
        ("proj_bias", "the attention's output projection"),
        ("mlp_bias", "the MLP's projections"),
    ] {
        if !fields.flag(field, true)? {
            return Err(format!(
                "{field}: false ({what} without a bias) is not supported; DINOv3's checkpoints \
                 have it"
            ));
        }
    }
    if config.mlp == Mlp::SwiGlu && config.hidden_act != Activation::Silu {
        return Err(format!(
            "use_gated_mlp with hidden_act \"{}\": the gated MLP is supported with silu \
             (SwiGLU) only",
            config.hidden_act_name
        ));
    }
    Ok(())
}

/// The names of a DINOv3 block's weights.
fn layer_part(part: LayerPart) -> &'static [&'static str] {
    use LayerPart::*;
    match part {
        NormBefore => &["norm1"],
        Query => &["attention.q_proj"],
        Key => &["attention.k_proj"],
        Value => &["attention.v_proj"],
        AttentionOutput => &["attention.o_proj"],
        AttentionScale => &["layer_scale1.lambda1"],
        NormAfter => &["norm2"],
        Up => &["mlp.up_proj"],
        Down => &["mlp.down_proj"],
        SwiGluIn => &[],
        SwiGluGate => &["mlp.gate_proj"],
        SwiGluUp => &["mlp.up_proj"],
        SwiGluOut => &["mlp.down_proj"],
        MlpScale => &["layer_scale2.lambda1"],
    }
}

/// No position table to resample: positions are rotary, computed for the grid at hand.
fn position_resampling(_config: &ModelConfig) -> Resampling {
    Resampling::Bicubic
}
