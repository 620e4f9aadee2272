//! timm's own ViT checkpoints: the `vit_*` models of `timm`, with timm's `config.json`
//! (`architecture`, `model_args`, `pretrained_cfg`; `timm/vit_base_patch16_224.augreg_in21k`
//! and its kin). The plain ViT with a CLS token read by the head, its Q, K and V in one
//! tensor; the sizes come from the architecture's name.

use crate::config::{Mlp, ModelConfig};
use crate::family::Family;
use crate::rules::{
    ClassifierInput, ClassifierRules, ConfigFormat, EmbeddingLayout, FamilyRules, LayerPart,
    OwnConfig, TensorRules,
};
use serde_json::{Map, Value};
use std::collections::BTreeMap;
use vitrt_runtime::Activation;

pub(crate) const TIMM: FamilyRules = FamilyRules {
    name: "timm ViT",
    // timm's checkpoints name an architecture instead of a model_type.
    config: ConfigFormat::Own(OwnConfig {
        key: "architecture",
        read: read_config,
    }),
    tensors: TensorRules {
        prefixes: &[""],
        patch_weight: "patch_embed.proj.weight",
        patch_bias: Some("patch_embed.proj.bias"),
        class_token: Some("cls_token"),
        distillation_token: None,
        register_tokens: None,
        positions: "pos_embed",
        embedding_layout: EmbeddingLayout::Batched,
        pre_norm: None,
        final_norm: Some("norm"),
        layers: "blocks.",
        layer_part,
        fused_qkv: true,
    },
    pooler: None,
    image_projection: None,
    classifier: ClassifierRules {
        name: "head",
        input: ClassifierInput::ClassToken,
        with_teacher: None,
    },
    position_resampling: crate::rules::bicubic,
};

/// The names of a timm block's weights.
fn layer_part(part: LayerPart) -> &'static [&'static str] {
    use LayerPart::*;
    match part {
        NormBefore => &["norm1"],
        // Q, K and V are rows of one tensor (`TensorRules::fused_qkv`).
        Query | Key | Value => &["attn.qkv"],
        AttentionOutput => &["attn.proj"],
        AttentionScale => &["ls1.gamma"],
        NormAfter => &["norm2"],
        Up => &["mlp.fc1"],
        Down => &["mlp.fc2"],
        MlpScale => &["ls2.gamma"],
        SwiGluIn | SwiGluGate | SwiGluUp | SwiGluOut => &[],
    }
}

/// The plain ViT sizes timm names: (width, depth, heads).
fn timm_size(name: &str) -> Option<(usize, usize, usize)> {
    Some(match name {
        "tiny" => (192, 12, 3),
        "small" => (384, 12, 6),
        "base" => (768, 12, 12),
        "large" => (1024, 24, 16),
        "huge" => (1280, 32, 16),
        _ => return None,
    })
}

