//! `vitrt bench model`: latency and images per second of whole forward passes, per batch size.
//! Each pass is timed on the device between two events around its kernels (host time on the
//! CPU backend), on pixels written once beforehand: the figure PyTorch's benchmark
//! (scripts/bench_torch.py) takes around `model(pixels)`, host launch overhead included.

use crate::cli::common::ModelArgs;
use crate::output_file::OutputFile;
use crate::report::schema::{self, BenchReport, DeviceInfo, Skipped};
use crate::report::stats::Stats;
use anyhow::{bail, Context, Result};
use clap::Args;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Args, Debug)]
pub struct ModelBenchArgs {
    #[command(flatten)]
    model: ModelArgs,
    /// Batch sizes, comma-separated.
    #[arg(long, default_value = "1,8,64,256", value_delimiter = ',')]
    batch_sizes: Vec<usize>,
    /// Timed forward passes per batch size (at least 5).
    #[arg(long, default_value_t = 20)]
    reps: usize,
    /// Untimed passes first (at least one: it compiles the kernels and plans the memory).
    #[arg(long, default_value_t = 5)]
    warmup: usize,
    /// Also write the results as JSON (schema vitrt-bench/1, in "models").
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// Replace an output file even if it is read-only.
    #[arg(long)]
    force: bool,
}

pub fn run(args: ModelBenchArgs) -> Result<ExitCode> {
    if args.batch_sizes.is_empty() || args.batch_sizes.contains(&0) {
        bail!("--batch-sizes needs positive batch sizes, e.g. 1,8,64,256");
    }
    if args.reps < 5 {
        bail!(
            "--reps {} is too few for a median: use at least 5",
            args.reps
        );
    }
    let json = args
        .json
        .as_deref()
        .map(|path| OutputFile::check_report(path, args.force))
        .transpose()?;
    let (mut runner, _) = args.model.open()?;
    let dtype = runner.backend().dtype();
    outln!(
        "vitrt bench model: {} on {}, {dtype} (residual stream {}), median of {} passes after {} warm-up",
        args.model.name(),
        runner.backend().describe(),
        runner.precision().residual,
        args.reps,
        args.warmup.max(1)
    );
    let passes = args.batch_sizes.len() * (args.reps + args.warmup.max(1));
    let progress = super::measure::progress_bar(passes as u64);
    let mut rng = SmallRng::seed_from_u64(7);
    let mut rows = Vec::new();
    let mut skipped = Vec::new();
    outln!(
        "{:>6} {:>11} {:>11} {:>11} {:>12}",
        "batch",
        "median ms",
        "min ms",
        "max ms",
        "images/s"
    );
    for &batch in &args.batch_sizes {
        progress.set_message(format!("batch {batch}"));
        let len: usize = runner.input_shape(batch).iter().product();
        // Normalised pixels: roughly what a ViT image processor hands over.
        let pixels: Vec<f32> = (0..len).map(|_| rng.random_range(-1.0..1.0f32)).collect();
        let timed = runner.time_forward(
            &pixels,
            batch,
            (args.warmup.max(1), args.reps),
            false,
            &mut || progress.inc(1),
        );
        let times = match timed {
            Ok(times) => times,
            Err(e) => {
                // Out of memory at a large batch is a result, not a reason to lose the others.
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
        let samples: Vec<f64> = times.forward_ms.iter().map(|&t| t as f64).collect();
        let stats = Stats::from_samples(&samples).context("the timer gave no usable time")?;
        let images_per_s = batch as f64 / (stats.median_ms * 1e-3);
        progress.suspend(|| -> Result<()> {
            outln!(
                "{batch:>6} {:>11.3} {:>11.3} {:>11.3} {images_per_s:>12.1}",
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
        }));
    }
    progress.finish_and_clear();

    if let Some(json) = &json {
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
    Ok(ExitCode::SUCCESS)
}
