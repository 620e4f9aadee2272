//! Opening a model on a device, as every front door does it: resolve the checkpoint (local
//! folder or hub), start the GPU's driver on another thread while the host reads and encodes
//! the parameters (warm start), open the backend the options ask for (or the first CUDA GPU,
//! else the CPU), and set the runner up at the size the checkpoint's preprocessing makes, with
//! the residual stream's dtype and graph replay as asked.

use anyhow::{Context, Result};
use std::path::PathBuf;
use vitrt_kernels::cuda::DriverWarmUp;
use vitrt_model::fp8_scales::Fp8ScalesFile;
use vitrt_model::naflex::{NaflexRunner, NaflexVisionModel};
use vitrt_model::text::{TextEncoder, TextModel};
use vitrt_model::{Runner, VisionModel};
use vitrt_runtime::backend::Device;
use vitrt_runtime::fp8::Fp8Layers;
use vitrt_runtime::passes::Fusion;
use vitrt_runtime::{Backend, DType};
use vitrt_weights::{resolve_model, ModelFiles, ResolveOptions};

/// Where a model comes from and how it runs.
#[derive(Clone, Debug)]
pub struct ModelOptions {
    /// A local folder (config.json + safetensors) or a Hugging Face hub id.
    pub model: String,
    /// Hub revision (branch, tag or commit).
    pub revision: Option<String>,
    /// Use only the local hub cache.
    pub offline: bool,
    /// "cpu", "cuda" or "cuda:N"; `None`: the first usable CUDA GPU, else the CPU.
    pub device: Option<String>,
    /// Storage type of weights and activations; `None`: f16 on a GPU, f32 on the CPU.
    pub dtype: Option<DType>,
    /// Storage type of the residual stream; `None`: `Precision::default_for` the dtype.
    pub residual_dtype: Option<DType>,
    pub fusion: Fusion,
    /// Replay each forward pass as one captured CUDA graph (ignored on the CPU).
    pub cuda_graphs: bool,
    /// Choose the kernels' programs whatever the batch size, so that an image's outputs do
    /// not depend on what shares its batch (`Runner::with_batch_invariance`).
    pub batch_invariant: bool,
    /// Run on images of this (height, width) instead of what the preprocessing makes.
    pub image_size: Option<(usize, usize)>,
    /// Say on standard error which device was chosen when the options did not name one.
    pub announce_device: bool,
    /// Run these linear layers in FP8 (`--dtype fp8`): needs an f16 or bf16 dtype.
    pub fp8: Option<Fp8Layers>,
    /// Quantise their inputs with these calibrated static scales (`--fp8-scales`, a `vitrt
    /// calibrate` file); with `fp8` only.
    pub fp8_scales: Option<std::sync::Arc<Fp8ScalesFile>>,
}

impl ModelOptions {
    /// The defaults of every front door for `model`.
    pub fn new(model: impl Into<String>) -> ModelOptions {
        ModelOptions {
            model: model.into(),
            revision: None,
            offline: false,
            device: None,
            dtype: None,
            residual_dtype: None,
            fusion: Fusion::ALL,
            cuda_graphs: true,
            batch_invariant: false,
            image_size: None,
            announce_device: false,
            fp8: None,
            fp8_scales: None,
        }
    }
}

/// Why a model could not be opened: the caller's mistake (a missing model, a bad option), or
/// the device's failure. Front doors report the two differently (Python: `ValueError` and
/// `RuntimeError`).
#[derive(Debug)]
pub enum OpenError {
    Input(anyhow::Error),
    Device(anyhow::Error),
}

impl std::fmt::Display for OpenError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OpenError::Input(e) | OpenError::Device(e) => write!(f, "{e:#}"),
        }
    }
}

impl std::error::Error for OpenError {}

/// A vision model opened on a device.
pub struct OpenedModel {
    pub runner: Runner,
    /// The checkpoint's folder (preprocessor_config.json, the text tower's files).
    pub dir: PathBuf,
    pub device: Device,
}

impl ModelOptions {
    /// The model's files: the local folder, or the hub snapshot (downloaded unless offline).
    pub fn resolve(&self) -> Result<ModelFiles> {
        Ok(resolve_model(
            &self.model,
            &ResolveOptions {
                revision: self.revision.clone(),
                offline: self.offline,
            },
        )?)
    }

    /// The device the options name, if they name one.
    pub fn asked_device(&self) -> Result<Option<Device>> {
        Ok(self.device.as_deref().map(Device::parse).transpose()?)
    }

