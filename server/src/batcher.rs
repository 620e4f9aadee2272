//! The dynamic batching queue and the one thread that owns the model.
//!
//! ```text
//! requests (images made ready: decoded, or JPEGs read for the device)
//!   ──► queue (bounded by images: 429 past --max-queue)
//!   ──► batching thread: the first job waits at most --max-delay-ms for images already
//!       admitted (being decoded), none when there are none; images of several requests of
//!       one kind fill one batch of up to --max-batch-size
//!   ──► staging and arena (page-locked on CUDA) ──► Runner::submit_decoding (the path of
//!       `classify`: the device decodes the JPEGs into their places)
//!   ──► the previous batch's outputs collected while this one runs ──► rows per request
//!       (a batch the device marked an image of is decoded again on the host and rerun)
//! ```
//!
//! SigLIP 2 NaFlex ([`Engine::Naflex`]) batches images of different patch grids together: each
//! request's thread preprocesses its images to their own grids, a batch pads them to the
//! processor's `max_num_patches` with the key padding mask (`vitrt_engine::naflex`), and the
//! batch runs on this thread while the next one fills.
//!
//! The runner is not `Send` (its CUDA graphs are bound to a thread), so it is opened on this
//! thread and never leaves it. A request's images may span batches; it is answered when its
//! last row is back. Rows do not depend on the batch they ran in on the CPU backend (the
//! batch-invariance test); where the GPU's kernels choose tiles by batch size, see
//! benchmarks/NOTES.md.

use crate::metrics::Metrics;
use crate::ModelInfo;
use anyhow::{bail, Context, Result};
use std::collections::{HashMap, VecDeque};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::oneshot;
use vitrt_engine::memory::{ImageDecoder, MemoryBatches, PreparedImage};
use vitrt_engine::results::{encode_zero_shot_labels, output_rows, TextTower};
use vitrt_model::naflex::NaflexRunner;
use vitrt_model::preprocess::jpeg_coefficients::EntropyOn;
use vitrt_model::preprocess::naflex::{NaflexImage, NaflexProcessor};
use vitrt_model::preprocess::ImageLimits;
use vitrt_model::{Output, OutputSet, Pool, Runner};
use vitrt_runtime::{Backend, HostTensor, PendingOutputs};

/// What a request's images are run for: each kind is its own graph's outputs, so a batch
/// holds images of one kind.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    /// The classifier's logits.
    Classify,
    /// A pooled vector.
    Embed(Pool),
    /// Zero-shot probabilities against these labels in these templates.
    ZeroShot(Arc<LabelSet>),
}

#[derive(Debug, PartialEq, Eq, Hash)]
pub struct LabelSet {
    pub labels: Vec<String>,
    pub templates: Vec<String>,
}

/// The rows of a request's images, one per image in order, or why there are none.
pub type Rows = Result<Vec<Vec<f32>>, Failure>;

/// Text embeddings, one row each, and the tokens each text took, or why there are none.
pub type TextRows = Result<(Vec<Vec<f32>>, Vec<usize>), Failure>;

/// Why the batching thread could not answer.
#[derive(Clone, Debug)]
pub enum Failure {
    /// The request's deadline passed before its batch ran.
    Expired,
    /// The request was refused (a zero-shot checkpoint without a text tower, say): 400.
    Refused(String),
    /// The model failed or panicked: 500.
    Failed(String),
}

/// An image of a request made ready for the model's batches on the request's own thread.
pub enum ReadyImage {
    /// For a fixed-resolution model: decoded to its pixels, or a JPEG read for the device
    /// ([`ImageDecoder::prepare`]).
    Fixed(PreparedImage),
    /// For SigLIP 2 NaFlex: its patch rows (padded to `max_num_patches`) and its own grid.
    Naflex(NaflexImage),
}

/// One request's work.
pub enum Job {
    Images {
        kind: Kind,
        /// Images made ready, of the kind the model's engine runs.
        images: Vec<ReadyImage>,
        deadline: Instant,
        reply: oneshot::Sender<Rows>,
    },
    /// Texts through the text tower, unit length: (rows, tokens per text).
    Texts {
        texts: Vec<String>,
        reply: oneshot::Sender<TextRows>,
    },
}

