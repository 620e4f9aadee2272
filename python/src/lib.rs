//! The `vitrt` Python module: [`Model`] loads a checkpoint as the CLI does and classifies,
//! embeds, zero-shot labels or runs raw `pixel_values` through it. Images are decoded and
//! preprocessed here, in Rust, with the GIL released (as is the forward pass), so other Python
//! threads run meanwhile.
//!
//! Errors become Python exceptions carrying the same messages as the CLI's: `ValueError` for
//! bad input or usage (a missing model, a broken image, a wrong shape), `RuntimeError` for
//! failures of the device or the runtime. A panic inside is caught and raised as a
//! `RuntimeError` too, never unwound into Python.

mod dlpack;
mod failure;
mod images;
mod naflex;
mod several;
mod zero_shot;

use failure::{model_failure, FailAs, Failure, Result};

use anyhow::{anyhow, Context};
use images::{ImageError, ImageSource};
use numpy::{PyArray1, PyArrayMethods, PyReadonlyArrayDyn, PyUntypedArrayMethods};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use std::path::PathBuf;
use vitrt_engine::memory::MemoryBatches;
use vitrt_engine::results::{self, Scores};
use vitrt_engine::{batched, device_name, ModelOptions, OpenError, OpenedModel};
use vitrt_model::labels::Prediction;
use vitrt_model::preprocess::jpeg_coefficients::EntropyOn;
use vitrt_model::preprocess::{ImageLimits, ImageLoader, PreprocessConfig};
use vitrt_model::{Output, OutputSet, Pool, Runner, VisionModel};
use vitrt_runtime::backend::Device;
use vitrt_runtime::{DType, DeviceInput, HostTensor, PendingOutputs};

/// Moves a value that is not `Send` (the runner holds the backend, which is not) into
/// `Python::allow_threads`, which runs its closure at once on the calling thread with the
/// GIL released: the value never changes threads.
///
/// It only carries a `Model`'s own state (or a closure or result holding it), reached
/// through [`Pinned`], which says when that state may change threads; here it does not.
struct SameThread<T>(T);

// SAFETY: see the type's comment: the value is used on the thread it came from, only while
// `allow_threads` runs the closure synchronously there.
unsafe impl<T> Send for SameThread<T> {}

impl<T> SameThread<T> {
    /// The value; a method, so that a closure captures the whole wrapper and not its field.
    fn into_inner(self) -> T {
        self.0
    }
}

/// A model's engine, with the thread that created it when it must stay there.
///
/// The runner's backend is a `Box<dyn Backend>`, not `Send` as a type. Of what a backend
/// holds, only CUDA graphs are not `Send` (cudarc's graph handles are raw pointers): the CPU
/// backend, the models and the executors are, and cudarc binds its CUDA context to the
/// calling thread on every call. So an engine that never captures CUDA graphs (on the CPU,
/// or on CUDA with `cuda_graphs=False`) may move between threads, one call at a time (PyO3's
/// borrow flag keeps `&mut` exclusive: a second thread calling meanwhile gets a
/// `RuntimeError` from PyO3). One that replays graphs is pinned to its creator's thread:
/// another thread gets a `RuntimeError` saying what to do, and one dropping it leaks it, as
/// PyO3 does with objects it cannot drop.
struct Pinned<T = Engine> {
    owner: std::thread::ThreadId,
    /// Whether the engine may be used from any thread (it never captures CUDA graphs).
    movable: bool,
    engine: std::mem::ManuallyDrop<T>,
}

// SAFETY: see the type's comment: a movable engine holds only what may change threads; a
// pinned one is only reached on its owner's thread (`get` checks, `Drop` leaks it elsewhere).
unsafe impl<T> Send for Pinned<T> {}
unsafe impl<T> Sync for Pinned<T> {}

impl<T> Pinned<T> {
    fn new(engine: T, movable: bool) -> Pinned<T> {
        Pinned {
            owner: std::thread::current().id(),
            movable,
            engine: std::mem::ManuallyDrop::new(engine),
        }
    }

    fn on_owner_thread(&self) -> bool {
        std::thread::current().id() == self.owner
    }

    fn get(&mut self) -> Result<&mut T> {
        if !self.movable && !self.on_owner_thread() {
            return Err(Failure::Runtime(anyhow!(
                "this vitrt.Model replays CUDA graphs, which stay on the thread that created \
                 it: create the Model on the thread that uses it, or pass cuda_graphs=False \
                 to use it from any thread (one call at a time)"
            )));
        }
        Ok(&mut self.engine)
    }
}

impl<T> Drop for Pinned<T> {
    fn drop(&mut self) {
        if self.movable || self.on_owner_thread() {
            // SAFETY: dropped once, here, and never used after.
            unsafe { std::mem::ManuallyDrop::drop(&mut self.engine) }
        }
    }
}

/// Runs `work` with the GIL released, turning a panic into a `RuntimeError`.
fn without_gil<T, F>(py: Python<'_>, work: F) -> Result<T>
where
    F: FnOnce() -> Result<T>,
{
    let work = SameThread(work);
    let outcome = py.allow_threads(move || {
        let work = work.into_inner();
        SameThread(std::panic::catch_unwind(std::panic::AssertUnwindSafe(work)))
    });
    match outcome.into_inner() {
        Ok(result) => result,
        Err(panic) => Err(Failure::Runtime(anyhow!(
            "vitrt failed inside (a bug, please report it): {}",
            panic_message(panic.as_ref())
        ))),
    }
}

/// What a caught panic says: its `&str` or `String` payload.
fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "(no message)".to_string())
}

/// The pool named `asked` (`Model.embed`'s `pool=`), if the checkpoint has it, else the
/// checkpoint's default (`vitrt_model::Pool::choose`, as `vitrt embed`).
fn choose_pool(asked: Option<&str>, model: &VisionModel, name: &str) -> Result<Pool> {
    let asked = match asked {
        None => None,
        Some(asked) => Some(Pool::parse(asked).ok_or_else(|| {
            Failure::Value(anyhow!(
                "pool={asked:?} is not a pool: use \"projected\", \"pooler\", \"cls\" or \"mean\""
            ))
        })?),
    };
    Pool::choose(asked, model).map_err(|e| {
        let Some(pool) = asked else {
            return Failure::Value(anyhow!("the checkpoint has no vector to embed images as"));
        };
        let names: Vec<String> = e
            .available
            .iter()
            .map(|p| format!("{:?}", p.name()))
            .collect();
        Failure::Value(anyhow!(
            "pool={:?}: {name} (a {} checkpoint) has no {}; it has pool={}",
            pool.name(),
            e.family,
            pool.output().name(),
            names.join(", ")
        ))
    })
}

