//! `vitrt bench model`: latency and images per second of whole forward passes, per batch size.
//! A SigLIP 2 NaFlex checkpoint is timed on batches of mixed aspect ratios instead (naflex.rs).
//! Each pass is timed on the device between two events around its kernels (host time on the
//! CPU backend), on pixels written once beforehand: the figure PyTorch's benchmark
//! (scripts/bench/bench_torch.py) takes around `model(pixels)`, host launch overhead included.
//!
//! Memory, per batch size, two ways. The account: what the backend allocated itself (weights
//! as uploaded, the arena, staging buffers, kernels' scratch) and the most of it held at once,
//! the figure to put beside PyTorch's `torch.cuda.max_memory_allocated`. The device: the
//! driver's used memory (`cuMemGetInfo`, every process on the GPU) less what was used before
//! the weights were uploaded (the context is left out, as PyTorch's figure leaves it out),
//! sampled after the plan is made and the weights uploaded, after the first (eager) pass and
//! after the timed passes; the CUDA graph's share is the difference the pass that captures it
//! makes. The device figure also holds the loaded kernels' code and the graphs, which the
//! account cannot see, and misses anything freed between two samples.
//!
//! Clocks, per batch size on a GPU: the SM clock, power and throttle reasons read through NVML
//! every 10 ms while the back-to-back warm-up and timed passes run (report/clocks.rs).

use crate::cli::common::{random_pixels, ModelArgs};
use crate::output_file::OutputFile;
use crate::report::clocks::{self, ClockSource, ClockSummary};
use crate::report::schema::{self, BenchReport, DeviceInfo, Skipped};
use crate::report::stats::Stats;
use anyhow::{bail, Context, Result};
use clap::Args;
use rand::rngs::SmallRng;
use rand::SeedableRng;
use std::path::PathBuf;
use std::process::ExitCode;
use vitrt_model::Runner;
use vitrt_runtime::MemoryAccount;

#[derive(Args, Debug)]
pub struct ModelBenchArgs {
    #[command(flatten)]
    pub(super) model: ModelArgs,
    /// Batch sizes, comma-separated.
    #[arg(long, default_value = "1,8,64,256", value_delimiter = ',',
          value_parser = crate::cli::common::parse_batch_size)]
    pub(super) batch_sizes: Vec<usize>,
    /// Timed forward passes per batch size (at least 5).
    #[arg(long, default_value_t = 20, value_parser = crate::cli::common::parse_passes)]
    pub(super) reps: usize,
    /// Untimed passes first (at least one: it compiles the kernels and plans the memory).
    #[arg(long, default_value_t = 5, value_parser = crate::cli::common::parse_passes)]
    pub(super) warmup: usize,
    /// Then about this many milliseconds of untimed passes, run back to back with the timed
    /// ones: a GPU runs its first tens of ms of work after a pause faster than it then
    /// sustains (benchmarks/NOTES.md, 2026-11-28 "The first passes after idle run fast"), and
    /// the timed passes should see the pace a long job gets.
    #[arg(long, default_value_t = 1000.0)]
    pub(super) warmup_ms: f64,
    /// Also write the results as JSON (schema vitrt-bench/1, in "models").
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// Do not read the GPU's SM clock, power and throttle reasons through NVML while timing
    /// (a host thread reads them every 10 ms; this turns it off, to time without it).
    #[arg(long)]
    pub(super) no_clocks: bool,
    /// Replace an output file even if it is read-only.
    #[arg(long)]
    force: bool,
}

