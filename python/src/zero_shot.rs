//! `Model.zero_shot`'s labels: checked as `vitrt zero-shot` checks them, put into the
//! templates, encoded once by the text tower (the templates of a label averaged, CLIP's
//! prompt ensembling) and set on the vision graph as the scores' other side.

use crate::failure::{model_failure, FailAs, Failure, Result};
use anyhow::{anyhow, Context};
use std::path::Path;
use vitrt_model::text::labels::{
    average_templates, check_label_list, check_template, DEFAULT_TEMPLATE,
};
use vitrt_model::text::{TextModel, TextTokenizer};
use vitrt_model::Runner;
use vitrt_model::ZeroShotLabels;

/// The labels, trimmed; an error for none, an empty one, or one named twice (checked as
/// `vitrt zero-shot` checks them, through a set).
pub fn check_labels(labels: Vec<String>) -> Result<Vec<String>> {
    check_label_list(labels).map_err(model_failure)
}

/// The templates asked for (default: transformers' pipeline's), each holding exactly one
/// `{}`, where the label goes.
pub fn check_templates(templates: Option<Vec<String>>) -> Result<Vec<String>> {
    let templates = match templates {
        Some(templates) if templates.is_empty() => {
            return Err(Failure::Value(anyhow!(
                "templates is an empty list: give at least one, or None for the default"
            )))
        }
        Some(templates) => templates,
        None => vec![DEFAULT_TEMPLATE.to_string()],
    };
    for template in &templates {
        check_template(template).map_err(model_failure)?;
    }
    Ok(templates)
}

/// Encodes `labels` x `templates` with the checkpoint's text tower, on the vision runner's
/// backend, and sets the averaged embeddings on the runner.
pub fn set_labels(
    runner: &mut Runner,
    dir: &Path,
    name: &str,
    labels: &[String],
    templates: &[String],
) -> Result<()> {
    let Some(width) = runner.model.image_embeds_width() else {
        return Err(Failure::Value(anyhow!(
            "{name} is a {} checkpoint without image embeddings; zero-shot labels need a CLIP \
             or SigLIP checkpoint with both towers",
            runner.model.config.family.name()
        )));
    };
    let text = TextModel::load(dir)
        .with_context(|| format!("loading the text tower of {name} (zero-shot labels need it)"))
        .or_value()?;
    let rule = text.score_rule().map_err(model_failure)?;
    if text.embedding_size() != width {
        return Err(Failure::Value(anyhow!(
            "the text tower's embeddings have {} values and the vision tower's {width}: not \
             one checkpoint's towers",
            text.embedding_size()
        )));
    }
    let tokenizer =
        TextTokenizer::from_checkpoint(dir, text.context(), text.config.family).or_value()?;
    let texts: Vec<String> = labels
        .iter()
        .flat_map(|label| templates.iter().map(move |t| t.replacen("{}", label, 1)))
        .collect();
    let tokens = tokenizer.encode(&texts).map_err(model_failure)?;
    let embeds = runner
        .embed_texts(&text, &tokens.ids, texts.len(), true)
        .map_err(model_failure)?;
    let text_embeds =
        average_templates(&embeds, labels.len(), templates.len(), width).or_runtime()?;
    runner
        .set_zero_shot(ZeroShotLabels {
            text_embeds,
            labels: labels.len(),
            rule,
        })
        .map_err(model_failure)
}
