//! `vitrt classify`: images in, top-k labels out, as a table or one JSON document.

use super::ModelArgs;
use anyhow::{bail, Context, Result};
use clap::Args;
use serde::Serialize;
use std::path::PathBuf;
use std::process::ExitCode;
use vitrt_model::labels::{top_k, Prediction};
use vitrt_model::preprocess::{preprocess_file, PreprocessConfig};
use vitrt_model::Head;

#[derive(Args, Debug)]
pub struct ClassifyArgs {
    #[command(flatten)]
    model: ModelArgs,
    /// How many classes to show per image.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..))]
    top_k: u32,
    /// Images per forward pass.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..))]
    batch_size: u32,
    /// Print one JSON document on stdout instead of tables.
    #[arg(long)]
    json: bool,
    /// Image files (PNG, JPEG, WebP, ...).
    #[arg(required = true)]
    images: Vec<PathBuf>,
}

#[derive(Serialize)]
struct Report {
    model: String,
    device: String,
    dtype: String,
    results: Vec<ImageResult>,
}

#[derive(Serialize)]
struct ImageResult {
    image: String,
    predictions: Vec<JsonPrediction>,
}

#[derive(Serialize)]
struct JsonPrediction {
    index: usize,
    label: String,
    probability: f32,
}

pub fn run(args: ClassifyArgs) -> Result<ExitCode> {
    let (mut runner, dir) = args.model.open()?;
    if runner.model.head == Head::Base {
        bail!(
            "{} is a ViTModel without a classification head; it has no labels to predict. \
             Use `vitrt infer` to get its last_hidden_state",
            args.model.model
        );
    }
    let config = runner.model.config.clone();
    let pre_path = dir.join("preprocessor_config.json");
    let pre = if pre_path.exists() {
        PreprocessConfig::from_json_file(&pre_path)?
    } else {
        PreprocessConfig::hf_default(config.image_size.0, config.num_channels)
    };
    if pre.output_size() != config.image_size {
        bail!(
            "preprocessor_config.json resizes to {:?} but the model takes {:?} images",
            pre.output_size(),
            config.image_size
        );
    }

    // Every image is decoded before any runs, so a bad file fails fast and alone.
    let per_image = config.num_channels * config.image_size.0 * config.image_size.1;
    let mut pixels = Vec::with_capacity(args.images.len() * per_image);
    for path in &args.images {
        let chw = preprocess_file(path, &pre)
            .with_context(|| format!("reading image {}", path.display()))?;
        pixels.extend(chw);
    }

    let mut results = Vec::new();
    let batch_size = args.batch_size as usize;
    for (chunk_index, chunk) in args.images.chunks(batch_size).enumerate() {
        let start = chunk_index * batch_size * per_image;
        let batch_pixels = &pixels[start..start + chunk.len() * per_image];
        let outputs = runner.run(batch_pixels, chunk.len(), false)?;
        let logits = outputs
            .iter()
            .find(|t| t.name == "logits")
            .context("the model produced no logits")?;
        let classes = *logits.shape.last().unwrap_or(&0);
        for (path, row) in chunk.iter().zip(logits.data.chunks(classes)) {
            results.push((
                path.display().to_string(),
                top_k(row, args.top_k as usize, &config),
            ));
        }
    }

    let device = runner.backend().describe();
    let dtype = runner.backend().dtype().to_string();
    if args.json {
        let report = Report {
            model: args.model.model.clone(),
            device,
            dtype,
            results: results
                .into_iter()
                .map(|(image, preds)| ImageResult {
                    image,
                    predictions: preds
                        .into_iter()
                        .map(|p| JsonPrediction {
                            index: p.index,
                            label: p.label,
                            probability: p.probability,
                        })
                        .collect(),
                })
                .collect(),
        };
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!("model {} on {device} ({dtype})", args.model.model);
        for (image, preds) in &results {
            print_table(image, preds);
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn print_table(image: &str, preds: &[Prediction]) {
    println!("\n{image}");
    let width = preds
        .iter()
        .map(|p| p.label.chars().count())
        .max()
        .unwrap_or(5)
        .max(5);
    println!(
        "  {:>4}  {:>6}  {:<width$}  {:>11}",
        "rank", "class", "label", "probability"
    );
    for (rank, p) in preds.iter().enumerate() {
        println!(
            "  {:>4}  {:>6}  {:<width$}  {:>10.2}%",
            rank + 1,
            p.index,
            p.label,
            100.0 * p.probability
        );
    }
}