pub fn run(args: ModelBenchArgs) -> Result<ExitCode> {
    if args.batch_sizes.is_empty() {
        bail!("--batch-sizes needs batch sizes, e.g. 1,8,64,256");
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
    if let Some((runner, dir)) = args.model.open_naflex_in()? {
        return super::naflex::run(&args, runner, &dir, json.as_ref());
    }
    let (mut runner, _) = args.model.open()?;
    // An FP8 run computes in f16 with its chosen linear layers in e4m3: named "fp8", or
    // "fp8-static" with calibrated static input scales (`--fp8-scales`).
    let dtype = match runner.fp8() {
        Some(_) if runner.fp8_static_scales() => "fp8-static".to_string(),
        Some(_) => "fp8".to_string(),
        None => runner.backend().dtype().name().to_string(),
    };
    outln!(
        "vitrt bench model: {} on {}, {dtype} (residual stream {}), median of {} passes after {} \
         warm-up passes and about {} ms more",
        args.model.name(),
        runner.backend().describe(),
        runner.precision().residual,
        args.reps,
        args.warmup.max(1),
        args.warmup_ms
    );
    let passes = args.batch_sizes.len() * (args.reps + args.warmup.max(1) + 3);
    let progress = super::measure::progress_bar(passes as u64);
    let mut rng = SmallRng::seed_from_u64(7);
    let mut rows = Vec::new();
    let mut memory_rows = Vec::new();
    let mut skipped = Vec::new();
    let clock_source = ClockSource::for_run(runner.backend().device_pci_bus_id(), args.no_clocks);
    let mut clock_rows = Vec::new();
    // The device's used memory before anything of the model is on it (the backend uploads
    // weights when the first plan is made).
    runner.synchronize()?;
    let baseline = runner.backend().device_memory_used()?;
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
        let timed = random_pixels(&runner, batch, &mut rng).and_then(|pixels| {
            measure_batch(
                &mut runner,
                &pixels,
                batch,
                (args.warmup.max(1), args.warmup_ms, args.reps),
                baseline,
                clock_source.as_ref(),
                &mut || progress.inc(1),
            )
        });
        let (times, memory, clocks) = match timed {
            Ok(measured) => measured,
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
        let samples: Vec<f64> = times.iter().map(|&t| t as f64).collect();
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
            "memory": memory.to_json(baseline),
            "clocks": clocks.as_ref().map(ClockSummary::to_json),
        }));
        memory_rows.push(memory);
        if let Some(clocks) = clocks {
            clock_rows.push((batch, clocks));
        }
    }
    progress.finish_and_clear();
    print_memory(&memory_rows, baseline.is_some())?;
    print_clocks(&clock_rows)?;

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
            dtype,
            kernels: Vec::new(),
            models: rows,
            skipped,
        };
        json.write_and_tell((serde_json::to_string_pretty(&report)? + "\n").as_bytes())?;
    }
    Ok(ExitCode::SUCCESS)
}

/// What one batch size's run held, by the backend's account and by the driver.
struct BatchMemory {
    batch: usize,
    /// The plan's arena for this batch size, and what it would take without sharing bytes
    /// between values whose lifetimes do not overlap.
    plan_arena_bytes: usize,
    plan_unshared_bytes: usize,
    /// The backend's account after the timed passes.
    account: MemoryAccount,
    /// The driver's used memory less the baseline, after each step (None without a device).
    device: Option<DeviceSamples>,
}

/// Used device memory, in bytes beyond the baseline, after each step of one batch size's run.
struct DeviceSamples {
    /// The plan made and the weights uploaded (they are uploaded with the first plan).
    loaded: i64,
    /// After the first forward pass, eager: kernels loaded, the kernels' scratch allocated.
    first_pass: i64,
    /// After the timed passes (the second pass captures the CUDA graph).
    timed: i64,
    /// `timed - first_pass`, where a CUDA graph was captured: the graph's own memory.
    capture: Option<i64>,
}

impl DeviceSamples {
    fn peak(&self) -> i64 {
        self.loaded.max(self.first_pass).max(self.timed)
    }
}

impl BatchMemory {
    fn to_json(&self, baseline: Option<usize>) -> serde_json::Value {
        let a = &self.account;
        let device = match (&self.device, baseline) {
            (Some(d), Some(baseline)) => serde_json::json!({
                "baseline_used_bytes": baseline,
                "after_load_bytes": d.loaded,
                "after_first_pass_bytes": d.first_pass,
                "after_timed_bytes": d.timed,
                "capture_bytes": d.capture,
                "peak_bytes": d.peak(),
            }),
            _ => serde_json::Value::Null,
        };
        serde_json::json!({
            "weights_bytes": a.params_bytes,
            "arena_plan_bytes": self.plan_arena_bytes,
            "arena_unshared_bytes": self.plan_unshared_bytes,
            "arena_reserved_bytes": a.arena_bytes,
            "workspace_bytes": a.workspace_bytes,
            "staging_bytes": a.staging_bytes,
            "allocated_bytes": a.total_bytes(),
            "allocated_peak_bytes": a.peak_bytes,
            "graphs": a.graphs,
            "device": device,
        })
    }
}