/// The handle requests submit through: bounded by images queued.
#[derive(Clone)]
pub struct Queue {
    sender: Sender<Job>,
    /// Images admitted and not yet taken into a batch (the queue's depth).
    queued: Arc<AtomicUsize>,
    max_queue: usize,
}

/// The queue is full: answer 429.
#[derive(Debug)]
pub struct Full;

/// A place in the queue, held from admission (before decoding) until the batching thread
/// takes the job: dropped unused, it is given back.
pub struct Admission {
    queued: Arc<AtomicUsize>,
    images: usize,
}

impl Drop for Admission {
    fn drop(&mut self) {
        self.queued.fetch_sub(self.images, Ordering::AcqRel);
    }
}

impl Queue {
    /// Reserves room for `images` images, or says the queue is full.
    pub fn admit(&self, images: usize) -> Result<Admission, Full> {
        let mut now = self.queued.load(Ordering::Acquire);
        loop {
            if now + images > self.max_queue {
                return Err(Full);
            }
            match self.queued.compare_exchange_weak(
                now,
                now + images,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => {
                    return Ok(Admission {
                        queued: Arc::clone(&self.queued),
                        images,
                    })
                }
                Err(seen) => now = seen,
            }
        }
    }

    /// Images admitted and not yet in a batch.
    pub fn depth(&self) -> usize {
        self.queued.load(Ordering::Acquire)
    }

    /// Hands a job to the batching thread; its admission is given back when the thread takes
    /// it. An error when the thread has ended.
    pub fn submit(&self, job: Job, admission: Admission) -> Result<(), ()> {
        let sent = self.sender.send(job).map_err(|_| ());
        // The batching thread counts the job's images out when it takes it.
        std::mem::forget(admission);
        if sent.is_err() {
            return Err(());
        }
        Ok(())
    }
}

/// How the batching thread batches.
#[derive(Clone, Copy, Debug)]
pub struct BatchPolicy {
    pub max_batch_size: usize,
    pub max_delay: Duration,
}

/// A fixed-resolution model, its batches filled in memory as the image pipeline's are.
pub struct FixedEngine {
    pub runner: Runner,
    pub batches: MemoryBatches,
    /// Decodes the images of a batch the device marked again on the host.
    pub host: ImageDecoder,
    /// Whether requests' JPEGs come to the device to decode (and who reads their scans).
    pub device_decode: Option<EntropyOn>,
}

/// SigLIP 2 NaFlex: each batch's images padded to the processor's `max_num_patches` with the
/// key padding mask, whatever their grids, and run on the batching thread.
pub struct NaflexEngine {
    pub runner: NaflexRunner,
    pub processor: NaflexProcessor,
}

/// The model the batching thread runs.
pub enum Engine {
    Fixed(Box<FixedEngine>),
    Naflex(Box<NaflexEngine>),
}

impl Engine {
    fn backend(&self) -> &dyn Backend {
        match self {
            Engine::Fixed(fixed) => fixed.runner.backend(),
            Engine::Naflex(naflex) => naflex.runner.backend(),
        }
    }

    /// The text tower's embeddings of `texts` on the model's backend, unit length: (rows,
    /// tokens per text).
    fn embed_texts(
        &mut self,
        tower: &TextTower,
        texts: &[String],
    ) -> Result<(Vec<f32>, Vec<usize>)> {
        match self {
            Engine::Fixed(fixed) => tower.embed(&mut fixed.runner, texts, true),
            Engine::Naflex(naflex) => {
                let tokens = tower.tokenizer.encode(texts)?;
                let rows =
                    naflex
                        .runner
                        .embed_texts(&tower.model, &tokens.ids, texts.len(), true)?;
                Ok((rows, tokens.lengths))
            }
        }
    }
}

/// What the batching thread needs besides the model.
pub struct Batcher {
    pub engine: Engine,
    pub text: Option<TextTower>,
    /// The checkpoint's folder (the zero-shot labels' text tower).
    pub dir: std::path::PathBuf,
    pub name: String,
    pub policy: BatchPolicy,
    pub metrics: Arc<Metrics>,
    pub queued: Arc<AtomicUsize>,
    /// The zero-shot labels the runner scores against now.
    pub labels: Option<Arc<LabelSet>>,
}

