//! One process, several GPUs (`--device cuda:all`, `--device cuda:0,2,3`): a runner per device,
//! each on a thread of its own (a runner's CUDA graphs stay with the thread that captured
//! them), fed by one image pipeline; each batch goes to whichever device is free, and the
//! outputs reach the command in input order.
//!
//! ```text
//! workers ──► the staging ring (page-locked slots, portable across the devices' contexts)
//!   ──► the dispatcher (the calling thread): the first free device's thread gets the batch
//!   ──► that thread: submit (the copy, the device decoding, the forward pass), acknowledge
//!       (the slot goes back to the workers), collect its previous batch's outputs
//!   ──► the dispatcher puts outputs back in input order ──► BatchResults
//! ```
//!
//! A device that fails (a driver error, lost memory) stops the run: what came before its
//! first unfinished batch has been handed to the command, and the error names the device.
//!
//! SigLIP 2 NaFlex takes the same path ([`DeviceModel::Naflex`]): its workers stage each
//! image's patch rows instead of pixels (`crate::naflex`), and each device's thread runs a
//! `NaflexRunner` on the batches it takes.

use crate::batched::{
    progress_bar, BatchResults, BatchSetup, ConsumerTimes, ImageOptions, Loader, STAGING_DEPTH,
};
use crate::naflex::{NaflexLoader, StagedLayout};
use crate::pipeline::datasets::RowGroupCache;
use crate::pipeline::{self, Batch, Consumer, Flow, ImageLoad, InputList, PipelineStats};
use crate::ModelOptions;
use anyhow::{anyhow, bail, Context, Result};
use std::collections::{BTreeMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::time::{Duration, Instant};
use vitrt_model::naflex::{NaflexInputs, NaflexRunner};
use vitrt_model::preprocess::device_batch::device_batch;
use vitrt_model::preprocess::jpeg_coefficients::EntropyOn;
use vitrt_model::preprocess::naflex::NaflexProcessor;
use vitrt_model::preprocess::{DeviceImage, ImageLimits, ImageLoader, PreprocessConfig};
use vitrt_model::Runner;
use vitrt_runtime::backend::Device;
use vitrt_runtime::{HostStaging, HostTensor, PendingOutputs};

/// How many CUDA devices this process sees, counted once. Counting starts the driver (0.9 s
/// on a host of four H200s, benchmarks/NOTES.md 2026-11-27 "Every GPU of the host in one
/// process"), which [`count_cuda_devices_ahead`] overlaps with the listing of the inputs.
static CUDA_DEVICES: std::sync::OnceLock<Result<usize, String>> = std::sync::OnceLock::new();

fn cuda_devices() -> Result<usize, String> {
    CUDA_DEVICES
        .get_or_init(|| vitrt_runtime::backend::cuda_device_count().map_err(|e| e.to_string()))
        .clone()
}

/// Starts counting the CUDA devices on a thread of its own when `asked` is `cuda:all`, so
/// that the driver starts while the command lists its inputs; [`several_devices`] then takes
/// the count (waiting for it if it is not done).
pub fn count_cuda_devices_ahead(asked: Option<&str>) {
    if asked.is_some_and(|a| a.trim().eq_ignore_ascii_case("cuda:all")) {
        std::thread::spawn(|| {
            let _ = cuda_devices();
        });
    }
}

/// The devices `asked` names when it names more than one way: `cuda:all` (every CUDA device
/// this process sees) or a list, `cuda:0,2,3`. `None` for anything else (one device, or
/// none), which the single-device path takes as it is.
pub fn several_devices(asked: Option<&str>) -> Result<Option<Vec<String>>> {
    let Some(asked) = asked.map(str::trim) else {
        return Ok(None);
    };
    if asked.eq_ignore_ascii_case("cuda:all") {
        let count = cuda_devices().map_err(|e| anyhow!("--device cuda:all: {e}"))?;
        if count == 0 {
            bail!("--device cuda:all: this machine has no CUDA device");
        }
        return Ok(Some((0..count).map(|i| format!("cuda:{i}")).collect()));
    }
    let Some(list) = asked.strip_prefix("cuda:").filter(|l| l.contains(',')) else {
        return Ok(None);
    };
    let mut devices = Vec::new();
    for ordinal in list.split(',') {
        let name = format!("cuda:{}", ordinal.trim());
        Device::parse(&name).map_err(|e| anyhow!("--device {asked}: {e}"))?;
        if devices.contains(&name) {
            bail!("--device {asked}: {name} is named twice");
        }
        devices.push(name);
    }
    Ok(Some(devices))
}

/// What [`run_on_devices`] runs: the model, opened on each device, and how images are read.
pub struct DeviceRun<'a> {
    pub model: &'a ModelOptions,
    /// Device names as `--device` takes them (`cuda:1`; `cpu` stands a device in for tests).
    pub devices: &'a [String],
    pub images: &'a ImageOptions,
    /// What each device runs.
    pub runs: DeviceModel<'a>,
    /// Called on a device's thread before each of its submissions with the device's index
    /// and the batches it has taken so far: an error fails the device as a driver error
    /// would (tests stand a failing GPU in with it).
    pub before_submit: Option<&'a (dyn Fn(usize, usize) -> Result<()> + Sync)>,
}

