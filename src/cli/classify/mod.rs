//! `vitrt classify`: image files and folders in, top-k labels out, through the engine's image
//! pipeline and batch consumer (`vitrt_engine::batched`), which `vitrt embed` shares: a pool
//! of decode workers fills page-locked batches in input order, and each batch's upload
//! overlaps the previous batch's forward pass.

pub(crate) mod output;
mod sharded;

use super::common::{flow_after, ModelArgs};
use super::images::ImageArgs;
use super::output_dir::{OutputDir, OutputDirArgs};
use crate::output_file::OutputFile;
use anyhow::{bail, Context, Result};
use clap::Args;
use output::{Format, Record, RunInfo, Sink, WriteError};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;
use vitrt_engine::batched::{self, BatchResults};
use vitrt_engine::devices::{DeviceFigures, Placement, Ran};
use vitrt_engine::naflex::NaflexPlacement;
use vitrt_engine::pipeline::{Flow, InputList, PipelineStats};
use vitrt_engine::results::named_output;
pub(crate) use vitrt_engine::results::Scores;
use vitrt_model::labels::Prediction;
use vitrt_model::naflex::NaflexRunner;
use vitrt_model::{Head, Runner};
use vitrt_runtime::{HostTensor, MemoryAccount, TimelineSpan, TimelineStage};

#[derive(Args, Debug)]
pub struct ClassifyArgs {
    #[command(flatten)]
    model: ModelArgs,
    /// How many classes to show per image.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..))]
    top_k: u32,
    /// Output: a table per image, one JSON document, JSON Lines or CSV (the last two are
    /// written and flushed batch by batch).
    #[arg(long, value_enum, default_value_t = Format::Table, conflicts_with = "output_dir")]
    format: Format,
    /// The same as --format json.
    #[arg(long, conflicts_with_all = ["format", "output_dir"])]
    json: bool,
    /// Write the run's timings (per stage, per image; the pipeline's waits; peak memory) as
    /// JSON to this file (scripts/bench/bench_pipeline.py reads it).
    #[arg(long, value_name = "FILE", conflicts_with = "output_dir")]
    stats: Option<PathBuf>,
    /// With --output-dir, each shard is a STEM.parquet of each row's key, source, error, a
    /// webdataset sample's .json/.txt members, and its top-k labels and probabilities.
    #[command(flatten)]
    sharded: OutputDirArgs,
    #[command(flatten)]
    images: ImageArgs,
}

/// How a run over images reports: the output and its format.
pub(crate) struct Report {
    pub top_k: usize,
    pub format: Format,
    /// `--stats`: where to write the run's timings (checked before the run).
    pub stats: Option<OutputFile>,
    /// `--output-dir`, opened before the model (see [`open_output_dir`]).
    pub sharded: Option<OutputDir>,
}

/// `--output-dir`, if named, opened before the model is: a directory written with other
/// options is refused before any work, and a run with every shard written needs no model
/// (then `Ok(Err(()))`). `own`: the command's options that decide its results.
pub(crate) fn open_output_dir(
    sharded: &OutputDirArgs,
    command: &str,
    model: &ModelArgs,
    own: Vec<(&'static str, String)>,
    images: &ImageArgs,
    inputs: &InputList,
) -> Result<Result<Option<OutputDir>, ()>> {
    let Some(dir) = sharded.dir()? else {
        return Ok(Ok(None));
    };
    let mut options = model.recorded();
    options.extend(own);
    options.extend(images.recorded());
    let out = OutputDir::open(
        dir,
        command,
        &options,
        inputs,
        sharded.shard_size(),
        &["parquet"],
    )?;
    Ok(if out.announce() {
        Ok(Some(out))
    } else {
        Err(())
    })
}

pub fn run(args: ClassifyArgs) -> Result<ExitCode> {
    args.model.count_devices_ahead();
    // Before any work: a run that cannot keep its timings should not start.
    let stats = args
        .stats
        .as_deref()
        .map(|path| OutputFile::check_report(path, false))
        .transpose()
        .context("--stats")?;
    let inputs = args.images.collect()?;
    if let Some(stats) = &stats {
        stats.check_not_among(&inputs.paths).context("--stats")?;
    }
    // --output-dir runs batch-invariant (see ModelArgs::batch_invariant).
    let model = match args.sharded.dir()? {
        Some(_) => args.model.batch_invariant(),
        None => args.model.clone(),
    };
    let Ok(sharded) = open_output_dir(
        &args.sharded,
        "classify",
        &model,
        vec![("top-k", args.top_k.to_string())],
        &args.images,
        &inputs,
    )?
    else {
        return Ok(ExitCode::SUCCESS);
    };
    let mut placement = model.placement()?;
    let vision = placement.model();
    if vision.head == Head::Base {
        bail!(
            "{} is a {} checkpoint without a classification head; it has no labels to predict. \
             Use `vitrt embed` for its embeddings, `vitrt zero-shot` for CLIP and SigLIP, or \
             `vitrt infer` for its outputs",
            model.name(),
            vision.config.family.name()
        );
    }
    let config = vision.config.clone();
    let report = Report {
        top_k: args.top_k as usize,
        format: if args.json { Format::Json } else { args.format },
        stats,
        sharded,
    };
    classify_images(
        RunOn::Images {
            placement: &mut placement,
            prepare: &|_| Ok(()),
        },
        &model,
        &args.images,
        &inputs,
        Scores::Logits(&config),
        &report,
    )
}

/// Where a run's images go: a fixed-size model's image pipeline, `prepare` setting each
/// runner up (the one, or each device's once open); or SigLIP 2 NaFlex's, the same pipeline
/// with each image at its own patch grid.
pub(crate) enum RunOn<'a> {
    Images {
        placement: &'a mut Placement,
        prepare: &'a (dyn Fn(&mut Runner) -> Result<()> + Sync),
    },
    Naflex {
        placement: &'a mut NaflexPlacement,
        prepare: &'a (dyn Fn(&mut NaflexRunner) -> Result<()> + Sync),
    },
}