/// Times `reps` forward passes of `batch` images after `warmup` untimed ones (at least one),
/// three more to find the pace, and about `warmup_ms` of them back to back, sampling the memory account and the device's used
/// memory (less `baseline`) after each step: plan and weights, the first (eager) pass, the
/// rest.
fn measure_batch(
    runner: &mut Runner,
    pixels: &[f32],
    batch: usize,
    (warmup, warmup_ms, reps): (usize, f64, usize),
    baseline: Option<usize>,
    clock_source: Option<&ClockSource>,
    progress: &mut dyn FnMut(),
) -> Result<(Vec<f32>, BatchMemory, Option<ClockSummary>)> {
    runner.reset_memory_peak();
    let sample = |runner: &mut Runner| -> Result<Option<i64>> {
        runner.synchronize()?;
        let used = runner.backend().device_memory_used()?;
        Ok(used.zip(baseline).map(|(u, b)| u as i64 - b as i64))
    };
    let (plan_arena_bytes, plan_unshared_bytes) = {
        let plan = runner.prepare(batch, false)?.plan();
        (plan.arena_bytes, plan.unshared_bytes())
    };
    let loaded = sample(runner)?;
    runner.time_forward(pixels, batch, (1, 0), false, progress)?;
    let first_pass = sample(runner)?;
    // The rest of the warm-up runs back to back with the timed passes, in one call: a pause
    // between passes (another call writes the inputs again) lets the GPU start fast again.
    // Its length in passes comes from the pace of the first few.
    let probe = runner.time_forward(pixels, batch, (warmup - 1, 3), false, progress)?;
    let more = super::measure::warmup_passes(&probe.forward_ms, warmup_ms);
    let mut passes = 0;
    let (times, clocks) = clocks::sampled(clock_source, || {
        runner.time_forward(pixels, batch, (more, reps), false, &mut || {
            passes += 1;
            if passes > more {
                progress();
            }
        })
    });
    let times = times?;
    let timed = sample(runner)?;
    let captured = runner
        .executor(batch, false)
        .is_some_and(|e| e.has_captured_graph(runner.backend()));
    let device = match (loaded, first_pass, timed) {
        (Some(loaded), Some(first_pass), Some(timed)) => Some(DeviceSamples {
            loaded,
            first_pass,
            timed,
            capture: captured.then_some(timed - first_pass),
        }),
        _ => None,
    };
    let memory = BatchMemory {
        batch,
        plan_arena_bytes,
        plan_unshared_bytes,
        account: runner.backend().memory_account(),
        device,
    };
    Ok((times.forward_ms, memory, clocks))
}

/// The clocks table, after the timings (GPU runs where NVML could be read).
pub(super) fn print_clocks(rows: &[(usize, ClockSummary)]) -> Result<()> {
    if rows.is_empty() {
        return Ok(());
    }
    outln!("");
    outln!(
        "clocks (NVML every 10 ms over each batch size's back-to-back warm-up and timed passes; \
         power: the driver's figure, averaged; limited: the share of samples whose clock was \
         held back by power or temperature)"
    );
    outln!(
        "{:>6} {:>8} {:>10} {:>8} {:>9} {:>14} {:>22}",
        "batch",
        "samples",
        "SM MHz p10",
        "median",
        "p90",
        "power W",
        "limited: power (heat)"
    );
    for (batch, c) in rows {
        outln!(
            "{batch:>6} {:>8} {:>10} {:>8} {:>9} {:>14} {:>22}",
            c.samples,
            c.sm_mhz_p10,
            c.sm_mhz_median,
            c.sm_mhz_p90,
            c.power_w_median.map_or("-".into(), |w| format!("{w:.0}")),
            format!(
                "{} ({})",
                clocks::percent(c.power_limited_share),
                clocks::percent(c.thermal_limited_share)
            )
        );
    }
    Ok(())
}

/// The memory table, after the timings.
fn print_memory(rows: &[BatchMemory], on_device: bool) -> Result<()> {
    if rows.is_empty() {
        return Ok(());
    }
    let mib = |bytes: usize| bytes as f64 / (1u64 << 20) as f64;
    let signed_mib = |bytes: i64| bytes as f64 / (1u64 << 20) as f64;
    outln!("");
    outln!(
        "memory, MiB (account: what the backend allocated, now and its most at once during \
         the batch size's run)"
    );
    if on_device {
        outln!(
            "device: the driver's used memory (cuMemGetInfo) less before the weights, its most \
             after a step (upload, first pass, timed passes); graph: the capturing pass's \
             difference"
        );
    } else {
        outln!("(host memory on the CPU, every value held as an f32; no device figures)");
    }
    outln!(
        "{:>6} {:>9} {:>11} {:>11} {:>10} {:>8} {:>9} {:>9} {:>12} {:>9}",
        "batch",
        "weights",
        "arena plan",
        "arena held",
        "workspace",
        "staging",
        "account",
        "peak",
        "device peak",
        "graph"
    );
    for row in rows {
        let a = &row.account;
        let peak = a
            .peak_bytes
            .map_or("-".into(), |p| format!("{:.1}", mib(p)));
        let (device_peak, graph) = match &row.device {
            Some(d) => (
                format!("{:.1}", signed_mib(d.peak())),
                d.capture
                    .map_or("-".into(), |c| format!("{:.1}", signed_mib(c))),
            ),
            None => ("-".into(), "-".into()),
        };
        outln!(
            "{:>6} {:>9.1} {:>11.1} {:>11.1} {:>10.1} {:>8.1} {:>9.1} {:>9} {:>12} {:>9}",
            row.batch,
            mib(a.params_bytes),
            mib(row.plan_arena_bytes),
            mib(a.arena_bytes),
            mib(a.workspace_bytes),
            mib(a.staging_bytes),
            mib(a.total_bytes()),
            peak,
            device_peak,
            graph
        );
    }
    Ok(())
}