/// Everything a `Model` runs with; moved into `without_gil` as a whole.
struct Engine {
    runner: Runner,
    /// The checkpoint's folder (its preprocessor and text tower files).
    dir: PathBuf,
    device: Device,
    /// The preprocessing of the checkpoint (or HF's default for its size).
    preprocess: PreprocessConfig,
    /// One per decoding thread: its buffers and filter taps, reused batch after batch.
    loaders: Vec<ImageLoader>,

    /// The staging of a batch's decoded 8-bit images, [B, H, W, C] (page-locked on CUDA),
    /// grown to the largest batch, and its expansion table: the engine's in-memory batches.
    batches: MemoryBatches,
    /// JPEGs (files and bytes) are decoded on the device (`decode="gpu"` or `"gpu-idct"`).
    device_decode: bool,
    /// The label set (labels, templates) the runner scores zero-shot against now.
    zero_shot: Option<(Vec<String>, Vec<String>)>,
}

impl Engine {
    /// Resolves and loads the checkpoint, and opens the backend: the engine's
    /// [`ModelOptions::open`], as every front door (the driver warming up while the
    /// parameters are read and encoded).
    /// `announce`: say on stderr when JPEGs are decoded on the host instead of the device (one
    /// engine of several says it for all).
    fn open(
        options: &ModelOptions,
        workers: Option<usize>,
        decode: Option<&str>,
        announce: bool,
    ) -> Result<Engine> {
        let OpenedModel {
            mut runner,
            dir,
            device,
        } = options.open().map_err(|e| match e {
            OpenError::Input(e) => Failure::Value(e),
            OpenError::Device(e) => Failure::Runtime(e),
        })?;
        // The checkpoint's preprocessing (or HF's default at the model's size), the runner
        // set to the size it makes.
        let preprocess = batched::preprocessing(&mut runner, &dir, false).or_value()?;
        let workers = workers.unwrap_or_else(|| batched::default_workers(device != Device::Cpu));
        let on_gpu = device != Device::Cpu;
        let (mut device_decode, entropy) = match decode {
            None => (on_gpu, EntropyOn::Device),
            Some("cpu") => (false, EntropyOn::Device),
            Some(gpu @ ("gpu" | "gpu-idct")) if on_gpu => (
                true,
                if gpu == "gpu" {
                    EntropyOn::Device
                } else {
                    EntropyOn::Host
                },
            ),
            Some(gpu @ ("gpu" | "gpu-idct")) => {
                return Err(Failure::Value(anyhow!(
                    "decode=\"{gpu}\" needs a CUDA device; this model is on the CPU \
                     (use decode=\"cpu\", or device=\"cuda\")"
                )))
            }
            Some(other) => {
                return Err(Failure::Value(anyhow!(
                    "decode: unknown value \"{other}\" (use \"gpu\", \"gpu-idct\" or \"cpu\")"
                )))
            }
        };
        if device_decode {
            if let Some(why) = preprocess.device_decode_refusal() {
                if announce {
                    eprintln!("vitrt: decoding on the host: {why}");
                }
                device_decode = false;
            }
        }
        let loaders = (0..workers)
            .map(|_| ImageLoader::new(&preprocess, ImageLimits::default()).with_entropy(entropy))
            .collect();
        let batches = MemoryBatches::new(&preprocess, image_bytes_of(&preprocess));
        Ok(Engine {
            runner,
            dir,
            device,
            preprocess,
            loaders,
            batches,
            device_decode,
            zero_shot: None,
        })
    }

    /// Whether PIL images are converted to RGB before decoding: the processor's
    /// `do_convert_rgb`, for an RGB model.
    fn converts_to_rgb(&self) -> bool {
        self.preprocess.do_convert_rgb() && self.preprocess.num_channels() == 3
    }

    /// Sets the runner up for images as the preprocessing makes them, producing `outputs`.
    fn prepare_for_images(&mut self, outputs: OutputSet) -> Result<()> {
        self.runner
            .set_input_size(self.preprocess.output_size())
            .map_err(model_failure)?;
        self.runner.set_outputs(outputs);
        Ok(())
    }

    /// Decodes and resizes `images` (the first being `images[first]` of the call) into the
    /// staging buffer as 8-bit [B, H, W, C], a run of consecutive images on each loader's
    /// thread, and queues them as one batch (`Runner::submit_bytes`: expanded to the model's
    /// input on the device, and run), returning once the buffer may be reused. The error of
    /// the first image that fails is the one raised, before anything is queued.
    fn submit_images(&mut self, images: &[ImageSource], first: usize) -> Result<PendingOutputs> {
        if self.device_decode {
            return self.submit_images_for_device(images, first);
        }
        self.submit_images_on_host(images, first)
    }

    /// As [`Engine::submit_images`], the JPEGs (files and bytes) prepared for decoding on the
    /// device: the threads only read them into the arena.
    fn submit_images_for_device(
        &mut self,
        images: &[ImageSource],
        first: usize,
    ) -> Result<PendingOutputs> {
        let image_bytes = self.loaders[0].output_bytes();
        let loaders = &mut self.loaders;
        self.batches
            .submit_filled_for_device(&mut self.runner, images.len(), |pixels, arena| {
                on_loader_threads(
                    loaders,
                    images,
                    pixels,
                    image_bytes,
                    |image, loader, k, out| image.load_for_device(loader, first + k, out, arena),
                )
            })
    }

    /// Waits for a batch's outputs; a batch the device marked an image of (see
    /// `MemoryBatches::finish`) is decoded again on the host and run again.
    fn finish(
        &mut self,
        pending: PendingOutputs,
        images: &[ImageSource],
        first: usize,
    ) -> Result<Vec<HostTensor>> {
        let (outputs, marked) = MemoryBatches::finish(&mut self.runner, pending).or_runtime()?;
        if !marked {
            return Ok(outputs);
        }
        let pending = self.submit_images_on_host(images, first)?;
        self.runner.finish(pending).map_err(model_failure)
    }

    /// [`Engine::submit_images`] with every image decoded on the host.
    fn submit_images_on_host(
        &mut self,
        images: &[ImageSource],
        first: usize,
    ) -> Result<PendingOutputs> {
        let image_bytes = self.loaders[0].output_bytes();
        let loaders = &mut self.loaders;
        self.batches
            .submit_filled(&mut self.runner, images.len(), |pixels| {
                on_loader_threads(
                    loaders,
                    images,
                    pixels,
                    image_bytes,
                    |image, loader, k, out| {
                        image.load_into(loader, first + k, out).map(|()| None::<()>)
                    },
                )
                .map(|_| ())
            })
    }
}