/// What each device of a run opens and runs its batches on.
#[derive(Clone, Copy)]
pub enum DeviceModel<'a> {
    /// A model of one input size (every family but NaFlex): the checkpoint's preprocessing
    /// (`size_was_asked`: `--image-size` was given, which the preprocessing must then agree
    /// with), `prepare` setting each device's runner up once it is open (its outputs,
    /// zero-shot labels), on the device's thread.
    Images {
        size_was_asked: bool,
        prepare: &'a (dyn Fn(&mut Runner) -> Result<()> + Sync),
    },
    /// SigLIP 2 NaFlex: each device's runner set up by `prepare` once open, each batch giving
    /// `outputs`.
    Naflex {
        prepare: &'a (dyn Fn(&mut NaflexRunner) -> Result<()> + Sync),
        outputs: &'a [&'a str],
    },
}

/// One device's share of a run.
#[derive(Debug, Default)]
pub struct DeviceFigures {
    pub device: String,
    pub batches: usize,
    pub images: usize,
    /// In submissions (which wait for each batch's copy), and in waiting for outputs.
    pub submitting: Duration,
    pub collecting: Duration,
    /// Images the device could not decode exactly, whose batches were decoded again on the
    /// host.
    pub redone_on_host: usize,
}

/// How a run over several devices ended.
pub struct DevicesOutcome {
    pub stats: PipelineStats,
    pub devices: Vec<DeviceFigures>,
    /// The dispatcher's own time: waiting for a free device, and handing outputs over.
    pub times: ConsumerTimes,
    /// The results stopped the run (the reader closed the output).
    pub stopped: bool,
    pub batch_size: usize,
    pub workers: usize,
}

/// A batch handed to a device: the slot's bytes stay valid until the device acknowledges.
struct Job {
    first: usize,
    count: usize,
    failures: Vec<(usize, String)>,
    device: Vec<(usize, DeviceImage)>,
    pixels: SlotView,
    arena: SlotView,
}

/// A slot's bytes lent to a device's thread for one submission: the dispatcher does not
/// release the slot to the workers before the device has acknowledged the submission, after
/// which the device no longer reads them.
#[derive(Clone, Copy)]
struct SlotView {
    ptr: *const u8,
    len: usize,
}

// SAFETY: see the type's note: the bytes are read by one thread at a time, while the slot is
// held by the dispatcher.
unsafe impl Send for SlotView {}

impl SlotView {
    fn of(bytes: &[u8]) -> SlotView {
        SlotView {
            ptr: bytes.as_ptr(),
            len: bytes.len(),
        }
    }

    /// SAFETY: only between the job's dispatch and its acknowledgement.
    unsafe fn bytes<'a>(self) -> &'a [u8] {
        if self.len == 0 {
            return &[];
        }
        std::slice::from_raw_parts(self.ptr, self.len)
    }
}

/// A batch's outputs, collected by a device.
struct Collected {
    first: usize,
    count: usize,
    failures: Vec<(usize, String)>,
    outputs: Option<Vec<HostTensor>>,
}

/// What devices tell the dispatcher.
enum Event {
    /// A device is open; the first also lends the ring its staging.
    Opened(Option<Box<RingParts>>),
    /// Device `k` may take a batch.
    Free(usize),
    Done(Collected),
    /// Device `k` failed; it takes nothing more.
    Failed(usize, String),
    /// Device `k` ended (its jobs channel closed), with its figures.
    Ended(usize, DeviceFigures),
}

/// What the ring needs from the first device opened: its staging, and how images are loaded.
struct RingParts {
    staging: Vec<HostStaging>,
    arenas: Vec<HostStaging>,
    config: pipeline::PipelineConfig,
    loading: Loading,
    quiet: bool,
}

/// How the workers load images.
enum Loading {
    /// Decoded and resized to the model's size: the preprocessing, its limits, who reads JPEG
    /// scans.
    Images {
        pre: PreprocessConfig,
        limits: ImageLimits,
        entropy: EntropyOn,
    },
    /// SigLIP 2 NaFlex: each image to its own patch grid, staged as patch rows.
    Naflex {
        processor: NaflexProcessor,
        limits: ImageLimits,
    },
}

