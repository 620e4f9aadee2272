//! SigLIP 2 NaFlex over image files and dataset samples: each image preprocessed on the host by
//! `Siglip2ImageProcessor`'s steps (`vitrt_model::preprocess::naflex`) into its own patch grid,
//! a batch padded to `max_num_patches` with its mask, run by a [`NaflexRunner`], the results
//! handed to the same [`BatchResults`] writers as the fixed-size models'.
//!
//! The images go through the same image pipeline (`crate::pipeline`: a pool of workers writing
//! each image into its place in a staging slot, batches in input order) and, on several
//! devices, the same dispatcher (`crate::devices`: a runner per device, each batch to the
//! first free one). What differs is what a staged image holds: not pixels of one size but its
//! grid and its patch rows padded to `max_num_patches` ([`StagedLayout`]), the same number of
//! bytes for every aspect ratio. Device decoding (`--decode gpu`) is not built for it: the GPU
//! decoding path makes one size a batch.

use crate::batched::{default_workers, progress_bar, BatchResults, DecodeOn, ImageOptions};
use crate::devices::{run_on_devices, DeviceModel, DeviceRun, Ran};
use crate::pipeline::datasets::{RowGroupCache, SampleReader};
use crate::pipeline::{self, Batch, Consumer, Flow, ImageLoad, InputList, PipelineConfig};
use crate::results::encode_labels_with;
use crate::ModelOptions;
use anyhow::{bail, Context, Result};
use std::borrow::Borrow;
use std::path::{Path, PathBuf};
use std::time::Instant;
use vitrt_model::naflex::{NaflexInputs, NaflexRunner};
use vitrt_model::preprocess::naflex::{NaflexBatch, NaflexImage, NaflexProcessor};
use vitrt_model::preprocess::{ImageLimits, StageTimes};
use vitrt_runtime::{HostStaging, HostTensor};

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

/// Where a staged image's values lie in its staging slot: its grid (rows, then columns, as
/// little-endian u32), then `max_num_patches` patch rows of `patch_values` little-endian f32
/// (zeros past its own patches, as the processor pads them).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct StagedLayout {
    pub max_num_patches: usize,
    /// Values of one patch row: 3 · patch_size².
    pub patch_values: usize,
}

impl StagedLayout {
    const GRID_BYTES: usize = 8;

    pub(crate) fn of(processor: &NaflexProcessor) -> StagedLayout {
        StagedLayout {
            max_num_patches: processor.max_num_patches,
            patch_values: 3 * processor.patch_size * processor.patch_size,
        }
    }

    /// Bytes of one staged image.
    pub(crate) fn image_bytes(self) -> usize {
        Self::GRID_BYTES + self.max_num_patches * self.patch_values * 4
    }

    /// Writes `image` into `out` (exactly [`StagedLayout::image_bytes`]).
    fn stage(self, image: &NaflexImage, out: &mut [u8]) -> Result<(), String> {
        if out.len() != self.image_bytes()
            || image.patch_rows.len() != self.max_num_patches * self.patch_values
        {
            return Err(format!(
                "a preprocessed image of {} values does not fit a staged image of {} patches \
                 of {} values",
                image.patch_rows.len(),
                self.max_num_patches,
                self.patch_values
            ));
        }
        let (grid, rows) = out.split_at_mut(Self::GRID_BYTES);
        for (side, bytes) in [image.grid.0, image.grid.1]
            .into_iter()
            .zip(grid.chunks_exact_mut(4))
        {
            let side = u32::try_from(side).map_err(|_| format!("a grid side of {side}"))?;
            bytes.copy_from_slice(&side.to_le_bytes());
        }
        for (value, bytes) in image.patch_rows.iter().zip(rows.chunks_exact_mut(4)) {
            bytes.copy_from_slice(&value.to_le_bytes());
        }
        Ok(())
    }

