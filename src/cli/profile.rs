//! `vitrt profile`: where a forward pass spends its time. Every graph node is timed between
//! CUDA events over repeated passes (host time on the CPU backend); the table gives each
//! node's median time, its share, what it achieves (TFLOP/s for matmuls, GB/s for the rest,
//! from `runtime::cost`) and how close that is to a ceiling measured in the same run on the
//! same GPU: cuBLAS on the same GEMM shape for linear layers and the patch projection, a
//! device-to-device copy for the memory-bound nodes.
//!
//! On a SigLIP 2 NaFlex checkpoint the batch is `vitrt bench model`'s for it: images of a fixed
//! mix of aspect ratios, each at its own patch grid, padded to `max_num_patches` with the key
//! mask (`vitrt_model::naflex::synthetic`). Its graph is built from the same encoder blocks as
//! the fixed-size models', so their nodes carry the same names and the two tables line up.
//!
//! On a GPU the SM clock, power and throttle reasons are read through NVML while the passes
//! run, as `vitrt bench model` reads them (report/clocks.rs): at batch 256 the pass runs under
//! the power cap, and the node times are times at that clock.

use super::common::{random_pixels, ModelArgs};
use crate::output_file::OutputFile;
use crate::report::clocks::{self, ClockSource, ClockSummary};
use crate::report::stats::Stats;
use anyhow::{bail, Context, Result};
use clap::Args;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use vitrt_kernels::cuda::{Gpu, Timer};
use vitrt_kernels::{DType, MatmulProblem};
use vitrt_model::naflex::synthetic::{mixed_batch, MIXED_ASPECT_SIZES};
use vitrt_model::naflex::NaflexRunner;
use vitrt_model::ForwardTimes;
use vitrt_runtime::backend::Device;
use vitrt_runtime::cost::{node_cost, NodeCost};
use vitrt_runtime::{Graph, Plan};

#[derive(Args, Debug)]
pub struct ProfileArgs {
    #[command(flatten)]
    model: ModelArgs,
    /// Images per forward pass.
    #[arg(long, default_value_t = 64, value_parser = super::common::parse_batch_size)]
    batch_size: usize,
    /// Timed forward passes (at least 5); each node's median over them is reported.
    #[arg(long, default_value_t = 20, value_parser = super::common::parse_passes)]
    reps: usize,
    /// Untimed passes first (at least one: it compiles the kernels).
    #[arg(long, default_value_t = 3, value_parser = super::common::parse_passes)]
    warmup: usize,
    /// Also write the profile as JSON.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// Also write one forward pass as a Chrome trace (chrome://tracing, ui.perfetto.dev).
    #[arg(long, value_name = "FILE")]
    trace: Option<PathBuf>,
    /// Replace an output file even if it is read-only.
    #[arg(long)]
    force: bool,
    /// Do not read the GPU's SM clock, power and throttle reasons through NVML while timing.
    #[arg(long)]
    no_clocks: bool,
}

/// One node of the profile.
#[derive(serde::Serialize)]
struct NodeRow {
    node: String,
    op: &'static str,
    median_ms: f64,
    /// The fastest and slowest of the node's passes (a spread the median hides).
    min_ms: f64,
    max_ms: f64,
    share: f64,
    tflops: Option<f64>,
    gbps: Option<f64>,
    /// Achieved over the ceiling (cuBLAS's TFLOP/s on the same GEMM, or the copy's GB/s).
    ceiling_ratio: Option<f64>,
    ceiling: Option<String>,
}