/// Runs every image of `inputs` on `run.devices` (at least two), handing each batch's
/// outputs to `results` in input order.
pub fn run_on_devices(
    run: &DeviceRun<'_>,
    inputs: &InputList,
    results: &mut impl BatchResults,
) -> Result<DevicesOutcome> {
    anyhow::ensure!(!run.devices.is_empty(), "no device to run on");
    let (events_tx, events) = channel::<Event>();
    let mut jobs = Vec::new();
    let mut acks = Vec::new();
    std::thread::scope(|scope| {
        for (k, name) in run.devices.iter().enumerate() {
            let (job_tx, job_rx) = channel::<Job>();
            let (ack_tx, ack_rx) = channel::<Result<(), String>>();
            jobs.push(Some(job_tx));
            acks.push(ack_rx);
            let events_tx = events_tx.clone();
            std::thread::Builder::new()
                .name(format!("vitrt-{name}"))
                .spawn_scoped(scope, move || {
                    let device = DeviceThread {
                        k,
                        name,
                        run,
                        inputs,
                        events: events_tx.clone(),
                    };
                    if let Err(e) = device.serve(job_rx, ack_tx) {
                        let _ = events_tx.send(Event::Failed(k, format!("{name}: {e:#}")));
                    }
                })
                .context("starting a device's thread")?;
        }
        drop(events_tx);
        let outcome = dispatch(run, inputs, results, &events, &mut jobs, &acks);
        // Whatever happened, the devices hear that no job comes, finish, and are waited for
        // (the scope's end joins them).
        jobs.clear();
        outcome
    })
}

/// The calling thread's part: waits for the devices to open, runs the pipeline with itself
/// as the consumer, then collects the last outputs.
fn dispatch(
    run: &DeviceRun<'_>,
    inputs: &InputList,
    results: &mut impl BatchResults,
    events: &Receiver<Event>,
    jobs: &mut [Option<Sender<Job>>],
    acks: &[Receiver<Result<(), String>>],
) -> Result<DevicesOutcome> {
    let devices = run.devices.len();
    let mut dispatcher = Dispatcher {
        events,
        jobs,
        acks,
        idle: VecDeque::new(),
        unacked: VecDeque::new(),
        lag: devices,
        arrived: BTreeMap::new(),
        next_first: 0,
        results,
        failure: None,
        stopped: false,
        opened: 0,
        ring: None,
        ended: (0..devices).map(|_| None).collect(),
        progress: indicatif::ProgressBar::hidden(),
        times: ConsumerTimes::default(),
    };
    // Every device opens (in parallel: reading the weights, compiling the kernels).
    while dispatcher.opened < devices {
        if !dispatcher.wait_event()? {
            bail!("the devices' threads ended before opening");
        }
        if let Some(failure) = dispatcher.failure.take() {
            return Err(failure.context("opening the model on every device"));
        }
    }
    let mut ring = *dispatcher
        .ring
        .take()
        .ok_or_else(|| anyhow!("no device lent the pipeline its staging"))?;
    dispatcher.progress = progress_bar(inputs.paths.len(), ring.quiet);
    crate::startup::mark("every device open, staging allocated");
    let groups = RowGroupCache::default();
    let loading = &ring.loading;
    let loader = || -> Box<dyn ImageLoad + '_> {
        match loading {
            Loading::Images {
                pre,
                limits,
                entropy,
            } => Box::new(Loader::new(
                ImageLoader::new(pre, *limits).with_entropy(*entropy),
                inputs,
                &groups,
            )),
            Loading::Naflex { processor, limits } => {
                Box::new(NaflexLoader::new(processor, *limits, inputs, &groups))
            }
        }
    };
    let stats = pipeline::run(
        inputs,
        ring.config,
        &mut ring.staging,
        &mut ring.arenas,
        &loader,
        &mut dispatcher,
    );
    dispatcher.progress.finish_and_clear();
    // Every slot copied before the staging can go, whatever ended the run.
    let acknowledged = dispatcher.settle_acks();
    // No more jobs: each device collects its last batch and ends.
    for job in dispatcher.jobs.iter_mut() {
        *job = None;
    }
    while dispatcher.ended.iter().any(Option::is_none) {
        if !dispatcher.wait_event()? {
            break;
        }
    }
    let stats = stats?;
    acknowledged?;
    if let Some(failure) = dispatcher.failure.take() {
        return Err(failure);
    }
    if !dispatcher.stopped && dispatcher.next_first < stats.images {
        bail!(
            "outputs of images {} and later never came back from the devices",
            dispatcher.next_first
        );
    }
    Ok(DevicesOutcome {
        stats,
        devices: dispatcher
            .ended
            .into_iter()
            .enumerate()
            .map(|(k, figures)| {
                figures.unwrap_or_else(|| DeviceFigures {
                    device: run.devices[k].clone(),
                    ..DeviceFigures::default()
                })
            })
            .collect(),
        times: dispatcher.times,
        stopped: dispatcher.stopped,
        batch_size: ring.config.batch_size,
        workers: ring.config.workers,
    })
}