    /// The image staged in `bytes` (written by [`StagedLayout::stage`]).
    fn unstage(self, bytes: &[u8]) -> NaflexImage {
        let (grid, rows) = bytes.split_at(Self::GRID_BYTES);
        let side =
            |at: usize| u32::from_le_bytes(grid[at..at + 4].try_into().expect("4 bytes")) as usize;
        NaflexImage {
            grid: (side(0), side(4)),
            patch_rows: rows
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes(b.try_into().expect("4 bytes")))
                .collect(),
        }
    }

    /// The model's inputs for the images of a staged batch (images `first .. first + count`
    /// in `pixels`) that did not fail, and their places in the batch.
    pub(crate) fn batch_inputs(
        self,
        runner: &NaflexRunner,
        pixels: &[u8],
        (first, count): (usize, usize),
        failures: &[(usize, String)],
    ) -> Result<(NaflexInputs, Vec<usize>)> {
        let image_bytes = self.image_bytes();
        let mut batch = NaflexBatch::new();
        let mut loaded = Vec::with_capacity(count);
        for slot in 0..count {
            if failures.iter().any(|(i, _)| *i == first + slot) {
                continue;
            }
            let image = self.unstage(&pixels[slot * image_bytes..][..image_bytes]);
            batch.push(&image, self.max_num_patches);
            loaded.push(slot);
        }
        let inputs = NaflexInputs::new(
            &runner.model,
            batch.pixel_values,
            &batch.pixel_attention_mask,
            &batch.spatial_shapes,
        )?;
        Ok((inputs, loaded))
    }
}

/// Runs a batch's inputs (made by [`StagedLayout::batch_inputs`]), giving `outputs` for all
/// `count` images of the batch (the rows of failed images zero).
pub(crate) fn run_staged(
    runner: &mut NaflexRunner,
    inputs: &NaflexInputs,
    loaded: &[usize],
    count: usize,
    outputs: &[&str],
) -> Result<Vec<HostTensor>> {
    let ran = runner
        .run(inputs, outputs, false)
        .context("running SigLIP 2 NaFlex")?;
    Ok(scatter(ran, loaded, count))
}

/// The pipeline's loader of NaFlex images: a file, or a dataset sample's bytes read from its
/// shard, preprocessed into its patch rows and staged.
pub(crate) struct NaflexLoader<'a> {
    processor: &'a NaflexProcessor,
    layout: StagedLayout,
    limits: ImageLimits,
    inputs: &'a InputList,
    samples: SampleReader<'a>,
    /// A sample's bytes, kept from image to image.
    bytes: Vec<u8>,
}

impl<'a> NaflexLoader<'a> {
    pub(crate) fn new(
        processor: &'a NaflexProcessor,
        limits: ImageLimits,
        inputs: &'a InputList,
        groups: &'a RowGroupCache,
    ) -> Self {
        NaflexLoader {
            processor,
            layout: StagedLayout::of(processor),
            limits,
            inputs,
            samples: SampleReader::new(&inputs.shards, groups, limits.max_file_bytes),
            bytes: Vec::new(),
        }
    }
}

impl ImageLoad for NaflexLoader<'_> {
    fn load(&mut self, index: usize, path: &Path, out: &mut [u8]) -> Result<StageTimes, String> {
        if let Some(why) = self.inputs.unlisted.get(path) {
            return Err(format!("{}: {why}", path.display()));
        }
        let started = Instant::now();
        let preprocessed = match self.inputs.sample(index) {
            Some(sample) => {
                let name = self.inputs.name(index);
                self.samples
                    .read(sample, false, &mut self.bytes)
                    .map_err(|why| format!("{name}: {why}"))?;
                self.processor
                    .preprocess_bytes(&self.bytes, &name, &self.limits)
            }
            None => self.processor.preprocess_file(path, &self.limits),
        };
        let image = preprocessed.map_err(|e| format!("{:#}", anyhow::Error::new(e)))?;
        self.layout.stage(&image, out)?;
        // Reading, decoding and resizing are one call here: counted as decoding.
        Ok(StageTimes {
            decode: started.elapsed(),
            ..StageTimes::default()
        })
    }
}

