//! Running a model over many image files (`vitrt classify`, `vitrt embed`, `vitrt
//! zero-shot`): the image options ([`ImageOptions`]), the preprocessing a checkpoint's images get and
//! the input size it makes ([`preprocessing`]), the batch plan ([`BatchSetup`]), and the
//! pipeline's consumer ([`run_batches`]) that submits each batch and collects its outputs one
//! batch behind, handing them in input order to the command's [`BatchResults`].

use crate::pipeline::datasets::{ImageAt, RowGroupCache, SampleReader};
use crate::pipeline::{self, Batch, Flow, ImageLoad, InputList, PipelineConfig, PipelineStats};
use anyhow::{bail, Context, Result};
use std::io::IsTerminal;
use std::path::Path;
use std::time::{Duration, Instant};
use vitrt_model::preprocess::device_batch::{device_batch, DeviceBatch};
use vitrt_model::preprocess::jpeg_coefficients::EntropyOn;
use vitrt_model::preprocess::{
    ArenaReserve, ImageLimits, ImageLoader, Loaded, PixelExpansion, PreprocessConfig, StageTimes,
};
use vitrt_model::Runner;
use vitrt_runtime::{HostTensor, PendingOutputs};

/// Staging slots: one batch being filled while one is copied and one computes.
pub(crate) const STAGING_DEPTH: usize = 3;

/// Bounds of the arena bytes per image of a batch for `--decode gpu` (page-locked, one arena
/// per staging slot), which [`arena_bytes_per_image`] sizes from the input files: a baseline
/// JPEG's scan takes about its file's size, a progressive one's coefficients about ten times
/// that (3 bytes a pixel in 4:2:0: 0.56 MB for 500x375), so the floor leaves a batch of small
/// photos room for some progressive ones. An image that finds the arena full is decoded on
/// the host.
const ARENA_BYTES_PER_IMAGE: (usize, usize) = (256 << 10, 16 << 20);
/// The most one slot's arena takes, whatever the batch size and files.
const ARENA_BYTES_PER_SLOT: usize = 1 << 30;

/// Arena bytes per image for `inputs`: one and a half times the median size of up to 64 of
/// the files or tar members (spread over the list), within [`ARENA_BYTES_PER_IMAGE`]; pinning
/// page-locked memory costs start-up time (0.5 s a GiB), so photos of 50 KB get the floor and
/// 12-megapixel ones room for their scans. Parquet rows, whose sizes are known only once read,
/// count as nothing.
fn arena_bytes_per_image(inputs: &InputList) -> usize {
    let step = inputs.len().div_ceil(64).max(1);
    let mut sizes: Vec<u64> = (0..inputs.len())
        .step_by(step)
        .filter_map(|i| match inputs.sample(i) {
            Some(sample) => match sample.image {
                ImageAt::Tar { size, .. } => Some(size),
                _ => None,
            },
            None => std::fs::metadata(&inputs.paths[i]).ok().map(|m| m.len()),
        })
        .collect();
    sizes.sort_unstable();
    let median = sizes.get(sizes.len() / 2).copied().unwrap_or(0) as usize;
    let (floor, ceiling) = ARENA_BYTES_PER_IMAGE;
    median
        .saturating_mul(3)
        .div_ceil(2)
        .clamp(floor, ceiling)
        .next_multiple_of(64 << 10)
}

/// Where JPEGs are decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DecodeOn {
    Cpu,
    Gpu,
    /// The host entropy-decodes, the GPU does the rest.
    GpuIdct,
}

