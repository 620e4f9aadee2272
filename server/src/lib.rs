//! `vitrt serve`: an HTTP server over the engine. It listens at once (`GET /health` answers
//! 503 meanwhile), opens the model on its batching thread, warms it up, and then answers 200;
//! requests' images are made ready on a bounded pool of blocking threads (decoded, or, on a
//! GPU, JPEGs read for the device to decode in the batch; for SigLIP 2 NaFlex, each resized to
//! its own patch grid), queued (429 past
//! `--max-queue`), batched across requests (`batcher`) and answered with the engine's typed
//! results (`routes`). SIGTERM or SIGINT stops accepting, finishes what was accepted, and the
//! process exits 0.

mod batcher;
mod error;
pub mod fetch;
mod inputs;
pub mod load;
mod metrics;
mod routes;

use anyhow::{Context, Result};
use axum::serve::ListenerExt;
use batcher::{BatchPolicy, Batcher, Engine, FixedEngine, Kind, NaflexEngine};
use metrics::Metrics;
use std::net::SocketAddr;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use tokio::sync::Semaphore;
use vitrt_engine::batched::{default_workers, preprocessing, DecodeOn};
use vitrt_engine::memory::{ImageDecoder, MemoryBatches};
use vitrt_engine::results::TextTower;
use vitrt_engine::ModelOptions;
use vitrt_model::config::ModelConfig;
use vitrt_model::naflex::NaflexRunner;
use vitrt_model::preprocess::jpeg_coefficients::EntropyOn;
use vitrt_model::preprocess::naflex::NaflexProcessor;
use vitrt_model::preprocess::{ImageLimits, PreprocessConfig};
use vitrt_model::{Head, Pool};
use vitrt_runtime::backend::Device;

/// What `vitrt serve` was asked to do.
#[derive(Clone, Debug)]
pub struct ServeOptions {
    pub model: ModelOptions,
    pub host: String,
    /// 0: any free port (the one bound is said on stderr).
    pub port: u16,
    pub max_batch_size: usize,
    /// How long the first image of a batch waits for others already admitted.
    pub max_delay: Duration,
    /// Images admitted and not yet in a batch, at most.
    pub max_queue: usize,
    /// Request bodies larger than this are answered 413.
    pub max_body_bytes: usize,
    /// Requests must carry `Authorization: Bearer KEY` (all but `GET /health`).
    pub api_key: Option<String>,
    /// A request not answered by then is answered 504.
    pub request_timeout: Duration,
    pub limits: ImageLimits,
    /// Decoding threads. Default: as the pipeline's workers.
    pub workers: Option<usize>,
    /// Images may name files under this folder (`file:NAME`); none otherwise.
    pub allow_local_files: Option<std::path::PathBuf>,
    /// Where JPEGs are decoded. Default: on the GPU on a CUDA device (the request's thread
    /// reads the file's markers and scan, the device decodes it in the batch), on the host
    /// elsewhere and for SigLIP 2 NaFlex (which refuses the GPU's decoding).
    pub decode: Option<DecodeOn>,
    /// Images may be `http(s)://` URLs, fetched within these limits; none otherwise.
    pub allow_url_fetch: Option<fetch::FetchOptions>,
}

/// What the routes know of the model once it is open.
pub struct ModelInfo {
    pub name: String,
    /// The model's config when it has a classification head (`/v1/classify`, its labels).
    pub classifier: Option<ModelConfig>,
    /// The pool `/v1/embeddings` embeds images with (the checkpoint's default).
    pub pool: Option<Pool>,
    /// Image embeddings and a text tower of the same width: text inputs and `/v1/zero-shot`.
    pub text_tower: bool,
    /// How a request's images are made ready for the model's batches.
    pub images: ImagePreparation,
}

/// How a request's thread makes its images ready for the model's batches.
pub enum ImagePreparation {
    /// A fixed-resolution model: every image decoded to the size `pre` makes, or, with
    /// `device_decode`, JPEGs left to the device, their scans entropy-decoded where it says.
    Fixed {
        pre: PreprocessConfig,
        device_decode: Option<EntropyOn>,
    },
    /// SigLIP 2 NaFlex: every image resized on the host to its own patch grid under the
    /// processor's `max_num_patches`.
    Naflex(NaflexProcessor),
}

