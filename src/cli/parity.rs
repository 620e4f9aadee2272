//! `vitrt parity`: run on a reference's pixel_values and compare every tensor it holds.

use super::common::{pixel_values, read_tensors, ModelArgs};
use anyhow::Result;
use clap::Args;
use std::path::PathBuf;
use std::process::ExitCode;
use vitrt_model::parity::{compare, tolerance};
use vitrt_model::{Output, OutputSet};

#[derive(Args, Debug)]
pub struct ParityArgs {
    #[command(flatten)]
    model: ModelArgs,
    /// A safetensors file from scripts/reference.py: pixel_values and the expected outputs.
    #[arg(long)]
    reference: PathBuf,
    /// The largest relative error accepted (default: 1e-4 for f32, 1e-2 for f16 and bf16).
    #[arg(long)]
    tolerance: Option<f64>,
}

pub fn run(args: ParityArgs) -> Result<ExitCode> {
    let (mut runner, _) = args.model.open()?;
    let tensors = read_tensors(&args.reference)?;
    let (batch, pixels) = pixel_values(&tensors, &mut runner, &args.model, &args.reference)?;
    // Every output of the model the reference holds (logits, or last_hidden_state,
    // pooler_output, image_embeds), and the hidden states.
    let outputs: Vec<Output> = runner
        .model
        .model_outputs()
        .iter()
        .filter(|o| tensors.iter().any(|t| t.name == o.name()))
        .collect();
    let expected: Vec<_> = tensors
        .into_iter()
        .filter(|t| {
            outputs.iter().any(|o| o.name() == t.name) || t.name.starts_with("hidden_states.")
        })
        .collect();
    if expected.is_empty() {
        anyhow::bail!(
            "{} holds neither {} nor hidden_states.*: nothing to compare",
            args.reference.display(),
            runner.model.output_name()
        );
    }
    if !outputs.is_empty() {
        runner.set_outputs(OutputSet::of(&outputs));
    }
    let wants_hidden = expected
        .iter()
        .any(|t| t.name.starts_with("hidden_states."));
    let outputs = runner.run(&pixels, batch, wants_hidden)?;
    let rows = compare(&outputs, &expected).map_err(anyhow::Error::msg)?;

    let dtype = runner.backend().dtype();
    let limit = args.tolerance.unwrap_or_else(|| tolerance(dtype));
    outln!(
        "{} on {} ({dtype}), batch {batch}, tolerance {limit:.0e}",
        args.model.name(),
        runner.backend().describe()
    );
    outln!(
        "{:<20} {:>18} {:>14} {:>14}  ",
        "tensor",
        "shape",
        "max abs err",
        "rel err"
    );
    let mut failed = Vec::new();
    for row in &rows {
        let ok = row.relative_error <= limit && row.same_top1 != Some(false);
        let top1 = match (&row.shape_mismatch, row.same_top1) {
            (Some(ours), _) => format!(", ours has shape {ours:?}"),
            (None, Some(true)) => ", same top-1".into(),
            (None, Some(false)) => ", TOP-1 DIFFERS".into(),
            (None, None) => String::new(),
        };
        outln!(
            "{:<20} {:>18} {:>14.3e} {:>14.3e}  {}{top1}",
            row.name,
            format!("{:?}", row.shape),
            row.max_abs_error,
            row.relative_error,
            if ok { "ok" } else { "FAIL" }
        );
        if !ok {
            failed.push(row.name.clone());
        }
    }
    let worst = rows.iter().map(|r| r.relative_error).fold(0.0, f64::max);
    if failed.is_empty() {
        outln!(
            "parity: ok ({} tensors, worst relative error {worst:.3e})",
            rows.len()
        );
        Ok(ExitCode::SUCCESS)
    } else {
        outln!(
            "parity: FAILED ({} tensors, worst relative error {worst:.3e})",
            rows.len()
        );
        eprintln!(
            "error: parity failed for {} (first: {})",
            failed.join(", "),
            failed[0]
        );
        Ok(ExitCode::FAILURE)
    }
}