/// How images are read and batched: what `ImageArgs` of the CLI and the Python `Model`'s
/// keywords say.
#[derive(Clone, Copy, Debug, Default)]
pub struct ImageOptions {
    /// Images per forward pass. Default: 64 on a GPU, 8 on the CPU.
    pub batch_size: Option<usize>,
    /// Decoding threads. Default: the available cores on a GPU, half of them on the CPU (whose
    /// forward pass needs them too).
    pub workers: Option<usize>,
    /// Stop at the first image that cannot be read (in input order).
    pub fail_fast: bool,
    /// Pixel, file and decoded-size limits (decompression bombs).
    pub limits: ImageLimits,
    /// No progress bar (it is shown only when stderr is a terminal).
    pub quiet: bool,
    /// Where JPEGs are decoded: `Gpu` reads the files on the host and decodes them on the GPU
    /// (Huffman decoding of baseline files, IDCT, upsampling, colour, orientation, resize,
    /// crop) with the host's exact pixels; `GpuIdct` leaves the Huffman decoding to the host
    /// and the rest to the GPU; `Cpu` decodes everything on the host. Default: `Gpu` on a CUDA
    /// device (files the GPU path cannot decode exactly go through the host decoder), `Cpu`
    /// elsewhere.
    pub decode: Option<DecodeOn>,
}

/// Decoding threads by default: every core on a GPU; half of them on the CPU, whose forward
/// pass needs them too (decoding on all of them beside it cost 5% on the demo digits with 2
/// cores, NOTES, 2026-11-24; half of them costs nothing).
pub fn default_workers(on_gpu: bool) -> usize {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    if on_gpu {
        cores
    } else {
        (cores / 2).max(1)
    }
}

