//! The text tower's part of a CLIP or SigLIP `config.json`: a dual-tower checkpoint's
//! `text_config` (`model_type` `clip` or `siglip`), or a text model's own config
//! (`clip_text_model`, `siglip_text_model`). Missing fields take the defaults of
//! transformers' `CLIPTextConfig` and `SiglipTextConfig`. A family's own format (open_clip's
//! `open_clip_config.json`) is read by its rules.

use crate::config::{EncoderConfig, Fields, Mlp, Norm};
use crate::error::ModelError;
use crate::families;
use crate::rules::TextConfigFormat;
use serde_json::{Map, Value};
use std::path::Path;
use vitrt_runtime::Activation;

pub use crate::family::TextFamily;

#[derive(Clone, Debug, PartialEq)]
pub struct TextConfig {
    pub family: TextFamily,
    /// Whether the config is a dual tower's (`clip`, `siglip`): tensors under `text_model.`
    /// and the scores' parameters beside them.
    pub dual_tower: bool,
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    pub intermediate_size: usize,
    pub hidden_act: Activation,
    pub layer_norm_eps: f32,
    /// The context: the longest token sequence, and the length SigLIP pads to.
    pub max_position_embeddings: usize,
    /// CLIP: the end-of-text id whose first position is pooled; 2 (the value of configs
    /// saved before transformers fixed it) means the position of the highest id instead,
    /// as transformers keeps doing for them.
    pub eos_token_id: u32,
    /// The width of the text embeddings: CLIP's top-level `projection_dim`, SigLIP's
    /// `projection_size` (the head's output; `hidden_size` by default), open_clip's
    /// `embed_dim`.
    pub projection_size: usize,
    /// Each block's attention and MLP outputs are scaled per channel (open_clip's
    /// `ls_init_value`: `ls_1.gamma`, `ls_2.gamma`).
    pub layer_scale: bool,
}

impl TextConfig {
    /// The text tower's config of the checkpoint in `dir`: its `config.json`, or its
    /// family's own config file (open_clip's `open_clip_config.json`).
    pub fn of_checkpoint(dir: &Path) -> Result<TextConfig, ModelError> {
        TextConfig::from_file(&families::config_file(dir))
    }

    pub fn from_file(path: &Path) -> Result<TextConfig, ModelError> {
        let text = std::fs::read_to_string(path).map_err(|e| ModelError::Config {
            path: path.display().to_string(),
            message: format!("cannot read: {e}"),
        })?;
        TextConfig::from_json_str(&text).map_err(|message| ModelError::Config {
            path: path.display().to_string(),
            message,
        })
    }

    pub fn from_json_str(text: &str) -> Result<TextConfig, String> {
        let json: Value = serde_json::from_str(text).map_err(|e| format!("not valid JSON: {e}"))?;
        let top = json.as_object().ok_or("not a JSON object")?;
        // A family's own config format (open_clip's) has no model_type.
        if top.get("model_type").is_none() {
            if let Some(read) = TextFamily::own_config_reader(top) {
                return read(top);
            }
        }
        let model_type = match top.get("model_type") {
            Some(Value::String(s)) => s.as_str(),
            _ => "(none)",
        };
        let empty = Map::new();
        let Some((family, dual_tower)) = TextFamily::of_model_type(model_type) else {
            if let Some(refusal) = families::refused_model_type(model_type) {
                return Err(refusal);
            }
            return Err(format!(
                "model_type \"{model_type}\" has no text tower: text embeddings and zero-shot \
                 labels need a CLIP or SigLIP checkpoint with both towers (supported: {})",
                families::text_model_types()
            ));
        };
        let obj = if dual_tower {
            match top.get("text_config") {
                None | Some(Value::Null) => &empty,
                Some(Value::Object(map)) => map,
                Some(v) => return Err(format!("\"text_config\" must be an object, got {v}")),
            }
        } else {
            top
        };
        let TextConfigFormat::Transformers(rules) = &family.rules().config else {
            return Err(format!(
                "model_type \"{model_type}\" is not read from config.json"
            ));
        };
        let defaults = &rules.defaults;
        let f = Fields(obj);
        let hidden_size = f.int("hidden_size", Some(defaults.hidden_size))?;
        let (hidden_act, _) = f.activation("hidden_act", defaults.hidden_act)?;
        let eos_token_id = f.count("eos_token_id", 49407)?;
        let projection_size =
            (rules.read_projection_size)(&f, &Fields(top), dual_tower, hidden_size)?;
        let config = TextConfig {
            family,
            dual_tower,
            vocab_size: f.int("vocab_size", Some(defaults.vocab_size))?,
            hidden_size,
            num_hidden_layers: f.int("num_hidden_layers", Some(12))?,
            num_attention_heads: f
                .int("num_attention_heads", Some(defaults.num_attention_heads))?,
            intermediate_size: f.int("intermediate_size", Some(defaults.intermediate_size))?,
            hidden_act,
            layer_norm_eps: f.positive_number("layer_norm_eps", defaults.layer_norm_eps)? as f32,
            max_position_embeddings: f.int(
                "max_position_embeddings",
                Some(defaults.max_position_embeddings),
            )?,
            eos_token_id: u32::try_from(eos_token_id)
                .map_err(|_| format!("\"eos_token_id\" {eos_token_id} is out of range"))?,
            projection_size,
            layer_scale: false,
        };
        config.check()?;
        Ok(config)
    }

