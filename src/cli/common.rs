//! What every subcommand shares: where the model comes from and how it runs ([`ModelArgs`]),
//! reading `pixel_values` from a file, the standard-output line behind `outln!`, and how a
//! streamed write ends ([`WriteError`]).

use super::output_dir;
use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};
use std::path::PathBuf;
use vitrt_engine::ModelOptions;
use vitrt_model::fp8_choice::{layers_to_run, Fp8ChoiceFile};
use vitrt_model::fp8_scales::Fp8ScalesFile;
use vitrt_model::limits::{MAX_BATCH_SIZE, MAX_IMAGE_SIDE};
use vitrt_model::text::TextEncoder;
use vitrt_model::Runner;
use vitrt_runtime::backend::Device;
use vitrt_runtime::fp8::Fp8Layers;
use vitrt_runtime::passes::{AttentionFusion, Fusion};
use vitrt_runtime::DType;

/// Where the model comes from and how it runs: shared by every subcommand.
#[derive(Args, Debug, Clone)]
pub struct ModelArgs {
    /// A local folder (config.json + safetensors) or a Hugging Face hub id.
    #[arg(long, short, default_value = "google/vit-base-patch16-224")]
    model: String,
    /// Hub revision (branch, tag or commit).
    #[arg(long)]
    revision: Option<String>,
    /// Use only the local hub cache (also when HF_HUB_OFFLINE=1).
    #[arg(long)]
    offline: bool,
    /// cpu, cuda or cuda:N. Default: the first usable CUDA GPU, else the CPU (said on stderr).
    /// `classify`, `embed` and `zero-shot` also take several GPUs, `cuda:all` or a list such as
    /// `cuda:0,2,3`: one process, a model on each, batches going to whichever is free,
    /// results in input order.
    #[arg(long)]
    device: Option<String>,
    /// Storage type of weights and activations (accumulation is always f32): f32, f16, bf16,
    /// or fp8: f16 with linear layers of the transformer blocks in FP8 (e4m3 weights with a
    /// scale per output channel, each input row quantised with its own scale): those
    /// --fp8-layers names, else those whose input is a layernorm's output (QKV and the first
    /// MLP layer). Default: f16 on a GPU, f32 on the CPU.
    #[arg(long, value_parser = parse_run_dtype)]
    dtype: Option<RunDtype>,
    /// With --dtype fp8: the choice of `vitrt quantize-report --output` (which linear layers
    /// run in FP8) instead of the default.
    #[arg(long)]
    fp8_layers: Option<PathBuf>,
    /// With --dtype fp8: the static input scales `vitrt calibrate --out` wrote for this model.
    /// Each FP8 layer's input is then quantised with one calibrated scale instead of a scale a
    /// row, which lets the layernorms and the first MLP layer write e4m3 themselves, and the
    /// default choice takes every linear layer of the blocks.
    #[arg(long)]
    fp8_scales: Option<PathBuf>,
    /// Storage type of the residual stream, the values every block adds into: f32 or the
    /// --dtype itself. Default: f16 for f16 runs (as PyTorch stores it), f32 otherwise (bf16
    /// rounded after every block loses too much).
    #[arg(long, value_parser = parse_dtype)]
    residual_dtype: Option<DType>,
    /// Graph fusion: all (default) or none, to compare the fused and plain graphs. `all` also
    /// folds each block's layernorms into the linear layers that read them in a graph of one
    /// image (f16, or bf16 with a bf16 residual stream; not batch-invariant) on GPUs with the
    /// kernels (sm_90a).
    #[arg(long, value_enum, default_value_t = FusionArg::All)]
    fusion: FusionArg,
    /// Attention as one fused kernel or as scores, softmax and context. Default: fused where
    /// the backend has a kernel for the model (CUDA: f16/bf16, head dims up to 128, those not
    /// a multiple of 16 padded with zeros to one) and --fusion is all; `fused` makes it an
    /// error when it cannot be.
    #[arg(long, value_enum)]
    attention: Option<AttentionArg>,
    /// CUDA graphs: on (default) replays each forward pass as one captured graph after a
    /// first eager pass; off launches kernel by kernel. Ignored on the CPU.
    #[arg(long, value_enum, default_value_t = Switch::On)]
    cuda_graphs: Switch,
    /// Choose the GPU kernels' programs whatever the batch size, so that an image's outputs
    /// are the same bytes alone or in any batch (`vitrt serve` always does); off (default),
    /// the kernels choose by the batch size, faster at small batches. The CPU is invariant
    /// either way.
    #[arg(long)]
    batch_invariant: bool,
    /// Run the model on images of this size (HEIGHT or HEIGHT,WIDTH; a remainder of less than
    /// a patch is dropped, as transformers' Conv2d drops it), its position embeddings resampled
    /// as transformers' interpolate_pos_encoding.
    /// Default: the size the checkpoint's preprocessing makes (or the input tensor's, for
    /// infer), else the config's image_size.
    #[arg(long, value_parser = parse_image_size)]
    image_size: Option<(usize, usize)>,
}