    /// Opens the backend: the device and dtype asked for, or without a device the first CUDA
    /// GPU that opens (f16 unless the dtype says otherwise), else the CPU (f32), saying on
    /// stderr which was chosen and why when `announce_device` is set.
    pub fn open_backend(&self) -> Result<(Box<dyn Backend>, Device), OpenError> {
        let asked = self.asked_device().map_err(OpenError::Input)?;
        let opened = vitrt_runtime::backend::open_with_defaults(asked, self.dtype)
            .map_err(|e| OpenError::Device(e.into()))?;
        let dtype = opened.backend.dtype();
        if self.announce_device {
            match (&opened.fallback, asked) {
                (Some(why), _) => {
                    eprintln!("vitrt: running on the CPU in {dtype}: no usable CUDA GPU ({why})")
                }
                (None, None) => eprintln!(
                    "vitrt: running on {} in {dtype} (the first CUDA GPU; --device cpu forces \
                     the CPU)",
                    opened.backend.describe()
                ),
                (None, Some(_)) => {}
            }
        }
        Ok((opened.backend, opened.device))
    }

    /// Resolves, loads and checks the vision model, and opens the backend, the driver warming
    /// up meanwhile.
    pub fn open(&self) -> Result<OpenedModel, OpenError> {
        let files = self.resolve().map_err(OpenError::Input)?;
        // The GPU's driver starts on another thread while this one reads the model and
        // encodes its parameters (benchmarks/NOTES.md, 2026-11-25 "Warm start: the driver
        // behind the weights"). Without a driver library there is nothing to start.
        let warm_up = match self.asked_device().map_err(OpenError::Input)? {
            Some(Device::Cpu) => None,
            Some(Device::Cuda(ordinal)) => DriverWarmUp::start(ordinal),
            None => DriverWarmUp::start(0),
        };
        let model = self.load_model_from(&files.dir).map_err(OpenError::Input)?;
        // A CUDA backend stores f16 unless the dtype says otherwise.
        let cuda_dtype = self.dtype.unwrap_or(DType::F16);
        let encoded = warm_up
            .as_ref()
            .map(|_| Runner::encode_params(&model, self.fusion, cuda_dtype));
        crate::startup::mark("parameters read and encoded (while the driver starts)");
        let (backend, device) = self.open_backend()?;
        drop(warm_up);
        crate::startup::mark("backend opened (CUDA context, NVRTC and headers found)");
        let dtype = backend.dtype();
        let mut runner = Runner::new(model, backend, self.fusion);
        if let Some(encoded) = encoded.filter(|_| dtype == cuda_dtype) {
            runner = runner.with_encoded_params(encoded);
        }
        if let Some(residual) = self.residual_dtype {
            runner = runner
                .with_residual(residual)
                .map_err(|e| OpenError::Input(e.into()))?;
        }
        if let Some(layers) = &self.fp8 {
            runner = runner
                .with_fp8(layers.clone())
                .map_err(|e| OpenError::Input(e.into()))?;
        }
        if let Some(scales) = &self.fp8_scales {
            runner = runner
                .with_fp8_scales(Fp8ScalesFile::clone(scales))
                .map_err(|e| OpenError::Input(e.into()))?;
        }
        let runner = runner
            .with_graph_replay(self.cuda_graphs)
            .with_batch_invariance(self.batch_invariant);
        Ok(OpenedModel {
            runner,
            dir: files.dir,
            device,
        })
    }

    /// SigLIP 2 NaFlex (`model_type` `siglip2`, `siglip2_vision_model`) on the backend the
    /// options ask for, with its folder; None for any other checkpoint, which
    /// [`ModelOptions::open`] takes. Its batches are patch rows with a mask, not images of
    /// one size, so its runner is a `NaflexRunner`: on tensors as transformers' processor
    /// makes them (`vitrt infer`, `vitrt parity`), or fed by the image pipeline
    /// (`crate::naflex`).
    pub fn open_naflex(&self) -> Result<Option<(NaflexRunner, PathBuf)>, OpenError> {
        Ok(self
            .open_naflex_on_device()?
            .map(|(runner, dir, _)| (runner, dir)))
    }