/// Makes the queue and its receiving end.
pub fn queue(max_queue: usize) -> (Queue, Receiver<Job>, Arc<AtomicUsize>) {
    let (sender, receiver) = std::sync::mpsc::channel();
    let queued = Arc::new(AtomicUsize::new(0));
    (
        Queue {
            sender,
            queued: Arc::clone(&queued),
            max_queue,
        },
        receiver,
        queued,
    )
}

/// A request's images in the batching thread: rows filled as batches come back.
struct Request {
    kind: Kind,
    images: Vec<ReadyImage>,
    /// Images already put into a batch.
    taken: usize,
    rows: Vec<Option<Vec<f32>>>,
    deadline: Instant,
    reply: Option<oneshot::Sender<Rows>>,
}

/// A batch queued on the device: which request each row is, and its outputs to come.
struct InFlight {
    kind: Kind,
    rows: Vec<(u64, usize)>,
    pending: Pending,
}

/// A batch's outputs to come: queued on the device (a fixed-resolution model's), or already
/// there (NaFlex runs each batch to its end on this thread).
enum Pending {
    Queued(PendingOutputs),
    Ran(Vec<HostTensor>),
}

/// A batch's outputs once back: its rows (width, data), or the device marked one of its
/// images and the batch is to be decoded again on the host.
enum Finished {
    Rows(usize, Vec<f32>),
    Marked,
}

impl Batcher {
    /// Runs until every queue handle is dropped and all work taken is answered.
    pub fn run(mut self, receiver: Receiver<Job>) {
        let mut requests: HashMap<u64, Request> = HashMap::new();
        // Requests in arrival order with images not yet in a batch.
        let mut waiting: VecDeque<u64> = VecDeque::new();
        let mut texts: VecDeque<Job> = VecDeque::new();
        let mut next_id = 0u64;
        let mut in_flight: Option<InFlight> = None;
        let mut closed = false;
        loop {
            // Take what has arrived; wait only when nothing is in flight or waiting.
            let idle = in_flight.is_none() && waiting.is_empty() && texts.is_empty();
            if idle && closed {
                break;
            }
            let first = if idle {
                match receiver.recv() {
                    Ok(job) => Some(job),
                    Err(_) => {
                        closed = true;
                        None
                    }
                }
            } else {
                None
            };
            for job in first.into_iter().chain(receiver.try_iter()) {
                self.take(job, &mut requests, &mut waiting, &mut texts, &mut next_id);
            }
            // Texts run alone, once the device is free.
            if !texts.is_empty() {
                if let Some(done) = in_flight.take() {
                    self.collect(done, &mut requests);
                }
                while let Some(job) = texts.pop_front() {
                    self.run_texts(job);
                }
                continue;
            }
            // Fill a batch: wait up to the delay for more images of the first one's kind.
            let Some(kind) = waiting
                .front()
                .and_then(|id| requests.get(id))
                .map(|r| r.kind.clone())
            else {
                if let Some(done) = in_flight.take() {
                    self.collect(done, &mut requests);
                }
                continue;
            };
            if in_flight.as_ref().is_some_and(|f| f.kind != kind) {
                // A new kind changes the graphs: the device finishes the batch first.
                if let Some(done) = in_flight.take() {
                    self.collect(done, &mut requests);
                }
            }
            if in_flight.is_none() && !closed {
                let opened = requests[&waiting[0]]
                    .deadline
                    .min(Instant::now() + self.policy.max_delay);
                // Wait only for images already admitted (being decoded, or in the channel):
                // a request alone runs at once.
                while images_of(&kind, &waiting, &requests) < self.policy.max_batch_size
                    && self.queued.load(Ordering::Acquire) > untaken(&waiting, &requests)
                {
                    let left = opened.saturating_duration_since(Instant::now());
                    match receiver.recv_timeout(left) {
                        Ok(job) => {
                            self.take(job, &mut requests, &mut waiting, &mut texts, &mut next_id)
                        }
                        Err(RecvTimeoutError::Timeout) => break,
                        Err(RecvTimeoutError::Disconnected) => {
                            closed = true;
                            break;
                        }
                    }
                }
            }
            let rows = self.fill_batch(&kind, &mut waiting, &mut requests);
            if rows.is_empty() {
                continue;
            }
            match self.submit(&kind, &rows, &requests) {
                Ok(pending) => {
                    let previous = in_flight.replace(InFlight {
                        kind,
                        rows,
                        pending,
                    });
                    if let Some(done) = previous {
                        self.collect(done, &mut requests);
                    }
                }
                Err(why) => self.run_alone(&kind, &rows, &mut requests, why),
            }
        }
    }