/// Runs `load` on every image of `images` with its place in `pixels` ([B, H, W, C] bytes,
/// `image_bytes` each), a run of consecutive images on each loader's thread; returns what it
/// gave for each image that gave something, by place in the batch. The error of the first
/// image that fails, in input order, is the one returned.
fn on_loader_threads<T: Send>(
    loaders: &mut [ImageLoader],
    images: &[ImageSource],
    pixels: &mut [u8],
    image_bytes: usize,
    load: impl Fn(
            &ImageSource,
            &mut ImageLoader,
            usize,
            &mut [u8],
        ) -> std::result::Result<Option<T>, ImageError>
        + Sync,
) -> Result<Vec<(usize, T)>> {
    let per_thread = images.len().div_ceil(loaders.len()).max(1);
    let load = &load;
    let results: Vec<std::result::Result<Vec<(usize, T)>, ImageError>> =
        std::thread::scope(|scope| {
            let threads: Vec<_> = loaders
                .iter_mut()
                .zip(images.chunks(per_thread))
                .zip(pixels.chunks_mut(per_thread * image_bytes))
                .enumerate()
                .map(|(t, ((loader, images), pixels))| {
                    scope.spawn(move || {
                        let mut gave = Vec::new();
                        let outputs = pixels.chunks_mut(image_bytes);
                        for (k, (image, out)) in images.iter().zip(outputs).enumerate() {
                            let place = t * per_thread + k;
                            if let Some(given) = load(image, loader, place, out)? {
                                gave.push((place, given));
                            }
                        }
                        Ok(gave)
                    })
                })
                .collect();
            threads
                .into_iter()
                // A decoding thread's panic goes on to `without_gil`, which reports it.
                .map(|thread| {
                    thread
                        .join()
                        .unwrap_or_else(|p| std::panic::resume_unwind(p))
                })
                .collect()
        });
    let mut gave = Vec::new();
    for result in results {
        gave.extend(result.or_value()?);
    }
    Ok(gave)
}

/// Bytes of one image as the preprocessing makes it (height x width x channels).
fn image_bytes_of(preprocess: &PreprocessConfig) -> usize {
    ImageLoader::new(preprocess, ImageLimits::default()).output_bytes()
}

/// Refuses a row of `values` (rows of `width`, the first being `images[first]`'s) holding a
/// value that is not finite, naming the image and `output`; with `normalize`, scales each row
/// to unit length.
fn finite_rows(
    values: &mut [f32],
    width: usize,
    first: usize,
    output: &str,
    normalize: bool,
) -> Result<()> {
    for (k, row) in values.chunks_mut(width.max(1)).enumerate() {
        if let Some(bad) = row.iter().find(|v| !v.is_finite()) {
            return Err(Failure::Runtime(anyhow!(
                "images[{}]: the model gave a non-finite value ({bad}) in its {output}",
                first + k
            )));
        }
        if normalize {
            results::normalize(row);
        }
    }
    Ok(())
}

/// The tensor named `name` of a batch's outputs, checked to be [count, width].
fn output_rows(outputs: Vec<HostTensor>, name: &str, count: usize) -> Result<(usize, Vec<f32>)> {
    results::output_rows(outputs, name, count).or_runtime()
}

/// Each image's predictions as a list of `{"index", "label", "probability"}` dicts.
fn predictions_to_python<'py>(
    py: Python<'py>,
    per_image: &[Vec<Prediction>],
) -> PyResult<Bound<'py, PyList>> {
    let out = PyList::empty(py);
    for predictions in per_image {
        let row = PyList::empty(py);
        for p in predictions {
            let dict = PyDict::new(py);
            dict.set_item("index", p.index)?;
            dict.set_item("label", &p.label)?;
            dict.set_item("probability", p.probability)?;
            row.append(dict)?;
        }
        out.append(row)?;
    }
    Ok(out)
}

fn check_top_k(top_k: usize) -> Result<()> {
    if top_k == 0 {
        return Err(Failure::Value(anyhow!("top_k must be at least 1")));
    }
    Ok(())
}

/// A Vision Transformer checkpoint loaded on a device.
///
/// `Model(model, device=None, dtype=None, offline=False, revision=None, batch_size=None,
/// workers=None, cuda_graphs=True, residual_dtype=None, decode=None, fp8_layers=None,
/// fp8_scales=None)`:
/// `model` is a local folder (config.json and safetensors) or a Hugging Face hub id (from the
/// local cache only with `offline=True` or `HF_HUB_OFFLINE=1`); `device` is "cpu", "cuda" or
/// "cuda:N", by default the first CUDA GPU that opens, else the CPU; `dtype` is "f32", "f16",
/// "bf16" or "fp8" (f16 with linear layers in FP8, as the CLI's `--dtype fp8`: those the file
/// `fp8_layers`, written by `vitrt quantize-report --output`, names, else those saved in
/// `fp8_scales`' file, else the default's; with `fp8_scales`, a file `vitrt calibrate --out`
/// wrote, their inputs are quantised with its static scales, as the CLI's `--fp8-scales`), by
/// default f16 on a GPU and f32 on the CPU; images go through the model
/// `batch_size` at a time (default 64 on a GPU, 8 on the CPU), decoded by `workers` threads
/// (default: every core on a GPU, half of them on the CPU, as the CLI's `--workers`).
/// `cuda_graphs` replays each forward pass on CUDA as one captured graph, as the CLI does;
/// `residual_dtype` ("f32" or the dtype) stores the residual stream as the CLI's
/// `--residual-dtype` does; `decode` ("gpu", "gpu-idct" or "cpu", by default "gpu" on CUDA
/// and "cpu" on the CPU) says where JPEG files and bytes are decoded, as the CLI's `--decode`:
/// on the GPU with the host's exact pixels, a batch the GPU cannot decode exactly being
/// decoded again on the host. The model opens as every front door opens it (the engine's
/// `ModelOptions::open`): the GPU's driver starts while the weights are read and encoded.
///
/// `device` may name several devices: `"cuda:all"` (every GPU this process sees),
/// `"cuda:0,2"`, or a list of names; an engine is opened on each, on a thread of its own, and
/// each batch goes to the device with the fewest outstanding (`workers` shared among them),
/// the results coming back in input order; `forward` cuts a batch's rows over the devices (a
/// CUDA tensor runs on its own device). `device` then joins the names with commas; `devices`
/// lists them.
///
/// A Model may be used from any thread, one call at a time (on several devices always), except
/// on one CUDA device with `cuda_graphs=True`: its graphs stay on the thread that created it (another thread gets a
/// RuntimeError); pass `cuda_graphs=False` to use it from other threads (Ray Data's actors
/// call from another thread than the one that created them).
#[pyclass(module = "vitrt", name = "Model")]
struct Model {
    placed: Placed,
    /// The devices it runs on, by name ("cpu", "cuda:N").
    devices: Vec<String>,
    dtype: DType,
    /// Linear layers run in FP8 (`dtype="fp8"`; `dtype` is then the f16 around them).
    fp8: bool,
    image_size: (usize, usize),
    name: String,
    batch_size: usize,
}

