//! The model families vitrt runs, one file each, on the shared config reader, tensor names
//! and graph builder. A family's file holds what sets its checkpoints apart, as a
//! [`FamilyRules`]: the `model_type`s it answers to, its config's defaults and own fields,
//! its tensor names, the tokens ahead of the patches, its pooler, projection and classifier;
//! and for a family with a text tower (CLIP, SigLIP), the tower's as a [`TextTowerRules`].
//!
//! Adding a family: its file here, its variant of [`Family`], and its line in [`Family::ALL`]
//! and [`Family::rules`] (for a text tower, the same in [`TextFamily`]).

mod clip;
mod deit;
mod dinov2;
mod siglip;
mod timm;
mod vit;

use crate::config::{Fields, Mlp, ModelConfig};
use crate::model::ClassifierInput;
use crate::names::LayerPart;
use crate::positions::Resampling;
use serde_json::{Map, Value};
use std::fmt;

/// The model families vitrt builds graphs for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Family {
    /// `ViTModel`, `ViTForImageClassification`.
    Vit,
    /// `DeiTModel`, `DeiTForImageClassification`, `DeiTForImageClassificationWithTeacher`.
    Deit,
    /// `Dinov2Model`, `Dinov2ForImageClassification`, and the same with registers.
    Dinov2,
    /// The vision tower of CLIP: `CLIPVisionModel(WithProjection)`, `CLIPModel`,
    /// `CLIPForImageClassification`.
    Clip,
    /// The vision tower of SigLIP: `SiglipVisionModel`, `SiglipModel`,
    /// `SiglipForImageClassification`.
    Siglip,
    /// timm's own `vit_*` checkpoints (`config.json` with `architecture` and
    /// `pretrained_cfg`): the plain ViT with a CLS token, its Q, K and V in one tensor.
    Timm,
}

impl Family {
    /// Every family, in the order messages list them.
    pub(crate) const ALL: [Family; 6] = [
        Family::Vit,
        Family::Deit,
        Family::Dinov2,
        Family::Clip,
        Family::Siglip,
        Family::Timm,
    ];

    /// The registry: each family's rules.
    pub(crate) fn rules(self) -> &'static FamilyRules {
        match self {
            Family::Vit => &vit::VIT,
            Family::Deit => &deit::DEIT,
            Family::Dinov2 => &dinov2::DINOV2,
            Family::Clip => &clip::CLIP,
            Family::Siglip => &siglip::SIGLIP,
            Family::Timm => &timm::TIMM,
        }
    }

    pub fn name(self) -> &'static str {
        self.rules().name
    }

    /// The family whose configs have `model_type`, how they are read, and where.
    pub(crate) fn of_model_type(
        model_type: &str,
    ) -> Option<(Family, &'static TransformersConfig, &'static ModelType)> {
        Family::ALL.into_iter().find_map(|family| {
            let ConfigFormat::Transformers(config) = &family.rules().config else {
                return None;
            };
            let found = config.model_types.iter().find(|t| t.name == model_type)?;
            Some((family, config, found))
        })
    }

    /// The reader of `top` when it is a family's own config format (one without
    /// `model_type`).
    pub(crate) fn own_config_reader(top: &Map<String, Value>) -> Option<&'static OwnConfig> {
        Family::ALL
            .into_iter()
            .find_map(|family| match &family.rules().config {
                ConfigFormat::Own(own) if top.contains_key(own.key) => Some(own),
                _ => None,
            })
    }
}

/// The `model_type`s vitrt reads, for messages.
pub(crate) fn supported_model_types() -> String {
    let types = Family::ALL
        .into_iter()
        .flat_map(|family| match &family.rules().config {
            ConfigFormat::Transformers(config) => config.model_types,
            ConfigFormat::Own(_) => &[],
        });
    types.map(|t| t.name).collect::<Vec<_>>().join(", ")
}

/// What sets one family's checkpoints apart from the others'.
pub(crate) struct FamilyRules {
    /// The family's name in messages.
    pub name: &'static str,
    /// How its `config.json` is recognised and read.
    pub config: ConfigFormat,
    /// Where its encoder's tensors live and what they are called.
    pub tensors: TensorRules,
    /// The pooler (`pooler_output`), if the family has one.
    pub pooler: Option<PoolerKind>,
    /// The projection of the pooled output into the embedding space shared with the text
    /// tower: a bias-free linear layer beside the towers' tensors (CLIP's
    /// `visual_projection`), used where the checkpoint holds it.
    pub image_projection: Option<&'static str>,
    /// The classifier of its `*ForImageClassification` checkpoints.
    pub classifier: ClassifierRules,
    /// How the position table is resampled for another image size.
    pub position_resampling: fn(&ModelConfig) -> Resampling,
}

/// How a family's `config.json` is recognised and read.
pub(crate) enum ConfigFormat {
    /// transformers' `config.json`, read by the shared reader (`ModelConfig::from_json_str`).
    Transformers(TransformersConfig),
    /// A format of the family's own (timm's).
    Own(OwnConfig),
}