/// The preprocessing of the checkpoint in `dir`: its preprocessor_config.json (or a timm
/// config.json's pretrained_cfg), else the defaults at the model's input size. The runner is set to run at the size the preprocessing
/// makes (DINOv2's tables are for 518 pixels and its processor crops 224), unless
/// `--image-size` chose one, which must then agree.
pub fn preprocessing(
    runner: &mut Runner,
    dir: &Path,
    size_was_asked: bool,
) -> Result<PreprocessConfig> {
    let channels = runner.model.config.num_channels;
    let pre = match PreprocessConfig::of_checkpoint(dir, channels)? {
        Some(pre) => pre,
        None => {
            let (h, w) = runner.model.input_size();
            PreprocessConfig::hf_default_sized(h, w, channels)
        }
    };
    if pre.output_size() != runner.model.input_size() {
        if size_was_asked {
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
    Ok(pre)
}

/// How a run's images are loaded and batched.
pub struct BatchSetup {
    pub batch_size: usize,
    pub workers: usize,
    pub(crate) pipeline: PipelineConfig,
    pub(crate) pre: PreprocessConfig,
    pub(crate) limits: ImageLimits,
    /// Where the JPEGs left to the device are entropy-decoded.
    pub(crate) entropy: EntropyOn,
    /// How a staged image becomes the model's input (bytes through a table, or f32 values).
    pub(crate) expansion: PixelExpansion,
    pub(crate) quiet: bool,
}

impl BatchSetup {
    /// The plan for `images` images on `runner`'s backend; an error for `--decode gpu` where
    /// there is no GPU.
    pub fn new(
        runner: &Runner,
        pre: PreprocessConfig,
        args: &ImageOptions,
        images: usize,
    ) -> Result<Self> {
        let on_gpu = runner.backend().describe().starts_with("cuda");
        // No batch larger than the run: staging and activations are sized by it.
        let batch_size = args
            .batch_size
            .unwrap_or(if on_gpu { 64 } else { 8 })
            .min(images.max(1));
        let workers = args.workers.unwrap_or_else(|| default_workers(on_gpu));
        let limits = args.limits;
        let image_bytes = ImageLoader::new(&pre, limits).output_bytes();
        if matches!(args.decode, Some(DecodeOn::Gpu | DecodeOn::GpuIdct)) && !on_gpu {
            bail!(
                "--decode gpu needs a CUDA device; this run is on {} (use --decode cpu, or \
                 --device cuda)",
                runner.backend().describe()
            );
        }
        let entropy = if args.decode == Some(DecodeOn::GpuIdct) {
            EntropyOn::Host
        } else {
            EntropyOn::Device
        };
        let mut device_decode = on_gpu && args.decode != Some(DecodeOn::Cpu);
        if device_decode {
            if let Some(why) = pre.device_decode_refusal() {
                eprintln!("vitrt: decoding on the host: {why}");
                device_decode = false;
            }
        }
        Ok(BatchSetup {
            batch_size,
            workers,
            pipeline: PipelineConfig {
                batch_size,
                depth: STAGING_DEPTH,
                workers,
                image_bytes,
                fail_fast: args.fail_fast,
                // Sized from the files in run_batches.
                arena_bytes: usize::from(device_decode),
                release_lag: 0,
            },
            expansion: PixelExpansion::of(&pre),
            pre,
            limits,
            entropy,
            quiet: args.quiet,
        })
    }
}

/// The preprocessing loader as the pipeline calls it. An entry of a folder that could not be
/// listed fails here, in its place, with why; a dataset sample's bytes are read from its
/// shard, then decoded as a file's would be.
pub struct Loader<'a> {
    pub images: ImageLoader,
    inputs: &'a InputList,
    samples: SampleReader<'a>,
    /// Whether the images were read before in this run (a batch decoded again on the host).
    pub(crate) again: bool,
    /// A sample's bytes, kept from image to image.
    bytes: Vec<u8>,
}

impl<'a> Loader<'a> {
    /// A loader of `inputs` (Parquet row groups shared through `groups`).
    pub fn new(images: ImageLoader, inputs: &'a InputList, groups: &'a RowGroupCache) -> Self {
        let max_bytes = images.limits().max_file_bytes;
        Loader {
            images,
            inputs,
            samples: SampleReader::new(&inputs.shards, groups, max_bytes),
            again: false,
            bytes: Vec::new(),
        }
    }

    /// Reads sample `index`'s bytes into `self.bytes`: the time it took, or why it failed
    /// (naming the sample).
    fn read_sample(&mut self, index: usize) -> Option<Result<Duration, String>> {
        let sample = self.inputs.sample(index)?;
        let started = Instant::now();
        Some(
            self.samples
                .read(sample, self.again, &mut self.bytes)
                .map(|()| started.elapsed())
                .map_err(|why| format!("{}: {why}", self.inputs.name(index))),
        )
    }
}

impl ImageLoad for Loader<'_> {
    fn load(&mut self, index: usize, path: &Path, out: &mut [u8]) -> Result<StageTimes, String> {
        if let Some(why) = self.inputs.unlisted.get(path) {
            return Err(format!("{}: {why}", path.display()));
        }
        if let Some(read) = self.read_sample(index) {
            let read = read?;
            let name = self.inputs.name(index);
            return self
                .images
                .load_bytes_into(&self.bytes, &name, out)
                .map(|times| StageTimes { read, ..times })
                .map_err(|e| format!("{:#}", anyhow::Error::new(e)));
        }
        // The whole chain: a read error's cause ("a socket, not a regular file") is its source.
        self.images
            .load_file_into(path, out)
            .map_err(|e| format!("{:#}", anyhow::Error::new(e)))
    }

    fn load_for_device(
        &mut self,
        index: usize,
        path: &Path,
        out: &mut [u8],
        arena: &dyn ArenaReserve,
    ) -> Result<(StageTimes, Loaded), String> {
        if let Some(why) = self.inputs.unlisted.get(path) {
            return Err(format!("{}: {why}", path.display()));
        }
        if let Some(read) = self.read_sample(index) {
            let read = read?;
            let name = self.inputs.name(index);
            return self
                .images
                .load_bytes_for_device(&self.bytes, &name, out, arena)
                .map(|(times, loaded)| (StageTimes { read, ..times }, loaded))
                .map_err(|e| format!("{:#}", anyhow::Error::new(e)));
        }
        self.images
            .load_file_for_device(path, out, arena)
            .map_err(|e| format!("{:#}", anyhow::Error::new(e)))
    }
}