/// Where a `Model`'s engines are: one, used on the calling thread, or one per device, each on
/// a thread of its own (`several`).
enum Placed {
    One(Box<Pinned>),
    Several(Box<several::SeveralEngines>),
    /// A SigLIP 2 NaFlex checkpoint, on one device (`naflex`).
    Naflex(Box<Pinned<naflex::NaflexEngine>>),
}

/// The vision model (its head, labels, pools), as every device opened it.
fn vision_model(placed: &mut Placed) -> Result<&VisionModel> {
    match placed {
        Placed::One(pinned) => Ok(&pinned.get()?.runner.model),
        Placed::Several(engines) => Ok(&engines.model),
        Placed::Naflex(_) => Err(naflex_refusal("this call")),
    }
}

/// Why a call is not built for a SigLIP 2 NaFlex checkpoint (`what` is the call).
fn naflex_refusal(what: &str) -> Failure {
    Failure::Value(anyhow!(
        "{what} is not built for SigLIP 2 NaFlex checkpoints: they have no classifier, and \
         their input is patch rows with a mask, not [B, C, H, W] pixels; embed() and \
         zero_shot() run"
    ))
}

/// A batch queued and not yet collected: its first image's index, its count, its pending
/// outputs and its images (decoded again on the host if the device marks one).
type InFlight = (usize, usize, PendingOutputs, Vec<ImageSource>);

impl Model {
    /// Runs `images` through a NaFlex model in batches, handing each batch's rows of `output`
    /// to `each_batch` with the index of its first image, its image count and the rows' width.
    fn naflex_batches(
        &mut self,
        py: Python<'_>,
        images: &Bound<'_, PyAny>,
        output: &str,
        mut each_batch: impl FnMut(usize, usize, usize, Vec<f32>) -> Result<()>,
    ) -> PyResult<()> {
        let batch_size = self.batch_size;
        let Placed::Naflex(pinned) = &mut self.placed else {
            return Err(Failure::Runtime(anyhow!("not a SigLIP 2 NaFlex model")).into());
        };
        let engine = pinned.get()?;
        let images = images::collect(images)?;
        let convert_rgb = engine.processor.do_convert_rgb;
        for (chunk_index, chunk) in images.chunks(batch_size).enumerate() {
            let first = chunk_index * batch_size;
            let sources = chunk
                .iter()
                .enumerate()
                .map(|(k, image)| ImageSource::of(py, image, first + k, convert_rgb))
                .collect::<PyResult<Vec<_>>>()?;
            let on_thread = SameThread(&mut *engine);
            let (width, rows) = without_gil(py, move || {
                on_thread
                    .into_inner()
                    .run(&sources, first, output)
                    .map(SameThread)
            })?
            .into_inner();
            each_batch(first, chunk.len(), width, rows)?;
        }
        Ok(())
    }

    /// The `top_k` zero-shot labels of each image, against the labels set on the engines.
    fn zero_shot_scores<'py>(
        &mut self,
        py: Python<'py>,
        images: &Bound<'py, PyAny>,
        labels: &[String],
        top_k: usize,
    ) -> PyResult<Bound<'py, PyList>> {
        let mut per_image = Vec::new();
        self.run_batches(
            py,
            images,
            OutputSet::of(&[Output::ZeroShotProbs]),
            |_, count, outputs| {
                let (width, probs) = output_rows(outputs, Output::ZeroShotProbs.name(), count)?;
                per_image.extend(
                    probs
                        .chunks(width)
                        .map(|row| Scores::Probabilities(labels).top_k(row, top_k)),
                );
                Ok(())
            },
        )?;
        predictions_to_python(py, &per_image)
    }

    /// Runs `images` through the model in batches producing `outputs`, handing each batch's
    /// outputs to `each_batch` with the index of its first image and its image count.
    fn run_batches(
        &mut self,
        py: Python<'_>,
        images: &Bound<'_, PyAny>,
        outputs: OutputSet,
        mut each_batch: impl FnMut(usize, usize, Vec<HostTensor>) -> Result<()>,
    ) -> PyResult<()> {
        let images = images::collect(images)?;
        let batch_size = self.batch_size;
        let engine = match &mut self.placed {
            Placed::One(pinned) => pinned.get()?,
            Placed::Several(engines) => {
                return run_batches_on_devices(
                    py, engines, &images, batch_size, outputs, each_batch,
                )
            }
            Placed::Naflex(_) => return Err(naflex_refusal("this call").into()),
        };
        engine.prepare_for_images(outputs)?;
        let convert_rgb = engine.converts_to_rgb();
        // One batch in flight: batch k + 1 is decoded while the device runs batch k, whose
        // outputs are then collected, and k + 1 queued (as the CLI's pipeline does).
        let mut in_flight: Option<InFlight> = None;
        let mut step = |in_flight: &mut Option<InFlight>,
                        chunk_index: usize,
                        chunk: &[Bound<'_, PyAny>]|
         -> PyResult<()> {
            let first = chunk_index * batch_size;
            let sources = chunk
                .iter()
                .enumerate()
                .map(|(k, image)| ImageSource::of(py, image, first + k, convert_rgb))
                .collect::<PyResult<Vec<_>>>()?;
            let previous = in_flight.take();
            let pinned = SameThread(&mut *engine);
            let (done, pending, sources) = without_gil(py, move || {
                let engine = pinned.into_inner();
                let pending = engine.submit_images(&sources, first);
                // The previous batch ran meanwhile; its outputs are collected even when this
                // one failed, so that nothing is left in flight.
                let done = previous.map(|(first, count, pending, sources)| {
                    (first, count, engine.finish(pending, &sources, first))
                });
                Ok(SameThread((done, pending, sources)))
            })?
            .into_inner();
            let pending = pending?;
            *in_flight = Some((first, chunk.len(), pending, sources));
            if let Some((first, count, outputs)) = done {
                each_batch(first, count, outputs?)?;
            }
            Ok(())
        };
        let mut outcome = Ok(());
        for (chunk_index, chunk) in images.chunks(batch_size).enumerate() {
            outcome = step(&mut in_flight, chunk_index, chunk);
            if outcome.is_err() {
                break;
            }
        }
        // The last batch; after an error, drained and dropped.
        if let Some((first, count, pending, sources)) = in_flight.take() {
            let pinned = SameThread(&mut *engine);
            let outputs = without_gil(py, move || {
                pinned.into_inner().finish(pending, &sources, first)
            });
            if outcome.is_ok() {
                outcome = outputs
                    .map_err(PyErr::from)
                    .and_then(|o| each_batch(first, count, o).map_err(PyErr::from));
            }
        }
        outcome
    }
}