pub fn run(args: ProfileArgs) -> Result<ExitCode> {
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
    let trace_file = args
        .trace
        .as_deref()
        .map(|path| OutputFile::check_report(path, args.force))
        .transpose()?;
    if let Some((runner, dir, device)) = args.model.open_naflex_on_device()? {
        return profile_naflex(
            &args,
            runner,
            &dir,
            device,
            (json.as_ref(), trace_file.as_ref()),
        );
    }
    let (mut runner, _, device) = args.model.open_on_device()?;
    let dtype = runner.backend().dtype();
    // An FP8 run computes in f16 with its chosen linear layers in e4m3: named "fp8", or
    // "fp8-static" with calibrated static input scales (`--fp8-scales`).
    let run_name = match runner.fp8() {
        Some(_) if runner.fp8_static_scales() => "fp8-static",
        Some(_) => "fp8",
        None => dtype.name(),
    };
    let batch = args.batch_size;
    let pixels = random_pixels(&runner, batch, &mut SmallRng::seed_from_u64(7))?;
    eprintln!(
        "profiling {} on {}: batch {batch}, {run_name}, {} passes after {} warm-up",
        args.model.name(),
        runner.backend().describe(),
        args.reps,
        args.warmup.max(1)
    );
    let clock_source = ClockSource::for_run(runner.backend().device_pci_bus_id(), args.no_clocks);
    let (times, clocks) = clocks::sampled(clock_source.as_ref(), || {
        runner.time_forward(
            &pixels,
            batch,
            (args.warmup.max(1), args.reps),
            true,
            &mut || {},
        )
    });
    let times = times?;
    let described = runner.backend().describe();
    let executor = runner.prepare(batch, false)?;
    let profiled = Profiled {
        described,
        device,
        dtype,
        run_name,
        batch,
        times: &times,
        graph: executor.graph(),
        plan: executor.plan(),
        naflex: None,
        clocks,
    };
    report(&args, &profiled, (json.as_ref(), trace_file.as_ref()))
}

/// `vitrt profile` on SigLIP 2 NaFlex: `vitrt bench model`'s batch of mixed aspect ratios,
/// timed node by node as the fixed-size models are.
fn profile_naflex(
    args: &ProfileArgs,
    mut runner: NaflexRunner,
    dir: &Path,
    device: Device,
    files: (Option<&OutputFile>, Option<&OutputFile>),
) -> Result<ExitCode> {
    let max_patches = super::bench::naflex::max_num_patches(&runner, dir)?;
    let dtype = runner.backend().dtype();
    let batch = args.batch_size;
    let mut rng = SmallRng::seed_from_u64(7);
    let (inputs, grids) = mixed_batch(&runner.model, batch, max_patches, &mut || {
        rng.random_range(-1.0..1.0f32)
    })?;
    let mix = &grids[..grids.len().min(MIXED_ASPECT_SIZES.len())];
    let patches = grids.iter().map(|(r, c)| r * c).sum::<usize>() as f64 / batch as f64;
    eprintln!(
        "profiling {} (SigLIP 2 NaFlex) on {}: batch {batch} of mixed aspect ratios, {dtype}, \
         {} passes after {} warm-up",
        args.model.name(),
        runner.backend().describe(),
        args.reps,
        args.warmup.max(1)
    );
    // The fixed-size models' profile times their primary output, the last hidden state of a
    // SigLIP vision tower: so does this one, leaving out the pooling head that `bench model`
    // times for NaFlex, so that the two profiles time the same nodes.
    let clock_source = ClockSource::for_run(runner.backend().device_pci_bus_id(), args.no_clocks);
    let (timed, clocks) = clocks::sampled(clock_source.as_ref(), || {
        runner.time_forward(
            &inputs,
            &["last_hidden_state"],
            (args.warmup.max(1), args.reps),
            true,
            &mut || {},
        )
    });
    let (times, executor) = timed?;
    let profiled = Profiled {
        described: runner.backend().describe(),
        device,
        dtype,
        run_name: dtype.name(),
        batch,
        times: &times,
        graph: executor.graph(),
        plan: executor.plan(),
        naflex: Some(NaflexBatchInfo {
            max_num_patches: max_patches,
            mean_patches: patches,
            grids: mix.to_vec(),
        }),
        clocks,
    };
    report(args, &profiled, files)
}

/// What a NaFlex profile's batch held: each image's grid in turn, padded to
/// `max_num_patches`.
#[derive(serde::Serialize)]
struct NaflexBatchInfo {
    max_num_patches: usize,
    mean_patches: f64,
    /// The mix's grids, (rows, cols), in the order the batch takes them.
    grids: Vec<(usize, usize)>,
}