    /// Registers a job: a request's images wait for a batch; texts wait for the device.
    fn take(
        &mut self,
        job: Job,
        requests: &mut HashMap<u64, Request>,
        waiting: &mut VecDeque<u64>,
        texts: &mut VecDeque<Job>,
        next_id: &mut u64,
    ) {
        match job {
            Job::Images {
                kind,
                images,
                deadline,
                reply,
            } => {
                // Its images count in the queue's depth until they are put into a batch.
                let id = *next_id;
                *next_id += 1;
                let count = images.len();
                requests.insert(
                    id,
                    Request {
                        kind,
                        images,
                        taken: 0,
                        rows: vec![None; count],
                        deadline,
                        reply: Some(reply),
                    },
                );
                waiting.push_back(id);
            }
            Job::Texts { .. } => texts.push_back(job),
        }
    }

    /// Takes up to a batch of images of `kind` from the waiting requests, in arrival order;
    /// requests whose deadline passed are answered so and dropped.
    fn fill_batch(
        &mut self,
        kind: &Kind,
        waiting: &mut VecDeque<u64>,
        requests: &mut HashMap<u64, Request>,
    ) -> Vec<(u64, usize)> {
        let now = Instant::now();
        let mut rows = Vec::new();
        let mut kept = VecDeque::new();
        while let Some(id) = waiting.pop_front() {
            let Some(request) = requests.get_mut(&id) else {
                continue;
            };
            if request.deadline <= now {
                fail_rows(&[(id, 0)], requests, Failure::Expired, &self.queued);
                continue;
            }
            if &request.kind == kind && rows.len() < self.policy.max_batch_size {
                let take = (request.images.len() - request.taken)
                    .min(self.policy.max_batch_size - rows.len());
                rows.extend((request.taken..request.taken + take).map(|i| (id, i)));
                request.taken += take;
                self.queued.fetch_sub(take, Ordering::AcqRel);
            }
            if request.taken < request.images.len() {
                kept.push_back(id);
            }
        }
        *waiting = kept;
        rows
    }

    /// Sets the runner up for `kind` and queues the batch's images.
    fn submit(
        &mut self,
        kind: &Kind,
        rows: &[(u64, usize)],
        requests: &HashMap<u64, Request>,
    ) -> Result<Pending, String> {
        let outcome = catch_unwind(AssertUnwindSafe(|| -> Result<Pending> {
            self.set_kind(kind)?;
            let images = rows.iter().map(|(id, i)| &requests[id].images[*i]);
            self.metrics.batch(rows.len());
            match &mut self.engine {
                Engine::Fixed(fixed) => {
                    let images: Vec<&PreparedImage> = images
                        .map(|image| match image {
                            ReadyImage::Fixed(prepared) => Ok(prepared),
                            ReadyImage::Naflex(_) => Err(wrong_image()),
                        })
                        .collect::<Result<_>>()?;
                    let on_device = images.iter().filter(|image| image.on_device()).count();
                    self.metrics.decoded_on_device(on_device);
                    let pending = fixed.batches.submit_prepared(&mut fixed.runner, &images)?;
                    Ok(Pending::Queued(pending))
                }
                Engine::Naflex(naflex) => {
                    let images: Vec<&NaflexImage> = images
                        .map(|image| match image {
                            ReadyImage::Naflex(image) => Ok(image),
                            ReadyImage::Fixed(_) => Err(wrong_image()),
                        })
                        .collect::<Result<_>>()?;
                    let outputs = vitrt_engine::naflex::run_images(
                        &mut naflex.runner,
                        naflex.processor.max_num_patches,
                        &images,
                        &[output_of(kind).name()],
                    )?;
                    Ok(Pending::Ran(outputs))
                }
            }
        }));
        flatten(outcome)
    }