/// The pipeline's consumer over several devices.
struct Dispatcher<'a, R: BatchResults> {
    events: &'a Receiver<Event>,
    jobs: &'a mut [Option<Sender<Job>>],
    acks: &'a [Receiver<Result<(), String>>],
    /// Devices free to take a batch, in the order they became so.
    idle: VecDeque<usize>,
    /// The device of each job not yet acknowledged (its slot not yet copied), oldest first,
    /// and how many may be (the ring's release lag).
    unacked: VecDeque<usize>,
    lag: usize,
    /// Outputs back before those of earlier images, by their first image.
    arrived: BTreeMap<usize, Collected>,
    /// The first image whose outputs the command has not had yet.
    next_first: usize,
    results: &'a mut R,
    /// The first device failure: the run ends with it.
    failure: Option<anyhow::Error>,
    stopped: bool,
    /// Devices open, and the staging the first lent.
    opened: usize,
    ring: Option<Box<RingParts>>,
    /// Per device, its figures once it has ended.
    ended: Vec<Option<DeviceFigures>>,
    progress: indicatif::ProgressBar,
    times: ConsumerTimes,
}

impl<R: BatchResults> Dispatcher<'_, R> {
    /// Waits for the next event and takes it in; `false` once every device has ended.
    fn wait_event(&mut self) -> Result<bool> {
        match self.events.recv() {
            Ok(event) => self.absorb(event).map(|()| true),
            Err(_) => Ok(false),
        }
    }

    /// Takes every event already there, handing outputs over in order.
    fn take_arrived(&mut self) -> Result<()> {
        while let Ok(event) = self.events.try_recv() {
            self.absorb(event)?;
        }
        Ok(())
    }

    /// Takes in what a device said: outputs go to the command in order; a failure is kept.
    fn absorb(&mut self, event: Event) -> Result<()> {
        match event {
            Event::Opened(parts) => {
                self.opened += 1;
                if self.ring.is_none() {
                    self.ring = parts;
                }
            }
            Event::Free(k) => self.idle.push_back(k),
            Event::Done(collected) => {
                self.arrived.insert(collected.first, collected);
                self.deliver()?;
            }
            Event::Failed(k, why) => {
                self.jobs[k] = None;
                if self.failure.is_none() {
                    self.failure = Some(anyhow!("{why}"));
                }
            }
            Event::Ended(k, figures) => self.ended[k] = Some(figures),
        }
        Ok(())
    }

    /// Hands the command every batch whose turn has come.
    fn deliver(&mut self) -> Result<()> {
        while let Some(collected) = self.arrived.remove(&self.next_first) {
            self.next_first += collected.count;
            if self.stopped {
                continue;
            }
            let started = Instant::now();
            let flow = self.results.batch(
                collected.first,
                collected.count,
                &collected.failures,
                collected.outputs,
            )?;
            self.times.collecting += started.elapsed();
            self.progress.inc(collected.count as u64);
            if let Some(note) = self.results.progress_note() {
                self.progress.set_message(note);
            }
            if flow == Flow::Stop {
                self.stopped = true;
            }
        }
        Ok(())
    }

    /// Waits for a free device, handing over outputs meanwhile; an error once a device failed.
    fn free_device(&mut self) -> Result<usize> {
        loop {
            if let Some(failure) = self.failure.take() {
                return Err(failure);
            }
            if let Some(k) = self.idle.pop_front() {
                if self.jobs[k].is_some() {
                    return Ok(k);
                }
                continue;
            }
            match self.events.recv() {
                Ok(event) => self.absorb(event)?,
                Err(_) => bail!("every device has ended"),
            }
        }
    }
}

impl<R: BatchResults> Dispatcher<'_, R> {
    /// Takes the devices' acknowledgements of their copies, oldest first: those already
    /// there, then, waiting, until at most `keep` jobs are unacknowledged.
    fn take_acks(&mut self, keep: usize) -> Result<()> {
        while let Some(&k) = self.unacked.front() {
            let ack = if self.unacked.len() > keep {
                self.acks[k].recv().map_err(|_| ())
            } else {
                match self.acks[k].try_recv() {
                    Ok(ack) => Ok(ack),
                    Err(std::sync::mpsc::TryRecvError::Empty) => break,
                    Err(std::sync::mpsc::TryRecvError::Disconnected) => Err(()),
                }
            };
            self.unacked.pop_front();
            match ack {
                Ok(Ok(())) => {}
                Ok(Err(why)) => {
                    self.jobs[k] = None;
                    return Err(anyhow!("{why}"));
                }
                Err(()) => {
                    self.jobs[k] = None;
                    // The device failed before acknowledging: its event says why.
                    self.take_arrived()?;
                    return Err(self
                        .failure
                        .take()
                        .unwrap_or_else(|| anyhow!("a device ended unexpectedly")));
                }
            }
        }
        Ok(())
    }

    /// Waits for every job's acknowledgement, whatever each says (a device that failed reads
    /// nothing more): after this no device reads the staging. The first error is returned.
    fn settle_acks(&mut self) -> Result<()> {
        let mut first = Ok(());
        while !self.unacked.is_empty() {
            // Each call takes at least the oldest acknowledgement, so this ends.
            if let Err(e) = self.take_acks(0) {
                first = first.and(Err(e));
            }
        }
        first
    }
}