/// What a command does with the results, in input order.
pub trait BatchResults {
    /// The batch of images `first .. first + count`: `failures` could not be loaded (by input
    /// index, with why); `outputs` are the runner's outputs for all `count` images (rows of
    /// failed images are meaningless), `None` when every image failed. [`Flow::Stop`] ends
    /// the run (the reader closed the output).
    fn batch(
        &mut self,
        first: usize,
        count: usize,
        failures: &[(usize, String)],
        outputs: Option<Vec<HostTensor>>,
    ) -> Result<Flow>;

    /// What the progress bar shows beside the count of images (`--output-dir`: the shards
    /// written of the whole dataset's), asked after each batch.
    fn progress_note(&self) -> Option<String> {
        None
    }
}

/// Host time of the consumer, for `--stats`.
#[derive(Debug, Default)]
pub struct ConsumerTimes {
    /// In submissions (which wait for each batch's copy).
    pub submitting: Duration,
    /// In waits for results and in handing them to the command.
    pub collecting: Duration,
    /// The first executor's preparation (plan, weights), then the first two submissions.
    pub first_submits: Vec<Duration>,
    /// Per batch, in ms from the consumer's start: its submission's start and end, then the
    /// start of the wait for its outputs, the outputs' arrival and the results' hand-over.
    pub batch_marks: Vec<[f64; 5]>,
    /// When the consumer started.
    pub started: Option<Instant>,
    /// Images the device could not decode exactly, whose batches were decoded again on the
    /// host.
    pub redone_on_host: usize,
}

impl ConsumerTimes {
    fn ms(&mut self, at: Instant) -> f64 {
        let started = *self.started.get_or_insert(at);
        at.saturating_duration_since(started).as_secs_f64() * 1e3
    }
}

/// How the pipeline's run ended.
pub struct RunOutcome {
    pub stats: PipelineStats,
    pub times: ConsumerTimes,
    /// The results stopped the run (the reader closed the output).
    pub stopped: bool,
}

/// Runs every image of `inputs.paths` through the pipeline and the model, handing each batch's
/// outputs to `results` in input order. `record_timeline`: record the device's timeline (read
/// it afterwards with `Runner::take_timeline`).
pub fn run_batches(
    runner: &mut Runner,
    inputs: &InputList,
    setup: &BatchSetup,
    results: &mut impl BatchResults,
    record_timeline: bool,
) -> Result<RunOutcome> {
    let slot_bytes = setup.batch_size * setup.pipeline.image_bytes;
    let mut staging = (0..STAGING_DEPTH)
        .map(|_| runner.alloc_staging(slot_bytes))
        .collect::<Result<Vec<_>, _>>()
        .context("allocating the staging buffers")?;
    let mut pipeline_config = setup.pipeline;
    if pipeline_config.arena_bytes > 0 {
        pipeline_config.arena_bytes = arena_bytes_per_slot(setup, inputs);
    }
    let arena_bytes = pipeline_config.arena_bytes;
    let mut arenas = match arena_bytes {
        0 => Vec::new(),
        bytes => (0..STAGING_DEPTH)
            .map(|_| runner.alloc_staging(bytes))
            .collect::<Result<Vec<_>, _>>()
            .context("allocating the coefficient staging for --decode gpu")?,
    };
    crate::startup::mark("preprocessing read, staging buffers allocated");
    runner.record_timeline(record_timeline);
    let groups = RowGroupCache::default();
    let make_loader = || {
        Box::new(Loader::new(
            ImageLoader::new(&setup.pre, setup.limits).with_entropy(setup.entropy),
            inputs,
            &groups,
        )) as Box<dyn ImageLoad + '_>
    };
    let mut host_loader = Loader::new(
        ImageLoader::new(&setup.pre, setup.limits).with_entropy(setup.entropy),
        inputs,
        &groups,
    );
    host_loader.again = true;
    let mut submitter = Submitter {
        runner,
        paths: &inputs.paths,
        host_loader: Box::new(host_loader),
        expansion: &setup.expansion,
        image_bytes: setup.pipeline.image_bytes,
        results,
        in_flight: None,
        to_collect: None,
        stopped: false,
        progress: progress_bar(inputs.paths.len(), setup.quiet),
        times: ConsumerTimes::default(),
        collected_any: false,
    };
    let stats = pipeline::run(
        inputs,
        pipeline_config,
        &mut staging,
        &mut arenas,
        &make_loader,
        &mut submitter,
    );
    submitter.progress.finish_and_clear();
    let stats = stats?;
    // The last batch's results.
    if !submitter.stopped {
        if let Some(last) = submitter.in_flight.take() {
            submitter.collect(last)?;
        }
    }
    crate::startup::note_kernel_loads(submitter.runner.backend().kernel_loads());
    crate::startup::mark("the other batches");
    Ok(RunOutcome {
        stats,
        times: submitter.times,
        stopped: submitter.stopped,
    })
}

