//! The registry of the model families vitrt runs, one file each: [`Family::rules`] and
//! [`TextFamily::rules`], and the lookups over every family (by `model_type`, by own config
//! format, the lists for messages). A family's file holds what sets its checkpoints apart, as a
//! `FamilyRules`: the `model_type`s it answers to, its config's defaults and own fields,
//! its tensor names, the tokens ahead of the patches, its pooler, projection and classifier;
//! and for a family with a text tower (CLIP, SigLIP), the tower's as a `TextTowerRules`. The
//! files are written in the vocabulary below them (`family.rs`, `rules.rs`, `config.rs`); the
//! config reader, the tensor names and the graph builder consult this registry from above.
//!
//! Adding a family: its file here, its variant of [`Family`] (in `family.rs`), and its line in
//! [`Family::ALL`] and [`Family::rules`] (for a text tower, the same in [`TextFamily`]).

mod aimv2;
mod clip;
mod deit;
mod dinov2;
mod dinov3;
mod open_clip;
mod siglip;
mod timm;
mod timm_architectures;
mod vit;

use crate::family::{Family, TextFamily};
use crate::rules::{
    ConfigFormat, FamilyRules, ModelType, OwnConfig, ReadTextConfig, SpecialTokens,
    TextConfigFormat, TextTowerRules, TransformersConfig,
};
use serde_json::{Map, Value};
use std::fmt;
use std::path::{Path, PathBuf};

/// The config file of the checkpoint in `dir`: `config.json` where there is one (transformers'
/// and timm's), else the first family's own config file that is there (open_clip's
/// `open_clip_config.json`); `config.json` when there is none, for the error to name.
pub(crate) fn config_file(dir: &Path) -> PathBuf {
    let transformers = dir.join("config.json");
    if transformers.is_file() {
        return transformers;
    }
    Family::ALL
        .into_iter()
        .find_map(|family| match &family.rules().config {
            ConfigFormat::Own(own) => Some(dir.join(own.file)).filter(|path| path.is_file()),
            ConfigFormat::Transformers(_) => None,
        })
        .unwrap_or(transformers)
}

impl Family {
    /// Every family, in the order messages list them.
    pub(crate) const ALL: [Family; 9] = [
        Family::Vit,
        Family::Deit,
        Family::Dinov2,
        Family::Dinov3,
        Family::Clip,
        Family::Siglip,
        Family::Aimv2,
        Family::Timm,
        Family::OpenClip,
    ];

    /// The registry: each family's rules.
    pub(crate) fn rules(self) -> &'static FamilyRules {
        match self {
            Family::Vit => &vit::VIT,
            Family::Deit => &deit::DEIT,
            Family::Dinov2 => &dinov2::DINOV2,
            Family::Dinov3 => &dinov3::DINOV3,
            Family::Clip => &clip::CLIP,
            Family::Siglip => &siglip::SIGLIP,
            Family::Aimv2 => &aimv2::AIMV2,
            Family::Timm => &timm::TIMM,
            Family::OpenClip => &open_clip::OPEN_CLIP,
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

impl TextFamily {
    /// Every family with a text tower, in the order messages list them.
    pub(crate) const ALL: [TextFamily; 3] =
        [TextFamily::Clip, TextFamily::Siglip, TextFamily::OpenClip];

    /// The registry of text towers: each one's rules.
    pub(crate) fn rules(self) -> &'static TextTowerRules {
        match self {
            TextFamily::Clip => &clip::CLIP_TEXT,
            TextFamily::Siglip => &siglip::SIGLIP_TEXT,
            TextFamily::OpenClip => &open_clip::OPEN_CLIP_TEXT,
        }
    }

    /// The family whose transformers configs have `model_type`, and whether the config is a
    /// dual tower's.
    pub(crate) fn of_model_type(model_type: &str) -> Option<(TextFamily, bool)> {
        // SigLIP 2's NaFlex checkpoints (`Siglip2Model`, `Siglip2TextModel`) have SigLIP's text
        // tower: the same layers, tensor names, last-token pooling, head and sigmoid scores
        // (transformers' Siglip2TextModel is SiglipTextModel's code under another name).
        let model_type = match model_type {
            "siglip2" => "siglip",
            "siglip2_text_model" => "siglip_text_model",
            other => other,
        };
        TextFamily::ALL.into_iter().find_map(|family| {
            let TextConfigFormat::Transformers(config) = &family.rules().config else {
                return None;
            };
            if model_type == config.dual_model_type {
                Some((family, true))
            } else if model_type == config.text_model_type {
                Some((family, false))
            } else {
                None
            }
        })
    }

    /// The reader of `top` when it is a family's own config format (one without
    /// `model_type`: open_clip's).
    pub(crate) fn own_config_reader(top: &Map<String, Value>) -> Option<ReadTextConfig> {
        TextFamily::ALL
            .into_iter()
            .find_map(|family| match family.rules().config {
                TextConfigFormat::Own { key, read } if top.contains_key(key) => Some(read),
                _ => None,
            })
    }

    /// The token that ends every sequence of the family's first tokenizer (SigLIP's
    /// SentencePiece `</s>`).
    pub fn end_token(self) -> &'static str {
        self.rules().vocabularies[0].end
    }