    /// [`ModelOptions::open_naflex`], and the device the backend runs on.
    pub fn open_naflex_on_device(
        &self,
    ) -> Result<Option<(NaflexRunner, PathBuf, Device)>, OpenError> {
        let Some(dir) = self.naflex_dir().map_err(OpenError::Input)? else {
            return Ok(None);
        };
        let model = NaflexVisionModel::load(&dir)
            .with_context(|| format!("loading model {}", self.model))
            .map_err(OpenError::Input)?;
        let (backend, device) = self.open_backend()?;
        let mut runner = NaflexRunner::new(model, backend, self.fusion)
            .with_graph_replay(self.cuda_graphs)
            .with_batch_invariance(self.batch_invariant);
        if let Some(residual) = self.residual_dtype {
            runner = runner
                .with_residual(residual)
                .map_err(|e| OpenError::Input(e.into()))?;
        }
        Ok(Some((runner, dir, device)))
    }

    /// The folder of the checkpoint when it is SigLIP 2 NaFlex, None for any other; an error
    /// for what these options ask of NaFlex that it does not take (`--image-size`, FP8).
    /// [`ModelOptions::open_naflex`] opens it; a run on several devices opens it on each.
    pub fn naflex_dir(&self) -> anyhow::Result<Option<PathBuf>> {
        let files = self.resolve()?;
        if !vitrt_model::naflex::is_naflex_dir(&files.dir) {
            return Ok(None);
        }
        if self.image_size.is_some() {
            anyhow::bail!(
                "--image-size does not apply to SigLIP 2 NaFlex: each image keeps its own patch \
                 grid, given by spatial_shapes"
            );
        }
        if self.fp8.is_some() {
            anyhow::bail!("--dtype fp8 is not built for SigLIP 2 NaFlex: use f16 or bf16");
        }
        Ok(Some(files.dir))
    }

    /// The vision model and its folder, without a backend: what a command needs to know of
    /// it (head, labels, pools) before a run on several devices opens it on each.
    pub fn load_model(&self) -> anyhow::Result<(VisionModel, PathBuf)> {
        let files = self.resolve()?;
        let model = self.load_model_from(&files.dir)?;
        Ok((model, files.dir))
    }

    /// Reads the model in `dir`, at the input size `--image-size` or its preprocessing asks.
    fn load_model_from(&self, dir: &std::path::Path) -> anyhow::Result<VisionModel> {
        let mut model =
            VisionModel::load(dir).with_context(|| format!("loading model {}", self.model))?;
        crate::startup::mark("model files read (config.json; safetensors opened and checked)");
        if let Some(size) = self.image_size {
            model = model.with_input_size(size).context("--image-size")?;
        } else if let Some(size) = preprocessed_size(dir, model.config.num_channels) {
            // The model runs on what its preprocessing makes: DINOv2's position tables are
            // for 518 pixels and its processor crops 224.
            model = model.with_input_size(size).with_context(|| {
                format!(
                    "the {}x{} images preprocessor_config.json makes",
                    size.0, size.1
                )
            })?;
        }
        Ok(model)
    }

    /// The text tower of the model alone (a CLIP or SigLIP checkpoint with both towers, or a
    /// text model's own), on the backend the options ask for, with the residual stream as
    /// they say. Also returns the checkpoint's folder (its tokenizer).
    pub fn open_text_only(&self) -> Result<(TextEncoder, PathBuf), OpenError> {
        let files = self.resolve().map_err(OpenError::Input)?;
        let text = TextModel::load(&files.dir)
            .with_context(|| format!("loading the text tower of {}", self.model))
            .map_err(OpenError::Input)?;
        let (backend, _) = self.open_backend()?;
        let dtype = backend.dtype();
        let precision = match self.residual_dtype {
            Some(residual) => vitrt_runtime::Precision::new(dtype, residual)
                .map_err(|e| OpenError::Input(e.into()))?,
            None => vitrt_runtime::Precision::default_for(dtype),
        };
        let encoder = TextEncoder::new(text, backend, self.fusion).with_precision(precision);
        Ok((encoder, files.dir))
    }
}

/// (height, width) of the images the model folder's preprocessing makes
/// (preprocessor_config.json, or a timm config.json's pretrained_cfg), if it has one that
/// parses (the commands over images report a broken one; the others do not read it).
fn preprocessed_size(dir: &std::path::Path, channels: usize) -> Option<(usize, usize)> {
    vitrt_model::preprocess::PreprocessConfig::of_checkpoint(dir, channels)
        .ok()
        .flatten()
        .map(|config| config.output_size())
}

/// The name front doors show for a device: "cpu" or "cuda:N".
pub fn device_name(device: Device) -> String {
    match device {
        Device::Cpu => "cpu".to_string(),
        Device::Cuda(ordinal) => format!("cuda:{ordinal}"),
    }
}
