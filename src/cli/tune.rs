//! `vitrt tune`: times every candidate tile on every distinct matmul a model's forward pass
//! launches, at each batch size, and keeps the fastest in the tuning file (see
//! `vitrt_kernels::cuda::tuning`), which every later run on the same GPU model reads. Prints
//! what the cost-model heuristic would have chosen, what won, and the gain.

use crate::output_file::OutputFile;
use anyhow::{bail, Context, Result};
use clap::Args;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;
use vitrt_kernels::cuda::Gpu;
use vitrt_kernels::matmul::{self, MatmulCase, MatmulStorage, TuneSettings, TuningKey};
use vitrt_model::{GraphOptions, VisionModel};
use vitrt_runtime::backend::Device;
use vitrt_runtime::lowering::matmul_launches;
use vitrt_runtime::passes::Fusion;
use vitrt_runtime::{DType, Plan, Precision};
use vitrt_weights::{resolve_model, ResolveOptions};

#[derive(Args, Debug)]
pub struct TuneArgs {
    /// A local folder (config.json + safetensors) or a Hugging Face hub id.
    #[arg(long, short, default_value = "google/vit-base-patch16-224")]
    model: String,
    /// Hub revision (branch, tag or commit).
    #[arg(long)]
    revision: Option<String>,
    /// Use only the local hub cache (also when HF_HUB_OFFLINE=1).
    #[arg(long)]
    offline: bool,
    /// cuda or cuda:N (tuning times kernels on a GPU).
    #[arg(long, default_value = "cuda")]
    device: String,
    /// Storage type of weights and activations.
    #[arg(long, default_value = "f16", value_parser = super::common::parse_dtype)]
    dtype: DType,
    /// Storage type of the residual stream (as the runs to be tuned for store it; default as
    /// theirs: f16 for f16, f32 otherwise).
    #[arg(long, value_parser = super::common::parse_dtype)]
    residual_dtype: Option<DType>,
    /// Batch sizes, comma-separated.
    #[arg(long, default_value = "1,8,64,256", value_delimiter = ',',
          value_parser = super::common::parse_batch_size)]
    batch_sizes: Vec<usize>,
    /// Timed launches per candidate (at least 5); the median counts.
    #[arg(long, default_value_t = 20, value_parser = super::common::parse_passes)]
    reps: usize,
    /// Untimed launches per candidate first (the first compiles it).
    #[arg(long, default_value_t = 5, value_parser = super::common::parse_passes)]
    warmup: usize,
    /// Also write the results as JSON.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// Replace an output file even if it is read-only.
    #[arg(long)]
    force: bool,
}

/// One tuned problem, as printed and written.
#[derive(serde::Serialize)]
struct TunedRow {
    batch: usize,
    /// The nodes that launch this problem (the first, and how many).
    node: String,
    nodes: usize,
    problem: String,
    heuristic: String,
    heuristic_ms: f64,
    best: String,
    best_ms: f64,
    /// heuristic_ms / best_ms.
    gain: f64,
}