    /// The family's tokenizers' special tokens, in the order they are tried.
    pub(crate) fn vocabularies(self) -> &'static [SpecialTokens] {
        self.rules().vocabularies
    }

    pub fn name(self) -> &'static str {
        self.rules().family.name()
    }
}

/// The reason a `model_type` of a family vitrt knows is refused, by name: AIMv2's LiT dual
/// tower and its text tower (`Aimv2Model`, `Aimv2TextModel`), and the earlier remote-code
/// format of AIMv2's checkpoints, which also says `aimv2`; and, by the image pipeline, SigLIP
/// 2's NaFlex checkpoints (`Siglip2Model`, `Siglip2VisionModel`), whose images each have their
/// own patch grid. Those run in crate::naflex (`vitrt infer`, `parity`, `embed`,
/// `zero-shot`, `serve`); their text tower is SigLIP's ([`TextFamily::of_model_type`]).
pub(crate) fn refused_model_type(model_type: &str) -> Option<String> {
    // "aimv2" is also what the checkpoints' earlier remote-code format (AIMv2Config, loaded
    // with trust_remote_code) names, with other fields and tensor names.
    let aimv2 = match model_type {
        "aimv2" => Some(
            "AIMv2's LiT dual tower (Aimv2Model) or the earlier remote-code format of AIMv2's \
             checkpoints (AIMv2Config, trust_remote_code)",
        ),
        "aimv2_text_model" => Some("AIMv2's text tower (Aimv2TextModel)"),
        _ => None,
    };
    if let Some(what) = aimv2 {
        return Some(format!(
            "model_type \"{model_type}\" is {what}, which vitrt does not read; AIMv2's \
             vision checkpoints in transformers' format (model_type \"aimv2_vision_model\", \
             Aimv2VisionModel) run"
        ));
    }
    matches!(model_type, "siglip2" | "siglip2_vision_model").then(|| {
        format!(
            "model_type \"{model_type}\" is SigLIP 2's NaFlex (each image resized to its own \
             patch grid, position embeddings resized per image, a key padding mask): vitrt runs \
             it in `vitrt infer`, `parity`, `embed` and `zero-shot` (--output-dir and several \
             devices included; images preprocessed on the host), `serve`, `bench model`, \
             `profile` and the Python Model's embed() and zero_shot() (on one device); not in \
             `classify` (it has no classifier) or `tune`. SigLIP 2's fixed-resolution \
             checkpoints (model_type \"siglip\", such as google/siglip2-base-patch16-224) run \
             everywhere"
        )
    })
}

impl fmt::Display for TextFamily {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The `model_type`s with a text tower, for messages.
pub(crate) fn text_model_types() -> String {
    let types = TextFamily::ALL
        .into_iter()
        .flat_map(|family| match &family.rules().config {
            TextConfigFormat::Transformers(config) => {
                vec![config.dual_model_type, config.text_model_type]
            }
            TextConfigFormat::Own { .. } => vec![],
        });
    types.collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_list_every_model_type_in_order() {
        assert_eq!(
            supported_model_types(),
            "vit, deit, dinov2, dinov2_with_registers, dinov3_vit, clip, clip_vision_model, siglip, \
             siglip_vision_model, aimv2_vision_model"
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
