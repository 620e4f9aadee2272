//! `vitrt classify`: image files and folders in, top-k labels out, through the image pipeline
//! (`crate::pipeline`): a pool of decode workers fills page-locked batches in input order, and
//! each batch's upload overlaps the previous batch's forward pass.

mod output;

use super::common::ModelArgs;
use crate::pipeline::{self, Batch, Flow, ImageLoad, PipelineConfig, PipelineStats};
use anyhow::{bail, Context, Result};
use clap::Args;
use output::{Format, Record, RunInfo, Sink, WriteError};
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};
use vitrt_model::config::ModelConfig;
use vitrt_model::labels::top_k;
use vitrt_model::preprocess::{
    normalization_table, ImageLimits, ImageLoader, PreprocessConfig, StageTimes,
};
use vitrt_model::{Head, Runner};
use vitrt_runtime::{PendingOutputs, TimelineSpan, TimelineStage};

/// Staging slots: one batch being filled while one is copied and one computes.
const STAGING_DEPTH: usize = 3;

#[derive(Args, Debug)]
pub struct ClassifyArgs {
    #[command(flatten)]
    model: ModelArgs,
    /// How many classes to show per image.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..))]
    top_k: u32,
    /// Images per forward pass. Default: 64 on a GPU, 8 on the CPU.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=65535))]
    batch_size: Option<u32>,
    /// Output: a table per image, one JSON document, JSON Lines or CSV (the last two are
    /// written and flushed batch by batch).
    #[arg(long, value_enum, default_value_t = Format::Table)]
    format: Format,
    /// The same as --format json.
    #[arg(long, conflicts_with = "format")]
    json: bool,
    /// Decoding threads. Default: the available cores on a GPU, half of them on the CPU (whose
    /// forward pass needs them too).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=1024))]
    workers: Option<u32>,
    /// Read more image paths from this file, one a line (`-`: standard input).
    #[arg(long, value_name = "LIST")]
    files_from: Option<PathBuf>,
    /// Stop at the first image that cannot be read (in input order) instead of reporting it
    /// and going on.
    #[arg(long)]
    fail_fast: bool,
    /// Refuse images of more pixels than this before decoding them (decompression bombs).
    #[arg(long, default_value_t = ImageLimits::default().max_pixels)]
    max_pixels: u64,
    /// Refuse image files larger than this many bytes without reading them whole.
    #[arg(long, default_value_t = ImageLimits::default().max_file_bytes)]
    max_file_size: u64,
    /// Refuse images whose decoded pixels would take more bytes than this (width x height x
    /// channels x bytes per sample), before decoding them.
    #[arg(long, default_value_t = ImageLimits::default().max_decoded_bytes)]
    max_decoded_bytes: u64,
    /// No progress bar (it is shown only when stderr is a terminal).
    #[arg(long, short)]
    quiet: bool,
    /// Write the run's timings (per stage, per image; the pipeline's waits; peak memory) as
    /// JSON to this file (scripts/bench_pipeline.py reads it).
    #[arg(long, value_name = "FILE")]
    stats: Option<PathBuf>,
    /// Image files (JPEG, PNG, WebP) and folders, walked for .jpg, .jpeg, .png and .webp
    /// files in name order.
    images: Vec<PathBuf>,
}

/// The preprocessing loader as the pipeline calls it.
struct Loader(ImageLoader);

impl ImageLoad for Loader {
    fn load(&mut self, path: &Path, out: &mut [u8]) -> Result<StageTimes, String> {
        self.0.load_file_into(path, out).map_err(|e| e.to_string())
    }
}