pub fn run(args: TuneArgs) -> Result<ExitCode> {
    if args.batch_sizes.is_empty() {
        bail!("--batch-sizes needs batch sizes, e.g. 1,8,64,256");
    }
    if args.reps < 5 {
        bail!(
            "--reps {} is too few for a median: use at least 5",
            args.reps
        );
    }
    let ordinal = match Device::parse(&args.device)? {
        Device::Cuda(ordinal) => ordinal,
        Device::Cpu => bail!("vitrt tune times kernels on a GPU: use --device cuda or cuda:N"),
    };
    let precision = match args.residual_dtype {
        Some(residual) => Precision::new(args.dtype, residual)?,
        None => Precision::default_for(args.dtype),
    };
    let residual_dtype = precision.residual;
    let json = args
        .json
        .as_deref()
        .map(|path| OutputFile::check_report(path, args.force))
        .transpose()?;
    let files = resolve_model(
        &args.model,
        &ResolveOptions {
            revision: args.revision.clone(),
            offline: args.offline,
        },
    )?;
    let model =
        VisionModel::load(&files.dir).with_context(|| format!("loading model {}", args.model))?;
    let gpu = Gpu::new(ordinal).with_context(|| format!("opening {}", args.device))?;

    // Every distinct problem per batch size, with the nodes that launch it.
    let mut cases: Vec<(usize, MatmulCase, Vec<String>)> = Vec::new();
    for &batch in &args.batch_sizes {
        let options = GraphOptions {
            hidden_states: false,
            fusion: Fusion::ALL,
            ..Default::default()
        };
        let graph = model.build_graph(batch, options)?;
        let plan = Plan::new(&graph, precision);
        let mut distinct: BTreeMap<TuningKey, usize> = BTreeMap::new();
        for launch in matmul_launches(&graph, &plan) {
            let storage = MatmulStorage {
                output: launch.output,
                residual: launch.residual,
            };
            let key = TuningKey::matmul(
                &launch.problem,
                launch.dtype,
                storage,
                gpu.compute_capability(),
                gpu.name(),
            );
            match distinct.get(&key) {
                Some(&index) => cases[index].2.push(launch.node),
                None => {
                    distinct.insert(key, cases.len());
                    let case = MatmulCase {
                        dtype: launch.dtype,
                        problem: launch.problem,
                        storage,
                    };
                    cases.push((batch, case, vec![launch.node]));
                }
            }
        }
    }
    if cases.is_empty() {
        bail!("{} launches no matmul to tune", args.model);
    }

    outln!(
        "vitrt tune: {} on cuda:{ordinal} ({}), {} (residual stream {}), {} problems, median of {} launches per tile",
        args.model,
        gpu.name(),
        args.dtype,
        residual_dtype,
        cases.len(),
        args.reps
    );
    let progress =
        ProgressBar::with_draw_target(Some(cases.len() as u64), ProgressDrawTarget::stderr());
    if let Ok(style) =
        ProgressStyle::with_template("{elapsed_precise} [{bar:30}] {pos}/{len} {msg}")
    {
        progress.set_style(style.progress_chars("=> "));
    }
    let settings = TuneSettings {
        warmup: args.warmup,
        reps: args.reps,
    };
    let mut rows = Vec::with_capacity(cases.len());
    let mut tuning_file = None;
    for (batch, case, nodes) in &cases {
        progress.set_message(format!("batch {batch}: {}", nodes[0]));
        let tuning = matmul::tune_matmul(&gpu, case, settings)
            .with_context(|| format!("tuning {} (batch {batch})", tuning_problem_name(case)))?;
        tuning_file =
            Some(matmul::store_matmul_tuning(&gpu, &tuning).context("storing the tuning table")?);
        rows.push(TunedRow {
            batch: *batch,
            node: nodes[0].clone(),
            nodes: nodes.len(),
            problem: tuning.key.problem.clone(),
            heuristic: tuning.heuristic.name(),
            heuristic_ms: tuning.heuristic_ms,
            best: tuning.best.name(),
            best_ms: tuning.best_ms,
            gain: tuning.heuristic_ms / tuning.best_ms,
        });
        progress.inc(1);
    }
    progress.finish_and_clear();

    outln!(
        "{:>5}  {:<34} {:<42} {:<20} {:>9}  {:<20} {:>9}  {:>5}",
        "batch",
        "node",
        "problem",
        "heuristic",
        "ms",
        "best",
        "ms",
        "gain"
    );
    for row in &rows {
        let node = if row.nodes > 1 {
            format!("{} (+{})", row.node, row.nodes - 1)
        } else {
            row.node.clone()
        };
        outln!(
            "{:>5}  {:<34} {:<42} {:<20} {:>9.4}  {:<20} {:>9.4}  {:>4.2}x",
            row.batch,
            node,
            row.problem,
            row.heuristic,
            row.heuristic_ms,
            row.best,
            row.best_ms,
            row.gain
        );
    }
    if let Some(file) = tuning_file {
        outln!("tuned tiles kept in {}", file.display());
    }
    if let Some(json) = &json {
        let document = serde_json::json!({
            "model": args.model,
            "device": gpu.name(),
            "dtype": args.dtype.name(),
            "residual_dtype": residual_dtype.name(),
            "reps": args.reps,
            "results": rows,
        });
        json.write_and_tell((serde_json::to_string_pretty(&document)? + "\n").as_bytes())?;
    }
    Ok(ExitCode::SUCCESS)
}

fn tuning_problem_name(case: &MatmulCase) -> String {
    matmul::matmul_signature(&case.problem, case.storage)
}