/// Fails with the count of images that failed (`verb`: what could not be done to them).
pub fn check_failures(failed: usize, total: usize, fail_fast: bool, verb: &str) -> Result<()> {
    if fail_fast && failed > 0 {
        bail!("stopped at the first image that failed (--fail-fast)");
    }
    if failed > 0 {
        bail!("{failed} of {total} images could not be {verb}");
    }
    Ok(())
}

/// The device decoding of a batch's images that the workers left to it, if any.
pub fn device_batch_of(batch: &Batch<'_>, image_bytes: usize) -> Option<DeviceBatch> {
    let on_device: Vec<_> = batch
        .device
        .iter()
        .map(|(index, image)| (index - batch.first, image))
        .collect();
    (!on_device.is_empty()).then(|| device_batch(&on_device, image_bytes, batch.arena.len()))
}

/// A batch submitted to the model whose results are not yet collected.
struct InFlight {
    /// The batch's number in the run.
    number: usize,
    pending: Option<PendingOutputs>,
    first: usize,
    count: usize,
    failures: Vec<(usize, String)>,
    /// Whether some of its images were decoded on the device (their status words come back
    /// with the outputs).
    decoded_on_device: bool,
}

/// The pipeline's consumer: submits each batch (the copy of its pixels overlaps the forward
/// pass of the batch before it), hands its slot back, then waits for the previous batch's
/// outputs and hands them to the results.
struct Submitter<'a, R: BatchResults> {
    runner: &'a mut Runner,
    /// The run's inputs, and a host loader: a batch with an image the device could not decode
    /// exactly is decoded again on the host.
    paths: &'a [std::path::PathBuf],
    host_loader: Box<dyn ImageLoad + 'a>,
    expansion: &'a PixelExpansion,
    /// Bytes of one preprocessed image.
    image_bytes: usize,
    results: &'a mut R,
    in_flight: Option<InFlight>,
    /// The batch before `in_flight`, whose outputs are collected next.
    to_collect: Option<InFlight>,
    /// The results asked to stop.
    stopped: bool,
    progress: indicatif::ProgressBar,
    times: ConsumerTimes,
    /// Whether a batch's results were collected yet (for the start-up breakdown).
    collected_any: bool,
}

