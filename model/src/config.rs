//! `config.json` of a Hugging Face ViT, read and checked: everything the graph builder needs,
//! and nothing it would have to guess.

use crate::error::ModelError;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;
use vitrt_runtime::Activation;

#[derive(Clone, Debug, PartialEq)]
pub struct VitConfig {
    pub hidden_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    pub intermediate_size: usize,
    pub hidden_act: Activation,
    /// The name as the config spells it, for messages.
    pub hidden_act_name: String,
    pub layer_norm_eps: f32,
    pub image_size: (usize, usize),
    pub patch_size: usize,
    pub num_channels: usize,
    pub qkv_bias: bool,
    /// Class index to label, when the config has one.
    pub id2label: BTreeMap<usize, String>,
}

impl VitConfig {
    pub fn from_file(path: &Path) -> Result<VitConfig, ModelError> {
        let text = std::fs::read_to_string(path).map_err(|e| ModelError::Config {
            path: path.display().to_string(),
            message: format!("cannot read: {e}"),
        })?;
        VitConfig::from_json_str(&text).map_err(|message| ModelError::Config {
            path: path.display().to_string(),
            message,
        })
    }

    pub fn from_json_str(text: &str) -> Result<VitConfig, String> {
        let json: Value = serde_json::from_str(text).map_err(|e| format!("not valid JSON: {e}"))?;
        let obj = json.as_object().ok_or("not a JSON object")?;
        if let Some(model_type) = obj.get("model_type").and_then(Value::as_str) {
            if model_type != "vit" {
                return Err(format!(
                    "model_type is \"{model_type}\"; vitrt runs ViT (model_type \"vit\")"
                ));
            }
        }
        let int = |key: &str, default: Option<usize>| -> Result<usize, String> {
            match obj.get(key) {
                None | Some(Value::Null) => default.ok_or(format!("missing \"{key}\"")),
                Some(v) => v
                    .as_u64()
                    .filter(|&n| n > 0)
                    .map(|n| n as usize)
                    .ok_or(format!("\"{key}\" must be a positive integer, got {v}")),
            }
        };
        // image_size and patch_size may be an integer or a [height, width] pair.
        let pair = |key: &str, default: usize| -> Result<(usize, usize), String> {
            match obj.get(key) {
                None | Some(Value::Null) => Ok((default, default)),
                Some(Value::Array(a)) if a.len() == 2 => {
                    let h = a[0].as_u64().filter(|&n| n > 0);
                    let w = a[1].as_u64().filter(|&n| n > 0);
                    match (h, w) {
                        (Some(h), Some(w)) => Ok((h as usize, w as usize)),
                        _ => Err(format!(
                            "\"{key}\" must hold positive integers, got {:?}",
                            a
                        )),
                    }
                }
                Some(v) => v
                    .as_u64()
                    .filter(|&n| n > 0)
                    .map(|n| (n as usize, n as usize))
                    .ok_or(format!("\"{key}\" must be a positive integer, got {v}")),
            }
        };

        let hidden_size = int("hidden_size", Some(768))?;
        let num_hidden_layers = int("num_hidden_layers", Some(12))?;
        let num_attention_heads = int("num_attention_heads", Some(12))?;
        let intermediate_size = int("intermediate_size", Some(3072))?;
        let num_channels = int("num_channels", Some(3))?;
        let image_size = pair("image_size", 224)?;
        let (patch_h, patch_w) = pair("patch_size", 16)?;
        if patch_h != patch_w {
            return Err(format!(
                "non-square patches {patch_h}x{patch_w} are not supported"
            ));
        }
        let hidden_act_name = match obj.get("hidden_act") {
            None => "gelu".to_string(),
            Some(Value::String(s)) => s.clone(),
            Some(v) => return Err(format!("\"hidden_act\" must be a string, got {v}")),
        };
        let hidden_act = parse_activation(&hidden_act_name)?;
        let layer_norm_eps = match obj.get("layer_norm_eps") {
            None => 1e-12,
            Some(v) => v
                .as_f64()
                .filter(|e| *e > 0.0 && e.is_finite())
                .ok_or(format!(
                    "\"layer_norm_eps\" must be a positive number, got {v}"
                ))? as f32,
        };
        let qkv_bias = match obj.get("qkv_bias") {
            None => true,
            Some(v) => v
                .as_bool()
                .ok_or(format!("\"qkv_bias\" must be true or false, got {v}"))?,
        };
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

        let config = VitConfig {
            hidden_size,
            num_hidden_layers,
            num_attention_heads,
            intermediate_size,
            hidden_act,
            hidden_act_name,
            layer_norm_eps,
            image_size,
            patch_size: patch_h,
            num_channels,
            qkv_bias,
            id2label,
        };
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
        let (h, w) = self.image_size;
        if h % self.patch_size != 0 || w % self.patch_size != 0 {
            return Err(format!(
                "image_size {h}x{w} is not divisible by patch_size {}",
                self.patch_size
            ));
        }
        // The sizes the accessors and the graph builder compute, on checked arithmetic, so
        // that a config with absurd sizes is refused here instead of overflowing later.
        let p = self.patch_size;
        let tokens = (h / p)
            .checked_mul(w / p)
            .and_then(|patches| patches.checked_add(1));
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
        Ok(())
    }