impl ModelInfo {
    /// A decoder for a request's thread; an error for NaFlex, whose images the processor
    /// makes ([`ImagePreparation::Naflex`]).
    pub fn decoder(&self, limits: ImageLimits) -> Result<ImageDecoder> {
        match &self.images {
            ImagePreparation::Fixed {
                pre,
                device_decode: Some(entropy),
            } => Ok(ImageDecoder::for_device(pre, limits, *entropy)),
            ImagePreparation::Fixed {
                pre,
                device_decode: None,
            } => Ok(ImageDecoder::new(pre, limits)),
            ImagePreparation::Naflex(_) => {
                anyhow::bail!(
                    "SigLIP 2 NaFlex's images are made by its processor, not decoded to one size"
                )
            }
        }
    }
}

/// What every route shares.
pub struct AppState {
    pub options: ServeOptions,
    pub queue: batcher::Queue,
    pub metrics: Arc<Metrics>,
    /// Set once the model is open (its facts for the routes).
    pub info: OnceLock<Arc<ModelInfo>>,
    /// Set once the model has run its warm-up batches.
    pub ready: Arc<AtomicBool>,
    /// Decoding permits: images decoded at once.
    pub decoders: Semaphore,
    /// The folder `file:NAME` images are read from, if allowed.
    pub local: Option<inputs::LocalFiles>,
    /// Fetches `http(s)://` images, if allowed.
    pub fetcher: Option<Arc<fetch::UrlFetcher>>,
}

impl AppState {
    /// What image strings may name besides the image itself.
    pub fn sources(&self) -> inputs::Sources<'_> {
        inputs::Sources {
            local: self.local.as_ref(),
            urls: self.fetcher.is_some(),
        }
    }
}

/// Serves until SIGTERM or SIGINT; an error when the address cannot be bound or the model
/// cannot be opened.
pub fn serve(options: ServeOptions) -> Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("vitrt-serve")
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(serve_async(options))
}

async fn serve_async(options: ServeOptions) -> Result<()> {
    // Before anything else: a SIGTERM while the model loads also stops the server cleanly.
    let stop_signals = StopSignals::register()?;
    let local = options
        .allow_local_files
        .as_deref()
        .map(inputs::LocalFiles::new)
        .transpose()?;
    let address = format!("{}:{}", options.host, options.port);
    let listener = tokio::net::TcpListener::bind(&address)
        .await
        .with_context(|| format!("listening on {address}"))?;
    let bound: SocketAddr = listener.local_addr()?;
    eprintln!(
        "vitrt serve: listening on http://{bound} (loading {})",
        options.model.model
    );
    if !bound.ip().is_loopback() && options.api_key.is_none() {
        eprintln!(
            "vitrt serve: warning: listening beyond this machine without --api-key: anyone who \
             reaches {bound} can use the model"
        );
    }

    let metrics = Arc::new(Metrics::new(options.max_batch_size));
    let (queue, receiver, queued) = batcher::queue(options.max_queue);
    let ready = Arc::new(AtomicBool::new(false));
    let workers = options.workers.unwrap_or_else(|| {
        let on_gpu = !matches!(options.model.asked_device(), Ok(Some(Device::Cpu)));
        default_workers(on_gpu)
    });
    let state = Arc::new(AppState {
        options: options.clone(),
        queue,
        metrics: Arc::clone(&metrics),
        info: OnceLock::new(),
        ready: Arc::clone(&ready),
        decoders: Semaphore::new(workers),
        local,
        fetcher: options
            .allow_url_fetch
            .map(|fetch| Arc::new(fetch::UrlFetcher::new(fetch))),
    });

    let counts = Arc::clone(&metrics);
    // The model is opened, warmed and run on its own thread (its runner stays there).
    let (failed_tx, failed_rx) = tokio::sync::oneshot::channel::<anyhow::Error>();
    let batching = {
        let state = Arc::clone(&state);
        std::thread::Builder::new()
            .name("vitrt-batcher".to_string())
            .spawn(move || {
                let opened =
                    open_batcher(&state, metrics, queued).and_then(|(mut batcher, kind)| {
                        let info = state.info.get().expect("set when the model opened");
                        batcher
                            .warm_up(&kind, info, state.options.limits)
                            .context("warming the model up")?;
                        Ok(batcher)
                    });
                let ready = Arc::clone(&state.ready);
                // The routes' state holds a handle on the queue: dropped here, so that the
                // queue closes once the routes are gone.
                drop(state);
                match opened {
                    Ok(batcher) => {
                        ready.store(true, std::sync::atomic::Ordering::Release);
                        eprintln!("vitrt serve: ready");
                        batcher.run(receiver);
                    }
                    Err(e) => {
                        let _ = failed_tx.send(e);
                    }
                }
            })
            .context("starting the batching thread")?
    };

    let app = routes::router(Arc::clone(&state));
    drop(state);
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<Option<anyhow::Error>>();
    tokio::spawn(async move {
        let failure = tokio::select! {
            () = stop_signals.recv() => None,
            Ok(e) = failed_rx => Some(e),
        };
        let _ = stop_tx.send(failure);
    });
    let (failure_tx, failure_rx) = tokio::sync::oneshot::channel();
    let shutdown = async move {
        let failure = stop_rx.await.ok().flatten();
        if failure.is_none() {
            eprintln!("vitrt serve: stopping: finishing the requests accepted");
        }
        let _ = failure_tx.send(failure);
    };
    // No Nagle: an answer written in more than one segment would otherwise wait for the
    // client's delayed ACK (benchmarks/NOTES.md, 2026-11-27 "The 40 ms the load generator
    // waited").
    let listener = listener.tap_io(|stream| {
        let _ = stream.set_nodelay(true);
    });
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown)
        .await
        .context("serving")?;
    // Every route's handle on the queue is gone: the batching thread answers what it holds
    // and ends.
    let _ = tokio::task::spawn_blocking(move || batching.join()).await;
    let (begun, answered) = counts.begun_and_answered();
    eprintln!("vitrt serve: stopped: {begun} requests begun, {answered} answered");
    match failure_rx.await.ok().flatten() {
        Some(e) => Err(e.context("opening the model")),
        None => Ok(()),
    }
}