impl<R: BatchResults> pipeline::Consumer for Submitter<'_, R> {
    fn batch(&mut self, batch: Batch<'_>) -> Result<Flow> {
        for (_, why) in &batch.failures {
            eprintln!("vitrt: {why}");
        }
        let first = self.times.first_submits.is_empty();
        if first {
            crate::startup::mark("first batch decoded (pipeline started, images read)");
            // Plan and weights (timed apart from the first pass, for --stats).
            let preparing = Instant::now();
            self.runner.prepare(batch.count, false)?;
            self.times.first_submits.push(preparing.elapsed());
            crate::startup::mark("graph, plan and weights (read, converted, uploaded)");
        }
        let started = Instant::now();
        let submit_start = self.times.ms(started);
        let pending = if batch.failures.len() < batch.count {
            let device = device_batch_of(&batch, self.image_bytes);
            let decode = device.as_ref().map(|d| d.decode(batch.arena));
            Some(self.runner.submit_decoding(
                batch.pixels,
                batch.count,
                self.expansion,
                decode.as_ref(),
            )?)
        } else {
            None
        };
        let took = started.elapsed();
        if first {
            crate::startup::mark("first pass queued (kernels compiled or loaded from the cache)");
        }
        self.times.submitting += took;
        let submit_end = self.times.ms(Instant::now());
        self.times
            .batch_marks
            .push([submit_start, submit_end, f64::NAN, f64::NAN, f64::NAN]);
        if self.times.first_submits.len() < 3 {
            // The first pass (eager: kernels load), then the second (CUDA graph capture).
            self.times.first_submits.push(took);
        }
        self.progress.inc(batch.count as u64);
        // Outputs come one batch behind: the previous batch's are collected in
        // after_release, once this batch's slot is back with the workers.
        self.to_collect = self.in_flight.replace(InFlight {
            number: self.times.batch_marks.len() - 1,
            pending,
            first: batch.first,
            count: batch.count,
            failures: batch.failures,
            decoded_on_device: !batch.device.is_empty(),
        });
        Ok(Flow::Continue)
    }

    fn after_release(&mut self) -> Result<Flow> {
        match self.to_collect.take() {
            Some(previous) => self.collect(previous),
            None => Ok(Flow::Continue),
        }
    }
}

impl<R: BatchResults> Submitter<'_, R> {
    /// Decodes every image of `batch` again on the host and runs the model on them: for a
    /// batch the device marked an image of (data libjpeg would warn about, or a block outside
    /// the exactness guard), whose outputs are then what `--decode cpu` gives. Images the host
    /// refuses join the batch's failures.
    fn redo_on_host(&mut self, batch: &mut InFlight) -> Result<Option<Vec<HostTensor>>> {
        redo_on_host(
            self.runner,
            (self.expansion, self.image_bytes),
            self.host_loader.as_mut(),
            self.paths,
            &mut batch.failures,
            (batch.first, batch.count),
        )
    }

    /// Waits for a batch's outputs and hands them to the results.
    fn collect(&mut self, mut batch: InFlight) -> Result<Flow> {
        let started = Instant::now();
        let mut outputs = match batch.pending.take() {
            Some(pending) if batch.decoded_on_device => {
                let (outputs, status) = self.runner.finish_decoding(pending)?;
                let redo = status.iter().filter(|&&word| word != 0).count();
                if redo > 0 {
                    self.times.redone_on_host += redo;
                    None
                } else {
                    Some(outputs)
                }
            }
            Some(pending) => Some(self.runner.finish(pending)?),
            None => None,
        };
        if outputs.is_none() && batch.decoded_on_device {
            outputs = self.redo_on_host(&mut batch)?;
        }
        let arrived = Instant::now();
        let flow = self
            .results
            .batch(batch.first, batch.count, &batch.failures, outputs);
        if let Some(note) = self.results.progress_note() {
            self.progress.set_message(note);
        }
        let marks = [started, arrived, Instant::now()].map(|t| self.times.ms(t));
        if let Some(m) = self.times.batch_marks.get_mut(batch.number) {
            m[2..].copy_from_slice(&marks);
        }
        if !std::mem::replace(&mut self.collected_any, true) {
            crate::startup::mark("first results back and written (the first pass ran)");
        }
        self.times.collecting += started.elapsed();
        if matches!(flow, Ok(Flow::Stop)) {
            self.stopped = true;
        }
        flow
    }
}

