//! `config.json` of a Hugging Face ViT-family checkpoint, read and checked: everything the
//! graph builder needs, and nothing it would have to guess. The reader dispatches on
//! `model_type` through the families' registry (`families/`): each family's missing fields take
//! that family's defaults (transformers saves only what differs from them), and its own fields
//! are read by its rules. The config itself, and the field reader the rules use, are in
//! `config.rs`, below the families.

use crate::config::{Fields, GlobalPool, ModelConfig, Norm, PositionSource, PrefixPositions};
use crate::error::ModelError;
use crate::families;
use crate::family::Family;
use crate::rules::TransformersConfig;
use serde_json::{Map, Value};
use std::collections::BTreeMap;
use std::path::Path;
use vitrt_runtime::Activation;

impl ModelConfig {
    pub fn from_file(path: &Path) -> Result<ModelConfig, ModelError> {
        let text = std::fs::read_to_string(path).map_err(|e| ModelError::Config {
            path: path.display().to_string(),
            message: format!("cannot read: {e}"),
        })?;
        ModelConfig::from_json_str(&text).map_err(|message| ModelError::Config {
            path: path.display().to_string(),
            message,
        })
    }

    pub fn from_json_str(text: &str) -> Result<ModelConfig, String> {
        let json: Value = serde_json::from_str(text).map_err(|e| format!("not valid JSON: {e}"))?;
        let top = json.as_object().ok_or("not a JSON object")?;
        // A family's own config format (timm's) has no model_type.
        if top.get("model_type").is_none() {
            if let Some(own) = Family::own_config_reader(top) {
                let config = (own.read)(top)?;
                config.check()?;
                return Ok(config);
            }
        }
        // A config without model_type is read as ViT's, as it always was.
        let model_type = match top.get("model_type") {
            None | Some(Value::Null) => "vit".to_string(),
            Some(Value::String(s)) => s.clone(),
            Some(v) => return Err(format!("\"model_type\" must be a string, got {v}")),
        };
        let Some((family, rules, found)) = Family::of_model_type(&model_type) else {
            if let Some(refusal) = families::refused_model_type(&model_type) {
                return Err(refusal);
            }
            return Err(format!(
                "model_type \"{model_type}\" is not a family vitrt runs (supported: {})",
                families::supported_model_types()
            ));
        };
        let empty = Map::new();
        // The dual-tower checkpoints hold the vision tower's config under vision_config.
        let vision = if found.vision_config {
            match top.get("vision_config") {
                None | Some(Value::Null) => &empty,
                Some(Value::Object(map)) => map,
                Some(v) => return Err(format!("\"vision_config\" must be an object, got {v}")),
            }
        } else {
            top
        };
        let mut config = parse_vision(family, rules, model_type.as_str(), vision)?;
        config.id2label = parse_id2label(top)?;
        config.check()?;
        Ok(config)
    }
    /// The arithmetic the graph relies on.
    fn check(&self) -> Result<(), String> {
        if !self.hidden_size.is_multiple_of(self.num_attention_heads) {
            return Err(format!(
                "hidden_size {} is not divisible by num_attention_heads {}",
                self.hidden_size, self.num_attention_heads
            ));
        }
        // A size that is not a multiple of the patch leaves a remainder the patch embedding
        // drops, as its strided Conv2d does (SigLIP so400m: 384 pixels, 27 patches of 14).
        let (h, w) = self.image_size;
        if h < self.patch_size || w < self.patch_size {
            return Err(format!(
                "image_size {h}x{w} holds no patch of patch_size {}",
                self.patch_size
            ));
        }
        // The sizes the accessors and the graph builder compute, on checked arithmetic, so
        // that a config with absurd sizes is refused here instead of overflowing later.
        let p = self.patch_size;
        let tokens = (h / p)
            .checked_mul(w / p)
            .and_then(|patches| patches.checked_add(self.prefix_tokens()));
        let patch_values = self
            .num_channels
            .checked_mul(p)
            .and_then(|n| n.checked_mul(p));
        let activations =
            tokens.and_then(|t| t.checked_mul(self.hidden_size.max(self.intermediate_size)));
        if tokens.is_none() || patch_values.is_none() || activations.is_none() {
            return Err(format!(
                "image_size {h}x{w}, patch_size {p}, num_channels {}, hidden_size {} and \
                 intermediate_size {} give tensors larger than can be addressed",
                self.num_channels, self.hidden_size, self.intermediate_size
            ));
        }
        crate::limits::check_image_size(self.image_size, p).map_err(|e| format!("image_size: {e}"))
    }
}