    /// Waits for a batch's outputs: its rows, or whether the device marked an image.
    fn finish(&mut self, kind: &Kind, count: usize, pending: Pending) -> Result<Finished, String> {
        let name = output_of(kind).name();
        let outcome = catch_unwind(AssertUnwindSafe(|| -> Result<Finished> {
            let (outputs, marked) = match (pending, &mut self.engine) {
                (Pending::Ran(outputs), _) => (outputs, false),
                (Pending::Queued(pending), Engine::Fixed(fixed)) => {
                    MemoryBatches::finish(&mut fixed.runner, pending)?
                }
                (Pending::Queued(_), Engine::Naflex(_)) => {
                    bail!("a batch queued on the device for a NaFlex model (a bug)")
                }
            };
            if marked {
                return Ok(Finished::Marked);
            }
            let (width, data) = output_rows(outputs, name, count)?;
            Ok(Finished::Rows(width, data))
        }));
        flatten(outcome)
    }

    /// The device marked an image of the batch `rows` (data libjpeg would warn about, a block
    /// outside the exactness guard): every image is decoded again on the host and the batch
    /// run again, so that its rows are what host decoding gives; a request whose image the
    /// host refuses is answered 400 naming it.
    fn redo_on_host(
        &mut self,
        kind: &Kind,
        rows: &[(u64, usize)],
        requests: &mut HashMap<u64, Request>,
    ) {
        // Only the device's decoding marks a batch, and only fixed-resolution models' JPEGs
        // are decoded there.
        let Engine::Fixed(fixed) = &mut self.engine else {
            let why = "a NaFlex batch marked by the device's decoding (a bug)".to_string();
            return fail_rows(rows, requests, Failure::Failed(why), &self.queued);
        };
        self.metrics.redone_on_host(rows.len());
        let mut decoded = Vec::with_capacity(rows.len());
        for &(id, i) in rows {
            let Some(request) = requests.get(&id) else {
                continue;
            };
            let ReadyImage::Fixed(image) = &request.images[i] else {
                let why = format!("{:#}", wrong_image());
                fail_rows(&[(id, i)], requests, Failure::Failed(why), &self.queued);
                continue;
            };
            match image.pixels_on_host(&mut fixed.host) {
                Ok(pixels) => decoded.push(((id, i), pixels)),
                Err(why) => fail_rows(
                    &[(id, i)],
                    requests,
                    Failure::Refused(why.to_string()),
                    &self.queued,
                ),
            }
        }
        // Rows of a request refused by another of its images go too.
        decoded.retain(|((id, _), _)| requests.contains_key(id));
        if decoded.is_empty() {
            return;
        }
        let kept: Vec<(u64, usize)> = decoded.iter().map(|(row, _)| *row).collect();
        let name = output_of(kind).name();
        let outcome = catch_unwind(AssertUnwindSafe(|| -> Result<(usize, Vec<f32>)> {
            let images: Vec<&[u8]> = decoded.iter().map(|(_, p)| p.as_slice()).collect();
            let pending = fixed.batches.submit(&mut fixed.runner, &images)?;
            let outputs = fixed.runner.finish(pending)?;
            output_rows(outputs, name, images.len())
        }));
        match flatten(outcome) {
            Ok((width, data)) => self.deliver(&kept, width, &data, requests),
            Err(why) => fail_rows(&kept, requests, Failure::Failed(why), &self.queued),
        }
    }

    /// Waits for a batch's outputs and hands each request its rows, answering those complete.
    fn collect(&mut self, batch: InFlight, requests: &mut HashMap<u64, Request>) {
        match self.finish(&batch.kind, batch.rows.len(), batch.pending) {
            Ok(Finished::Rows(width, data)) => self.deliver(&batch.rows, width, &data, requests),
            Ok(Finished::Marked) => self.redo_on_host(&batch.kind, &batch.rows, requests),
            Err(why) => self.run_alone(&batch.kind, &batch.rows, requests, why),
        }
    }

