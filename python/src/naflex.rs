//! `Model` on a SigLIP 2 NaFlex checkpoint: each image preprocessed on the host to its own
//! patch grid (`Siglip2ImageProcessor`'s steps, as `vitrt embed` makes them from files), a
//! batch padded to `max_num_patches` and run by a `NaflexRunner` (the engine's
//! `naflex::run_images`). Embeddings (the pooling head's vector, or the mean over each image's
//! own patches) and zero-shot scores; `classify` (no classifier) and `forward` (its input is
//! patch rows with a mask, not [B, C, H, W] pixels) are refused by name.

use crate::failure::{engine_failure, model_failure, FailAs, Failure, Result};
use crate::images::ImageSource;
use anyhow::anyhow;
use std::path::PathBuf;
use vitrt_engine::ModelOptions;
use vitrt_model::naflex::{NaflexRunner, PATCH_MEAN};
use vitrt_model::preprocess::naflex::NaflexProcessor;
use vitrt_model::Pool;
use vitrt_runtime::backend::Device;
use vitrt_runtime::HostTensor;

/// Everything a NaFlex `Model` runs with.
pub struct NaflexEngine {
    pub runner: NaflexRunner,
    pub processor: NaflexProcessor,
    /// The checkpoint's folder (its text tower and tokenizer).
    pub dir: PathBuf,
    pub device: Device,
    /// The label set (labels, templates) the runner scores zero-shot against now.
    pub zero_shot: Option<(Vec<String>, Vec<String>)>,
}

impl NaflexEngine {
    /// The NaFlex checkpoint `options` names, on the device and dtype they ask for; None for
    /// any other checkpoint.
    pub fn open(options: &ModelOptions) -> Result<Option<NaflexEngine>> {
        let opened = options.open_naflex().map_err(|e| match e {
            vitrt_engine::OpenError::Input(e) => Failure::Value(e),
            vitrt_engine::OpenError::Device(e) => Failure::Runtime(e),
        })?;
        let Some((runner, dir)) = opened else {
            return Ok(None);
        };
        let processor = vitrt_engine::naflex::processor(&dir).or_value()?;
        let device = if runner.backend().describe() == "cpu" {
            Device::Cpu
        } else {
            // The ordinal the options asked for (the CUDA backend names it first).
            options
                .device
                .as_deref()
                .and_then(|d| Device::parse(d).ok())
                .unwrap_or(Device::Cuda(0))
        };
        Ok(Some(NaflexEngine {
            runner,
            processor,
            dir,
            device,
            zero_shot: None,
        }))
    }

    /// The output a pool is read from, or a `ValueError` naming the pools NaFlex has.
    pub fn pool_output(&self, asked: Option<&str>, name: &str) -> Result<&'static str> {
        let head = self.runner.model.image_embeds_width().is_some();
        let pool = match asked {
            None => {
                if head {
                    Pool::Projected
                } else {
                    Pool::Mean
                }
            }
            Some(asked) => Pool::parse(asked).ok_or_else(|| {
                Failure::Value(anyhow!(
                    "pool={asked:?}: not a pool; use projected, pooler or mean"
                ))
            })?,
        };
        match pool {
            Pool::Projected | Pool::Pooler if head => Ok(if pool == Pool::Projected {
                "image_embeds"
            } else {
                "pooler_output"
            }),
            Pool::Mean => Ok(PATCH_MEAN),
            _ => Err(Failure::Value(anyhow!(
                "pool={:?}: {name} (SigLIP 2 NaFlex) has no {}; it has pool={}",
                pool.name(),
                pool.output().name(),
                if head {
                    "projected, pooler, mean"
                } else {
                    "mean"
                }
            ))),
        }
    }

    /// Encodes `labels` in each of `templates` with the checkpoint's text tower (SigLIP's,
    /// with Gemma's tokenizer) and scores images against them from now on.
    pub fn set_labels(
        &mut self,
        name: &str,
        labels: &[String],
        templates: &[String],
    ) -> Result<()> {
        let dir = self.dir.clone();
        vitrt_engine::naflex::score_against_labels(&mut self.runner, &dir, name, labels, templates)
            .map_err(engine_failure)?;
        Ok(())
    }

    /// Preprocesses `images` (the first being `images[first]` of the call) and runs them as
    /// one batch, giving `output` [count, width].
    pub fn run(
        &mut self,
        images: &[ImageSource],
        first: usize,
        output: &str,
    ) -> Result<(usize, Vec<f32>)> {
        let preprocessed = images
            .iter()
            .enumerate()
            .map(|(k, image)| image.naflex(&self.processor, first + k).or_value())
            .collect::<Result<Vec<_>>>()?;
        let max = self.processor.max_num_patches;
        let outputs: Vec<HostTensor> =
            vitrt_engine::naflex::run_images(&mut self.runner, max, &preprocessed, &[output])
                .map_err(|e| match e.downcast::<vitrt_model::ModelError>() {
                    Ok(model) => model_failure(model),
                    Err(other) => engine_failure(other),
                })?;
        vitrt_engine::results::output_rows(outputs, output, images.len()).or_runtime()
    }
}