impl RunOn<'_> {
    /// Runs every image of `inputs`, handing each batch's `output` (what `results` reads; a
    /// fixed-size model's runner gives what `prepare` set) to `results` in input order.
    pub(crate) fn run(
        &mut self,
        inputs: &InputList,
        model: &ModelArgs,
        images: &ImageArgs,
        output: &str,
        results: &mut impl BatchResults,
        record_timeline: bool,
    ) -> Result<Ran> {
        match self {
            RunOn::Images { placement, prepare } => placement.run(
                inputs,
                &images.options(),
                model.image_size().is_some(),
                *prepare,
                results,
                record_timeline,
            ),
            RunOn::Naflex { placement, prepare } => {
                placement.run(inputs, &images.options(), *prepare, &[output], results)
            }
        }
    }

    fn describe(&self) -> String {
        match self {
            RunOn::Images { placement, .. } => placement.describe(),
            RunOn::Naflex { placement, .. } => placement.describe(),
        }
    }

    fn dtype(&self) -> String {
        match self {
            RunOn::Images { placement, .. } => placement.dtype(),
            RunOn::Naflex { placement, .. } => placement.dtype(),
        }
    }
}

/// Runs the model over the images, on one device or several, and writes each one's top
/// labels by `scores`: `vitrt classify`, and `vitrt zero-shot`, whose `prepare` encodes its
/// labels on each device.
pub(crate) fn classify_images(
    mut run_on: RunOn<'_>,
    model: &ModelArgs,
    images: &ImageArgs,
    inputs: &InputList,
    scores: Scores<'_>,
    report: &Report,
) -> Result<ExitCode> {
    if let Some(out) = &report.sharded {
        return classify_into_shards(run_on, model, images, report.top_k, inputs, scores, out);
    }
    if report.stats.is_some() && matches!(run_on, RunOn::Naflex { .. }) {
        bail!("--stats is not built for SigLIP 2 NaFlex");
    }
    let info = RunInfo {
        model: model.name().to_string(),
        device: run_on.describe(),
        dtype: run_on.dtype(),
    };
    let stdout = std::io::stdout();
    let sink = match Sink::new(report.format, std::io::BufWriter::new(stdout.lock()), info) {
        Ok(sink) => sink,
        Err(WriteError::Closed) => return Ok(ExitCode::SUCCESS),
        Err(WriteError::Failed(e)) => return Err(e).context("writing the results"),
    };
    let mut classifier = Classifier {
        sink,
        inputs,
        scores,
        top_k: report.top_k,
        fail_fast: images.fail_fast,
        not_finite: 0,
    };

    let output = classifier.scores.output();
    let outcome = run_on.run(
        inputs,
        model,
        images,
        output,
        &mut classifier,
        report.stats.is_some(),
    )?;
    if let Some(stats_file) = &report.stats {
        let (timeline, memory) = match &mut run_on {
            RunOn::Images { placement, .. } => match placement.runner() {
                Some(runner) => (
                    runner.take_timeline()?,
                    Some(runner.backend().memory_account()),
                ),
                None => (Vec::new(), None),
            },
            RunOn::Naflex { .. } => (Vec::new(), None),
        };
        let times = StatsTimes {
            submitting: outcome.times.submitting,
            collecting: outcome.times.collecting,
            first_submits: &outcome.times.first_submits,
            batch_marks: &outcome.times.batch_marks,
            timeline: &timeline,
            redone_on_host: outcome.times.redone_on_host
                + outcome
                    .devices
                    .iter()
                    .map(|d| d.redone_on_host)
                    .sum::<usize>(),
            memory,
            devices: &outcome.devices,
        };
        write_stats(
            stats_file,
            &outcome.stats,
            outcome.workers,
            outcome.batch_size,
            &times,
        )?;
    }
    // Stopped by the results: the reader closed the output, unless --fail-fast stopped at an
    // image whose scores are not finite (its record is written; the count below fails).
    if outcome.stopped && !(images.fail_fast && classifier.not_finite > 0) {
        return Ok(ExitCode::SUCCESS);
    }
    match classifier.sink.finish() {
        Ok(()) => {}
        Err(WriteError::Closed) => return Ok(ExitCode::SUCCESS),
        Err(WriteError::Failed(e)) => return Err(e).context("writing the results"),
    }
    let failed = outcome.stats.failed + classifier.not_finite;
    let total = inputs.paths.len();
    batched::check_failures(failed, total, images.fail_fast, "classified")?;
    Ok(ExitCode::SUCCESS)
}