    /// The arithmetic the graph relies on.
    pub(crate) fn check(&self) -> Result<(), String> {
        let config = self;
        if !config
            .hidden_size
            .is_multiple_of(config.num_attention_heads)
        {
            return Err(format!(
                "text hidden_size {} is not divisible by num_attention_heads {}",
                config.hidden_size, config.num_attention_heads
            ));
        }
        Ok(())
    }

    /// The encoder's part of the config: plain MLP blocks, causal in CLIP.
    pub fn encoder(&self) -> EncoderConfig {
        EncoderConfig {
            hidden_size: self.hidden_size,
            num_hidden_layers: self.num_hidden_layers,
            num_attention_heads: self.num_attention_heads,
            intermediate_size: self.intermediate_size,
            hidden_act: self.hidden_act,
            layer_norm_eps: self.layer_norm_eps,
            norm: Norm::Layer,
            qkv_bias: true,
            key_bias: true,
            attention_output_bias: true,
            mlp_bias: true,
            layer_scale: self.layer_scale,
            mlp: Mlp::Standard,
            causal: self.family.rules().causal,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dual_tower_configs_take_each_familys_defaults() {
        let clip = TextConfig::from_json_str(
            r#"{"model_type": "clip", "projection_dim": 768, "text_config": {"hidden_size": 768,
                "num_attention_heads": 12, "eos_token_id": 2}}"#,
        )
        .unwrap();
        assert_eq!(clip.family, TextFamily::Clip);
        assert!(clip.dual_tower && clip.encoder().causal);
        assert_eq!(
            (
                clip.max_position_embeddings,
                clip.projection_size,
                clip.eos_token_id
            ),
            (77, 768, 2)
        );
        assert_eq!(clip.hidden_act, Activation::QuickGelu);
        let siglip = TextConfig::from_json_str(r#"{"model_type": "siglip"}"#).unwrap();
        assert_eq!(siglip.max_position_embeddings, 64);
        assert_eq!(siglip.projection_size, 768);
        assert!(!siglip.encoder().causal);
    }

    #[test]
    fn configs_without_a_text_tower_are_refused_by_name() {
        let err = TextConfig::from_json_str(r#"{"model_type": "dinov2"}"#).unwrap_err();
        assert!(err.contains("\"dinov2\" has no text tower"), "{err}");
        // SigLIP 2 NaFlex's text tower is SigLIP's.
        let siglip2 = TextConfig::from_json_str(r#"{"model_type": "siglip2"}"#).unwrap();
        assert_eq!(siglip2.family, TextFamily::Siglip);
        assert!(siglip2.dual_tower);
        let err = TextConfig::from_json_str(
            r#"{"model_type": "clip", "text_config": {"hidden_size": 100, "num_attention_heads": 3}}"#,
        )
        .unwrap_err();
        assert!(err.contains("not divisible"), "{err}");
    }
}
