//! `vitrt infer`: pixel_values from a safetensors file in, the model's outputs out.

use super::common::{pixel_values, read_tensors, ModelArgs};
use crate::output_file::{Contents, OutputFile};
use anyhow::{bail, Context, Result};
use clap::Args;
use std::path::PathBuf;
use std::process::ExitCode;
use vitrt_model::naflex::NaflexInputs;

#[derive(Args, Debug)]
pub struct InferArgs {
    #[command(flatten)]
    model: ModelArgs,
    /// safetensors file holding `pixel_values` [B, C, H, W] (for SigLIP 2 NaFlex: the patch
    /// rows `pixel_values` [B, N, 3·p·p], `pixel_attention_mask` [B, N] and `spatial_shapes`
    /// [B, 2], as its processor returns them).
    #[arg(long)]
    input: PathBuf,
    /// Where to write the model's outputs as f32 safetensors: `logits`, or `last_hidden_state`
    /// and what the family pools from it (`pooler_output`; `image_embeds` for CLIP and
    /// SigLIP); `-` writes them to stdout (never to a terminal).
    #[arg(long)]
    output: PathBuf,
    /// Also write every `hidden_states.{i}`, indexed as Hugging Face's output_hidden_states.
    #[arg(long)]
    dump_activations: bool,
    /// Replace --output even if it is read-only.
    #[arg(long)]
    force: bool,
}

pub fn run(args: InferArgs) -> Result<ExitCode> {
    // Before any work: a run that cannot keep its result should not start.
    let output = OutputFile::check(&args.output, Contents::Binary, true, args.force)?;
    let outputs = if let Some(mut runner) = args.model.open_naflex()? {
        // SigLIP 2 NaFlex: patch rows, their mask and grids, as its processor makes them.
        let tensors = read_tensors(&args.input)?;
        let inputs = NaflexInputs::from_tensors(&runner.model, &tensors)
            .with_context(|| args.input.display().to_string())?;
        let outputs = runner.run(&inputs, &[], args.dump_activations)?;
        check_finite(&outputs, || runner.run(&inputs, &[], true))?;
        outputs
    } else {
        let (mut runner, _) = args.model.open()?;
        let tensors = read_tensors(&args.input)?;
        let (batch, pixels) = pixel_values(&tensors, &mut runner, &args.model, &args.input)?;
        let model_outputs = runner.model.model_outputs();
        runner.set_outputs(model_outputs);
        let outputs = runner.run(&pixels, batch, args.dump_activations)?;
        check_finite(&outputs, || runner.run(&pixels, batch, true))?;
        outputs
    };
    let named: Vec<_> = outputs
        .into_iter()
        .map(|t| (t.name, t.shape, t.data))
        .collect();
    // Written whole or not at all: a temporary file beside the target, then a rename.
    output.write(&vitrt_weights::f32_tensors_bytes(&args.output, &named)?)?;
    let names: Vec<&str> = named.iter().map(|(n, _, _)| n.as_str()).collect();
    let place = if output.is_stdout() {
        "stdout".to_string()
    } else {
        output.display().to_string()
    };
    eprintln!("wrote {place} ({})", names.join(", "));
    Ok(ExitCode::SUCCESS)
}

/// The results, checked cheaply; a non-finite value is traced to the first layer holding one
/// (`traced`: a pass with every hidden state, as `vitrt parity` compares them, run only then).
fn check_finite<E: Into<anyhow::Error>>(
    outputs: &[vitrt_runtime::HostTensor],
    traced: impl FnOnce() -> std::result::Result<Vec<vitrt_runtime::HostTensor>, E>,
) -> Result<()> {
    for last in outputs
        .iter()
        .filter(|t| !t.name.starts_with("hidden_states."))
    {
        if let Some(at) = last.data.iter().position(|v| !v.is_finite()) {
            let traced = if outputs.iter().any(|t| t.name.starts_with("hidden_states.")) {
                outputs.to_vec()
            } else {
                traced().map_err(Into::into)?
            };
            let first = traced
                .iter()
                .find(|t| t.data.iter().any(|v| !v.is_finite()))
                .map_or(last.name.as_str(), |t| t.name.as_str());
            bail!(
                "the model's {} is {} at {:?}; the first tensor that is not finite is {} ({}); \
                 nothing was written",
                last.name,
                last.data[at],
                unravel(at, &last.shape),
                first,
                describe_tensor(first)
            );
        }
    }
    Ok(())
}

/// A flat index as a multi-index of `shape`.
fn unravel(mut flat: usize, shape: &[usize]) -> Vec<usize> {
    let mut index = vec![0; shape.len()];
    for (i, &extent) in shape.iter().enumerate().rev() {
        index[i] = flat % extent.max(1);
        flat /= extent.max(1);
    }
    index
}

/// What a tensor of `runner.run`'s outputs is, in the model's terms.
fn describe_tensor(name: &str) -> String {
    match name.strip_prefix("hidden_states.") {
        Some("0") => "the embeddings: patch projection, CLS token and position embeddings".into(),
        Some(i) => match i.parse::<usize>() {
            Ok(i) => format!("the output of encoder layer {} (0-based)", i - 1),
            Err(_) => name.to_string(),
        },
        None => "the head, after the last encoder layer and layernorm".into(),
    }
}