/// `classify_images` with `--output-dir`: the shards not yet written, each written as it
/// completes.
fn classify_into_shards(
    mut run_on: RunOn<'_>,
    model: &ModelArgs,
    images: &ImageArgs,
    top_k: usize,
    all: &InputList,
    scores: Scores<'_>,
    out: &OutputDir,
) -> Result<ExitCode> {
    let to_do = out.to_do();
    let ranges: Vec<_> = to_do.iter().map(|s| s.inputs.clone()).collect();
    let inputs = all.select(&ranges);
    let output = scores.output();
    let mut classifier = sharded::ShardedClassifier::new(out, &inputs, to_do, scores, top_k);
    run_on.run(&inputs, model, images, output, &mut classifier, false)?;
    eprintln!(
        "wrote {} shards to {} ({} of {} inputs could not be classified)",
        classifier.written,
        out.path().display(),
        classifier.failed(),
        inputs.len()
    );
    batched::check_failures(
        classifier.failed(),
        inputs.len(),
        images.fail_fast,
        "classified",
    )?;
    Ok(ExitCode::SUCCESS)
}

/// Writes each image's top-k labels, or why it has none.
struct Classifier<'a, W: std::io::Write> {
    sink: Sink<W>,
    inputs: &'a InputList,
    scores: Scores<'a>,
    top_k: usize,
    /// Stop at the first image that fails, a non-finite score included.
    fail_fast: bool,
    /// Images whose scores held a value that is not finite (failures, as in `vitrt embed`).
    not_finite: usize,
}

impl<W: std::io::Write> BatchResults for Classifier<'_, W> {
    fn batch(
        &mut self,
        first: usize,
        count: usize,
        failures: &[(usize, String)],
        outputs: Option<Vec<HostTensor>>,
    ) -> Result<Flow> {
        let wanted = self.scores.output();
        let logits = outputs.map(|o| named_output(o, wanted)).transpose()?;
        let not_finite = self.not_finite;
        let written = self
            .write_records(first, count, failures, logits.as_ref())
            .and_then(|()| self.sink.end_batch());
        let flow = flow_after(written, "writing the results")?;
        if self.fail_fast && self.not_finite > not_finite {
            return Ok(Flow::Stop);
        }
        Ok(flow)
    }
}

impl<W: std::io::Write> Classifier<'_, W> {
    fn write_records(
        &mut self,
        first: usize,
        count: usize,
        failures: &[(usize, String)],
        logits: Option<&HostTensor>,
    ) -> Result<(), WriteError> {
        // Each row's top-k before any is written: a softmax and a one-pass selection over the
        // classes, on this thread (the thread pool's threads, competing with the decoding
        // workers for the cores, answered late; NOTES, 2026-11-27).
        let classes = logits.map_or(1, |l| *l.shape.last().unwrap_or(&1));
        let predictions: Vec<Option<Vec<Prediction>>> = match logits {
            Some(logits) => (0..count)
                .map(|k| {
                    let row = &logits.data[k * classes..][..classes];
                    row.iter()
                        .all(|v| v.is_finite())
                        .then(|| self.scores.top_k(row, self.top_k))
                })
                .collect(),
            None => vec![None; count],
        };
        for k in 0..count {
            let index = first + k;
            let image = self.inputs.name(index);
            let failure = failures.iter().find(|(i, _)| *i == index);
            match (failure, logits) {
                (Some((_, why)), _) => {
                    self.sink.write(&Record::Failed {
                        image: &image,
                        error: why,
                    })?;
                    if self.fail_fast {
                        // The pipeline's batch ends at its first failure: nothing follows.
                        return Ok(());
                    }
                }
                (None, Some(logits)) => {
                    let classes = *logits.shape.last().unwrap_or(&1);
                    let row = &logits.data[k * classes..][..classes];
                    if let Some(bad) = row.iter().find(|v| !v.is_finite()) {
                        let why = format!(
                            "{image}: the model gave a non-finite score ({bad}); \
                             `vitrt parity` finds the first layer that does"
                        );
                        eprintln!("vitrt: {why}");
                        self.not_finite += 1;
                        self.sink.write(&Record::Failed {
                            image: &image,
                            error: &why,
                        })?;
                        if self.fail_fast {
                            // The first failure in input order: nothing after it.
                            return Ok(());
                        }
                    } else {
                        let predictions = predictions[k].as_deref().unwrap_or_default();
                        self.sink.write(&Record::Classified {
                            image: &image,
                            predictions,
                        })?
                    }
                }
                (None, None) => unreachable!("a batch with images to classify is submitted"),
            }
        }
        Ok(())
    }
}