pub fn run(args: ClassifyArgs) -> Result<ExitCode> {
    let inputs = pipeline::collect_inputs(&args.images, args.files_from.as_deref())?;
    if inputs.paths.is_empty() && inputs.unlisted.is_empty() {
        bail!(if args.images.is_empty() && args.files_from.is_none() {
            "no images given: name image files or folders, or use --files-from".to_string()
        } else {
            "no images found (folders are searched for .jpg, .jpeg, .png and .webp files)"
                .to_string()
        });
    }
    let (mut runner, dir) = args.model.open()?;
    if runner.model.head == Head::Base {
        bail!(
            "{} is a {} checkpoint without a classification head; it has no labels to predict. \
             Use `vitrt embed` for its embeddings, or `vitrt infer` for its outputs",
            args.model.name(),
            runner.model.config.family.name()
        );
    }
    let config = runner.model.config.clone();
    let pre_path = dir.join("preprocessor_config.json");
    let pre = if pre_path.exists() {
        PreprocessConfig::from_json_file_for_channels(&pre_path, config.num_channels)?
    } else {
        let (h, w) = runner.model.input_size();
        PreprocessConfig::hf_default_sized(h, w, config.num_channels)
    };
    // The model runs on what the preprocessing makes (DINOv2's tables are for 518 pixels and
    // its processor crops 224), unless --image-size says otherwise.
    if pre.output_size() != runner.model.input_size() {
        if args.model.image_size().is_some() {
            bail!(
                "preprocessor_config.json makes {:?} images (height, width, after any center \
                 crop) but --image-size asks for {:?}",
                pre.output_size(),
                runner.model.input_size()
            );
        }
        runner
            .set_input_size(pre.output_size())
            .context("the size preprocessor_config.json makes")?;
    }
    let limits = ImageLimits {
        max_pixels: args.max_pixels,
        max_file_bytes: args.max_file_size,
        max_decoded_bytes: args.max_decoded_bytes,
    };
    let on_gpu = runner.backend().describe().starts_with("cuda");
    // No batch larger than the run: staging and activations are sized by it.
    let batch_size = args
        .batch_size
        .map_or(if on_gpu { 64 } else { 8 }, |b| b as usize)
        .min(inputs.paths.len().max(1));
    // On the CPU the forward pass needs the cores too: decoding on all of them beside it cost
    // 5% on the demo digits with 2 cores (NOTES, 2026-11-24), half of them costs nothing.
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let workers = args
        .workers
        .map_or(if on_gpu { cores } else { (cores / 2).max(1) }, |w| {
            w as usize
        });
    let table = normalization_table(&pre);
    let image_bytes = ImageLoader::new(&pre, limits).output_bytes();
    let pipeline_config = PipelineConfig {
        batch_size,
        depth: STAGING_DEPTH,
        workers,
        image_bytes,
        fail_fast: args.fail_fast,
    };

    let format = if args.json { Format::Json } else { args.format };
    let info = RunInfo {
        model: args.model.name().to_string(),
        device: runner.backend().describe(),
        dtype: runner.backend().dtype().to_string(),
    };
    let stdout = std::io::stdout();
    let mut sink = match Sink::new(format, std::io::BufWriter::new(stdout.lock()), info) {
        Ok(sink) => sink,
        Err(WriteError::Closed) => return Ok(ExitCode::SUCCESS),
        Err(WriteError::Failed(e)) => return Err(e).context("writing the results"),
    };

    // Entries that could not even be listed are failures too, reported first.
    let mut failed = 0usize;
    for (path, why) in &inputs.unlisted {
        eprintln!("vitrt: {}: {why}", path.display());
        failed += 1;
        let image = path.display().to_string();
        if let Err(e) = sink.write(&Record::Failed {
            image: &image,
            error: why,
        }) {
            return finish_early(e);
        }
    }
    if args.fail_fast && failed > 0 {
        bail!("stopped at the first failure (--fail-fast)");
    }

    let mut staging = (0..STAGING_DEPTH)
        .map(|_| runner.alloc_staging(batch_size * image_bytes))
        .collect::<Result<Vec<_>, _>>()
        .context("allocating the staging buffers")?;
    runner.record_timeline(args.stats.is_some());
    let mut classifier = Classifier {
        runner: &mut runner,
        sink,
        paths: &inputs.paths,
        config: &config,
        table: &table,
        top_k: args.top_k as usize,
        in_flight: None,
        to_write: None,
        closed: false,
        progress: progress_bar(inputs.paths.len(), args.quiet),
        submitting: Duration::ZERO,
        collecting: Duration::ZERO,
        first_submits: Vec::new(),
    };
    let make_loader = || Box::new(Loader(ImageLoader::new(&pre, limits))) as Box<dyn ImageLoad>;
    let stats = pipeline::run(
        &inputs.paths,
        pipeline_config,
        &mut staging,
        &make_loader,
        &mut classifier,
    );
    classifier.progress.finish_and_clear();
    let stats: PipelineStats = stats?;
    // The last batch's results.
    if !classifier.closed {
        if let Flow::Stop = classifier.write_last()? {
            classifier.closed = true;
        }
    }
    let Classifier {
        sink,
        closed,
        submitting,
        collecting,
        first_submits,
        ..
    } = classifier;
    if let Some(path) = &args.stats {
        let timeline = runner.take_timeline()?;
        let times = StatsTimes {
            submitting,
            collecting,
            first_submits: &first_submits,
            timeline: &timeline,
        };
        write_stats(path, &stats, workers, batch_size, &times)?;
    }
    if closed {
        return Ok(ExitCode::SUCCESS);
    }
    if let Err(e) = sink.finish() {
        return finish_early(e);
    }
    failed += stats.failed;
    let total = inputs.paths.len() + inputs.unlisted.len();
    if args.fail_fast && failed > 0 {
        bail!("stopped at the first image that failed (--fail-fast)");
    }
    if failed > 0 {
        bail!("{failed} of {total} images could not be classified");
    }
    Ok(ExitCode::SUCCESS)
}