/// `H` or `H,W`, each 1 to [`MAX_IMAGE_SIDE`] (the model also bounds the patches they make).
pub fn parse_image_size(s: &str) -> Result<(usize, usize), String> {
    let side = |v: &str| match v.trim().parse::<usize>() {
        Ok(n) if (1..=MAX_IMAGE_SIDE).contains(&n) => Ok(n),
        _ => Err(format!(
            "\"{s}\" is not an image size: use HEIGHT or HEIGHT,WIDTH, each 1 to \
             {MAX_IMAGE_SIDE} pixels"
        )),
    };
    match s.split_once(',') {
        Some((h, w)) => Ok((side(h)?, side(w)?)),
        None => side(s).map(|n| (n, n)),
    }
}

/// The value of every batch-size flag: 1 to [`MAX_BATCH_SIZE`], the bound the runner itself
/// holds every caller to.
pub fn parse_batch_size(s: &str) -> Result<usize, String> {
    match s.trim().parse::<usize>() {
        Ok(n) if (1..=MAX_BATCH_SIZE).contains(&n) => Ok(n),
        _ => Err(format!(
            "\"{s}\" is not a batch size: use 1 to {MAX_BATCH_SIZE} images"
        )),
    }
}

/// Most timed or untimed passes (`--reps`, `--warmup`) a measuring command takes: far more than
/// any median needs, and few enough that counts and time vectors stay small.
pub const MAX_PASSES: usize = 1_000_000;

