//! `vitrt infer`: pixel_values from a safetensors file in, the model's outputs out.

use super::{pixel_values, read_tensors, ModelArgs};
use anyhow::Result;
use clap::Args;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Args, Debug)]
pub struct InferArgs {
    #[command(flatten)]
    model: ModelArgs,
    /// safetensors file holding `pixel_values` [B, C, H, W].
    #[arg(long)]
    input: PathBuf,
    /// Where to write `logits` (or `last_hidden_state`) as f32 safetensors.
    #[arg(long)]
    output: PathBuf,
    /// Also write every `hidden_states.{i}`, indexed as Hugging Face's output_hidden_states.
    #[arg(long)]
    dump_activations: bool,
}

pub fn run(args: InferArgs) -> Result<ExitCode> {
    let (mut runner, _) = args.model.open()?;
    let tensors = read_tensors(&args.input)?;
    let (batch, pixels) = pixel_values(&tensors, &runner, &args.input)?;
    let outputs = runner.run(&pixels, batch, args.dump_activations)?;
    let named: Vec<_> = outputs
        .into_iter()
        .map(|t| (t.name, t.shape, t.data))
        .collect();
    // Written whole or not at all: the writer goes through a temporary file and a rename.
    vitrt_weights::write_f32_tensors(&args.output, &named)?;
    let names: Vec<&str> = named.iter().map(|(n, _, _)| n.as_str()).collect();
    eprintln!("wrote {} ({})", args.output.display(), names.join(", "));
    Ok(ExitCode::SUCCESS)
}