    pub fn head_dim(&self) -> usize {
        self.hidden_size / self.num_attention_heads
    }

    pub fn num_patches(&self) -> usize {
        (self.image_size.0 / self.patch_size) * (self.image_size.1 / self.patch_size)
    }

    /// Sequence length: the patches and the CLS token.
    pub fn tokens(&self) -> usize {
        self.num_patches() + 1
    }

    pub fn label(&self, index: usize) -> String {
        self.id2label
            .get(&index)
            .cloned()
            .unwrap_or_else(|| format!("LABEL_{index}"))
    }

    /// Multiply-adds ×2 of one image's forward pass through the encoder (no classifier).
    pub fn flops_per_image(&self) -> f64 {
        let (t, d, i) = (
            self.tokens() as f64,
            self.hidden_size as f64,
            self.intermediate_size as f64,
        );
        let patch = 2.0
            * self.num_patches() as f64
            * d
            * (self.num_channels * self.patch_size * self.patch_size) as f64;
        let per_layer =
            2.0 * t * d * 3.0 * d + 2.0 * 2.0 * t * t * d + 2.0 * t * d * d + 2.0 * 2.0 * t * d * i;
        patch + self.num_hidden_layers as f64 * per_layer
    }
}

/// The activations HF's ACT2FN maps for ViT configs; anything else is refused.
pub fn parse_activation(name: &str) -> Result<Activation, String> {
    Ok(match name {
        "gelu" => Activation::Gelu,
        "gelu_new" | "gelu_fast" | "gelu_pytorch_tanh" => Activation::GeluTanh,
        "quick_gelu" => Activation::QuickGelu,
        "relu" => Activation::Relu,
        "silu" | "swish" => Activation::Silu,
        other => {
            return Err(format!(
                "unknown hidden_act \"{other}\" (supported: gelu, gelu_new, gelu_fast, gelu_pytorch_tanh, quick_gelu, relu, silu)"
            ))
        }
    })
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
        let c = VitConfig::from_json_str(BASE).unwrap();
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
            let c = VitConfig::from_json_str(&with("hidden_act", &format!("\"{name}\""))).unwrap();
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
            let err = VitConfig::from_json_str(json).unwrap_err();
            assert!(err.contains("larger than can be addressed"), "{err}");
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
            (with("image_size", "30"), "not divisible by patch_size"),
            (with("hidden_size", "-3"), "positive integer"),
            (with("qkv_bias", "\"yes\""), "true or false"),
            (with("model_type", "\"deit\""), "model_type"),
            (with("id2label", "{\"a\": \"x\"}"), "not a class index"),
            ("[1, 2]".to_string(), "not a JSON object"),
            ("{\"hidden_size\": ".to_string(), "not valid JSON"),
        ];
        for (json, want) in cases {
            let err = VitConfig::from_json_str(&json).unwrap_err();
            assert!(err.contains(want), "{err} should mention {want}");
        }
    }

    #[test]
    fn vit_base_flops_are_about_35_gflop() {
        let c = VitConfig::from_json_str(r#"{"model_type": "vit"}"#).unwrap();
        let g = c.flops_per_image() / 1e9;
        assert!((34.0..36.5).contains(&g), "{g} GFLOP");
    }
}