/// `Model.run_batches` on several devices: each batch dealt to a device's thread, the outputs
/// handed to `each_batch` in input order. The first error, in input order, is raised once
/// every batch dealt has come back.
fn run_batches_on_devices(
    py: Python<'_>,
    engines: &mut several::SeveralEngines,
    images: &[Bound<'_, PyAny>],
    batch_size: usize,
    outputs: OutputSet,
    mut each_batch: impl FnMut(usize, usize, Vec<HostTensor>) -> Result<()>,
) -> PyResult<()> {
    engines.prepare_for_images(py, outputs)?;
    let convert_rgb = engines.convert_rgb;
    let mut dealer = engines.dealer();
    let mut outcome: PyResult<()> = Ok(());
    let mut hand_on = |ready: Vec<several::InOrder>, outcome: &mut PyResult<()>| {
        for (first, count, outputs) in ready {
            if outcome.is_ok() {
                *outcome = outputs
                    .and_then(|o| each_batch(first, count, o))
                    .map_err(PyErr::from);
            }
        }
    };
    for (chunk_index, chunk) in images.chunks(batch_size).enumerate() {
        if outcome.is_err() || dealer.failed {
            break;
        }
        let first = chunk_index * batch_size;
        let sources = chunk
            .iter()
            .enumerate()
            .map(|(k, image)| ImageSource::of(py, image, first + k, convert_rgb))
            .collect::<PyResult<Vec<_>>>();
        match sources.and_then(|sources| Ok(dealer.deal(py, first, sources)?)) {
            Ok(ready) => hand_on(ready, &mut outcome),
            Err(e) => outcome = Err(e),
        }
    }
    // What is in flight comes back before anything is raised: nothing is left on a device.
    match dealer.drain(py) {
        Ok(ready) => hand_on(ready, &mut outcome),
        Err(e) if outcome.is_ok() => outcome = Err(e.into()),
        Err(_) => {}
    }
    outcome
}

/// The devices `device=` names when it names several: a list of names (`["cuda:0",
/// "cuda:2"]`; `"cpu"` may stand a device in, more than once), `"cuda:all"` or `"cuda:0,2"`.
/// `None` for one device or none, which `ModelOptions` takes as it is (in `single`).
fn several_devices(
    device: Option<&Bound<'_, PyAny>>,
    single: &mut Option<String>,
) -> PyResult<Option<Vec<String>>> {
    let Some(device) = device.filter(|d| !d.is_none()) else {
        return Ok(None);
    };
    if let Ok(name) = device.extract::<String>() {
        let devices = vitrt_engine::devices::several_devices(Some(&name))
            .map_err(|e| PyValueError::new_err(format!("device={name:?}: {e:#}")))?;
        *single = Some(name);
        return Ok(devices.filter(|d| d.len() > 1));
    }
    let names: Vec<String> = device.extract().map_err(|_| {
        PyValueError::new_err(
            "device must be a name (\"cpu\", \"cuda\", \"cuda:N\", \"cuda:all\", \
             \"cuda:0,2\") or a list of names",
        )
    })?;
    if names.is_empty() {
        return Err(PyValueError::new_err(
            "device=[]: name at least one device, or leave device out",
        ));
    }
    for (k, name) in names.iter().enumerate() {
        let parsed = Device::parse(name)
            .map_err(|e| PyValueError::new_err(format!("device[{k}]={name:?}: {e}")))?;
        if parsed != Device::Cpu && names[..k].contains(name) {
            return Err(PyValueError::new_err(format!(
                "device: {name} is named twice"
            )));
        }
    }
    if names.len() == 1 {
        *single = names.into_iter().next();
        return Ok(None);
    }
    Ok(Some(names))
}

#[pymethods]
impl Model {
    #[new]
    // One argument per keyword of the Python constructor.
    #[allow(clippy::too_many_arguments)]
    #[pyo3(signature = (model, device=None, dtype=None, offline=false, revision=None, batch_size=None, workers=None, cuda_graphs=true, residual_dtype=None, decode=None, fp8_layers=None, fp8_scales=None))]
    fn new(
        py: Python<'_>,
        model: PathBuf,
        device: Option<&Bound<'_, PyAny>>,
        dtype: Option<String>,
        offline: bool,
        revision: Option<String>,
        batch_size: Option<usize>,
        workers: Option<usize>,
        cuda_graphs: bool,
        residual_dtype: Option<String>,
        decode: Option<String>,
        fp8_layers: Option<PathBuf>,
        fp8_scales: Option<PathBuf>,
    ) -> PyResult<Model> {
        let name = model.to_string_lossy().into_owned();
        let parse_dtype = |keyword: &str, s: Option<String>| match s {
            Some(s) => DType::parse(&s).map(Some).ok_or_else(|| {
                PyValueError::new_err(format!(
                    "{keyword}: unknown dtype \"{s}\" (use f32, f16, bf16 or, for dtype, fp8)"
                ))
            }),
            None => Ok(None),
        };
        // "fp8": an f16 run with FP8 linear layers, as the CLI's `--dtype fp8`.
        let fp8_asked = matches!(dtype.as_deref(), Some("fp8" | "e4m3"));
        let dtype = if fp8_asked {
            Some(DType::F16)
        } else {
            parse_dtype("dtype", dtype)?
        };
        let fp8_scales: Option<std::sync::Arc<vitrt_model::fp8_scales::Fp8ScalesFile>> =
            match (fp8_asked, fp8_scales) {
                (true, Some(path)) => Some(
                    vitrt_model::fp8_scales::Fp8ScalesFile::read(&path)
                        .map_err(|e| PyValueError::new_err(format!("fp8_scales: {e}")))?
                        .into(),
                ),
                (false, Some(_)) => {
                    return Err(PyValueError::new_err("fp8_scales goes with dtype=\"fp8\""))
                }
                (_, None) => None,
            };
        let fp8 = match (fp8_asked, fp8_layers) {
            (false, Some(_)) => {
                return Err(PyValueError::new_err("fp8_layers goes with dtype=\"fp8\""))
            }
            (false, None) => None,
            (true, path) => {
                let choice = path
                    .map(|path| {
                        vitrt_model::fp8_choice::Fp8ChoiceFile::read(&path)
                            .map_err(|e| PyValueError::new_err(format!("fp8_layers: {e}")))
                    })
                    .transpose()?;
                Some(vitrt_model::fp8_choice::layers_to_run(
                    choice.as_ref(),
                    fp8_scales.as_deref(),
                ))
            }
        };
        let residual_dtype = parse_dtype("residual_dtype", residual_dtype)?;
        if batch_size == Some(0) {
            return Err(PyValueError::new_err("batch_size must be at least 1"));
        }
        if workers == Some(0) {
            return Err(PyValueError::new_err("workers must be at least 1"));
        }
        let mut single = None;
        let several = several_devices(device, &mut single)?;
        let options = ModelOptions {
            revision,
            offline,
            device: single,
            dtype,
            residual_dtype,
            cuda_graphs,
            fp8,
            fp8_scales,
            ..ModelOptions::new(name.clone())
        };
        if several.is_none() {
            let opened = without_gil(py, || naflex::NaflexEngine::open(&options).map(SameThread))?
                .into_inner();
            if let Some(engine) = opened {
                let movable = engine.device == Device::Cpu || !cuda_graphs;
                return Ok(Model {
                    devices: vec![device_name(engine.device)],
                    dtype: engine.runner.backend().dtype(),
                    fp8: false,
                    // No one size: each image keeps its own patch grid.
                    image_size: (0, 0),
                    batch_size: batch_size.unwrap_or(match engine.device {
                        Device::Cpu => 8,
                        Device::Cuda(_) => 64,
                    }),
                    placed: Placed::Naflex(Box::new(Pinned::new(engine, movable))),
                    name,
                });
            }
        }
        if let Some(devices) = several {
            // Each device's engine decodes with its share of the threads.
            let on_gpu = devices.iter().any(|d| d != "cpu");
            let workers = workers.unwrap_or_else(|| batched::default_workers(on_gpu));
            let workers = (workers / devices.len()).max(1);
            let engines = without_gil(py, || {
                several::SeveralEngines::open(&options, &devices, workers, decode.as_deref())
                    .map(SameThread)
            })?
            .into_inner();
            return Ok(Model {
                devices: engines.names(),
                dtype: engines.dtype,
                fp8: options.fp8.is_some(),
                image_size: engines.image_size,
                placed: Placed::Several(Box::new(engines)),
                name,
                batch_size: batch_size.unwrap_or(if on_gpu { 64 } else { 8 }),
            });
        }
        let engine = without_gil(py, || {
            Engine::open(&options, workers, decode.as_deref(), true).map(SameThread)
        })?
        .into_inner();
        let batch_size = batch_size.unwrap_or(match engine.device {
            Device::Cpu => 8,
            Device::Cuda(_) => 64,
        });
        // Graphs are only captured on CUDA (the CPU backend runs op by op).
        let movable = engine.device == Device::Cpu || !cuda_graphs;
        Ok(Model {
            devices: vec![device_name(engine.device)],
            dtype: engine.runner.backend().dtype(),
            fp8: options.fp8.is_some(),
            image_size: engine.preprocess.output_size(),
            placed: Placed::One(Box::new(Pinned::new(engine, movable))),
            name,
            batch_size,
        })
    }

    /// The device the model runs on: "cpu" or "cuda:N"; on several, their names joined by
    /// commas ("cuda:0,cuda:1").
    #[getter]
    fn device(&self) -> String {
        self.devices.join(",")
    }

    /// The devices the model runs on, by name: one, or each of several.
    #[getter]
    fn devices(&self) -> Vec<String> {
        self.devices.clone()
    }

    /// The storage type of weights and activations: "f32", "f16" or "bf16"; "fp8" for an f16
    /// run with FP8 linear layers.
    #[getter]
    fn dtype(&self) -> String {
        if self.fp8 {
            "fp8".to_string()
        } else {
            self.dtype.to_string()
        }
    }

    /// How many images go through the model at a time.
    #[getter]
    fn batch_size(&self) -> usize {
        self.batch_size
    }

    /// (height, width) of the images the model's preprocessing makes.
    #[getter]
    fn image_size(&self) -> (usize, usize) {
        self.image_size
    }

    fn __repr__(&self) -> String {
        format!(
            "vitrt.Model({:?}, device={:?}, dtype={:?}, batch_size={})",
            self.name,
            self.device(),
            self.dtype(),
            self.batch_size
        )
    }

    /// The `top_k` most probable classes of each image (softmax over the logits), as a list
    /// per image of `{"index", "label", "probability"}` dicts. Images are paths, PIL images
    /// or uint8 numpy arrays [H, W, 3] or [H, W] (a uint8 array [N, H, W, C] is N images).
    #[pyo3(signature = (images, top_k=5))]
    fn classify<'py>(
        &mut self,
        py: Python<'py>,
        images: &Bound<'py, PyAny>,
        top_k: usize,
    ) -> PyResult<Bound<'py, PyList>> {
        check_top_k(top_k)?;
        if matches!(self.placed, Placed::Naflex(_)) {
            return Err(naflex_refusal("classify()").into());
        }
        let model = vision_model(&mut self.placed)?;
        if model.num_labels().is_none() {
            return Err(PyValueError::new_err(format!(
                "{} is a {} checkpoint without a classification head: use embed(), or \
                 zero_shot() for a CLIP or SigLIP checkpoint with both towers",
                self.name,
                model.config.family.name()
            )));
        }
        let config = model.config.clone();
        let mut per_image = Vec::new();
        self.run_batches(
            py,
            images,
            OutputSet::of(&[Output::Logits]),
            |_, count, outputs| {
                let (width, logits) = output_rows(outputs, Output::Logits.name(), count)?;
                per_image.extend(
                    logits
                        .chunks(width)
                        .map(|row| Scores::Logits(&config).top_k(row, top_k)),
                );
                Ok(())
            },
        )?;
        predictions_to_python(py, &per_image)
    }

    /// One embedding per image: a float32 array [N, D]. `pool` is "projected" (CLIP's and
    /// SigLIP's image embeddings), "pooler", "cls" or "mean"; by default the first of these
    /// the checkpoint has. `normalize=True` scales each row to unit length.
    #[pyo3(signature = (images, pool=None, normalize=false))]
    fn embed<'py>(
        &mut self,
        py: Python<'py>,
        images: &Bound<'py, PyAny>,
        pool: Option<&str>,
        normalize: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        if let Placed::Naflex(pinned) = &mut self.placed {
            let engine = pinned.get()?;
            let output = engine.pool_output(pool, &self.name)?;
            let mut dim = engine.runner.model.config.hidden_size;
            let mut rows: Vec<f32> = Vec::new();
            let mut count = 0;
            self.naflex_batches(py, images, output, |first, batch, width, mut values| {
                dim = width;
                finite_rows(&mut values, width, first, output, normalize)?;
                rows.extend_from_slice(&values);
                count += batch;
                Ok(())
            })?;
            return Ok(PyArray1::from_vec(py, rows)
                .reshape([count, dim])?
                .into_any());
        }
        let model = vision_model(&mut self.placed)?;
        let pool = choose_pool(pool, model, &self.name)?;
        let mut dim = match pool {
            Pool::Projected => model
                .image_embeds_width()
                .unwrap_or(model.config.hidden_size),
            _ => model.config.hidden_size,
        };
        let name = pool.output().name();
        let mut rows: Vec<f32> = Vec::new();
        let mut count = 0;
        self.run_batches(
            py,
            images,
            OutputSet::of(&[pool.output()]),
            |first, batch, outputs| {
                let (width, mut values) = output_rows(outputs, name, batch)?;
                dim = width;
                finite_rows(&mut values, width, first, name, normalize)?;
                rows.extend_from_slice(&values);
                count += batch;
                Ok(())
            },
        )?;
        Ok(PyArray1::from_vec(py, rows)
            .reshape([count, dim])?
            .into_any())
    }

    /// Scores images against text labels with a CLIP or SigLIP checkpoint holding both
    /// towers: each label is put into each template at its `{}` (default "This is a photo of
    /// {}.") and encoded by the text tower, the templates of a label averaged. Returns the
    /// `top_k` labels of each image as `classify` does; the probabilities are CLIP's softmax
    /// over the labels, or SigLIP's sigmoid of each.
    #[pyo3(signature = (images, labels, templates=None, top_k=5))]
    fn zero_shot<'py>(
        &mut self,
        py: Python<'py>,
        images: &Bound<'py, PyAny>,
        labels: Vec<String>,
        templates: Option<Vec<String>>,
        top_k: usize,
    ) -> PyResult<Bound<'py, PyList>> {
        check_top_k(top_k)?;
        let labels = zero_shot::check_labels(labels)?;
        let templates = zero_shot::check_templates(templates)?;
        let asked = (labels.clone(), templates);
        if let Placed::Naflex(pinned) = &mut self.placed {
            let engine = pinned.get()?;
            if engine.zero_shot.as_ref() != Some(&asked) {
                let pinned = SameThread(&mut *engine);
                let name = &self.name;
                let (labels, templates) = (&asked.0, &asked.1);
                without_gil(py, move || {
                    pinned.into_inner().set_labels(name, labels, templates)
                })?;
                engine.zero_shot = Some(asked);
            }
            let mut per_image = Vec::new();
            self.naflex_batches(py, images, "probs", |_, _, width, probs| {
                per_image.extend(
                    probs
                        .chunks(width)
                        .map(|row| Scores::Probabilities(&labels).top_k(row, top_k)),
                );
                Ok(())
            })?;
            return predictions_to_python(py, &per_image);
        }
        let engine = match &mut self.placed {
            Placed::Naflex(_) => return Err(naflex_refusal("this call").into()),
            Placed::One(pinned) => pinned.get()?,
            Placed::Several(engines) => {
                if engines.zero_shot.as_ref() != Some(&asked) {
                    // Each device encodes the labels with its own text tower.
                    let (name, (labels, templates)) = (self.name.clone(), asked.clone());
                    engines.on_each(py, move |engine| {
                        let dir = engine.dir.clone();
                        zero_shot::set_labels(&mut engine.runner, &dir, &name, &labels, &templates)
                    })?;
                    engines.zero_shot = Some(asked);
                }
                return self.zero_shot_scores(py, images, &labels, top_k);
            }
        };
        if engine.zero_shot.as_ref() != Some(&asked) {
            let pinned = SameThread(&mut *engine);
            let name = &self.name;
            let (labels, templates) = (&asked.0, &asked.1);
            without_gil(py, move || {
                let engine = pinned.into_inner();
                let dir = engine.dir.as_path();
                zero_shot::set_labels(&mut engine.runner, dir, name, labels, templates)
            })?;
            engine.zero_shot = Some(asked);
        }
        self.zero_shot_scores(py, images, &labels, top_k)
    }

    /// Runs `pixel_values`, float32 [B, C, H, W] already preprocessed, through the model;
    /// returns its outputs as `vitrt infer` writes them: a dict of name to float32 array
    /// (`logits`, or `last_hidden_state` and what the family pools from it). Images of another
    /// height and width than the preprocessing's run with the position embeddings resampled.
    ///
    /// `pixel_values` may be a numpy array, another library's host tensor (read through
    /// DLPack), or a contiguous CUDA tensor on the model's GPU (torch's, say), which is read
    /// there through DLPack: copied into the model's input on the device, after the writes
    /// pending on the producer's stream.
    fn forward<'py>(
        &mut self,
        py: Python<'py>,
        pixel_values: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyDict>> {
        if matches!(self.placed, Placed::Naflex(_)) {
            return Err(naflex_refusal("forward()").into());
        }
        let outputs = match dlpack::device_of(pixel_values)? {
            Some((dlpack::DL_CUDA, device_id)) => self.forward_cuda(py, pixel_values, device_id)?,
            Some((dlpack::DL_CPU, _))
                if !pixel_values.is_instance_of::<numpy::PyUntypedArray>() =>
            {
                // A host tensor of another library (torch on the CPU): numpy reads it in place.
                let array = py
                    .import("numpy")?
                    .call_method1("from_dlpack", (pixel_values,))?;
                self.forward_host(py, &array)?
            }
            _ => self.forward_host(py, pixel_values)?,
        };
        let dict = PyDict::new(py);
        for tensor in outputs {
            let array = PyArray1::from_vec(py, tensor.data).reshape(tensor.shape)?;
            dict.set_item(tensor.name, array)?;
        }
        Ok(dict)
    }
}