/// A timed forward pass, node by node: what the report needs.
struct Profiled<'a> {
    described: String,
    device: Device,
    dtype: DType,
    run_name: &'static str,
    batch: usize,
    times: &'a ForwardTimes,
    graph: &'a Graph,
    plan: &'a Plan,
    naflex: Option<NaflexBatchInfo>,
    /// The GPU's clocks over the timed passes and their warm-up (None on the CPU, with
    /// `--no-clocks`, or where NVML could not be read).
    clocks: Option<ClockSummary>,
}

/// Prints the profile by op kind and by node, with the ceilings measured on a GPU, and
/// writes `--json` and `--trace` (`files`).
fn report(
    args: &ProfileArgs,
    profiled: &Profiled<'_>,
    (json, trace_file): (Option<&OutputFile>, Option<&OutputFile>),
) -> Result<ExitCode> {
    let Profiled {
        described,
        device,
        dtype,
        run_name,
        batch,
        times,
        graph,
        plan,
        ..
    } = profiled;
    let (device, dtype, run_name, batch) = (*device, *dtype, *run_name, *batch);
    let costs: Vec<NodeCost> = (0..graph.nodes.len())
        .map(|n| node_cost(graph, plan, n))
        .collect();
    let stats: Vec<Option<Stats>> = (0..graph.nodes.len())
        .map(|n| {
            let samples: Vec<f64> = times.node_ms.iter().map(|pass| pass[n] as f64).collect();
            Stats::from_samples(&samples)
        })
        .collect();
    let medians: Vec<f64> = stats
        .iter()
        .map(|s| s.as_ref().map_or(f64::NAN, |s| s.median_ms))
        .collect();
    let total: f64 = medians.iter().sum();
    let forward = Stats::from_samples(
        &times
            .forward_ms
            .iter()
            .map(|&t| t as f64)
            .collect::<Vec<_>>(),
    )
    .context("the timer gave no usable time")?;

    // Ceilings, on the GPU only: a second context on the same device, timed after the model.
    let ceilings = match device {
        Device::Cuda(ordinal) => Some(Ceilings::measure(ordinal, dtype, &costs)?),
        Device::Cpu => None,
    };

    let rows: Vec<NodeRow> = graph
        .nodes
        .iter()
        .enumerate()
        .map(|(n, node)| {
            let (cost, ms) = (&costs[n], medians[n]);
            let seconds = ms * 1e-3;
            let tflops = (cost.flops > 0.0).then(|| cost.flops / seconds / 1e12);
            let gbps = (cost.flops == 0.0).then(|| cost.bytes / seconds / 1e9);
            let (ceiling_ratio, ceiling) = match (&ceilings, cost.matmul, tflops, gbps) {
                (Some(c), Some(p), Some(t), _) => match c.gemm_tflops.get(&gemm_key(&p)) {
                    Some(&cublas) => (
                        Some(t / cublas),
                        Some(format!("cuBLAS {cublas:.0} TFLOP/s")),
                    ),
                    None => (None, None),
                },
                (Some(c), None, _, Some(g)) => (
                    Some(g / c.copy_gbps),
                    Some(format!("copy {:.0} GB/s", c.copy_gbps)),
                ),
                _ => (None, None),
            };
            NodeRow {
                node: node.name.clone(),
                op: node.op.kind_name(),
                median_ms: ms,
                min_ms: stats[n].as_ref().map_or(f64::NAN, |s| s.min_ms),
                max_ms: stats[n].as_ref().map_or(f64::NAN, |s| s.max_ms),
                share: ms / total,
                tflops,
                gbps,
                ceiling_ratio,
                ceiling,
            }
        })
        .collect();

    outln!(
        "{} on {}, batch {batch}, {run_name}: forward {:.3} ms median ({:.0} images/s; with a mark \
         after every node: {total:.3} ms)",
        args.model.name(),
        described,
        forward.median_ms,
        batch as f64 / (forward.median_ms * 1e-3),
    );
    if let Some(naflex) = &profiled.naflex {
        outln!(
            "each image at its own patch grid ({} in turn; {:.1} patches on average), padded to \
             {} rows with the key mask",
            super::bench::naflex::describe_grids(&naflex.grids),
            naflex.mean_patches,
            naflex.max_num_patches
        );
    }
    if let Some(c) = &profiled.clocks {
        outln!(
            "clocks (NVML every 10 ms over the passes): SM {} MHz median (p10 {}, p90 {}), power \
             {} W, held back by power in {} of {} samples, by heat in {}",
            c.sm_mhz_median,
            c.sm_mhz_p10,
            c.sm_mhz_p90,
            c.power_w_median.map_or("-".into(), |w| format!("{w:.0}")),
            clocks::percent(c.power_limited_share),
            c.samples,
            clocks::percent(c.thermal_limited_share)
        );
    }
    print_by_kind(&rows, total)?;
    print_by_node(&rows)?;

    if let Some(json) = &json {
        let document = serde_json::json!({
            "model": args.model.name(),
            "device": described,
            "dtype": run_name,
            "batch": batch,
            "reps": args.reps,
            "forward_median_ms": forward.median_ms,
            // Each timed pass in order, to see whether a spread drifts or alternates.
            "forward_passes_ms": times.forward_ms,
            "ceilings": ceilings.as_ref().map(|c| serde_json::json!({"copy_gbps": c.copy_gbps})),
            "naflex": profiled.naflex,
            "clocks": profiled.clocks.as_ref().map(ClockSummary::to_json),
            "nodes": rows,
        });
        json.write_and_tell((serde_json::to_string_pretty(&document)? + "\n").as_bytes())?;
    }
    if let Some(trace_file) = &trace_file {
        // The last timed pass, its nodes laid end to end (the marks leave no gaps to show).
        let pass = times.node_ms.last().context("no pass was timed")?;
        let mut start_us = 0.0f64;
        let mut events = Vec::with_capacity(pass.len());
        for (n, &ms) in pass.iter().enumerate() {
            let dur_us = ms as f64 * 1e3;
            events.push(serde_json::json!({
                "name": graph.nodes[n].name,
                "cat": graph.nodes[n].op.kind_name(),
                "ph": "X",
                "ts": start_us,
                "dur": dur_us,
                "pid": 0,
                "tid": 0,
                "args": {"flops": costs[n].flops, "bytes": costs[n].bytes},
            }));
            start_us += dur_us;
        }
        let trace = serde_json::json!({"traceEvents": events, "displayTimeUnit": "ms"});
        trace_file.write_and_tell((serde_json::to_string(&trace)? + "\n").as_bytes())?;
    }
    Ok(ExitCode::SUCCESS)
}