/// Decodes images `first .. first + count` (of `paths`) again with the host loader `host`
/// and runs them (`expansion`: staged bytes to model input; `image_bytes`: one image's): the outputs of a
/// batch the device marked, then what `--decode cpu` gives. Images the host refuses join
/// `failures`; `None` when every image failed.
pub(crate) fn redo_on_host(
    runner: &mut Runner,
    (expansion, image_bytes): (&PixelExpansion, usize),
    host: &mut dyn ImageLoad,
    paths: &[std::path::PathBuf],
    failures: &mut Vec<(usize, String)>,
    (first, count): (usize, usize),
) -> Result<Option<Vec<HostTensor>>> {
    let mut pixels = vec![0u8; count * image_bytes];
    for (i, out) in pixels.chunks_exact_mut(image_bytes).enumerate() {
        let index = first + i;
        if failures.iter().any(|(failed, _)| *failed == index) {
            continue;
        }
        if let Err(why) = host.load(index, &paths[index], out) {
            eprintln!("vitrt: {why}");
            failures.push((index, why));
        }
    }
    failures.sort_by_key(|(index, _)| *index);
    if failures.len() == count {
        return Ok(None);
    }
    let pending = runner.submit_decoding(&pixels, count, expansion, None)?;
    Ok(Some(runner.finish(pending)?))
}

/// Arena bytes of one staging slot for `--decode gpu` over `paths`.
pub(crate) fn arena_bytes_per_slot(setup: &BatchSetup, inputs: &InputList) -> usize {
    (setup.batch_size * arena_bytes_per_image(inputs)).min(ARENA_BYTES_PER_SLOT)
}