impl Model {
    /// `forward` on a host array: float32 numpy [B, C, H, W].
    fn forward_host<'py>(
        &mut self,
        py: Python<'py>,
        pixel_values: &Bound<'py, PyAny>,
    ) -> PyResult<Vec<HostTensor>> {
        let array: PyReadonlyArrayDyn<'py, f32> = pixel_values.extract().map_err(|_| {
            let what = pixel_values
                .getattr("dtype")
                .map(|d| format!("an array of dtype {d}"))
                .unwrap_or_else(|_| {
                    pixel_values
                        .get_type()
                        .name()
                        .map_or("something else".to_string(), |n| format!("a {n}"))
                });
            PyValueError::new_err(format!(
                "pixel_values must be a float32 numpy array [B, C, H, W]; got {what}"
            ))
        })?;
        let shape = array.shape().to_vec();
        let (pixels, first_bad) = images::checked_pixels(&array.as_array());
        drop(array);
        let engine = match &mut self.placed {
            Placed::Naflex(_) => return Err(naflex_refusal("this call").into()),
            Placed::One(pinned) => SameThread(pinned.get()?),
            Placed::Several(engines) => {
                // The shape is checked whole (the first device takes its height and width),
                // then each device runs its rows.
                let whole = shape.clone();
                engines.on_device(py, 0, move |engine| {
                    check_pixel_shape(&mut engine.runner, &whole)
                })?;
                refuse_non_finite(&shape, &pixels, first_bad)?;
                return Ok(engines.forward_host(py, shape, pixels)?);
            }
        };
        Ok(without_gil(py, move || {
            forward_pixels(&mut engine.into_inner().runner, &shape, &pixels, first_bad)
        })?)
    }

    /// `forward` on a CUDA tensor handed over through DLPack (torch's, say): float32,
    /// contiguous [B, C, H, W] on the model's GPU, copied into the model's input on the device
    /// (no host round trip), after the producer's pending writes (the capsule is asked for
    /// with the model's stream). Its values are not checked for NaN or infinity, as a host
    /// array's are: that would read them back.
    fn forward_cuda<'py>(
        &mut self,
        py: Python<'py>,
        pixel_values: &Bound<'py, PyAny>,
        device_id: i32,
    ) -> PyResult<Vec<HostTensor>> {
        let engine = match &mut self.placed {
            Placed::Naflex(_) => return Err(naflex_refusal("this call").into()),
            Placed::One(pinned) => pinned.get()?,
            Placed::Several(engines) => {
                let Some(k) = engines.device_of_ordinal(device_id) else {
                    return Err(Failure::Value(anyhow!(
                        "pixel_values is on cuda:{device_id}; this model runs on {}",
                        self.devices.join(", ")
                    ))
                    .into());
                };
                let stream = engines.on_device(py, k, |engine| {
                    Ok(engine
                        .runner
                        .device_input_stream()
                        .map(|(_, stream)| stream))
                })?;
                let stream = stream.ok_or_else(|| {
                    Failure::Runtime(anyhow!("cuda:{device_id} has no input stream"))
                })?;
                let tensor = dlpack::cuda_f32_tensor(pixel_values, stream, device_id)?;
                let outputs = engines.forward_device(py, k, tensor.shape.clone(), tensor.ptr);
                // The tensor is released only after its device has run it.
                drop(tensor);
                return Ok(outputs?);
            }
        };
        let Some((ordinal, stream)) = engine.runner.device_input_stream() else {
            return Err(Failure::Value(anyhow!(
                "pixel_values is a CUDA tensor (cuda:{device_id}), but this model runs on the CPU: \
                 pass a host array, or load the model with device=\"cuda\""
            ))
            .into());
        };
        if device_id as i64 != ordinal as i64 {
            return Err(Failure::Value(anyhow!(
                "pixel_values is on cuda:{device_id}; this model runs on cuda:{ordinal}"
            ))
            .into());
        }
        let tensor = dlpack::cuda_f32_tensor(pixel_values, stream, device_id)?;
        let shape = tensor.shape.clone();
        let ptr = tensor.ptr;
        let engine = SameThread(engine);
        let outputs = without_gil(py, move || {
            // SAFETY: `tensor` (its capsule) keeps the memory alive until after this returns,
            // and the producer ordered its writes before the runner's stream.
            unsafe { forward_device_pixels(&mut engine.into_inner().runner, &shape, ptr) }
        });
        drop(tensor);
        Ok(outputs?)
    }
}