/// How a NaFlex run's images are batched and loaded: the ring's plan for `images` images
/// (8 a batch by default), an error for `--decode gpu`.
pub(crate) fn pipeline_config(
    processor: &NaflexProcessor,
    options: &ImageOptions,
    images: usize,
    on_gpu: bool,
) -> Result<PipelineConfig> {
    if matches!(options.decode, Some(DecodeOn::Gpu | DecodeOn::GpuIdct)) {
        bail!(
            "--decode gpu is not built for SigLIP 2 NaFlex: its images are decoded and resized \
             on the host, each to its own patch grid (the GPU decoding path makes one size a \
             batch); --decode cpu runs"
        );
    }
    let batch_size = options.batch_size.unwrap_or(8).clamp(1, images.max(1));
    Ok(PipelineConfig {
        batch_size,
        depth: crate::batched::STAGING_DEPTH,
        workers: options.workers.unwrap_or_else(|| default_workers(on_gpu)),
        image_bytes: StagedLayout::of(processor).image_bytes(),
        fail_fast: options.fail_fast,
        arena_bytes: 0,
        release_lag: 0,
    })
}

/// `count` staging slots of `bytes` each, in ordinary memory: a NaFlex batch is copied out of
/// its slot on the host (its positions and mask are made there), never uploaded from it.
pub(crate) fn staging(count: usize, bytes: usize) -> Result<Vec<HostStaging>> {
    (0..count)
        .map(|_| HostStaging::try_heap(bytes).map_err(anyhow::Error::from))
        .collect::<Result<Vec<_>>>()
        .context("allocating the staging buffers")
}

/// Where a command's NaFlex images run: on the runner it opened, or on several devices, a
/// runner opened on each by the run on its own thread (`crate::devices`).
pub enum NaflexPlacement {
    One {
        runner: Box<NaflexRunner>,
        dir: PathBuf,
    },
    Several {
        devices: Vec<String>,
        options: ModelOptions,
        dir: PathBuf,
    },
}

impl NaflexPlacement {
    /// SigLIP 2 NaFlex as `options` say, on one device (opened here) or on the several
    /// `--device` names (`cuda:all`, `cuda:0,2`: each opened by the run); None for any other
    /// checkpoint. The processor is read and checked here either way.
    pub fn open(options: &ModelOptions) -> Result<Option<NaflexPlacement>> {
        match crate::devices::several_devices(options.device.as_deref())? {
            Some(devices) if devices.len() > 1 => {
                let Some(dir) = options.naflex_dir()? else {
                    return Ok(None);
                };
                processor(&dir)?;
                if options.announce_device {
                    eprintln!(
                        "vitrt: running on {} devices ({})",
                        devices.len(),
                        devices.join(", ")
                    );
                }
                Ok(Some(NaflexPlacement::Several {
                    devices,
                    options: options.clone(),
                    dir,
                }))
            }
            Some(mut one) => NaflexPlacement::open(&ModelOptions {
                device: one.pop(),
                ..options.clone()
            }),
            None => {
                let Some((runner, dir)) = options.open_naflex()? else {
                    return Ok(None);
                };
                processor(&dir)?;
                Ok(Some(NaflexPlacement::One {
                    runner: Box::new(runner),
                    dir,
                }))
            }
        }
    }

    /// The checkpoint's folder (its processor and tokenizer).
    pub fn dir(&self) -> &Path {
        match self {
            NaflexPlacement::One { dir, .. } | NaflexPlacement::Several { dir, .. } => dir,
        }
    }

    /// The device(s), as outputs name them.
    pub fn describe(&self) -> String {
        match self {
            NaflexPlacement::One { runner, .. } => runner.backend().describe(),
            NaflexPlacement::Several { devices, .. } => devices.join(", "),
        }
    }

    /// The dtype the model runs in.
    pub fn dtype(&self) -> String {
        match self {
            NaflexPlacement::One { runner, .. } => runner.backend().dtype().to_string(),
            NaflexPlacement::Several { options, .. } => options
                .dtype
                .unwrap_or(vitrt_runtime::DType::F16)
                .to_string(),
        }
    }