/// A timm `config.json`: the architecture's name (`vit_{size}_patch{P}_{image}`) gives the
/// sizes, `model_args` (where the checkpoint was saved with any) overrides them, and
/// `pretrained_cfg.input_size` the image size. Anything but the plain ViT with a CLS token
/// read by the head is refused by name.
fn read_config(top: &Map<String, Value>) -> Result<ModelConfig, String> {
    let architecture = top
        .get("architecture")
        .and_then(Value::as_str)
        .ok_or("\"architecture\" must be a string")?;
    let unsupported = |why: &str| {
        format!(
            "timm architecture \"{architecture}\" is not one vitrt runs ({why}; supported: the \
             plain vit_{{tiny,small,base,large,huge}}_patch{{P}}_{{size}} with a CLS token)"
        )
    };
    let parts: Vec<&str> = architecture.split('_').collect();
    let (size, patch, image) = match parts[..] {
        ["vit", size, patch, image] => (
            size,
            patch
                .strip_prefix("patch")
                .and_then(|p| p.parse::<usize>().ok()),
            image.parse::<usize>().ok(),
        ),
        _ => return Err(unsupported("not a plain ViT name")),
    };
    let (Some((mut width, mut depth, mut heads)), Some(mut patch), Some(image)) =
        (timm_size(size), patch, image)
    else {
        return Err(unsupported("unknown size or patch"));
    };
    let mut image_size = (image, image);
    let mut mlp_ratio = 4.0;
    let (mut qkv_bias, mut channels, mut layer_scale) = (true, 3, false);
    let empty = Map::new();
    let args = match top.get("model_args") {
        None | Some(Value::Null) => &empty,
        Some(Value::Object(map)) => map,
        Some(v) => return Err(format!("\"model_args\" must be an object, got {v}")),
    };
    let positive = |key: &str, v: &Value| {
        v.as_u64()
            .filter(|&n| n > 0)
            .map(|n| n as usize)
            .ok_or(format!(
                "model_args.{key} must be a positive integer, got {v}"
            ))
    };
    for (key, v) in args {
        match key.as_str() {
            "embed_dim" => width = positive(key, v)?,
            "depth" => depth = positive(key, v)?,
            "num_heads" => heads = positive(key, v)?,
            "patch_size" => patch = positive(key, v)?,
            "in_chans" => channels = positive(key, v)?,
            "img_size" => {
                image_size = match v {
                    Value::Array(a) if a.len() == 2 => {
                        (positive(key, &a[0])?, positive(key, &a[1])?)
                    }
                    _ => {
                        let n = positive(key, v)?;
                        (n, n)
                    }
                }
            }
            "mlp_ratio" => {
                mlp_ratio = v
                    .as_f64()
                    .filter(|r| *r > 0.0 && r.is_finite())
                    .ok_or(format!(
                        "model_args.mlp_ratio must be a positive number, got {v}"
                    ))?
            }
            "qkv_bias" => {
                qkv_bias = v.as_bool().ok_or(format!(
                    "model_args.qkv_bias must be true or false, got {v}"
                ))?
            }
            "init_values" => layer_scale = !v.is_null(),
            "num_classes" => {}
            "global_pool" if v.as_str() == Some("token") => {}
            "class_token" if v.as_bool() == Some(true) => {}
            "no_embed_class" | "pre_norm" | "fc_norm" if v.as_bool() != Some(true) => {}
            "reg_tokens" if v.as_u64() == Some(0) => {}
            other => return Err(unsupported(&format!("model_args.{other} = {v}"))),
        }
    }
    if let Some(pool) = top.get("global_pool").and_then(Value::as_str) {
        if pool != "token" {
            return Err(unsupported(&format!("global_pool \"{pool}\"")));
        }
    }
    let cfg = top.get("pretrained_cfg").and_then(Value::as_object);
    if let Some(input) = cfg
        .and_then(|c| c.get("input_size"))
        .and_then(Value::as_array)
    {
        if let [c, h, w] = &input[..] {
            let n = |v: &Value| positive("pretrained_cfg.input_size", v);
            channels = n(c)?;
            image_size = (n(h)?, n(w)?);
        }
    }
    let mut id2label = BTreeMap::new();
    if let Some(names) = top.get("label_names").and_then(Value::as_array) {
        for (i, name) in names.iter().enumerate() {
            if let Some(name) = name.as_str() {
                id2label.insert(i, name.to_string());
            }
        }
    }
    Ok(ModelConfig {
        family: Family::Timm,
        model_type: architecture.to_string(),
        hidden_size: width,
        num_hidden_layers: depth,
        num_attention_heads: heads,
        intermediate_size: (width as f64 * mlp_ratio) as usize,
        hidden_act: Activation::Gelu,
        hidden_act_name: "gelu".into(),
        layer_norm_eps: 1e-6,
        image_size,
        patch_size: patch,
        num_channels: channels,
        qkv_bias,
        num_register_tokens: 0,
        layer_scale,
        mlp: Mlp::Standard,
        vision_use_head: false,
        pooler_act: Activation::Tanh,
        id2label,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timm_configs_take_their_sizes_from_the_name_and_model_args() {
        let base = ModelConfig::from_json_str(
            r#"{"architecture": "vit_base_patch16_384", "num_classes": 1000,
                "pretrained_cfg": {"input_size": [3, 384, 384]}}"#,
        )
        .unwrap();
        assert_eq!(base.family, Family::Timm);
        assert_eq!(
            (
                base.hidden_size,
                base.num_hidden_layers,
                base.num_attention_heads
            ),
            (768, 12, 12)
        );
        assert_eq!(
            (base.image_size, base.patch_size, base.tokens()),
            ((384, 384), 16, 577)
        );
        assert_eq!((base.layer_norm_eps, base.intermediate_size), (1e-6, 3072));
        let small = ModelConfig::from_json_str(
            r#"{"architecture": "vit_base_patch16_224", "label_names": ["a", "b"],
                "model_args": {"embed_dim": 48, "depth": 2, "num_heads": 3, "patch_size": 8,
                               "img_size": [32, 32], "init_values": 0.5}}"#,
        )
        .unwrap();
        assert_eq!(
            (small.hidden_size, small.head_dim(), small.tokens()),
            (48, 16, 17)
        );
        assert!(small.layer_scale);
        assert_eq!(small.label(1), "b");
        for (json, want) in [
            (
                r#"{"architecture": "vit_base_patch16_clip_224"}"#,
                "not a plain ViT name",
            ),
            (
                r#"{"architecture": "vit_medium_patch16_224"}"#,
                "unknown size",
            ),
            (
                r#"{"architecture": "vit_base_patch16_224", "global_pool": "avg"}"#,
                "global_pool \"avg\"",
            ),
            (
                r#"{"architecture": "vit_base_patch16_224", "model_args": {"reg_tokens": 4}}"#,
                "model_args.reg_tokens",
            ),
        ] {
            let err = ModelConfig::from_json_str(json).unwrap_err();
            assert!(err.contains(want), "{err} should mention {want}");
        }
    }
}