/// How the shared reader reads a family's transformers config.
pub(crate) struct TransformersConfig {
    /// The `model_type`s the family answers to, in the order messages list them.
    pub model_types: &'static [ModelType],
    /// The values of the fields a config may leave out (transformers' configuration classes).
    pub defaults: Defaults,
    /// Whether the configs have `qkv_bias` (CLIP's and SigLIP's always have the biases and no
    /// such field).
    pub has_qkv_bias: bool,
    pub read_mlp: ReadMlp,
    /// Reads the fields only this family's configs have into the config read so far, given
    /// its `model_type`; they are read after every shared field.
    pub read_own_fields: fn(&str, &Fields, &mut ModelConfig) -> Result<(), String>,
}

/// Reads the MLP's width and kind from a config's fields, given `hidden_size`.
pub(crate) type ReadMlp = fn(&Fields, usize) -> Result<(usize, Mlp), String>;

/// A `model_type` a family answers to.
pub(crate) struct ModelType {
    pub name: &'static str,
    /// The config is a dual tower's: the vision tower's fields are under `vision_config`.
    pub vision_config: bool,
}

/// A family's defaults for the fields its config may leave out.
pub(crate) struct Defaults {
    pub patch_size: usize,
    pub hidden_act: &'static str,
    pub layer_norm_eps: f64,
}

/// A family's own `config.json` format: one without `model_type` that has `key`, read whole
/// by `read`.
pub(crate) struct OwnConfig {
    pub key: &'static str,
    pub read: fn(&Map<String, Value>) -> Result<ModelConfig, String>,
}

/// The names of a family's encoder tensors, each after the prefix the checkpoint's class puts
/// in front of them.
pub(crate) struct TensorRules {
    /// The prefixes its checkpoints' classes put in front of every encoder tensor, tried in
    /// order ("" for the bare models).
    pub prefixes: &'static [&'static str],
    /// The patch projection (a Conv2d's weight) and its bias, if it has one.
    pub patch_weight: &'static str,
    pub patch_bias: Option<&'static str>,
    /// The tokens ahead of the patches, in this order: the CLS token, DeiT's distillation
    /// token, DINOv2's register tokens (as many as the config says).
    pub class_token: Option<&'static str>,
    pub distillation_token: Option<&'static str>,
    pub register_tokens: Option<&'static str>,
    /// The position table.
    pub positions: &'static str,
    /// How the CLS token and the position table are stored.
    pub embedding_layout: EmbeddingLayout,
    /// The layernorm between the embeddings and the encoder.
    pub pre_norm: Option<&'static str>,
    /// The layernorm after the encoder, applied to every token.
    pub final_norm: Option<&'static str>,
    /// What every encoder block's tensor names start with, before the block's index.
    pub layers: &'static str,
    /// The candidate names of a block's weight after `{layers}{index}.` (`.weight`, `.bias`
    /// or a bare parameter is up to the caller), most common first; none for a part the
    /// family's blocks lack.
    pub layer_part: fn(LayerPart) -> &'static [&'static str],
    /// Q, K and V are stored as one tensor of 3·hidden rows, in that order.
    pub fused_qkv: bool,
}

/// How the CLS token and the position table are stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum EmbeddingLayout {
    /// `[1, 1, hidden]` and `[1, T, hidden]`.
    Batched,
    /// `[hidden]` and `[T, hidden]`: a bare vector and an embedding table.
    Unbatched,
}

/// What a family's pooler computes; the tensor names are under the encoder's prefix.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PoolerKind {
    /// activation(dense(CLS token)), where the checkpoint holds the dense layer.
    Dense(&'static str),
    /// The CLS token of the final hidden states.
    ClassToken,
    /// The CLS token through a layernorm of its own.
    NormedClassToken(&'static str),
    /// An attention-pooling head (a learned query attends over the tokens, then a residual
    /// MLP), where the config uses it (`vision_use_head`) and the checkpoint holds it.
    AttentionPool(&'static str),
}

/// A family's classifier.
pub(crate) struct ClassifierRules {
    /// The base name of its tensors, beside the towers' tensors.
    pub name: &'static str,
    /// What it reads.
    pub input: ClassifierInput,
    /// Two heads, on the CLS token and on the distillation token, whose mean is the logits:
    /// their base names, looked for before `name`.
    pub with_teacher: Option<[&'static str; 2]>,
}

/// The plain resampling of the position table: bicubic, as `interpolate_pos_encoding`.
pub(crate) fn bicubic(_: &ModelConfig) -> Resampling {
    Resampling::Bicubic
}

/// The plain MLP: `intermediate_size` wide (3072 when the config leaves it out).
pub(crate) fn read_standard_mlp(
    fields: &Fields,
    _hidden_size: usize,
) -> Result<(usize, Mlp), String> {
    Ok((fields.int("intermediate_size", Some(3072))?, Mlp::Standard))
}

/// For a family whose configs have no fields of their own.
pub(crate) fn no_own_fields(_: &str, _: &Fields, _: &mut ModelConfig) -> Result<(), String> {
    Ok(())
}

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
    /// Every family with a text tower, in the order messages list them.
    pub(crate) const ALL: [TextFamily; 2] = [TextFamily::Clip, TextFamily::Siglip];

    /// The registry of text towers: each one's rules.
    pub(crate) fn rules(self) -> &'static TextTowerRules {
        match self {
            TextFamily::Clip => &clip::CLIP_TEXT,
            TextFamily::Siglip => &siglip::SIGLIP_TEXT,
        }
    }

    /// The family whose configs have `model_type`, and whether the config is a dual tower's.
    pub(crate) fn of_model_type(model_type: &str) -> Option<(TextFamily, bool)> {
        TextFamily::ALL.into_iter().find_map(|family| {
            let rules = family.rules();
            if model_type == rules.dual_model_type {
                Some((family, true))
            } else if model_type == rules.text_model_type {
                Some((family, false))
            } else {
                None
            }
        })
    }

    /// The token that ends every sequence (CLIP pools its text tower at it).
    pub fn end_token(self) -> &'static str {
        self.rules().end_token
    }

    /// The pad token of transformers' tokenizer class of the family (`CLIPTokenizer`,
    /// `SiglipTokenizer`), used when the checkpoint's tokenizer files name none.
    pub fn default_pad_token(self) -> &'static str {
        self.rules().default_pad_token
    }

    pub fn name(self) -> &'static str {
        self.rules().family.name()
    }
}