/// A batch submitted to the model whose results are not yet written.
struct InFlight {
    pending: Option<PendingOutputs>,
    first: usize,
    count: usize,
    failures: Vec<(usize, String)>,
}

/// The pipeline's consumer: submits each batch (the copy of its pixels overlaps the forward
/// pass of the batch before it), hands its slot back, then waits for the previous batch's
/// results and writes them.
struct Classifier<'a, W: std::io::Write> {
    runner: &'a mut Runner,
    sink: Sink<W>,
    paths: &'a [PathBuf],
    config: &'a ModelConfig,
    table: &'a [f32],
    top_k: usize,
    in_flight: Option<InFlight>,
    /// The batch before `in_flight`, whose results are written next.
    to_write: Option<InFlight>,
    /// The reader closed the output.
    closed: bool,
    progress: indicatif::ProgressBar,
    /// Host time in submissions (which wait for each batch's copy) and in waits for results.
    submitting: Duration,
    collecting: Duration,
    /// The first executor's preparation (plan, weights), then the first two submissions.
    first_submits: Vec<Duration>,
}

impl<W: std::io::Write> pipeline::Consumer for Classifier<'_, W> {
    fn batch(&mut self, batch: Batch<'_>) -> Result<Flow> {
        for (_, why) in &batch.failures {
            eprintln!("vitrt: {why}");
        }
        if self.first_submits.is_empty() {
            // Plan and weights (timed apart from the first pass, for --stats).
            let preparing = Instant::now();
            self.runner.prepare(batch.count, false)?;
            self.first_submits.push(preparing.elapsed());
        }
        let started = Instant::now();
        let pending = if batch.failures.len() < batch.count {
            Some(
                self.runner
                    .submit_bytes(batch.pixels, batch.count, self.table)?,
            )
        } else {
            None
        };
        let took = started.elapsed();
        self.submitting += took;
        if self.first_submits.len() < 3 {
            // The first pass (eager: kernels load), then the second (CUDA graph capture).
            self.first_submits.push(took);
        }
        self.progress.inc(batch.count as u64);
        // Results come one batch behind: the previous batch's are written in after_release,
        // once this batch's slot is back with the workers.
        self.to_write = self.in_flight.replace(InFlight {
            pending,
            first: batch.first,
            count: batch.count,
            failures: batch.failures,
        });
        Ok(Flow::Continue)
    }

    fn after_release(&mut self) -> Result<Flow> {
        match self.to_write.take() {
            Some(previous) => self.write_results(previous),
            None => Ok(Flow::Continue),
        }
    }
}

impl<W: std::io::Write> Classifier<'_, W> {
    /// Writes the newest batch's results, once no batch comes after it.
    fn write_last(&mut self) -> Result<Flow> {
        match self.in_flight.take() {
            Some(last) => self.write_results(last),
            None => Ok(Flow::Continue),
        }
    }

    /// Waits for a batch's logits and writes each image's record.
    fn write_results(&mut self, mut batch: InFlight) -> Result<Flow> {
        let started = Instant::now();
        let logits = match batch.pending.take() {
            Some(pending) => Some(
                self.runner
                    .finish(pending)?
                    .into_iter()
                    .find(|t| t.name == "logits")
                    .context("the model produced no logits")?,
            ),
            None => None,
        };
        let written = self.write_records(&batch, logits.as_ref());
        self.collecting += started.elapsed();
        match written.and_then(|()| self.sink.end_batch()) {
            Ok(()) => Ok(Flow::Continue),
            Err(e) => write_failed(e, &mut self.closed),
        }
    }

    fn write_records(
        &mut self,
        batch: &InFlight,
        logits: Option<&vitrt_runtime::HostTensor>,
    ) -> Result<(), WriteError> {
        for k in 0..batch.count {
            let index = batch.first + k;
            let image = self.paths[index].display().to_string();
            let failure = batch.failures.iter().find(|(i, _)| *i == index);
            match (failure, logits) {
                (Some((_, why)), _) => self.sink.write(&Record::Failed {
                    image: &image,
                    error: why,
                })?,
                (None, Some(logits)) => {
                    let classes = *logits.shape.last().unwrap_or(&1);
                    let row = &logits.data[k * classes..][..classes];
                    if let Some(bad) = row.iter().find(|v| !v.is_finite()) {
                        let why = format!(
                            "{image}: the model gave a non-finite logit ({bad}); \
                             `vitrt parity` finds the first layer that does"
                        );
                        eprintln!("vitrt: {why}");
                        self.sink.write(&Record::Failed {
                            image: &image,
                            error: &why,
                        })?
                    } else {
                        let predictions = top_k(row, self.top_k, self.config);
                        self.sink.write(&Record::Classified {
                            image: &image,
                            predictions: &predictions,
                        })?
                    }
                }
                (None, None) => unreachable!("a batch with images to classify is submitted"),
            }
        }
        Ok(())
    }
}