/// Opens the model on the batching thread and says what the routes need to know.
fn open_batcher(
    state: &AppState,
    metrics: Arc<Metrics>,
    queued: Arc<std::sync::atomic::AtomicUsize>,
) -> Result<(Batcher, Kind)> {
    let options = &state.options;
    let (engine, info, text, dir) = match options.model.open_naflex()? {
        Some((runner, dir)) => open_naflex(options, runner, dir)?,
        None => open_fixed(options)?,
    };
    let warm_kind = match (info.classifier.is_some(), info.pool) {
        (true, _) | (false, None) => Kind::Classify,
        (false, Some(pool)) => Kind::Embed(pool),
    };
    let _ = state.info.set(Arc::new(info));
    let batcher = Batcher {
        engine,
        text,
        dir,
        name: options.model.model.clone(),
        policy: BatchPolicy {
            max_batch_size: options.max_batch_size,
            max_delay: options.max_delay,
        },
        metrics,
        queued,
        labels: None,
    };
    Ok((batcher, warm_kind))
}

/// A fixed-resolution model opened as `options` ask, with what the routes know of it, its
/// text tower if it has one, and its folder.
fn open_fixed(
    options: &ServeOptions,
) -> Result<(Engine, ModelInfo, Option<TextTower>, std::path::PathBuf)> {
    let opened = options.model.open()?;
    let mut runner = opened.runner;
    let pre = preprocessing(&mut runner, &opened.dir, options.model.image_size.is_some())?;
    let image_bytes = ImageDecoder::new(&pre, options.limits).image_bytes();
    let device_decode = device_decoding(options.decode, &runner, &pre)?;
    let text = match runner.model.image_embeds_width() {
        Some(width) => TextTower::load(&opened.dir, width).ok(),
        None => None,
    };
    let info = ModelInfo {
        name: options.model.model.clone(),
        classifier: (runner.model.head != Head::Base).then(|| runner.model.config.clone()),
        pool: Pool::choose(None, &runner.model).ok(),
        text_tower: text.is_some(),
        images: ImagePreparation::Fixed {
            pre: pre.clone(),
            device_decode,
        },
    };
    let engine = Engine::Fixed(Box::new(FixedEngine {
        runner,
        batches: MemoryBatches::new(&pre, image_bytes),
        host: ImageDecoder::new(&pre, options.limits),
        device_decode,
    }));
    Ok((engine, info, text, opened.dir))
}