/// The vision tower's fields of `obj` (the whole config, or a dual tower's `vision_config`).
fn parse_vision(
    family: Family,
    rules: &TransformersConfig,
    model_type: &str,
    obj: &Map<String, Value>,
) -> Result<ModelConfig, String> {
    let defaults = &rules.defaults;
    let fields = Fields(obj);
    let int = |key: &str, default: Option<usize>| fields.int(key, default);
    let flag = |key: &str, default: bool| fields.flag(key, default);
    let pair = |key: &str, default: usize| fields.pair(key, default);
    let activation = |key: &str, default: &str| fields.activation(key, default);

    let hidden_size = int("hidden_size", Some(768))?;
    let num_hidden_layers = int("num_hidden_layers", Some(12))?;
    let num_attention_heads = int("num_attention_heads", Some(12))?;
    let num_channels = int("num_channels", Some(3))?;
    let image_size = pair("image_size", 224)?;
    let (patch_h, patch_w) = pair("patch_size", defaults.patch_size)?;
    if patch_h != patch_w {
        return Err(format!(
            "non-square patches {patch_h}x{patch_w} are not supported"
        ));
    }
    let (hidden_act, hidden_act_name) = activation("hidden_act", defaults.hidden_act)?;
    let layer_norm_eps = fields.positive_number("layer_norm_eps", defaults.layer_norm_eps)? as f32;
    // A family whose configs have no qkv_bias always has the biases (CLIP, SigLIP).
    let qkv_bias = if rules.has_qkv_bias {
        flag("qkv_bias", true)?
    } else {
        true
    };
    let (intermediate_size, mlp) = (rules.read_mlp)(&fields, hidden_size)?;
    if intermediate_size == 0 {
        return Err("the MLP has no hidden units (mlp_ratio too small)".into());
    }
    let mut config = ModelConfig {
        family,
        model_type: model_type.to_string(),
        hidden_size,
        num_hidden_layers,
        num_attention_heads,
        intermediate_size,
        hidden_act,
        hidden_act_name,
        layer_norm_eps,
        norm: Norm::Layer,
        image_size,
        patch_size: patch_h,
        num_channels,
        qkv_bias,
        key_bias: true,
        attention_output_bias: true,
        mlp_bias: true,
        positions: PositionSource::Checkpoint,
        positions_after_pre_norm: false,
        rope_theta: None,
        num_register_tokens: 0,
        layer_scale: false,
        mlp,
        vision_use_head: false,
        // As the family's rules name them: transformers' configs have no switches for these.
        class_token: true,
        prefix_positions: PrefixPositions::AllButRegisters,
        patch_bias: true,
        pre_norm: true,
        final_norm: true,
        global_pool: GlobalPool::ClassToken,
        fc_norm: false,
        pooler_act: Activation::Tanh,
        id2label: BTreeMap::new(),
    };
    (rules.read_own_fields)(model_type, &fields, &mut config)?;
    Ok(config)
}