/// Images done of total, images/s and the time left, on stderr when it is a terminal.
pub(crate) fn progress_bar(total: usize, quiet: bool) -> indicatif::ProgressBar {
    if quiet || !std::io::stderr().is_terminal() {
        return indicatif::ProgressBar::hidden();
    }
    let bar = indicatif::ProgressBar::new(total as u64);
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{bar:30} {pos}/{len} images  {per_sec}  ETA {eta}  {msg}",
        )
        .expect("a valid template"),
    );
    bar
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipeline::{self, Batch, ImageLoad, PipelineConfig};
    use std::path::PathBuf;
    use vitrt_runtime::HostStaging;

    fn listed(paths: &[PathBuf]) -> InputList {
        InputList {
            paths: paths.to_vec(),
            ..InputList::default()
        }
    }

    #[test]
    fn the_arena_is_sized_from_the_files() {
        let dir = tempfile::tempdir().unwrap();
        let write = |name: &str, bytes: usize| {
            let path = dir.path().join(name);
            std::fs::write(&path, vec![0u8; bytes]).unwrap();
            path
        };
        // Small photos get the floor; 4 MB ones one and a half times their size; huge ones
        // the ceiling.
        let small: Vec<_> = (0..5).map(|i| write(&format!("s{i}"), 40_000)).collect();
        assert_eq!(
            arena_bytes_per_image(&listed(&small)),
            ARENA_BYTES_PER_IMAGE.0
        );
        let large: Vec<_> = (0..5).map(|i| write(&format!("l{i}"), 4 << 20)).collect();
        assert_eq!(arena_bytes_per_image(&listed(&large)), 6 << 20);
        let huge = vec![write("h", 100 << 20)];
        assert_eq!(
            arena_bytes_per_image(&listed(&huge)),
            ARENA_BYTES_PER_IMAGE.1
        );
        // Files that cannot be read count as nothing.
        assert_eq!(
            arena_bytes_per_image(&listed(&[dir.path().join("missing")])),
            ARENA_BYTES_PER_IMAGE.0
        );
    }

    /// The pipeline's pixels, from many workers in small batches, expanded through the table,
    /// are bit for bit what the one-thread host path (`preprocess_file`) gives, for every
    /// fixture image and filter.
    #[test]
    fn pipeline_pixels_equal_the_one_thread_path_bitwise() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/images");
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
        // The same images as files and as the samples of a webdataset tar, whose bytes the
        // workers read from the shard.
        let files = listed(&paths);
        let dir = tempfile::tempdir().unwrap();
        let tar_path = dir.path().join("images.tar");
        let mut tar = tar::Builder::new(std::fs::File::create(&tar_path).unwrap());
        for (i, path) in paths.iter().enumerate() {
            let extension = path.extension().unwrap().to_str().unwrap();
            tar.append_path_with_name(path, format!("{i:04}.{extension}"))
                .unwrap();
        }
        tar.finish().unwrap();
        drop(tar);
        let shard = pipeline::collect_inputs(&[tar_path], None).unwrap();
        assert_eq!(shard.len(), paths.len());
        // Two filters, and a shortest-edge resize whose center crop is wider than the resized
        // image on the square fixture (zero padding in the staging slot).
        for json in [
            r#"{"size": {"height": 40, "width": 56}, "resample": 2}"#,
            r#"{"size": {"height": 40, "width": 56}, "resample": 3}"#,
            r#"{"size": {"shortest_edge": 44}, "do_center_crop": true,
                "crop_size": {"height": 40, "width": 56}, "resample": 3}"#,
        ] {
            let pre = PreprocessConfig::from_json_str(json).unwrap();
            let table = vitrt_model::preprocess::normalization_table(&pre);
            let limits = ImageLimits::default();
            let image_bytes = ImageLoader::new(&pre, limits).output_bytes();
            // Decoded on the host; then with the JPEGs left to device decoding, done here by
            // the image kernels' CPU twins on the batch the consumer assembles.
            for (inputs, arena_bytes) in [
                (&files, 0),
                (&files, 4 << 20),
                (&shard, 0),
                (&shard, 4 << 20),
            ] {
                let config = PipelineConfig {
                    batch_size: 4,
                    depth: 2,
                    workers: 5,
                    image_bytes,
                    fail_fast: false,
                    arena_bytes,
                    release_lag: 0,
                };
                let mut staging: Vec<HostStaging> =
                    (0..2).map(|_| HostStaging::heap(4 * image_bytes)).collect();
                let mut arenas: Vec<HostStaging> =
                    (0..2).map(|_| HostStaging::heap(arena_bytes)).collect();
                let groups = RowGroupCache::default();
                let make = || {
                    Box::new(Loader::new(ImageLoader::new(&pre, limits), inputs, &groups))
                        as Box<dyn ImageLoad + '_>
                };
                let mut checked = 0;
                let mut on_device = 0;
                let stats = pipeline::run(
                    inputs,
                    config,
                    &mut staging,
                    &mut arenas,
                    &make,
                    &mut |batch: Batch<'_>| {
                        assert!(batch.failures.is_empty(), "{:?}", batch.failures);
                        let mut pixels = batch.pixels.to_vec();
                        if let Some(device) = device_batch_of(&batch, image_bytes) {
                            let status =
                                device.decode(batch.arena).run_on_host(&mut pixels).unwrap();
                            assert!(status.iter().all(|&s| s == 0), "{status:?}");
                            on_device += batch.device.len();
                        }
                        for k in 0..batch.count {
                            let bytes = &pixels[k * image_bytes..][..image_bytes];
                            let mut ours = vec![0f32; image_bytes];
                            vitrt_model::preprocess::normalize_into(bytes, 3, &table, &mut ours);
                            let path = &paths[batch.first + k];
                            let want =
                                vitrt_model::preprocess::preprocess_file(path, &pre).unwrap();
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
                    },
                )
                .unwrap();
                assert_eq!(checked, paths.len());
                let jpegs = paths
                    .iter()
                    .filter(|p| p.extension().is_some_and(|e| e == "jpg"))
                    .count();
                assert_eq!(
                    on_device,
                    if arena_bytes > 0 { jpegs } else { 0 },
                    "{json}: {:?}",
                    stats.host_decoded
                );
            }
        }
    }
}