/// Stops the pipeline after a failed write: quietly for a closed output, else with the error.
fn write_failed(error: WriteError, closed: &mut bool) -> Result<Flow> {
    match error {
        WriteError::Closed => {
            *closed = true;
            Ok(Flow::Stop)
        }
        WriteError::Failed(e) => Err(e).context("writing the results"),
    }
}

fn finish_early(error: WriteError) -> Result<ExitCode> {
    match error {
        WriteError::Closed => Ok(ExitCode::SUCCESS),
        WriteError::Failed(e) => Err(e).context("writing the results"),
    }
}

/// Host waits of the consumer and the device's timeline, for `--stats`.
struct StatsTimes<'a> {
    submitting: Duration,
    collecting: Duration,
    first_submits: &'a [Duration],
    timeline: &'a [TimelineSpan],
}

/// The run's timings as JSON (see `--stats`).
fn write_stats(
    path: &Path,
    stats: &PipelineStats,
    workers: usize,
    batch_size: usize,
    times: &StatsTimes<'_>,
) -> Result<()> {
    let loaded = (stats.images - stats.failed).max(1) as f64;
    let per_image_ms = |d: Duration| d.as_secs_f64() * 1e3 / loaded;
    let wall = stats.wall.as_secs_f64();
    // The device: per stage, the total and the median per batch; the compute stream's busy
    // time (expansion, forward pass and output copy run there one after another) against the
    // span from the first copy to the last result, and against the pipeline's wall time.
    let stage = |wanted: TimelineStage| {
        let mut ms: Vec<f64> = times
            .timeline
            .iter()
            .filter(|s| s.stage == wanted)
            .map(|s| f64::from(s.end_ms - s.start_ms))
            .collect();
        ms.sort_by(f64::total_cmp);
        let median = ms.get(ms.len() / 2).copied();
        serde_json::json!({"batches": ms.len(), "total_ms": ms.iter().sum::<f64>(), "median_ms": median})
    };
    let compute_ms: f64 = times
        .timeline
        .iter()
        .filter(|s| s.stage != TimelineStage::CopyIn)
        .map(|s| f64::from(s.end_ms - s.start_ms))
        .sum();
    let span_ms = times
        .timeline
        .iter()
        .map(|s| f64::from(s.end_ms))
        .fold(0.0, f64::max);
    let device = if times.timeline.is_empty() {
        serde_json::Value::Null
    } else {
        serde_json::json!({
            "copy_in": stage(TimelineStage::CopyIn),
            "expand": stage(TimelineStage::Expand),
            "forward": stage(TimelineStage::Forward),
            "copy_out": stage(TimelineStage::CopyOut),
            "compute_busy_ms": compute_ms,
            "span_ms": span_ms,
            "busy_fraction_of_span": compute_ms / span_ms.max(1e-9),
            "busy_fraction_of_wall": compute_ms / 1e3 / wall.max(1e-9),
        })
    };
    let document = serde_json::json!({
        "schema": "vitrt-pipeline-stats/1",
        "images": stats.images,
        "failed": stats.failed,
        "batches": stats.batches,
        "batch_size": batch_size,
        "workers": workers,
        "wall_s": wall,
        "images_per_s": stats.images as f64 / wall.max(1e-9),
        "per_image_ms": {
            "read": per_image_ms(stats.stages.read),
            "decode": per_image_ms(stats.stages.decode),
            "resize": per_image_ms(stats.stages.resize),
            "worker_total": per_image_ms(stats.worker_busy),
        },
        "worker_busy_fraction": stats.worker_busy.as_secs_f64() / (wall * workers as f64).max(1e-9),
        "consumer": {
            "waiting_for_batches_s": stats.consumer_waiting.as_secs_f64(),
            "submitting_s": times.submitting.as_secs_f64(),
            "collecting_results_s": times.collecting.as_secs_f64(),
            "prepare_then_first_two_submits_s": times.first_submits.iter().map(Duration::as_secs_f64).collect::<Vec<_>>(),
        },
        "device": device,
        "max_images_in_flight": stats.max_in_flight,
        "peak_rss_bytes": peak_rss_bytes(),
    });
    std::fs::write(path, serde_json::to_string_pretty(&document)? + "\n")
        .with_context(|| format!("writing --stats {}", path.display()))
}

