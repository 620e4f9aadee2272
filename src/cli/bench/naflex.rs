//! `vitrt bench model` on a SigLIP 2 NaFlex checkpoint: batches of images of mixed aspect
//! ratios (`vitrt_model::naflex::synthetic`: a fixed mix of nine, each at the patch grid the
//! processor would give it under the checkpoint's `max_num_patches`), every row padded to
//! `max_num_patches` with the key padding mask, random patch rows. Each pass is timed as the
//! fixed-size families' are (device events around the forward pass, the inputs written once
//! beforehand); the time per image is the figure to put beside the fixed-resolution model's
//! at the same token count. `scripts/bench/bench_family_torch.py` times the same batches
//! through transformers' `Siglip2VisionModel`.

use super::model::ModelBenchArgs;
use crate::report::clocks::{self, ClockSource, ClockSummary};
use crate::report::schema::{self, BenchReport, DeviceInfo, Skipped};
use crate::report::stats::Stats;
use anyhow::{Context, Result};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::path::Path;
use std::process::ExitCode;
use vitrt_model::naflex::synthetic::{mixed_batch, mixed_grids, MIXED_ASPECT_SIZES};
use vitrt_model::naflex::NaflexRunner;

/// The padded length of a batch: the processor's `max_num_patches`, or without a
/// `preprocessor_config.json` the learned position table's size (256 for every released
/// checkpoint's config, and the processor's default).
pub(crate) fn max_num_patches(runner: &NaflexRunner, dir: &Path) -> Result<usize> {
    if dir.join("preprocessor_config.json").exists() {
        Ok(vitrt_engine::naflex::processor(dir)?.max_num_patches)
    } else {
        Ok(runner.model.config.num_patches)
    }
}

/// "12x21, 21x12, ...": the grids of the mix, in the order a batch takes them.
pub(crate) fn describe_grids(grids: &[(usize, usize)]) -> String {
    grids
        .iter()
        .map(|(rows, cols)| format!("{rows}x{cols}"))
        .collect::<Vec<_>>()
        .join(", ")
}

pub(super) fn run(
    args: &ModelBenchArgs,
    mut runner: NaflexRunner,
    dir: &Path,
    json: Option<&crate::output_file::OutputFile>,
) -> Result<ExitCode> {
    let max_patches = max_num_patches(&runner, dir)?;
    let patch = runner.model.config.patch_size;
    let mix = mixed_grids(MIXED_ASPECT_SIZES.len(), patch, max_patches);
    let dtype = runner.backend().dtype();
    let warmup = args.warmup.max(1);
    outln!(
        "vitrt bench model: {} (SigLIP 2 NaFlex) on {}, {dtype}, median of {} passes after {warmup} \
         warm-up passes and about {} ms more",
        args.model.name(),
        runner.backend().describe(),
        args.reps,
        args.warmup_ms,
    );
    outln!(
        "each batch: images of {} aspect ratios in turn, patch grids {} (under {max_patches} \
         patches of {patch}), every image padded to {max_patches} rows with the key mask",
        mix.len(),
        describe_grids(&mix)
    );
    outln!(
        "{:>6} {:>11} {:>11} {:>11} {:>12} {:>11} {:>9}",
        "batch",
        "median ms",
        "min ms",
        "max ms",
        "images/s",
        "ms/image",
        "patches"
    );
    let passes = args.batch_sizes.len() * (args.reps + warmup + 3);
    let progress = super::measure::progress_bar(passes as u64);
    let mut rng = SmallRng::seed_from_u64(7);
    let mut rows = Vec::new();
    let mut skipped = Vec::new();
    let clock_source = ClockSource::for_run(runner.backend().device_pci_bus_id(), args.no_clocks);
    let mut clock_rows = Vec::new();
    for &batch in &args.batch_sizes {
        progress.set_message(format!("batch {batch}"));
        let timed = mixed_batch(&runner.model, batch, max_patches, &mut || {
            rng.random_range(-1.0..1.0f32)
        })
        .and_then(|(inputs, grids)| {
            // `warmup` passes, then as many as `--warmup-ms` takes at their pace (as the fixed
            // models): each call plans the batch anew, so the pace comes from a first call.
            let (probe, _) =
                runner.time_forward(&inputs, &[], (warmup, 3), false, &mut || progress.inc(1))?;
            let more = super::measure::warmup_passes(&probe.forward_ms, args.warmup_ms);
            let (timed, clocks) = clocks::sampled(clock_source.as_ref(), || {
                runner.time_forward(&inputs, &[], (more.max(1), args.reps), false, &mut || {})
            });
            let (times, _) = timed?;
            progress.inc(args.reps as u64);
            Ok((times.forward_ms, grids, clocks))
        });
        let (times, grids, clocks) = match timed {
            Ok(measured) => measured,
            Err(e) => {
                // A refusal or out of memory at one batch size is a result; the others run.
                progress.suspend(|| eprintln!("skipped batch {batch}: {e}"));
                skipped.push(Skipped {
                    op: "model".into(),
                    case: format!("b{batch}"),
                    provider: "vitrt".into(),
                    epilogue: None,
                    reason: e.to_string(),
                });
                continue;
            }
        };
        let samples: Vec<f64> = times.iter().map(|&t| t as f64).collect();
        let stats = Stats::from_samples(&samples).context("the timer gave no usable time")?;
        let images_per_s = batch as f64 / (stats.median_ms * 1e-3);
        let per_image_ms = stats.median_ms / batch as f64;
        let patches = grids.iter().map(|(r, c)| r * c).sum::<usize>() as f64 / batch as f64;
        progress.suspend(|| -> Result<()> {
            outln!(
                "{batch:>6} {:>11.3} {:>11.3} {:>11.3} {images_per_s:>12.1} {per_image_ms:>11.4} \
                 {patches:>9.1}",
                stats.median_ms,
                stats.min_ms,
                stats.max_ms
            );
            Ok(())
        })?;
        rows.push(serde_json::json!({
            "model": args.model.name(),
            "provider": "vitrt",
            "batch": batch,
            "reps": stats.reps,
            "median_ms": stats.median_ms,
            "min_ms": stats.min_ms,
            "max_ms": stats.max_ms,
            "images_per_s": images_per_s,
            "per_image_ms": per_image_ms,
            "naflex": {
                "max_num_patches": max_patches,
                "mean_patches": patches,
                "grids": grids.iter().take(mix.len()).map(|&(r, c)| [r, c]).collect::<Vec<_>>(),
            },
            "clocks": clocks.as_ref().map(ClockSummary::to_json),
        }));
        if let Some(clocks) = clocks {
            clock_rows.push((batch, clocks));
        }
    }
    progress.finish_and_clear();
    super::model::print_clocks(&clock_rows)?;
    let measured = !rows.is_empty();
    if let Some(json) = json {
        let report = BenchReport {
            schema: schema::SCHEMA.into(),
            tool: format!("vitrt {}", env!("CARGO_PKG_VERSION")),
            date: schema::utc_timestamp(std::time::SystemTime::now()),
            device: DeviceInfo {
                name: runner.backend().describe(),
                driver: String::new(),
                compute_capability: String::new(),
                l2_bytes: 0,
            },
            dtype: dtype.name().into(),
            kernels: Vec::new(),
            models: rows,
            skipped,
        };
        json.write_and_tell((serde_json::to_string_pretty(&report)? + "\n").as_bytes())?;
    }
    // Nothing measured (every batch size refused) is a failure for the scripts that call this.
    Ok(if measured {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
