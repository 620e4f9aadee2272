//! SigLIP 2 NaFlex over image files: each image preprocessed on the host by
//! `Siglip2ImageProcessor`'s steps (`vitrt_model::preprocess::naflex`) into its own patch grid,
//! a batch padded to `max_num_patches` with its mask, run by a [`NaflexRunner`], the results
//! handed to the same [`BatchResults`] writers as the image pipeline's. The image pipeline
//! (ring, device decoding, several devices) makes one size for a whole batch, which NaFlex's
//! images do not have; its host path is this one, one batch after another.

use crate::batched::{BatchResults, DecodeOn, ImageOptions};
use crate::pipeline::{Flow, InputList};
use crate::results::encode_labels_with;
use anyhow::{bail, Context, Result};
use std::borrow::Borrow;
use std::path::Path;
use vitrt_model::naflex::{NaflexInputs, NaflexRunner};
use vitrt_model::preprocess::naflex::{NaflexBatch, NaflexImage, NaflexProcessor};
use vitrt_runtime::HostTensor;

/// How a NaFlex run over files ended.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NaflexOutcome {
    /// Images that could not be read or preprocessed.
    pub failed: usize,
    /// The results stopped the run ([`Flow::Stop`]).
    pub stopped: bool,
}

/// The processor of a NaFlex checkpoint's folder (`preprocessor_config.json`, which NaFlex
/// needs: `max_num_patches` decides every image's grid).
pub fn processor(dir: &Path) -> Result<NaflexProcessor> {
    let path = dir.join("preprocessor_config.json");
    if !path.exists() {
        bail!(
            "{} has no preprocessor_config.json: SigLIP 2 NaFlex needs its patch_size and \
             max_num_patches to preprocess image files",
            dir.display()
        );
    }
    Ok(NaflexProcessor::from_json_file(&path)?)
}

/// Encodes zero-shot `labels` in each of `templates` with the text tower of the checkpoint in
/// `dir` (SigLIP's, with Gemma's tokenizer) on `runner`'s backend, and scores images against
/// them from now on. Returns the number of texts encoded.
pub fn score_against_labels(
    runner: &mut NaflexRunner,
    dir: &Path,
    name: &str,
    labels: &[String],
    templates: &[String],
) -> Result<usize> {
    let Some(width) = runner.model.image_embeds_width() else {
        bail!(
            "{name} has no pooling head (vision_use_head is false), so no image embeddings to \
             score labels against"
        );
    };
    let encoded = encode_labels_with(width, dir, name, labels, templates, &mut |text, ids, n| {
        Ok(runner.embed_texts(text, ids, n, true)?)
    })?;
    runner.set_zero_shot(encoded.labels)?;
    Ok(encoded.texts)
}

/// Runs one batch of preprocessed images (each padded to the processor's `max_num_patches`;
/// owned or borrowed, as a server's requests hold theirs) through `runner`, giving `outputs`
/// (every output the runner gives by default when empty).
pub fn run_images<I: Borrow<NaflexImage>>(
    runner: &mut NaflexRunner,
    max_num_patches: usize,
    images: &[I],
    outputs: &[&str],
) -> Result<Vec<HostTensor>> {
    if images.is_empty() {
        bail!("no image to run");
    }
    let mut batch = NaflexBatch::new();
    for image in images {
        batch.push(image.borrow(), max_num_patches);
    }
    let model_inputs = NaflexInputs::new(
        &runner.model,
        batch.pixel_values,
        &batch.pixel_attention_mask,
        &batch.spatial_shapes,
    )?;
    runner
        .run(&model_inputs, outputs, false)
        .context("running SigLIP 2 NaFlex")
}

/// Runs `runner` over `inputs` (image files) `outputs` at a time in batches of
/// `options.batch_size` (8 by default), handing each batch's results to `results` in input
/// order. Dataset shards and GPU decoding are refused by name.
pub fn run_files(
    runner: &mut NaflexRunner,
    processor: &NaflexProcessor,
    inputs: &InputList,
    options: &ImageOptions,
    outputs: &[&str],
    results: &mut dyn BatchResults,
) -> Result<NaflexOutcome> {
    if inputs.samples.iter().any(Option::is_some) {
        bail!(
            "SigLIP 2 NaFlex reads image files; dataset shards (.tar, .parquet) are not built \
             for it"
        );
    }
    if matches!(options.decode, Some(DecodeOn::Gpu | DecodeOn::GpuIdct)) {
        bail!(
            "--decode gpu is not built for SigLIP 2 NaFlex: its images are decoded and resized \
             on the host, each to its own patch grid (the GPU decoding path makes one size a \
             batch); --decode cpu runs"
        );
    }
    let batch_size = options.batch_size.unwrap_or(8).max(1);
    let max = processor.max_num_patches;
    let mut outcome = NaflexOutcome::default();
    let mut first = 0;
    while first < inputs.len() {
        let count = batch_size.min(inputs.len() - first);
        let mut images = Vec::new();
        let mut failures = Vec::new();
        let mut loaded = Vec::new();
        for index in first..first + count {
            match processor.preprocess_file(&inputs.paths[index], &options.limits) {
                Ok(image) => {
                    images.push(image);
                    loaded.push(index - first);
                }
                Err(e) => failures.push((index, format!("{:#}", anyhow::Error::new(e)))),
            }
        }
        outcome.failed += failures.len();
        let outputs = if images.is_empty() {
            None
        } else {
            let ran = run_images(runner, max, &images, outputs)?;
            Some(scatter(ran, &loaded, count))
        };
        if matches!(results.batch(first, count, &failures, outputs)?, Flow::Stop) {
            outcome.stopped = true;
            return Ok(outcome);
        }
        if options.fail_fast && !failures.is_empty() {
            return Ok(outcome);
        }
        first += count;
    }
    Ok(outcome)
}

/// Each output's rows of the loaded images put at their places in a batch of `count`, the
/// rows of failed images zero (`BatchResults` reads them as meaningless).
fn scatter(outputs: Vec<HostTensor>, loaded: &[usize], count: usize) -> Vec<HostTensor> {
    outputs
        .into_iter()
        .map(|t| {
            let row = t.data.len() / loaded.len().max(1);
            let mut data = vec![0.0f32; row * count];
            for (i, &slot) in loaded.iter().enumerate() {
                data[slot * row..][..row].copy_from_slice(&t.data[i * row..][..row]);
            }
            let mut shape = t.shape;
            shape[0] = count;
            HostTensor {
                name: t.name,
                shape,
                data,
            }
        })
        .collect()
}