/// The process's peak resident memory (Linux: VmHWM), if known.
fn peak_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// Images done of total, images/s and the time left, on stderr when it is a terminal.
fn progress_bar(total: usize, quiet: bool) -> indicatif::ProgressBar {
    if quiet || !std::io::stderr().is_terminal() {
        return indicatif::ProgressBar::hidden();
    }
    let bar = indicatif::ProgressBar::new(total as u64);
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{bar:30} {pos}/{len} images  {per_sec}  ETA {eta}",
        )
        .expect("a valid template"),
    );
    bar
}

#[cfg(test)]
mod tests {
    use super::*;
    use vitrt_runtime::HostStaging;

    /// The pipeline's pixels, from many workers in small batches, expanded through the table,
    /// are bit for bit what the one-thread host path (`preprocess_file`) gives, for every
    /// fixture image and filter.
    #[test]
    fn pipeline_pixels_equal_the_one_thread_path_bitwise() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/images");
        let mut images: Vec<PathBuf> = std::fs::read_dir(&root)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| {
                p.extension()
                    .and_then(|e| e.to_str())
                    .is_some_and(|e| ["jpg", "png", "webp"].contains(&e))
            })
            .collect();
        images.sort();
        assert!(images.len() >= 6, "{images:?}");
        // Each image three times, so batches mix them.
        let paths: Vec<PathBuf> = images
            .iter()
            .cycle()
            .take(images.len() * 3)
            .cloned()
            .collect();
        // Two filters, and a shortest-edge resize whose center crop is wider than the resized
        // image on the square fixture (zero padding in the staging slot).
        for json in [
            r#"{"size": {"height": 40, "width": 56}, "resample": 2}"#,
            r#"{"size": {"height": 40, "width": 56}, "resample": 3}"#,
            r#"{"size": {"shortest_edge": 44}, "do_center_crop": true,
                "crop_size": {"height": 40, "width": 56}, "resample": 3}"#,
        ] {
            let pre = PreprocessConfig::from_json_str(json).unwrap();
            let table = normalization_table(&pre);
            let limits = ImageLimits::default();
            let image_bytes = ImageLoader::new(&pre, limits).output_bytes();
            let config = PipelineConfig {
                batch_size: 4,
                depth: 2,
                workers: 5,
                image_bytes,
                fail_fast: false,
            };
            let mut staging: Vec<HostStaging> =
                (0..2).map(|_| HostStaging::heap(4 * image_bytes)).collect();
            let make = || Box::new(Loader(ImageLoader::new(&pre, limits))) as Box<dyn ImageLoad>;
            let mut checked = 0;
            pipeline::run(&paths, config, &mut staging, &make, &mut |batch: Batch<
                '_,
            >| {
                assert!(batch.failures.is_empty(), "{:?}", batch.failures);
                for k in 0..batch.count {
                    let bytes = &batch.pixels[k * image_bytes..][..image_bytes];
                    let mut ours = vec![0f32; image_bytes];
                    vitrt_model::preprocess::normalize_into(bytes, 3, &table, &mut ours);
                    let path = &paths[batch.first + k];
                    let want = vitrt_model::preprocess::preprocess_file(path, &pre).unwrap();
                    assert!(
                        ours.iter()
                            .zip(&want)
                            .all(|(a, b)| a.to_bits() == b.to_bits()),
                        "{} ({json}) differs",
                        path.display()
                    );
                    checked += 1;
                }
                Ok(Flow::Continue)
            })
            .unwrap();
            assert_eq!(checked, paths.len());
        }
    }
}