    /// After a batch failed (`why`): each of its requests is run again alone, so that a
    /// request that fails (or panics) by itself is the only one answered 500.
    fn run_alone(
        &mut self,
        kind: &Kind,
        rows: &[(u64, usize)],
        requests: &mut HashMap<u64, Request>,
        why: String,
    ) {
        let mut ids: Vec<u64> = rows.iter().map(|(id, _)| *id).collect();
        ids.dedup();
        if ids.len() < 2 {
            return fail_rows(rows, requests, Failure::Failed(why), &self.queued);
        }
        for id in ids {
            let mine: Vec<(u64, usize)> = rows.iter().filter(|(r, _)| *r == id).copied().collect();
            for chunk in mine.chunks(self.policy.max_batch_size) {
                let outcome = self
                    .submit(kind, chunk, requests)
                    .and_then(|pending| self.finish(kind, chunk.len(), pending));
                match outcome {
                    Ok(Finished::Rows(width, data)) => self.deliver(chunk, width, &data, requests),
                    Ok(Finished::Marked) => self.redo_on_host(kind, chunk, requests),
                    Err(why) => {
                        fail_rows(chunk, requests, Failure::Failed(why), &self.queued);
                        break;
                    }
                }
            }
        }
    }

    /// Hands each request its rows of a batch's output, answering those now complete.
    fn deliver(
        &mut self,
        rows: &[(u64, usize)],
        width: usize,
        data: &[f32],
        requests: &mut HashMap<u64, Request>,
    ) {
        self.metrics.images_done(rows.len());
        self.metrics
            .device_bytes(self.engine.backend().memory_account().total_bytes());
        for (k, (id, i)) in rows.iter().enumerate() {
            let Some(request) = requests.get_mut(id) else {
                continue;
            };
            request.rows[*i] = Some(data[k * width..][..width].to_vec());
            if request.rows.iter().all(Option::is_some) {
                let mut request = requests.remove(id).expect("present above");
                let rows = request
                    .rows
                    .drain(..)
                    .map(Option::unwrap_or_default)
                    .collect();
                if let Some(reply) = request.reply.take() {
                    let _ = reply.send(Ok(rows));
                }
            }
        }
    }

    /// The runner's graphs end in what `kind` reads (NaFlex's runner is told with each
    /// batch); zero-shot labels are encoded by the text tower when they change.
    fn set_kind(&mut self, kind: &Kind) -> Result<()> {
        if let Kind::ZeroShot(set) = kind {
            if self.labels.as_ref() != Some(set) {
                match &mut self.engine {
                    Engine::Fixed(fixed) => {
                        let encoded = encode_zero_shot_labels(
                            &mut fixed.runner,
                            &self.dir,
                            &self.name,
                            &set.labels,
                            &set.templates,
                        )?;
                        fixed.runner.set_zero_shot(encoded.labels)?;
                    }
                    Engine::Naflex(naflex) => {
                        vitrt_engine::naflex::score_against_labels(
                            &mut naflex.runner,
                            &self.dir,
                            &self.name,
                            &set.labels,
                            &set.templates,
                        )?;
                    }
                }
                self.labels = Some(Arc::clone(set));
            }
        }
        if let Engine::Fixed(fixed) = &mut self.engine {
            fixed.runner.set_outputs(OutputSet::of(&[output_of(kind)]));
        }
        Ok(())
    }

    /// Embeds texts with the text tower (unit length), answering the job.
    fn run_texts(&mut self, job: Job) {
        let Job::Texts { texts, reply } = job else {
            return;
        };
        let outcome = match &self.text {
            None => Err(Failure::Refused(format!(
                "{} has no text tower: /v1/embeddings takes images (data URIs) here",
                self.name
            ))),
            Some(tower) => {
                let engine = &mut self.engine;
                let outcome = catch_unwind(AssertUnwindSafe(|| engine.embed_texts(tower, &texts)));
                match flatten(outcome) {
                    Ok((data, tokens)) => {
                        let width = data.len() / texts.len().max(1);
                        Ok((data.chunks(width).map(<[f32]>::to_vec).collect(), tokens))
                    }
                    Err(why) => Err(Failure::Failed(why)),
                }
            }
        };
        let _ = reply.send(outcome);
    }

