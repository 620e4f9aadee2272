//! The text tower's part of a CLIP or SigLIP `config.json`: a dual-tower checkpoint's
//! `text_config` (`model_type` `clip` or `siglip`), or a text model's own config
//! (`clip_text_model`, `siglip_text_model`). Missing fields take the defaults of
//! transformers' `CLIPTextConfig` and `SiglipTextConfig`.

use crate::config::{EncoderConfig, Fields, Mlp};
use crate::error::ModelError;
use serde_json::{Map, Value};
use std::fmt;
use std::path::Path;
use vitrt_runtime::Activation;

/// The families with a text tower.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TextFamily {
    /// Byte-level BPE, `<|startoftext|>` text `<|endoftext|>`; causal attention, pooled at
    /// the end-of-text token, a bias-free `text_projection`; scores are a softmax over the
    /// labels.
    Clip,
    /// SentencePiece Unigram, text `</s>`, no start token; full attention over a sequence
    /// padded to its length, pooled at the last token, a `head` with a bias; each label's
    /// score is a sigmoid.
    Siglip,
}

impl TextFamily {
    /// The token that ends every sequence (CLIP pools its text tower at it).
    pub fn end_token(self) -> &'static str {
        match self {
            TextFamily::Clip => "<|endoftext|>",
            TextFamily::Siglip => "</s>",
        }
    }

    /// The pad token of transformers' tokenizer class of the family (`CLIPTokenizer`,
    /// `SiglipTokenizer`), used when the checkpoint's tokenizer files name none.
    pub fn default_pad_token(self) -> &'static str {
        match self {
            TextFamily::Clip => "<|endoftext|>",
            TextFamily::Siglip => "</s>",
        }
    }
}

impl TextFamily {
    pub fn name(self) -> &'static str {
        match self {
            TextFamily::Clip => "CLIP",
            TextFamily::Siglip => "SigLIP",
        }
    }
}

impl fmt::Display for TextFamily {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The model types with a text tower, for messages.
pub const TEXT_MODEL_TYPES: &str = "clip, clip_text_model, siglip, siglip_text_model";

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
    /// `projection_size` (the head's output; `hidden_size` by default).
    pub projection_size: usize,
}

impl TextConfig {
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
        let model_type = match top.get("model_type") {
            Some(Value::String(s)) => s.as_str(),
            _ => "(none)",
        };
        let empty = Map::new();
        let (family, dual_tower) = match model_type {
            "clip" => (TextFamily::Clip, true),
            "siglip" => (TextFamily::Siglip, true),
            "clip_text_model" => (TextFamily::Clip, false),
            "siglip_text_model" => (TextFamily::Siglip, false),
            other => {
                return Err(format!(
                    "model_type \"{other}\" has no text tower: text embeddings and zero-shot \
                     labels need a CLIP or SigLIP checkpoint with both towers (supported: \
                     {TEXT_MODEL_TYPES})"
                ))
            }
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
        let f = Fields(obj);
        let clip = family == TextFamily::Clip;
        let hidden_size = f.int("hidden_size", Some(if clip { 512 } else { 768 }))?;
        let (hidden_act, _) = f.activation(
            "hidden_act",
            if clip {
                "quick_gelu"
            } else {
                "gelu_pytorch_tanh"
            },
        )?;
        let eos_token_id = f.count("eos_token_id", 49407)?;
        let projection_size = if clip {
            // The projection's width is the dual config's; a text model with projection
            // keeps its own.
            let outer = Fields(top);
            let own = f.int("projection_dim", Some(512))?;
            if dual_tower {
                outer.int("projection_dim", Some(512))?
            } else {
                own
            }
        } else {
            f.int("projection_size", Some(hidden_size))?
        };
        let config = TextConfig {
            family,
            dual_tower,
            vocab_size: f.int("vocab_size", Some(if clip { 49408 } else { 32000 }))?,
            hidden_size,
            num_hidden_layers: f.int("num_hidden_layers", Some(12))?,
            num_attention_heads: f.int("num_attention_heads", Some(if clip { 8 } else { 12 }))?,
            intermediate_size: f.int("intermediate_size", Some(if clip { 2048 } else { 3072 }))?,
            hidden_act,
            layer_norm_eps: f.positive_number("layer_norm_eps", if clip { 1e-5 } else { 1e-6 })?
                as f32,
            max_position_embeddings: f
                .int("max_position_embeddings", Some(if clip { 77 } else { 64 }))?,
            eos_token_id: u32::try_from(eos_token_id)
                .map_err(|_| format!("\"eos_token_id\" {eos_token_id} is out of range"))?,
            projection_size,
        };
        if !config
            .hidden_size
            .is_multiple_of(config.num_attention_heads)
        {
            return Err(format!(
                "text hidden_size {} is not divisible by num_attention_heads {}",
                config.hidden_size, config.num_attention_heads
            ));
        }
        Ok(config)
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
            qkv_bias: true,
            layer_scale: false,
            mlp: Mlp::Standard,
            causal: self.family == TextFamily::Clip,
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
        let err = TextConfig::from_json_str(
            r#"{"model_type": "clip", "text_config": {"hidden_size": 100, "num_attention_heads": 3}}"#,
        )
        .unwrap_err();
        assert!(err.contains("not divisible"), "{err}");
    }
}