/// SigLIP 2 NaFlex (`runner`, opened from `dir`) as `options` ask: images preprocessed on the
/// host, each to its own patch grid (the processor of `dir`), embedded with the pooling head
/// (or, without one, each image's mean over its own patches), and zero-shot labels scored
/// through the text tower when the checkpoint has one. It has no classifier.
fn open_naflex(
    options: &ServeOptions,
    runner: NaflexRunner,
    dir: std::path::PathBuf,
) -> Result<(Engine, ModelInfo, Option<TextTower>, std::path::PathBuf)> {
    if matches!(options.decode, Some(DecodeOn::Gpu | DecodeOn::GpuIdct)) {
        anyhow::bail!(
            "--decode gpu is not built for SigLIP 2 NaFlex: its images are decoded and resized \
             on the host, each to its own patch grid (--decode cpu runs)"
        );
    }
    let processor = vitrt_engine::naflex::processor(&dir)?;
    // Every batch size up to the largest, for each of the two kinds a batch can be
    // (embeddings, zero-shot labels), keeps its plan.
    let runner = runner.with_plans_kept(2 * options.max_batch_size);
    let width = runner.model.image_embeds_width();
    let pool = if width.is_some() {
        Pool::Projected
    } else {
        Pool::Mean
    };
    let text = width.and_then(|width| TextTower::load(&dir, width).ok());
    let info = ModelInfo {
        name: options.model.model.clone(),
        classifier: None,
        pool: Some(pool),
        text_tower: text.is_some(),
        images: ImagePreparation::Naflex(processor.clone()),
    };
    let engine = Engine::Naflex(Box::new(NaflexEngine { runner, processor }));
    Ok((engine, info, text, dir))
}

/// Where JPEGs are decoded, as `--decode` asks on `runner`'s backend: on the device by
/// default on CUDA (entropy-decoded there, or on the host with `gpu-idct`), on the host
/// elsewhere or where the preprocessing is one the device path does not do.
fn device_decoding(
    asked: Option<DecodeOn>,
    runner: &vitrt_model::Runner,
    pre: &PreprocessConfig,
) -> Result<Option<EntropyOn>> {
    let on_gpu = runner.backend().describe().starts_with("cuda");
    if matches!(asked, Some(DecodeOn::Gpu | DecodeOn::GpuIdct)) && !on_gpu {
        anyhow::bail!(
            "--decode gpu needs a CUDA device; this server runs on {} (use --decode cpu, or \
             --device cuda)",
            runner.backend().describe()
        );
    }
    if !on_gpu || asked == Some(DecodeOn::Cpu) {
        return Ok(None);
    }
    if let Some(why) = pre.device_decode_refusal() {
        eprintln!("vitrt serve: decoding on the host: {why}");
        return Ok(None);
    }
    Ok(Some(if asked == Some(DecodeOn::GpuIdct) {
        EntropyOn::Host
    } else {
        EntropyOn::Device
    }))
}

/// SIGTERM and SIGINT (Ctrl-C), their handlers installed when registered.
struct StopSignals {
    #[cfg(unix)]
    terminate: tokio::signal::unix::Signal,
    #[cfg(unix)]
    interrupt: tokio::signal::unix::Signal,
}

impl StopSignals {
    fn register() -> Result<StopSignals> {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{signal, SignalKind};
            Ok(StopSignals {
                terminate: signal(SignalKind::terminate()).context("handling SIGTERM")?,
                interrupt: signal(SignalKind::interrupt()).context("handling SIGINT")?,
            })
        }
        #[cfg(not(unix))]
        Ok(StopSignals {})
    }

    /// Waits for either.
    async fn recv(mut self) {
        #[cfg(unix)]
        tokio::select! {
            _ = self.terminate.recv() => {}
            _ = self.interrupt.recv() => {}
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}
