//! `Model.zero_shot`'s labels: checked as `vitrt zero-shot` checks them, put into the
//! templates, encoded once by the text tower (the templates of a label averaged, CLIP's
//! prompt ensembling) and set on the vision graph as the scores' other side.

use crate::failure::{engine_failure, model_failure, Failure, Result};
use anyhow::anyhow;
use std::path::Path;
use vitrt_engine::results::encode_zero_shot_labels;
use vitrt_model::text::labels::{check_label_list, check_template, DEFAULT_TEMPLATE};
use vitrt_model::Runner;

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
/// backend, and sets the averaged embeddings on the runner (the engine's
/// `encode_zero_shot_labels`, as `vitrt zero-shot`).
pub fn set_labels(
    runner: &mut Runner,
    dir: &Path,
    name: &str,
    labels: &[String],
    templates: &[String],
) -> Result<()> {
    let encoded =
        encode_zero_shot_labels(runner, dir, name, labels, templates).map_err(engine_failure)?;
    runner.set_zero_shot(encoded.labels).map_err(model_failure)
}