impl fmt::Display for TextFamily {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The `model_type`s with a text tower, for messages.
pub(crate) fn text_model_types() -> String {
    let types = TextFamily::ALL.into_iter().flat_map(|family| {
        let rules = family.rules();
        [rules.dual_model_type, rules.text_model_type]
    });
    types.collect::<Vec<_>>().join(", ")
}

/// What sets one family's text tower apart from the other's.
pub(crate) struct TextTowerRules {
    /// The family whose vision tower it pairs with: its name, and its blocks' tensor names.
    pub family: Family,
    /// The dual tower's `model_type` (the text tower's fields under `text_config`), and the
    /// text model's own.
    pub dual_model_type: &'static str,
    pub text_model_type: &'static str,
    /// The values of the fields a config may leave out.
    pub defaults: TextDefaults,
    pub read_projection_size: ReadProjectionSize,
    /// Each token attends only to itself and the tokens before it.
    pub causal: bool,
    /// The token that ends every sequence, and the tokenizer class's pad token.
    pub end_token: &'static str,
    pub default_pad_token: &'static str,
    /// A checkpoint without `tokenizer.json` may ship SentencePiece's `spiece.model` instead,
    /// tokenized as transformers' slow tokenizer class does.
    pub reads_spiece_model: bool,
    /// The token whose final hidden state is pooled.
    pub pooled_token: PooledToken,
    pub projection: TextProjection,
    /// How image-text similarities become scores.
    pub scores: ScoreKind,
}

/// A text tower's defaults for the fields its config may leave out.
pub(crate) struct TextDefaults {
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub num_attention_heads: usize,
    pub intermediate_size: usize,
    pub hidden_act: &'static str,
    pub layer_norm_eps: f64,
    pub max_position_embeddings: usize,
}

/// Reads the width of the text embeddings from the text tower's fields and the whole config's,
/// given whether the config is a dual tower's and the tower's `hidden_size`.
pub(crate) type ReadProjectionSize = fn(&Fields, &Fields, bool, usize) -> Result<usize, String>;

/// The token a text tower pools.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PooledToken {
    /// The end-of-text token (`TextConfig::eos_token_id`).
    EndToken,
    /// The last token of the padded sequence.
    LastToken,
}

/// The linear layer that takes a text tower's pooled token into the embedding space.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TextProjection {
    /// A bias-free layer beside the towers' tensors, after the pooler (`pooler_output` is the
    /// pooled token), used where the checkpoint holds it.
    AfterPooler(&'static str),
    /// A layer with a bias under the text tower's prefix, the pooler's last step
    /// (`pooler_output` is its output).
    Head(&'static str),
}

/// How a dual tower turns the image-text cosine similarities into scores.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ScoreKind {
    /// A softmax over the labels of `exp(logit_scale) · cos`.
    Softmax,
    /// Each label's own sigmoid of `exp(logit_scale) · cos + logit_bias`.
    Sigmoid,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_list_every_model_type_in_order() {
        assert_eq!(
            supported_model_types(),
            "vit, deit, dinov2, dinov2_with_registers, clip, clip_vision_model, siglip, \
             siglip_vision_model"
        );
    }

    #[test]
    fn messages_list_every_text_model_type_in_order() {
        assert_eq!(
            text_model_types(),
            "clip, clip_text_model, siglip, siglip_text_model"
        );
    }

    #[test]
    fn every_model_type_leads_to_its_family() {
        for family in Family::ALL {
            let ConfigFormat::Transformers(config) = &family.rules().config else {
                continue;
            };
            for model_type in config.model_types {
                assert_eq!(
                    Family::of_model_type(model_type.name).map(|(f, _, _)| f),
                    Some(family)
                );
            }
        }
    }
}