impl<R: BatchResults> Consumer for Dispatcher<'_, R> {
    fn batch(&mut self, batch: Batch<'_>) -> Result<Flow> {
        for (_, why) in &batch.failures {
            eprintln!("vitrt: {why}");
        }
        self.take_arrived()?;
        if self.stopped {
            return Ok(Flow::Stop);
        }
        if batch.failures.len() == batch.count {
            // Nothing for a device: straight to the command, in its turn.
            self.absorb(Event::Done(Collected {
                first: batch.first,
                count: batch.count,
                failures: batch.failures,
                outputs: None,
            }))?;
            return Ok(Flow::Continue);
        }
        let waiting = Instant::now();
        let k = self.free_device()?;
        self.times.submitting += waiting.elapsed();
        let job = Job {
            first: batch.first,
            count: batch.count,
            failures: batch.failures,
            device: batch.device,
            pixels: SlotView::of(batch.pixels),
            arena: SlotView::of(batch.arena),
        };
        let Some(sender) = self.jobs[k].as_ref() else {
            unreachable!("free_device returns open devices")
        };
        if sender.send(job).is_err() {
            return Err(self
                .failure
                .take()
                .unwrap_or_else(|| anyhow!("{} ended unexpectedly", k)));
        }
        // The ring gives the slot back to the workers `lag` batches later; by then the device
        // has copied it (it acknowledges before it takes another job).
        self.unacked.push_back(k);
        self.take_acks(self.lag)?;
        Ok(Flow::Continue)
    }

    fn after_release(&mut self) -> Result<Flow> {
        self.take_arrived()?;
        if let Some(failure) = self.failure.take() {
            return Err(failure);
        }
        Ok(if self.stopped {
            Flow::Stop
        } else {
            Flow::Continue
        })
    }
}

/// One device's thread: its runner, opened here and never moved.
struct DeviceThread<'a> {
    k: usize,
    name: &'a str,
    run: &'a DeviceRun<'a>,
    inputs: &'a InputList,
    events: Sender<Event>,
}

/// A batch submitted on a device whose outputs are not yet collected.
struct Submitted<P> {
    first: usize,
    count: usize,
    failures: Vec<(usize, String)>,
    pending: P,
}

/// What a device's thread runs its jobs on.
trait DeviceBatches {
    /// What a submitted batch leaves to collect.
    type Pending;
    /// Whether a batch's outputs are collected once the next batch is submitted (the device
    /// computes one while the host queues the next) rather than at once.
    const ONE_BEHIND: bool;
    /// Queues a job's batch, its slot's bytes read before this returns; None when no image of
    /// it loaded (nothing runs). `first`: the device's first batch.
    fn submit(&mut self, job: &Job, first: bool) -> Result<Option<Self::Pending>>;
    /// The outputs of a submitted batch.
    fn collect(
        &mut self,
        batch: Submitted<Self::Pending>,
        figures: &mut DeviceFigures,
    ) -> Result<Collected>;
}