/// `forward`'s work on a CUDA tensor's pixels (f32 [B, C, H, W] of `shape` from device
/// address `ptr`): checks the shape against the model as [`forward_pixels`] does and runs
/// them, copied into the model's input on the device (the runner checks the device).
///
/// # Safety
/// The memory must stay alive until this returns, its writes ordered before the runner's
/// stream.
unsafe fn forward_device_pixels(
    runner: &mut Runner,
    shape: &[usize],
    ptr: u64,
) -> Result<Vec<HostTensor>> {
    check_pixel_shape(runner, shape)?;
    let outputs = runner.model.model_outputs();
    runner.set_outputs(outputs);
    let input = DeviceInput {
        ptr,
        len: shape.iter().product(),
    };
    // SAFETY: as the caller promises.
    unsafe { runner.run_from_device(input, shape[0], false) }.map_err(model_failure)
}

/// `forward`'s work on host pixels in standard order: checks `pixels` of `shape` against the
/// model (taking their height and width, as `vitrt infer` does), refuses the first value that
/// is not finite (`first_bad`, from `images::checked_pixels`) and runs them, producing the
/// model's outputs.
fn forward_pixels(
    runner: &mut Runner,
    shape: &[usize],
    pixels: &[f32],
    first_bad: Option<usize>,
) -> Result<Vec<HostTensor>> {
    check_pixel_shape(runner, shape)?;
    refuse_non_finite(shape, pixels, first_bad)?;
    let outputs = runner.model.model_outputs();
    runner.set_outputs(outputs);
    runner.run(pixels, shape[0], false).map_err(model_failure)
}