/// Host waits of the consumer and the device's timeline, for `--stats`.
struct StatsTimes<'a> {
    submitting: Duration,
    collecting: Duration,
    first_submits: &'a [Duration],
    batch_marks: &'a [[f64; 5]],
    timeline: &'a [TimelineSpan],
    redone_on_host: usize,
    /// The backend's memory after the run (device memory on CUDA); none on several devices.
    memory: Option<MemoryAccount>,
    /// Several devices: each one's share.
    devices: &'a [DeviceFigures],
}

/// The run's timings as JSON (see `--stats`).
fn write_stats(
    file: &OutputFile,
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
        .filter(|s| {
            // The compute stream's stages; the copy stream copies and decodes beside it.
            matches!(
                s.stage,
                TimelineStage::Expand | TimelineStage::Forward | TimelineStage::CopyOut
            )
        })
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
            "entropy": stage(TimelineStage::Entropy),
            "decode": stage(TimelineStage::Decode),
            "resize": stage(TimelineStage::Resize),
            "expand": stage(TimelineStage::Expand),
            "forward": stage(TimelineStage::Forward),
            "copy_out": stage(TimelineStage::CopyOut),
            "compute_busy_ms": compute_ms,
            "span_ms": span_ms,
            "busy_fraction_of_span": compute_ms / span_ms.max(1e-9),
            "busy_fraction_of_wall": compute_ms / 1e3 / wall.max(1e-9),
            // Every recorded interval, for a picture of the gaps: [stage, start, end] in ms.
            "timeline": times.timeline.iter().map(|s| serde_json::json!([format!("{:?}", s.stage), s.start_ms, s.end_ms])).collect::<Vec<_>>(),
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
            // Per batch, ms from the consumer's start: submit start and end, the wait for its
            // outputs' start, their arrival, the results handed over.
            "batch_marks_ms": times.batch_marks,
        },
        "device": device,
        "decoded_on_device": stats.device_decoded,
        // Of those, the images whose Huffman decoding the device did too.
        "entropy_decoded_on_device": stats.device_entropy_decoded,
        // Images the device marked (data libjpeg would warn about, a block outside the
        // exactness guard): their batches were decoded again on the host.
        "redone_on_host": times.redone_on_host,
        "decoded_on_host": stats.host_decoded.iter().map(|(why, images)| serde_json::json!({"why": why.describe(), "images": images})).collect::<Vec<_>>(),
        "max_images_in_flight": stats.max_in_flight,
        // What the backend holds after the run (device memory on CUDA), by use: the device
        // decoding's uploads and scratch are `decode_bytes`, grown to the largest batch.
        "backend_memory": times.memory.as_ref().map(|memory| serde_json::json!({
            "params_bytes": memory.params_bytes,
            "arena_bytes": memory.arena_bytes,
            "staging_bytes": memory.staging_bytes,
            "decode_bytes": memory.decode_bytes,
            "workspace_bytes": memory.workspace_bytes,
            "peak_bytes": memory.peak_bytes,
        })),
        // Several devices: each one's batches, images, and its thread's time submitting
        // (copies included) and collecting.
        "devices": times.devices.iter().map(|d| serde_json::json!({
            "device": d.device,
            "batches": d.batches,
            "images": d.images,
            "submitting_s": d.submitting.as_secs_f64(),
            "collecting_s": d.collecting.as_secs_f64(),
            "redone_on_host": d.redone_on_host,
        })).collect::<Vec<_>>(),
        "peak_rss_bytes": peak_rss_bytes(),
    });
    file.write((serde_json::to_string_pretty(&document)? + "\n").as_bytes())
        .context("--stats")
}

/// The process's peak resident memory (Linux: VmHWM), if known.
fn peak_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}