impl DeviceThread<'_> {
    /// Opens the model on the device, then takes jobs until the channel closes.
    fn serve(self, jobs: Receiver<Job>, ack: Sender<Result<(), String>>) -> Result<()> {
        let options = ModelOptions {
            device: Some(self.name.to_string()),
            announce_device: false,
            ..self.run.model.clone()
        };
        // A batch the device marked is decoded again on the host, reading its samples again.
        let groups = RowGroupCache::default();
        match self.run.runs {
            DeviceModel::Images {
                size_was_asked,
                prepare,
            } => {
                let opened = options.open()?;
                let mut runner = opened.runner;
                let pre = crate::batched::preprocessing(&mut runner, &opened.dir, size_was_asked)?;
                prepare(&mut runner)?;
                let mut setup = BatchSetup::new(&runner, pre, self.run.images, self.inputs.len())?;
                let parts = if self.k == 0 {
                    Some(Box::new(self.ring_parts(&mut runner, &mut setup)?))
                } else {
                    None
                };
                let mut host = Loader::new(
                    ImageLoader::new(&setup.pre, setup.limits),
                    self.inputs,
                    &groups,
                );
                host.again = true;
                let _ = self.events.send(Event::Opened(parts));
                let mut device = ImagesOnDevice {
                    runner,
                    setup,
                    host,
                    inputs: self.inputs,
                };
                self.take_jobs(&mut device, jobs, ack)
            }
            DeviceModel::Naflex { prepare, outputs } => {
                let Some((mut runner, dir)) = options.open_naflex()? else {
                    bail!("{} is not a SigLIP 2 NaFlex checkpoint", options.model);
                };
                let processor = crate::naflex::processor(&dir)?;
                prepare(&mut runner)?;
                let on_gpu = runner.backend().describe().starts_with("cuda");
                let mut config = crate::naflex::pipeline_config(
                    &processor,
                    self.run.images,
                    self.inputs.len(),
                    on_gpu,
                )?;
                let parts = if self.k == 0 {
                    let (depth, release_lag) = self.ring_depth();
                    config.depth = depth;
                    config.release_lag = release_lag;
                    Some(Box::new(RingParts {
                        staging: crate::naflex::staging(
                            depth,
                            config.batch_size * config.image_bytes,
                        )?,
                        arenas: Vec::new(),
                        config,
                        loading: Loading::Naflex {
                            processor: processor.clone(),
                            limits: self.run.images.limits,
                        },
                        quiet: self.run.images.quiet,
                    }))
                } else {
                    None
                };
                let _ = self.events.send(Event::Opened(parts));
                let mut device = NaflexOnDevice {
                    runner,
                    layout: StagedLayout::of(&processor),
                    outputs,
                };
                self.take_jobs(&mut device, jobs, ack)
            }
        }
    }

    /// Takes jobs until the channel closes: each submitted (and acknowledged: its slot may
    /// go back to the workers), its outputs collected and sent to the dispatcher.
    fn take_jobs<D: DeviceBatches>(
        &self,
        device: &mut D,
        jobs: Receiver<Job>,
        ack: Sender<Result<(), String>>,
    ) -> Result<()> {
        let mut figures = DeviceFigures {
            device: self.name.to_string(),
            ..DeviceFigures::default()
        };
        let mut in_flight: Option<Submitted<D::Pending>> = None;
        let _ = self.events.send(Event::Free(self.k));
        for job in jobs {
            if let Some(hook) = self.run.before_submit {
                if let Err(e) = hook(self.k, figures.batches) {
                    let _ = ack.send(Err(format!("{}: {e:#}", self.name)));
                    return Err(e);
                }
            }
            let started = Instant::now();
            let submitted = device.submit(&job, figures.batches == 0);
            figures.submitting += started.elapsed();
            let _ = ack.send(
                submitted
                    .as_ref()
                    .map(|_| ())
                    .map_err(|e| format!("{}: {e:#}", self.name)),
            );
            figures.batches += 1;
            figures.images += job.count;
            let Some(pending) = submitted? else {
                // Every image failed to load (the dispatcher keeps such batches): nothing ran.
                let _ = self.events.send(Event::Done(Collected {
                    first: job.first,
                    count: job.count,
                    failures: job.failures,
                    outputs: None,
                }));
                let _ = self.events.send(Event::Free(self.k));
                continue;
            };
            let batch = Submitted {
                first: job.first,
                count: job.count,
                failures: job.failures,
                pending,
            };
            let to_collect = if D::ONE_BEHIND {
                in_flight.replace(batch)
            } else {
                Some(batch)
            };
            if let Some(batch) = to_collect {
                let started = Instant::now();
                let collected = device.collect(batch, &mut figures)?;
                figures.collecting += started.elapsed();
                let _ = self.events.send(Event::Done(collected));
            }
            let _ = self.events.send(Event::Free(self.k));
        }
        if let Some(last) = in_flight {
            let collected = device.collect(last, &mut figures)?;
            let _ = self.events.send(Event::Done(collected));
        }
        let _ = self.events.send(Event::Ended(self.k, figures));
        Ok(())
    }

    /// The ring's depth and release lag: each device holds a slot from its job's dispatch
    /// until its copy is done, so the ring releases slots that many batches late, and has two
    /// more for the workers to fill.
    fn ring_depth(&self) -> (usize, usize) {
        let devices = self.run.devices.len();
        ((STAGING_DEPTH - 1 + devices).max(devices + 2), devices)
    }

    /// The ring's staging, allocated by this device (page-locked memory any device's context
    /// copies from at full speed), and how its workers load images.
    fn ring_parts(&self, runner: &mut Runner, setup: &mut BatchSetup) -> Result<RingParts> {
        let (depth, release_lag) = self.ring_depth();
        setup.pipeline.depth = depth;
        setup.pipeline.release_lag = release_lag;
        let slot_bytes = setup.batch_size * setup.pipeline.image_bytes;
        let staging = (0..depth)
            .map(|_| runner.alloc_staging(slot_bytes))
            .collect::<Result<Vec<_>, _>>()
            .context("allocating the staging buffers")?;
        if setup.pipeline.arena_bytes > 0 {
            setup.pipeline.arena_bytes = crate::batched::arena_bytes_per_slot(setup, self.inputs);
        }
        let arenas = match setup.pipeline.arena_bytes {
            0 => Vec::new(),
            bytes => (0..depth)
                .map(|_| runner.alloc_staging(bytes))
                .collect::<Result<Vec<_>, _>>()
                .context("allocating the coefficient staging for --decode gpu")?,
        };
        Ok(RingParts {
            staging,
            arenas,
            config: setup.pipeline,
            loading: Loading::Images {
                pre: setup.pre.clone(),
                limits: setup.limits,
                entropy: setup.entropy,
            },
            quiet: setup.quiet,
        })
    }
}