fn parse_id2label(obj: &Map<String, Value>) -> Result<BTreeMap<usize, String>, String> {
    let mut id2label = BTreeMap::new();
    if let Some(map) = obj.get("id2label") {
        let map = map.as_object().ok_or("\"id2label\" must be an object")?;
        for (k, v) in map {
            let index: usize = k
                .parse()
                .map_err(|_| format!("id2label key \"{k}\" is not a class index"))?;
            let label = v
                .as_str()
                .ok_or(format!("id2label[{k}] must be a string"))?;
            id2label.insert(index, label.to_string());
        }
    }
    Ok(id2label)
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: &str = r#"{"model_type": "vit", "hidden_size": 64, "num_hidden_layers": 2,
        "num_attention_heads": 4, "intermediate_size": 128, "hidden_act": "gelu",
        "image_size": 32, "patch_size": 8, "num_channels": 3, "qkv_bias": true,
        "id2label": {"0": "cat", "1": "dog"}}"#;

    fn with(key: &str, value: &str) -> String {
        let mut v: Value = serde_json::from_str(BASE).unwrap();
        v[key] = serde_json::from_str(value).unwrap();
        v.to_string()
    }

    #[test]
    fn reads_a_small_config() {
        let c = ModelConfig::from_json_str(BASE).unwrap();
        assert_eq!((c.head_dim(), c.tokens(), c.image_size), (16, 17, (32, 32)));
        assert_eq!(c.label(1), "dog");
        assert_eq!(c.label(7), "LABEL_7");
        assert_eq!(c.layer_norm_eps, 1e-12);
    }

    #[test]
    fn every_hf_activation_name_maps() {
        for (name, act) in [
            ("gelu", Activation::Gelu),
            ("gelu_new", Activation::GeluTanh),
            ("gelu_fast", Activation::GeluTanh),
            ("gelu_pytorch_tanh", Activation::GeluTanh),
            ("quick_gelu", Activation::QuickGelu),
            ("relu", Activation::Relu),
            ("silu", Activation::Silu),
        ] {
            let c =
                ModelConfig::from_json_str(&with("hidden_act", &format!("\"{name}\""))).unwrap();
            assert_eq!(c.hidden_act, act, "{name}");
        }
    }

    #[test]
    fn refuses_sizes_whose_tensors_cannot_be_addressed() {
        let huge_image = r#"{"image_size": [1099511627776, 1099511627776], "patch_size": 1,
            "hidden_size": 8, "num_attention_heads": 1}"#;
        let huge_patch = r#"{"image_size": 8589934592, "patch_size": 8589934592,
            "hidden_size": 8, "num_attention_heads": 1}"#;
        let huge_hidden = r#"{"image_size": 4096, "patch_size": 1,
            "hidden_size": 4398046511104, "num_attention_heads": 1}"#;
        for json in [huge_image, huge_patch, huge_hidden] {
            let err = ModelConfig::from_json_str(json).unwrap_err();
            assert!(err.contains("larger than can be addressed"), "{err}");
        }
    }

    /// AIMv2's own fields and defaults: RMSNorms with `rms_norm_eps`, no biases, the head,
    /// positions after the patch norm; `is_native` computes them.
    #[test]
    fn reads_aimv2_configs() {
        let c = ModelConfig::from_json_str(
            r#"{"model_type": "aimv2_vision_model", "hidden_size": 32,
                "num_attention_heads": 4, "rms_norm_eps": 1e-6}"#,
        )
        .unwrap();
        assert_eq!(c.norm, Norm::Rms);
        assert_eq!(c.layer_norm_eps, 1e-6);
        assert_eq!((c.patch_size, c.intermediate_size), (14, 2816));
        assert!(!c.qkv_bias && !c.attention_output_bias && !c.mlp_bias);
        assert!(c.vision_use_head && c.positions_after_pre_norm);
        assert_eq!(c.positions, PositionSource::Checkpoint);
        assert_eq!(c.tokens(), 256, "no CLS token");
        let native = ModelConfig::from_json_str(
            r#"{"model_type": "aimv2_vision_model", "hidden_size": 32,
                "num_attention_heads": 4, "is_native": true, "qkv_bias": true,
                "mlp_bias": true, "use_head": false}"#,
        )
        .unwrap();
        assert_eq!(native.positions, PositionSource::SinCos2d);
        assert!(native.qkv_bias && native.attention_output_bias && native.mlp_bias);
        assert!(!native.vision_use_head);
        for (json, want) in [
            (
                r#"{"model_type": "aimv2_vision_model", "hidden_size": 30,
                    "num_attention_heads": 3, "is_native": true}"#,
                "needs a multiple of 4",
            ),
            (
                r#"{"model_type": "aimv2_vision_model", "hidden_act": "gelu"}"#,
                "silu (SwiGLU) only",
            ),
        ] {
            let err = ModelConfig::from_json_str(json).unwrap_err();
            assert!(err.contains(want), "{err} should mention {want}");
        }
    }

    #[test]
    fn refuses_what_does_not_add_up() {
        let cases = [
            (
                with("hidden_act", "\"mish\""),
                "unknown hidden_act \"mish\"",
            ),
            (
                with("num_attention_heads", "5"),
                "not divisible by num_attention_heads",
            ),
            (with("image_size", "4"), "holds no patch of patch_size 8"),
            (with("hidden_size", "-3"), "positive integer"),
            (with("qkv_bias", "\"yes\""), "true or false"),
            (
                with("model_type", "\"swin\""),
                "model_type \"swin\" is not a family",
            ),
            (with("model_type", "\"siglip2\""), "SigLIP 2's NaFlex"),
            (with("model_type", "\"aimv2\""), "AIMv2's LiT dual tower"),
            (
                with("model_type", "\"aimv2_text_model\""),
                "AIMv2's text tower (Aimv2TextModel)",
            ),
            (with("id2label", "{\"a\": \"x\"}"), "not a class index"),
            ("[1, 2]".to_string(), "not a JSON object"),
            ("{\"hidden_size\": ".to_string(), "not valid JSON"),
        ];
        for (json, want) in cases {
            let err = ModelConfig::from_json_str(&json).unwrap_err();
            assert!(err.contains(want), "{err} should mention {want}");
        }
    }

    #[test]
    fn vit_base_flops_are_about_35_gflop() {
        let c = ModelConfig::from_json_str(r#"{"model_type": "vit"}"#).unwrap();
        let g = c.flops_per_image() / 1e9;
        assert!((34.0..36.5).contains(&g), "{g} GFLOP");
    }
}