fn rate(row: &NodeRow) -> String {
    match (row.tflops, row.gbps) {
        (Some(t), _) => format!("{t:>8.1} TFLOP/s"),
        (_, Some(g)) => format!("{g:>8.0} GB/s   "),
        _ => String::new(),
    }
}

fn ratio(r: Option<f64>) -> String {
    r.map_or("-".into(), |r| format!("{r:.2}"))
}

fn print_by_kind(rows: &[NodeRow], total: f64) -> Result<()> {
    let mut kinds: BTreeMap<&str, (usize, f64)> = BTreeMap::new();
    for row in rows {
        let entry = kinds.entry(row.op).or_default();
        entry.0 += 1;
        entry.1 += row.median_ms;
    }
    let mut kinds: Vec<_> = kinds.into_iter().collect();
    kinds.sort_by(|a, b| b.1 .1.total_cmp(&a.1 .1));
    outln!("\n{:<20} {:>6} {:>11} {:>7}", "op", "nodes", "ms", "share");
    for (op, (count, ms)) in kinds {
        outln!(
            "{op:<20} {count:>6} {ms:>11.3} {:>6.1}%",
            100.0 * ms / total
        );
    }
    Ok(())
}

fn print_by_node(rows: &[NodeRow]) -> Result<()> {
    outln!(
        "\n{:<34} {:<18} {:>9} {:>6} {:>17} {:>7}  ceiling",
        "node",
        "op",
        "ms",
        "share",
        "achieved",
        "ratio"
    );
    for row in rows {
        outln!(
            "{:<34} {:<18} {:>9.4} {:>5.1}% {:>17} {:>7}  {}",
            row.node,
            row.op,
            row.median_ms,
            100.0 * row.share,
            rate(row),
            ratio(row.ceiling_ratio),
            row.ceiling.as_deref().unwrap_or("")
        );
    }
    Ok(())
}