/// A model of one input size on a device: its batches uploaded from the slot (decoded there
/// where the device decodes), computed while the next is queued.
struct ImagesOnDevice<'a> {
    runner: Runner,
    setup: BatchSetup,
    /// Decodes again on the host a batch the device marked.
    host: Loader<'a>,
    inputs: &'a InputList,
}

impl DeviceBatches for ImagesOnDevice<'_> {
    /// The outputs to wait for, and whether the device decoded images of the batch.
    type Pending = (PendingOutputs, bool);
    const ONE_BEHIND: bool = true;

    fn submit(&mut self, job: &Job, first: bool) -> Result<Option<Self::Pending>> {
        if job.failures.len() == job.count {
            return Ok(None);
        }
        if first {
            self.runner.prepare(job.count, false)?;
        }
        // SAFETY: the dispatcher holds the slot until this job is acknowledged, after this.
        let (pixels, arena) = unsafe { (job.pixels.bytes(), job.arena.bytes()) };
        let on_device: Vec<(usize, &DeviceImage)> = job
            .device
            .iter()
            .map(|(index, image)| (index - job.first, image))
            .collect();
        let image_bytes = self.setup.pipeline.image_bytes;
        let device =
            (!on_device.is_empty()).then(|| device_batch(&on_device, image_bytes, arena.len()));
        let decode = device.as_ref().map(|d| d.decode(arena));
        let pending = self.runner.submit_decoding(
            &pixels[..job.count * image_bytes],
            job.count,
            &self.setup.expansion,
            decode.as_ref(),
        )?;
        Ok(Some((pending, !job.device.is_empty())))
    }

    /// Waits for a batch's outputs; a batch the device marked an image of is decoded again on
    /// the host and run again, as the single-device path does.
    fn collect(
        &mut self,
        mut batch: Submitted<Self::Pending>,
        figures: &mut DeviceFigures,
    ) -> Result<Collected> {
        let (pending, decoded_on_device) = batch.pending;
        let outputs = if decoded_on_device {
            let (outputs, status) = self.runner.finish_decoding(pending)?;
            let marked = status.iter().filter(|&&word| word != 0).count();
            if marked == 0 {
                Some(outputs)
            } else {
                figures.redone_on_host += marked;
                crate::batched::redo_on_host(
                    &mut self.runner,
                    (&self.setup.expansion, self.setup.pipeline.image_bytes),
                    &mut self.host,
                    &self.inputs.paths,
                    &mut batch.failures,
                    (batch.first, batch.count),
                )?
            }
        } else {
            Some(self.runner.finish(pending)?)
        };
        Ok(Collected {
            first: batch.first,
            count: batch.count,
            failures: batch.failures,
            outputs,
        })
    }
}

/// SigLIP 2 NaFlex on a device: a batch's patch rows copied out of the slot (with each image's
/// positions and mask made on the host), then run.
struct NaflexOnDevice<'a> {
    runner: NaflexRunner,
    layout: StagedLayout,
    outputs: &'a [&'a str],
}

impl DeviceBatches for NaflexOnDevice<'_> {
    /// The batch's inputs, and the places of its images that loaded.
    type Pending = (NaflexInputs, Vec<usize>);
    const ONE_BEHIND: bool = false;

    fn submit(&mut self, job: &Job, _first: bool) -> Result<Option<Self::Pending>> {
        if job.failures.len() == job.count {
            return Ok(None);
        }
        // SAFETY: the dispatcher holds the slot until this job is acknowledged, after this.
        let pixels = unsafe { job.pixels.bytes() };
        let staged = self.layout.batch_inputs(
            &self.runner,
            &pixels[..job.count * self.layout.image_bytes()],
            (job.first, job.count),
            &job.failures,
        )?;
        Ok(Some(staged))
    }

    fn collect(
        &mut self,
        batch: Submitted<Self::Pending>,
        _figures: &mut DeviceFigures,
    ) -> Result<Collected> {
        let (inputs, loaded) = &batch.pending;
        let outputs =
            crate::naflex::run_staged(&mut self.runner, inputs, loaded, batch.count, self.outputs)?;
        Ok(Collected {
            first: batch.first,
            count: batch.count,
            failures: batch.failures,
            outputs: Some(outputs),
        })
    }
}