/// Refuses the first value of `pixels` ([B, C, H, W] of `shape`) that is not finite
/// (`first_bad`, from `images::checked_pixels`), naming its place.
fn refuse_non_finite(shape: &[usize], pixels: &[f32], first_bad: Option<usize>) -> Result<()> {
    if let Some(at) = first_bad {
        let (c, h, w) = (shape[1], shape[2], shape[3]);
        let index = [at / (c * h * w), at / (h * w) % c, at / w % h, at % w];
        return Err(Failure::Value(anyhow!(
            "pixel_values{index:?} (as [b, c, y, x]) is {}; the model takes finite values only",
            pixels[at]
        )));
    }
    Ok(())
}

/// Checks pixel_values of `shape` against the model, taking their height and width (as
/// `vitrt infer` does: the position embeddings are resampled).
fn check_pixel_shape(runner: &mut Runner, shape: &[usize]) -> Result<()> {
    if let [_, _, height, width] = shape[..] {
        if height > 0 && width > 0 && (height, width) != runner.model.input_size() {
            runner
                .set_input_size((height, width))
                .with_context(|| format!("pixel_values of {height}x{width}"))
                .or_value()?;
        }
    }
    let want = runner.input_shape(shape.first().copied().unwrap_or(0));
    if shape.len() != 4 || shape[0] == 0 || shape[1..] != want[1..] {
        return Err(Failure::Value(anyhow!(
            "pixel_values has shape {shape:?}; this model takes [B, {}, {}, {}]",
            want[1],
            want[2],
            want[3]
        )));
    }
    Ok(())
}

/// Vision Transformer inference: classify, embed, zero-shot label images, or run raw
/// pixel_values, on a CUDA GPU or the CPU.
#[pymodule]
fn vitrt(module: &Bound<'_, PyModule>) -> PyResult<()> {
    module.add_class::<Model>()?;
    module.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