    /// Runs every image of `inputs`, `prepare` having set each runner up (the one runner, or
    /// each device's once open), handing each batch's `outputs` to `results` in input order.
    pub fn run(
        &mut self,
        inputs: &InputList,
        images: &ImageOptions,
        prepare: &(dyn Fn(&mut NaflexRunner) -> Result<()> + Sync),
        outputs: &[&str],
        results: &mut impl BatchResults,
    ) -> Result<Ran> {
        match self {
            NaflexPlacement::One { runner, dir } => {
                let processor = processor(dir)?;
                prepare(runner)?;
                let on_gpu = runner.backend().describe().starts_with("cuda");
                let config = pipeline_config(&processor, images, inputs.len(), on_gpu)?;
                run_on_one(runner, &processor, config, inputs, images, outputs, results)
            }
            NaflexPlacement::Several {
                devices, options, ..
            } => {
                let run = DeviceRun {
                    model: options,
                    devices,
                    images,
                    runs: DeviceModel::Naflex { prepare, outputs },
                    before_submit: None,
                };
                Ok(run_on_devices(&run, inputs, results)?.into())
            }
        }
    }
}

/// The image pipeline over `inputs` with `runner` as its consumer, each batch run as it comes.
fn run_on_one(
    runner: &mut NaflexRunner,
    processor: &NaflexProcessor,
    config: PipelineConfig,
    inputs: &InputList,
    images: &ImageOptions,
    outputs: &[&str],
    results: &mut impl BatchResults,
) -> Result<Ran> {
    let mut slots = staging(config.depth, config.batch_size * config.image_bytes)?;
    let groups = RowGroupCache::default();
    let make_loader = || {
        Box::new(NaflexLoader::new(processor, images.limits, inputs, &groups))
            as Box<dyn ImageLoad + '_>
    };
    let mut consumer = OneDevice {
        runner,
        layout: StagedLayout::of(processor),
        outputs,
        results,
        progress: progress_bar(inputs.len(), images.quiet),
        stopped: false,
    };
    let stats = pipeline::run(
        inputs,
        config,
        &mut slots,
        &mut [],
        &make_loader,
        &mut consumer,
    );
    consumer.progress.finish_and_clear();
    Ok(Ran {
        stats: stats?,
        stopped: consumer.stopped,
        times: Default::default(),
        devices: Vec::new(),
        batch_size: config.batch_size,
        workers: config.workers,
    })
}

/// The pipeline's consumer on one device: each batch run as it comes, its outputs handed over.
struct OneDevice<'a, R: BatchResults> {
    runner: &'a mut NaflexRunner,
    layout: StagedLayout,
    outputs: &'a [&'a str],
    results: &'a mut R,
    progress: indicatif::ProgressBar,
    stopped: bool,
}

impl<R: BatchResults> Consumer for OneDevice<'_, R> {
    fn batch(&mut self, batch: Batch<'_>) -> Result<Flow> {
        for (_, why) in &batch.failures {
            eprintln!("vitrt: {why}");
        }
        let outputs = if batch.failures.len() == batch.count {
            None
        } else {
            let (inputs, loaded) = self.layout.batch_inputs(
                self.runner,
                batch.pixels,
                (batch.first, batch.count),
                &batch.failures,
            )?;
            Some(run_staged(
                self.runner,
                &inputs,
                &loaded,
                batch.count,
                self.outputs,
            )?)
        };
        let flow = self
            .results
            .batch(batch.first, batch.count, &batch.failures, outputs)?;
        self.progress.inc(batch.count as u64);
        if let Some(note) = self.results.progress_note() {
            self.progress.set_message(note);
        }
        if flow == Flow::Stop {
            self.stopped = true;
        }
        Ok(flow)
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_staged_image_comes_back_as_it_went_in() {
        let layout = StagedLayout {
            max_num_patches: 5,
            patch_values: 3,
        };
        let image = NaflexImage {
            grid: (2, 2),
            patch_rows: (0..15)
                .map(|i| if i < 12 { i as f32 * 0.5 - 1.0 } else { 0.0 })
                .collect(),
        };
        let mut bytes = vec![0xAB; layout.image_bytes()];
        layout.stage(&image, &mut bytes).unwrap();
        assert_eq!(layout.unstage(&bytes), image);
        // An image made for another padded length is refused, not cut.
        let longer = NaflexImage {
            grid: (2, 3),
            patch_rows: vec![0.0; 18],
        };
        assert!(layout.stage(&longer, &mut bytes).is_err());
    }
}
