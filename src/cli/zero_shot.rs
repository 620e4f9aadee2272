//! `vitrt zero-shot`: label images with words, no training, with a CLIP or SigLIP checkpoint.
//! The labels are put into each template and encoded once by the text tower (the templates of
//! a label averaged, as CLIP's prompt ensembling does); then the images go through the same
//! pipeline and writer as `vitrt classify`, the vision graph ending in the scores against the
//! labels (`vitrt_model::Output::ZeroShotProbs`).

use super::classify::output::Format;
use super::classify::{classify_images, open_output_dir, Report, RunOn, Scores};
use super::common::ModelArgs;
use super::images::ImageArgs;
use super::output_dir::OutputDirArgs;
use anyhow::{bail, Context, Result};
use clap::Args;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use vitrt_engine::naflex::score_against_labels;
use vitrt_engine::results::{encode_zero_shot_labels, score_against};
use vitrt_model::naflex::NaflexRunner;
use vitrt_model::text::labels::{
    check_template, labels_from_lines, labels_from_list, DEFAULT_TEMPLATE,
};

#[derive(Args, Debug)]
pub struct ZeroShotArgs {
    #[command(flatten)]
    model: ModelArgs,
    /// The labels, separated by commas: "cat,dog,a red car".
    #[arg(
        long,
        conflicts_with = "labels_file",
        required_unless_present = "labels_file"
    )]
    labels: Option<String>,
    /// A file of labels, one a line (blank lines skipped).
    #[arg(long, value_name = "FILE")]
    labels_file: Option<PathBuf>,
    /// The text each label is put into, at its `{}`. Repeat it to average several templates
    /// (CLIP's prompt ensembling). Default: "This is a photo of {}." (transformers' pipeline).
    #[arg(long)]
    template: Vec<String>,
    /// How many labels to show per image.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..))]
    top_k: u32,
    /// Output: a table per image, one JSON document, JSON Lines or CSV (the last two are
    /// written and flushed batch by batch). Each label's probability: CLIP's softmax over the
    /// labels, or SigLIP's own sigmoid of each.
    #[arg(long, value_enum, default_value_t = Format::Table, conflicts_with = "output_dir")]
    format: Format,
    /// The same as --format json.
    #[arg(long, conflicts_with_all = ["format", "output_dir"])]
    json: bool,
    /// With --output-dir, each shard is a STEM.parquet of each row's key, source, error, a
    /// webdataset sample's .json/.txt members, and its top-k labels and probabilities.
    #[command(flatten)]
    sharded: OutputDirArgs,
    #[command(flatten)]
    images: ImageArgs,
}

pub fn run(args: ZeroShotArgs) -> Result<ExitCode> {
    args.model.count_devices_ahead();
    let labels = read_labels(args.labels.as_deref(), args.labels_file.as_deref())?;
    let templates = if args.template.is_empty() {
        vec![DEFAULT_TEMPLATE.to_string()]
    } else {
        args.template.clone()
    };
    for template in &templates {
        check_template(template)?;
    }
    let inputs = args.images.collect()?;
    // --output-dir runs batch-invariant (see ModelArgs::batch_invariant).
    let model = match args.sharded.dir()? {
        Some(_) => args.model.batch_invariant(),
        None => args.model.clone(),
    };
    let Ok(sharded) = open_output_dir(
        &args.sharded,
        "zero-shot",
        &model,
        vec![
            ("top-k", args.top_k.to_string()),
            ("labels", serde_json::to_string(&labels)?),
            ("template", serde_json::to_string(&templates)?),
        ],
        &args.images,
        &inputs,
    )?
    else {
        return Ok(ExitCode::SUCCESS);
    };
    let report = Report {
        top_k: args.top_k as usize,
        format: if args.json { Format::Json } else { args.format },
        stats: None,
        sharded,
    };
    let name = model.name();
    // The labels, encoded by the text tower on each device before its run.
    let encoded_in = |started: std::time::Instant| {
        eprintln!(
            "vitrt: {} labels x {} templates encoded by the text tower in {:.2} s",
            labels.len(),
            templates.len(),
            started.elapsed().as_secs_f64()
        );
    };
    if let Some(mut placement) = model.naflex_placement()? {
        let dir = placement.dir().to_path_buf();
        let prepare = |runner: &mut NaflexRunner| -> Result<()> {
            let started = std::time::Instant::now();
            score_against_labels(runner, &dir, name, &labels, &templates)?;
            encoded_in(started);
            Ok(())
        };
        let run_on = RunOn::Naflex {
            placement: &mut placement,
            prepare: &prepare,
        };
        return classify_images(
            run_on,
            &model,
            &args.images,
            &inputs,
            Scores::Probabilities(&labels),
            &report,
        );
    }
    let mut placement = model.placement()?;
    let dir = placement.dir().to_path_buf();
    let prepare = |runner: &mut vitrt_model::Runner| -> Result<()> {
        let started = std::time::Instant::now();
        let encoded = encode_zero_shot_labels(runner, &dir, name, &labels, &templates)?;
        encoded_in(started);
        score_against(runner, encoded)
    };
    let run_on = RunOn::Images {
        placement: &mut placement,
        prepare: &prepare,
    };
    classify_images(
        run_on,
        &model,
        &args.images,
        &inputs,
        Scores::Probabilities(&labels),
        &report,
    )
}

/// The labels of `--labels` (comma-separated) or `--labels-file` (one a line), trimmed; an
/// error for none, an empty one, or one named twice.
fn read_labels(list: Option<&str>, file: Option<&Path>) -> Result<Vec<String>> {
    Ok(match (list, file) {
        (Some(list), _) => labels_from_list(list)?,
        (None, Some(path)) => labels_from_lines(
            &std::fs::read_to_string(path)
                .with_context(|| format!("reading --labels-file {}", path.display()))?,
        )
        .with_context(|| format!("--labels-file {}", path.display()))?,
        (None, None) => bail!("no labels: give --labels or --labels-file"),
    })
}