/// Where a command's images run: on the runner it opened, or on several devices, each opened
/// by the run on its own thread.
pub enum Placement {
    One {
        runner: Box<Runner>,
        dir: PathBuf,
    },
    Several {
        devices: Vec<String>,
        options: ModelOptions,
        /// The model as each device opens it: what the command reads before the run (its
        /// head, labels, pools).
        model: Box<vitrt_model::VisionModel>,
        dir: PathBuf,
    },
}

/// What a run over the images measured, on one device or several.
pub struct Ran {
    pub stats: PipelineStats,
    /// The results stopped the run (the reader closed the output).
    pub stopped: bool,
    /// One device: the consumer's times; several: the dispatcher's.
    pub times: ConsumerTimes,
    /// Several devices: each one's share.
    pub devices: Vec<DeviceFigures>,
    pub batch_size: usize,
    pub workers: usize,
}

impl From<DevicesOutcome> for Ran {
    fn from(outcome: DevicesOutcome) -> Ran {
        Ran {
            stats: outcome.stats,
            stopped: outcome.stopped,
            times: outcome.times,
            devices: outcome.devices,
            batch_size: outcome.batch_size,
            workers: outcome.workers,
        }
    }
}

impl Placement {
    /// Opens the model as `options` say: read here and opened on each device by the run when
    /// `--device` names several (`cuda:all`, `cuda:0,2`), else opened here on the one device.
    pub fn open(options: &ModelOptions) -> Result<Placement> {
        match several_devices(options.device.as_deref())? {
            Some(devices) if devices.len() > 1 => {
                let (model, dir) = options.load_model()?;
                if options.announce_device {
                    eprintln!(
                        "vitrt: running on {} devices ({})",
                        devices.len(),
                        devices.join(", ")
                    );
                }
                Ok(Placement::Several {
                    devices,
                    options: options.clone(),
                    model: Box::new(model),
                    dir,
                })
            }
            Some(mut one) => {
                let options = ModelOptions {
                    device: one.pop(),
                    ..options.clone()
                };
                Placement::open(&options)
            }
            None => {
                let opened = options.open()?;
                Ok(Placement::One {
                    runner: Box::new(opened.runner),
                    dir: opened.dir,
                })
            }
        }
    }

    pub fn model(&self) -> &vitrt_model::VisionModel {
        match self {
            Placement::One { runner, .. } => &runner.model,
            Placement::Several { model, .. } => model,
        }
    }

    /// The checkpoint's folder.
    pub fn dir(&self) -> &Path {
        match self {
            Placement::One { dir, .. } | Placement::Several { dir, .. } => dir,
        }
    }

    /// The one runner, when there is one.
    pub fn runner(&mut self) -> Option<&mut Runner> {
        match self {
            Placement::One { runner, .. } => Some(runner),
            Placement::Several { .. } => None,
        }
    }

    /// The dtype the model runs in.
    pub fn dtype(&self) -> String {
        match self {
            Placement::One { runner, .. } => runner.backend().dtype().to_string(),
            Placement::Several { options, .. } => options
                .dtype
                .unwrap_or(vitrt_runtime::DType::F16)
                .to_string(),
        }
    }

    /// The device(s), as outputs name them.
    pub fn describe(&self) -> String {
        match self {
            Placement::One { runner, .. } => runner.backend().describe(),
            Placement::Several { devices, .. } => devices.join(", "),
        }
    }

    /// Runs every image of `inputs`, `prepare` having set each runner up (the one runner, or
    /// each device's once open), handing the outputs to `results` in input order.
    pub fn run(
        &mut self,
        inputs: &InputList,
        images: &ImageOptions,
        size_was_asked: bool,
        prepare: &(dyn Fn(&mut Runner) -> Result<()> + Sync),
        results: &mut impl BatchResults,
        record_timeline: bool,
    ) -> Result<Ran> {
        match self {
            Placement::One { runner, dir } => {
                let pre = crate::batched::preprocessing(runner, dir, size_was_asked)?;
                prepare(runner)?;
                let setup = BatchSetup::new(runner, pre, images, inputs.len())?;
                let outcome =
                    crate::batched::run_batches(runner, inputs, &setup, results, record_timeline)?;
                Ok(Ran {
                    stats: outcome.stats,
                    stopped: outcome.stopped,
                    times: outcome.times,
                    devices: Vec::new(),
                    batch_size: setup.batch_size,
                    workers: setup.workers,
                })
            }
            Placement::Several {
                devices, options, ..
            } => {
                let run = DeviceRun {
                    model: options,
                    devices,
                    images,
                    runs: DeviceModel::Images {
                        size_was_asked,
                        prepare,
                    },
                    before_submit: None,
                };
                Ok(run_on_devices(&run, inputs, results)?.into())
            }
        }
    }
}