/// The GEMM shape cuBLAS is timed on for a node's matmul: (m, n, k) of one matrix, when the
/// node multiplies a single one (linear layers, the patch projection).
fn gemm_key(p: &MatmulProblem) -> (usize, usize, usize) {
    (p.m, p.n, p.k)
}

struct Ceilings {
    copy_gbps: f64,
    /// cuBLAS TFLOP/s per GEMM shape (m, n, k).
    gemm_tflops: BTreeMap<(usize, usize, usize), f64>,
}

impl Ceilings {
    fn measure(ordinal: usize, dtype: DType, costs: &[NodeCost]) -> Result<Ceilings> {
        let gpu = Gpu::new(ordinal)?;
        let timer = Timer {
            warmup: 3,
            reps: 20,
            spin_nanoseconds: 100_000,
        };
        let time =
            |work: &dyn Fn() -> Result<(), vitrt_kernels::cuda::KernelError>| -> Result<f64> {
                let samples = timer.samples_ms(&gpu, 1, |_| work())?;
                Ok(Stats::from_samples(&samples)
                    .context("the timer gave no usable time")?
                    .median_ms)
            };
        // 256 MiB each way: far larger than L2.
        let bytes = 256usize << 20;
        let (src, dst) = (gpu.alloc(bytes)?, gpu.alloc(bytes)?);
        let n = bytes / 4;
        let (s, d) = (src.view(0, n, DType::F32)?, dst.view(0, n, DType::F32)?);
        let copy_ms = time(&|| gpu.copy(DType::F32, s, n, d))?;
        let copy_gbps = 2.0 * bytes as f64 / (copy_ms * 1e-3) / 1e9;
        drop((src, dst));

        let mut gemm_tflops = BTreeMap::new();
        let cublas = match gpu.cublas() {
            Ok(c) => Some(c),
            Err(e) => {
                eprintln!("no cuBLAS ceilings for the matmuls: {e}");
                None
            }
        };
        if let Some(cublas) = &cublas {
            let mut rng = SmallRng::seed_from_u64(11);
            for p in costs.iter().filter_map(|c| c.matmul) {
                if p.batch * p.heads != 1 || gemm_tflops.contains_key(&gemm_key(&p)) {
                    continue;
                }
                let (m, n, k) = gemm_key(&p);
                let upload = |len: usize, rng: &mut SmallRng| -> Result<_> {
                    let values: Vec<f32> =
                        (0..len).map(|_| rng.random_range(-1.0..1.0f32)).collect();
                    let buffer = gpu.alloc(len * dtype.size_bytes())?;
                    gpu.upload(&buffer, 0, &dtype.encode(&values))?;
                    Ok(buffer)
                };
                let (a, w) = (upload(m * k, &mut rng)?, upload(n * k, &mut rng)?);
                let c = gpu.alloc(m * n * dtype.size_bytes())?;
                let (av, wv, cv) = (
                    a.view(0, m * k, dtype)?,
                    w.view(0, n * k, dtype)?,
                    c.view(0, m * n, dtype)?,
                );
                let ms = time(&|| cublas.gemm_nt(dtype, m, n, k, av, wv, cv))?;
                gemm_tflops.insert((m, n, k), p.flops() / (ms * 1e-3) / 1e12);
            }
        }
        Ok(Ceilings {
            copy_gbps,
            gemm_tflops,
        })
    }
}