/// The value of every `--reps` and `--warmup` flag: 0 to [`MAX_PASSES`] (each command says
/// its own least).
pub fn parse_passes(s: &str) -> Result<usize, String> {
    match s.trim().parse::<usize>() {
        Ok(n) if n <= MAX_PASSES => Ok(n),
        _ => Err(format!(
            "\"{s}\" is not a number of passes: use 0 to {MAX_PASSES}"
        )),
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Switch {
    On,
    Off,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum FusionArg {
    All,
    None,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum AttentionArg {
    Fused,
    Unfused,
}

pub fn parse_dtype(s: &str) -> Result<DType, String> {
    DType::parse(s).ok_or_else(|| format!("unknown dtype \"{s}\" (use f32, f16 or bf16)"))
}

/// What `--dtype` asks for: a storage type, or an f16 run with FP8 linear layers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunDtype {
    Plain(DType),
    Fp8,
}

impl RunDtype {
    /// The backend's dtype.
    pub fn compute(self) -> DType {
        match self {
            RunDtype::Plain(dtype) => dtype,
            RunDtype::Fp8 => DType::F16,
        }
    }
}

pub fn parse_run_dtype(s: &str) -> Result<RunDtype, String> {
    match s {
        "fp8" | "e4m3" => Ok(RunDtype::Fp8),
        _ => DType::parse(s)
            .map(RunDtype::Plain)
            .ok_or_else(|| format!("unknown dtype \"{s}\" (use f32, f16, bf16 or fp8)")),
    }
}

impl ModelArgs {
    /// The model as the user named it.
    pub fn name(&self) -> &str {
        &self.model
    }

    /// The image size asked for with `--image-size`.
    pub fn image_size(&self) -> Option<(usize, usize)> {
        self.image_size
    }

    /// The static FP8 scales file `--fp8-scales` names, read, if any.
    pub fn fp8_scales(&self) -> Result<Option<Fp8ScalesFile>> {
        Ok(match &self.fp8_scales {
            Some(path) => Some(Fp8ScalesFile::read(path)?),
            None => None,
        })
    }

    /// These flags without `--fp8-scales` (`quantize-report` applies the scales to the FP8
    /// runs it makes itself).
    pub fn without_fp8_scales(&self) -> ModelArgs {
        ModelArgs {
            fp8_scales: None,
            ..self.clone()
        }
    }

    /// These flags with `--batch-invariant` on, as `--output-dir` runs them: a resumed run
    /// batches the images differently, and its shards must be the bytes an uninterrupted run
    /// writes (the CPU is invariant either way).
    pub fn batch_invariant(&self) -> ModelArgs {
        ModelArgs {
            batch_invariant: true,
            ..self.clone()
        }
    }

    /// The flags that decide the outputs' values, by name, as `--output-dir`'s manifest
    /// records them (a resumed run must agree on each). The files `--fp8-layers` and
    /// `--fp8-scales` name are recorded by content too, so that a scales file rewritten in
    /// place (a new saved choice) is noticed on resume.
    pub fn recorded(&self) -> Vec<(&'static str, String)> {
        let shown = |v: Option<String>| v.unwrap_or_else(|| "default".to_string());
        let mut recorded = vec![
            ("model", self.model.clone()),
            ("revision", shown(self.revision.clone())),
            // The kind of device, not which: a run on cuda:all resumes on cuda:0 (or on two
            // GPUs) with the same bytes, its kernels chosen whatever the batch.
            ("device", shown(self.device.as_deref().map(device_kind))),
            (
                "dtype",
                shown(self.dtype.map(|d| match d {
                    RunDtype::Plain(d) => format!("{d:?}"),
                    RunDtype::Fp8 => "fp8".to_string(),
                })),
            ),
            (
                "fp8-layers",
                shown(self.fp8_layers.as_ref().map(|p| p.display().to_string())),
            ),
            (
                "fp8-scales",
                shown(self.fp8_scales.as_ref().map(|p| p.display().to_string())),
            ),
            (
                "residual-dtype",
                shown(self.residual_dtype.map(|d| format!("{d:?}"))),
            ),
            ("fusion", format!("{:?}", self.fusion)),
            ("attention", shown(self.attention.map(|a| format!("{a:?}")))),
            ("batch-invariant", self.batch_invariant.to_string()),
            (
                "image-size",
                shown(self.image_size.map(|(h, w)| format!("{h},{w}"))),
            ),
        ];
        if let Some(path) = &self.fp8_layers {
            recorded.push(("fp8-layers-sha256", output_dir::file_sha256(path)));
        }
        if let Some(path) = &self.fp8_scales {
            recorded.push(("fp8-scales-sha256", output_dir::file_sha256(path)));
        }
        recorded
    }

    /// The engine's options for what the flags say.
    pub fn options(&self) -> Result<ModelOptions> {
        Ok(ModelOptions {
            model: self.model.clone(),
            revision: self.revision.clone(),
            offline: self.offline,
            device: self.device.clone(),
            dtype: self.dtype.map(RunDtype::compute),
            residual_dtype: self.residual_dtype,
            fusion: self.fusion(),
            cuda_graphs: self.cuda_graphs == Switch::On,
            batch_invariant: self.batch_invariant,
            image_size: self.image_size,
            announce_device: true,
            fp8: self.fp8()?,
            fp8_scales: self.fp8_scales()?.map(std::sync::Arc::new),
        })
    }

    /// The FP8 choice `--dtype fp8`, `--fp8-layers` and `--fp8-scales` make, if any
    /// (`vitrt_model::fp8_choice::layers_to_run`: without a choice file, the one saved with
    /// the scales, else the default).
    fn fp8(&self) -> Result<Option<Fp8Layers>> {
        let fp8 = self.dtype == Some(RunDtype::Fp8);
        if !fp8 && self.fp8_scales.is_some() {
            bail!("--fp8-scales goes with --dtype fp8");
        }
        if !fp8 && self.fp8_layers.is_some() {
            bail!("--fp8-layers goes with --dtype fp8");
        }
        if !fp8 {
            return Ok(None);
        }
        let choice = self
            .fp8_layers
            .as_deref()
            .map(Fp8ChoiceFile::read)
            .transpose()?;
        Ok(Some(layers_to_run(
            choice.as_ref(),
            self.fp8_scales()?.as_ref(),
        )))
    }

    /// The text tower of the model alone (`vitrt embed-text`: a CLIP or SigLIP checkpoint
    /// with both towers, or a text model's own), on the backend `--device` and `--dtype` ask
    /// for, with the residual stream as `--residual-dtype` says.
    pub fn open_text_only(&self) -> Result<(TextEncoder, PathBuf)> {
        Ok(self.options()?.open_text_only()?)
    }

    /// The graph fusion `--fusion` and `--attention` ask for.
    fn fusion(&self) -> Fusion {
        let mut fusion = match self.fusion {
            FusionArg::All => Fusion::ALL,
            FusionArg::None => Fusion::NONE,
        };
        match self.attention {
            Some(AttentionArg::Fused) => fusion.attention = AttentionFusion::Required,
            Some(AttentionArg::Unfused) => fusion.attention = AttentionFusion::Off,
            None => {}
        }
        fusion
    }

    /// Resolves, loads and checks the model, and opens the backend (the engine's
    /// [`ModelOptions::open`]). Also returns the model's folder (for preprocessor_config.json).
    pub fn open(&self) -> Result<(Runner, PathBuf)> {
        let (runner, dir, _) = self.open_on_device()?;
        Ok((runner, dir))
    }

    /// With `--device cuda:all`, starts counting the devices (which starts the driver) while
    /// the command goes on reading its inputs.
    pub fn count_devices_ahead(&self) {
        vitrt_engine::devices::count_cuda_devices_ahead(self.device.as_deref());
    }

    /// The model on the device `--device` names, opened here, or on the several it names
    /// (`cuda:all`, `cuda:0,2`), read here and opened on each by the run.
    pub fn placement(&self) -> Result<vitrt_engine::devices::Placement> {
        let placement = vitrt_engine::devices::Placement::open(&self.options()?)?;
        if let (vitrt_engine::devices::Placement::One { runner, .. }, Some(AttentionArg::Fused)) =
            (&placement, self.attention)
        {
            runner.check_graph().context("--attention fused")?;
        }
        Ok(placement)
    }

    /// SigLIP 2 NaFlex on the device and dtype the flags ask for, when the model is one
    /// (`vitrt infer` and `vitrt parity` run it on tensors); None for any other model.
    pub fn open_naflex(&self) -> Result<Option<vitrt_model::naflex::NaflexRunner>> {
        Ok(self.open_naflex_in()?.map(|(runner, _)| runner))
    }

    /// [`ModelArgs::open_naflex`], and the checkpoint's folder (its processor and tokenizer):
    /// on one device, as the commands that time or check one runner take it.
    pub fn open_naflex_in(&self) -> Result<Option<(vitrt_model::naflex::NaflexRunner, PathBuf)>> {
        Ok(self
            .open_naflex_on_device()?
            .map(|(runner, dir, _)| (runner, dir)))
    }

    /// [`ModelArgs::open_naflex_in`], and the device the backend runs on.
    pub fn open_naflex_on_device(
        &self,
    ) -> Result<Option<(vitrt_model::naflex::NaflexRunner, PathBuf, Device)>> {
        if vitrt_engine::devices::several_devices(self.device.as_deref())?
            .is_some_and(|devices| devices.len() > 1)
        {
            // Only where the model is NaFlex: the others say what they make of the list.
            if self.options()?.naflex_dir()?.is_some() {
                bail!(
                    "this command runs SigLIP 2 NaFlex on one device; several (--device {}) \
                     are taken by `vitrt embed` and `vitrt zero-shot`",
                    self.device.as_deref().unwrap_or_default()
                );
            }
        }
        Ok(self.options()?.open_naflex_on_device()?)
    }

    /// SigLIP 2 NaFlex where `vitrt embed` and `vitrt zero-shot` run it over images: on the
    /// device `--device` names, opened here, or on the several it names (`cuda:all`,
    /// `cuda:0,2`), opened on each by the run; None for any other model.
    pub fn naflex_placement(&self) -> Result<Option<vitrt_engine::naflex::NaflexPlacement>> {
        vitrt_engine::naflex::NaflexPlacement::open(&self.options()?)
    }

    /// As [`ModelArgs::open`], and the device the backend runs on.
    pub fn open_on_device(&self) -> Result<(Runner, PathBuf, Device)> {
        let opened = self.options()?.open()?;
        if self.attention == Some(AttentionArg::Fused) {
            opened.runner.check_graph().context("--attention fused")?;
        }
        Ok((opened.runner, opened.dir, opened.device))
    }
}

/// `cpu`, or `cuda` for any GPU or set of GPUs (`cuda:1`, `cuda:all`, `cuda:0,2`): what an
/// `--output-dir` manifest records of `--device`.
fn device_kind(device: &str) -> String {
    let device = device.trim().to_ascii_lowercase();
    if device.starts_with("cuda") || device.starts_with("gpu") {
        "cuda".to_string()
    } else {
        device
    }
}

/// The line behind `outln!`.
pub fn write_stdout_line(line: std::fmt::Arguments<'_>) -> Result<()> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    match out.write_fmt(line).and_then(|()| out.write_all(b"\n")) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => std::process::exit(0),
        written => written.context("writing to standard output"),
    }
}

/// `batch` images of random pixels from -1 to 1 (roughly what an image processor hands over),
/// for the commands that time forward passes: an error, not an abort, for a batch beyond the
/// bound or more than the host can hold.
pub fn random_pixels(
    runner: &Runner,
    batch: usize,
    rng: &mut rand::rngs::SmallRng,
) -> Result<Vec<f32>> {
    use rand::Rng;
    let len = runner.input_len(batch)?;
    let mut pixels = Vec::new();
    pixels.try_reserve_exact(len).map_err(|_| {
        anyhow::anyhow!(
            "cannot allocate {} MiB of host memory for the pixels of a batch of {batch}",
            (len * 4) >> 20
        )
    })?;
    pixels.extend((0..len).map(|_| rng.random_range(-1.0..1.0f32)));
    Ok(pixels)
}

/// Reads a safetensors file of f32-convertible tensors.
pub fn read_tensors(path: &std::path::Path) -> Result<Vec<vitrt_runtime::HostTensor>> {
    Ok(vitrt_weights::read_f32_tensors(path)?
        .into_iter()
        .map(|(name, shape, data)| vitrt_runtime::HostTensor { name, shape, data })
        .collect())
}

/// The `pixel_values` tensor of a file, checked against the model's input shape. Without
/// `--image-size`, the model takes the tensor's height and width (its positions resampled).
pub fn pixel_values(
    tensors: &[vitrt_runtime::HostTensor],
    runner: &mut Runner,
    args: &ModelArgs,
    path: &std::path::Path,
) -> Result<(usize, Vec<f32>)> {
    let Some(px) = tensors.iter().find(|t| t.name == "pixel_values") else {
        bail!("{} holds no tensor named pixel_values", path.display());
    };
    if let [_, _, h, w] = px.shape[..] {
        if args.image_size.is_none() && (h, w) != runner.model.input_size() {
            runner
                .set_input_size((h, w))
                .with_context(|| format!("{}: pixel_values of {h}x{w}", path.display()))?;
        }
    }
    let want = runner.input_shape(px.shape.first().copied().unwrap_or(0));
    if px.shape.len() != 4 || px.shape[0] == 0 || px.shape[1..] != want[1..] {
        bail!(
            "{}: pixel_values has shape {:?}; this model takes [B, {}, {}, {}]",
            path.display(),
            px.shape,
            want[1],
            want[2],
            want[3]
        );
    }
    if let Some(at) = px.data.iter().position(|v| !v.is_finite()) {
        let (c, h, w) = (px.shape[1], px.shape[2], px.shape[3]);
        let index = [at / (c * h * w), at / (h * w) % c, at / w % h, at % w];
        bail!(
            "{}: pixel_values{index:?} (as [b, c, y, x]) is {}; the model takes finite values only",
            path.display(),
            px.data[at]
        );
    }
    Ok((px.shape[0], px.data.clone()))
}

/// Why writing stopped.
#[derive(Debug)]
pub enum WriteError {
    /// The reader closed standard output: end quietly.
    Closed,
    /// Anything else (a full disk): an error.
    Failed(std::io::Error),
}

impl From<std::io::Error> for WriteError {
    fn from(error: std::io::Error) -> Self {
        if error.kind() == std::io::ErrorKind::BrokenPipe {
            WriteError::Closed
        } else {
            WriteError::Failed(error)
        }
    }
}

impl From<serde_json::Error> for WriteError {
    fn from(error: serde_json::Error) -> Self {
        match error.io_error_kind() {
            Some(kind) => std::io::Error::new(kind, error).into(),
            None => WriteError::Failed(std::io::Error::other(error)),
        }
    }
}

/// Whether the run goes on after a write of results: it stops quietly for a closed output, and
/// fails for any other error (`what`: what was being written).
pub fn flow_after(
    written: Result<(), WriteError>,
    what: &'static str,
) -> Result<vitrt_engine::pipeline::Flow> {
    match written {
        Ok(()) => Ok(vitrt_engine::pipeline::Flow::Continue),
        Err(WriteError::Closed) => Ok(vitrt_engine::pipeline::Flow::Stop),
        Err(WriteError::Failed(e)) => Err(e).context(what),
    }
}

#[cfg(test)]
mod tests {
    use super::{device_kind, ModelArgs};
    use clap::Parser;

    #[derive(Parser)]
    struct Flags {
        #[command(flatten)]
        model: ModelArgs,
    }

    #[test]
    fn a_manifest_records_the_fp8_files_by_content() {
        let dir = tempfile::tempdir().unwrap();
        let scales = dir.path().join("scales.json");
        std::fs::write(&scales, "{\"first\": 1}").unwrap();
        let recorded = |path: &std::path::Path| {
            let flags = Flags::try_parse_from([
                "vitrt",
                "--dtype",
                "fp8",
                "--fp8-scales",
                path.to_str().unwrap(),
            ])
            .unwrap();
            flags.model.recorded()
        };
        let digest = |r: &[(&str, String)]| {
            r.iter()
                .find(|(name, _)| *name == "fp8-scales-sha256")
                .map(|(_, v)| v.clone())
                .unwrap()
        };
        let before = recorded(&scales);
        assert_eq!(digest(&before).len(), 64, "{before:?}");
        // The same path rewritten in place (a new saved choice) records another digest.
        std::fs::write(&scales, "{\"second\": 2}").unwrap();
        assert_ne!(digest(&before), digest(&recorded(&scales)));
        // Without the flag there is no such entry.
        let plain = Flags::try_parse_from(["vitrt"]).unwrap().model.recorded();
        assert!(plain.iter().all(|(name, _)| !name.ends_with("sha256")));
    }

    #[test]
    fn a_manifest_records_the_kind_of_device_not_which() {
        for gpus in [
            "cuda", "cuda:0", "cuda:3", "cuda:all", "cuda:0,2", "CUDA:1", "gpu",
        ] {
            assert_eq!(device_kind(gpus), "cuda", "{gpus}");
        }
        assert_eq!(device_kind("cpu"), "cpu");
        assert_eq!(device_kind("tpu"), "tpu");
    }
}