    /// One batch of a single image and one of the largest size, so that the first requests
    /// find the kernels compiled (the device decoding's among them, with a decoder of the
    /// routes' as `info` makes them within `limits`), their graphs captured and the staging
    /// allocated.
    pub fn warm_up(&mut self, kind: &Kind, info: &ModelInfo, limits: ImageLimits) -> Result<()> {
        self.set_kind(kind)?;
        let sizes = [1, self.policy.max_batch_size];
        match &mut self.engine {
            Engine::Fixed(fixed) => {
                let image = match fixed.device_decode {
                    // A baseline 4:2:0 photo of 240x160, decoded by the device.
                    Some(_) => info
                        .decoder(limits)
                        .context("a decoder for the warm-up image")?
                        .prepare(WARM_UP_JPEG.to_vec(), "the warm-up image")
                        .context("preparing the warm-up image")?,
                    None => PreparedImage::Pixels(vec![0u8; fixed.batches.image_bytes()]),
                };
                for size in sizes {
                    let images = vec![&image; size];
                    let pending = fixed.batches.submit_prepared(&mut fixed.runner, &images)?;
                    let (_, marked) = MemoryBatches::finish(&mut fixed.runner, pending)
                        .with_context(|| format!("a warm-up batch of {size}"))?;
                    anyhow::ensure!(!marked, "the device could not decode the warm-up image");
                }
            }
            Engine::Naflex(naflex) => {
                // The photo at its own grid: a batch's shape is its size and max_num_patches.
                let image = naflex
                    .processor
                    .preprocess_bytes(WARM_UP_JPEG, "the warm-up image", &limits)
                    .context("preprocessing the warm-up image")?;
                for size in sizes {
                    let images = vec![&image; size];
                    vitrt_engine::naflex::run_images(
                        &mut naflex.runner,
                        naflex.processor.max_num_patches,
                        &images,
                        &[output_of(kind).name()],
                    )
                    .with_context(|| format!("a warm-up batch of {size}"))?;
                }
            }
        }
        Ok(())
    }
}

/// An image a batch of the engine's other kind was handed (a bug: the routes prepare images
/// as the model's preprocessing says).
fn wrong_image() -> anyhow::Error {
    anyhow::anyhow!("an image prepared for another kind of model (a bug)")
}

/// The image the warm-up batches decode on the device (and NaFlex's preprocess).
const WARM_UP_JPEG: &[u8] = include_bytes!("../../tests/fixtures/images/cat.jpg");

/// The output a kind reads.
pub fn output_of(kind: &Kind) -> Output {
    match kind {
        Kind::Classify => Output::Logits,
        Kind::Embed(pool) => pool.output(),
        Kind::ZeroShot(_) => Output::ZeroShotProbs,
    }
}

/// Images of `kind` waiting (not yet in a batch).
fn images_of(kind: &Kind, waiting: &VecDeque<u64>, requests: &HashMap<u64, Request>) -> usize {
    waiting
        .iter()
        .filter_map(|id| requests.get(id))
        .filter(|r| &r.kind == kind)
        .map(|r| r.images.len() - r.taken)
        .sum()
}

/// Images of any kind waiting (not yet in a batch).
fn untaken(waiting: &VecDeque<u64>, requests: &HashMap<u64, Request>) -> usize {
    waiting
        .iter()
        .filter_map(|id| requests.get(id))
        .map(|r| r.images.len() - r.taken)
        .sum()
}

/// Answers every request with a row in `rows` with `failure`, once, and drops it; its images
/// not yet in a batch leave the queue's depth (`queued`).
fn fail_rows(
    rows: &[(u64, usize)],
    requests: &mut HashMap<u64, Request>,
    failure: Failure,
    queued: &AtomicUsize,
) {
    for (id, _) in rows {
        if let Some(mut request) = requests.remove(id) {
            queued.fetch_sub(request.images.len() - request.taken, Ordering::AcqRel);
            if let Some(reply) = request.reply.take() {
                let _ = reply.send(Err(failure.clone()));
            }
        }
    }
}

/// A caught panic or an error, as the message a 500 carries.
fn flatten<T>(outcome: std::thread::Result<Result<T>>) -> Result<T, String> {
    match outcome {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(e)) => Err(format!("{e:#}")),
        Err(panic) => Err(format!(
            "vitrt failed inside (a bug, please report it): {}",
            panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "(no message)".to_string())
        )),
    }
}
