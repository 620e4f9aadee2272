//! `vitrt parity`: run on a reference's pixel_values and compare every tensor it holds.

use super::common::{pixel_values, read_tensors, ModelArgs};
use anyhow::{Context, Result};
use clap::Args;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;
use vitrt_model::naflex::{NaflexInputs, NaflexRunner};
use vitrt_model::parity::{compare, tolerance, Comparison};
use vitrt_model::{Output, OutputSet};

#[derive(Args, Debug)]
pub struct ParityArgs {
    #[command(flatten)]
    model: ModelArgs,
    /// A safetensors file from scripts/fixtures/reference.py: pixel_values and the expected
    /// outputs (for SigLIP 2 NaFlex also pixel_attention_mask and spatial_shapes, as
    /// scripts/fixtures/make_naflex_fixture.py writes them).
    #[arg(long)]
    reference: PathBuf,
    /// The largest relative error accepted (default: 1e-4 for f32, 1e-2 for f16 and bf16).
    #[arg(long)]
    tolerance: Option<f64>,
}

pub fn run(args: ParityArgs) -> Result<ExitCode> {
    if let Some(runner) = args.model.open_naflex()? {
        return run_naflex(&args, runner);
    }
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
    report(&args, &rows, runner.backend(), batch)
}

/// SigLIP 2 NaFlex on the reference's `pixel_values`, `pixel_attention_mask` and
/// `spatial_shapes` (scripts/fixtures/make_naflex_fixture.py writes such a file).
fn run_naflex(args: &ParityArgs, mut runner: NaflexRunner) -> Result<ExitCode> {
    let tensors = read_tensors(&args.reference)?;
    let inputs = NaflexInputs::from_tensors(&runner.model, &tensors)
        .with_context(|| args.reference.display().to_string())?;
    let outputs: Vec<&str> = runner
        .available_outputs()
        .into_iter()
        .filter(|o| tensors.iter().any(|t| t.name == *o))
        .collect();
    let expected: Vec<_> = tensors
        .into_iter()
        .filter(|t| outputs.contains(&t.name.as_str()) || t.name.starts_with("hidden_states."))
        .collect();
    if expected.is_empty() {
        anyhow::bail!(
            "{} holds neither last_hidden_state, pooler_output nor hidden_states.*: nothing to \
             compare",
            args.reference.display()
        );
    }
    let wants_hidden = expected
        .iter()
        .any(|t| t.name.starts_with("hidden_states."));
    // No output asked for but hidden states: the last hidden state is computed and not
    // compared.
    let asked = if outputs.is_empty() {
        vec!["last_hidden_state"]
    } else {
        outputs
    };
    let ours = runner.run(&inputs, &asked, wants_hidden)?;
    let rows = compare(&ours, &expected).map_err(anyhow::Error::msg)?;
    report(args, &rows, runner.backend(), inputs.batch)
}

/// The comparison table, and success only if every tensor is within the tolerance.
fn report(
    args: &ParityArgs,
    rows: &[Comparison],
    backend: &dyn vitrt_runtime::Backend,
    batch: usize,
) -> Result<ExitCode> {
    let dtype = backend.dtype();
    let limit = args.tolerance.unwrap_or_else(|| tolerance(dtype));
    // In bf16, each tensor must also be no worse than PyTorch's own bf16 run on the same
    // inputs, where the reference's folder records it.
    let torch_bf16 = if dtype == vitrt_runtime::DType::BF16 {
        torch_bf16_errors(&args.reference)?
    } else {
        None
    };
    outln!(
        "{} on {} ({dtype}), batch {batch}, tolerance {limit:.0e}",
        args.model.name(),
        backend.describe()
    );
    if torch_bf16.is_some() {
        outln!("each tensor also no worse than PyTorch's own bf16 (torch-bf16.json)");
    }
    outln!(
        "{:<20} {:>18} {:>14} {:>14}  ",
        "tensor",
        "shape",
        "max abs err",
        "rel err"
    );
    let mut failed = Vec::new();
    for row in rows {
        let torch = torch_bf16
            .as_ref()
            .and_then(|errors| errors.get(&row.name).copied());
        let ok = row.relative_error <= limit
            && row.same_top1 != Some(false)
            && torch.is_none_or(|torch| row.relative_error <= torch);
        let torch_note = match torch {
            Some(torch) => format!(", torch bf16 {torch:.3e}"),
            None => String::new(),
        };
        let top1 = match (&row.shape_mismatch, row.same_top1) {
            (Some(ours), _) => format!(", ours has shape {ours:?}"),
            (None, Some(true)) => ", same top-1".into(),
            (None, Some(false)) => ", TOP-1 DIFFERS".into(),
            (None, None) => String::new(),
        };
        outln!(
            "{:<20} {:>18} {:>14.3e} {:>14.3e}  {}{top1}{torch_note}",
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

/// PyTorch's own bf16 relative error per tensor, from torch-bf16.json beside the reference
/// (scripts/fixtures/make_family_fixtures.py and make_random_family.py write it), if there is one.
fn torch_bf16_errors(reference: &std::path::Path) -> Result<Option<BTreeMap<String, f64>>> {
    let path = reference.with_file_name("torch-bf16.json");
    if !path.exists() {
        return Ok(None);
    }
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let errors: BTreeMap<String, f64> = serde_json::from_str(&text)
        .with_context(|| format!("{}: not a JSON object of tensor errors", path.display()))?;
    Ok(Some(errors))
}
