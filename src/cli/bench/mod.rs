//! `vitrt bench kernels`: our kernels against their yardsticks on one GPU, in one run —
//! matmuls against cuBLAS (TFLOP/s), the memory-bound ops against a device-to-device copy of
//! the same traffic (GB/s) — printed as a table, optionally written as JSON and plotted.

mod cases;
mod measure;
mod model;
pub(crate) mod naflex;
mod serve;

use crate::output_file::OutputFile;
use crate::report::{self, plot, schema, table};
use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;
use vitrt_kernels::cuda::Gpu;
use vitrt_kernels::DType;
use vitrt_runtime::backend::Device;

#[derive(Args, Debug)]
pub struct BenchArgs {
    #[command(subcommand)]
    command: BenchCommand,
}

#[derive(Subcommand, Debug)]
enum BenchCommand {
    /// Time our kernels against cuBLAS (matmul) and a device-to-device copy (the rest).
    Kernels(KernelsArgs),
    /// Time whole forward passes of a model: latency and images per second per batch size
    /// (SigLIP 2 NaFlex: batches of mixed aspect ratios, and the time per image).
    Model(model::ModelBenchArgs),
    /// Load a running `vitrt serve` with one image a request from many connections: images
    /// per second and latency percentiles.
    Serve(serve::ServeBenchArgs),
}

#[derive(Args, Debug)]
pub struct KernelsArgs {
    /// cuda or cuda:N.
    #[arg(long, default_value = "cuda")]
    device: String,
    /// Storage type of every operand: f16, bf16 or f32 (accumulation is always f32).
    #[arg(long, default_value = "f16")]
    dtype: String,
    /// Timed repetitions per case (at least 20): the median, min and max are reported.
    #[arg(long, default_value_t = 50, value_parser = crate::cli::common::parse_passes)]
    reps: usize,
    /// Untimed repetitions first (at least one is always run: it compiles the kernels).
    #[arg(long, default_value_t = 10, value_parser = crate::cli::common::parse_passes)]
    warmup: usize,
    /// Also write the results as JSON (schema vitrt-bench/1).
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// Also plot the results as an SVG file.
    #[arg(long, value_name = "FILE.svg")]
    plot: Option<PathBuf>,
    /// Only the cases whose op/case contains this text (qkv, softmax, b64, square/8192).
    #[arg(long, value_name = "SUBSTRING")]
    filter: Option<String>,
    /// Replace an output file even if it is read-only.
    #[arg(long)]
    force: bool,
}

/// The fewest timed repetitions whose median means something.
const MIN_REPS: usize = 20;

pub fn run(args: BenchArgs) -> Result<ExitCode> {
    match args.command {
        BenchCommand::Kernels(args) => kernels(args),
        BenchCommand::Model(args) => model::run(args),
        BenchCommand::Serve(args) => serve::run(args),
    }
}

fn kernels(args: KernelsArgs) -> Result<ExitCode> {
    // Everything that can be checked without a GPU is checked first.
    let ordinal = match Device::parse(&args.device)? {
        Device::Cuda(ordinal) => ordinal,
        Device::Cpu => bail!(
            "vitrt bench kernels times GPU kernels: use --device cuda or cuda:N, not {}",
            args.device
        ),
    };
    let dtype = DType::parse(&args.dtype)
        .with_context(|| format!("unknown dtype \"{}\" (use f16, bf16 or f32)", args.dtype))?;
    if args.reps < MIN_REPS {
        bail!(
            "--reps {} is too few: the median needs at least {MIN_REPS}",
            args.reps
        );
    }
    let cases: Vec<cases::Case> = cases::catalogue()
        .into_iter()
        .filter(|c| c.matches(args.filter.as_deref()))
        .collect();
    if cases.is_empty() {
        bail!(
            "no case matches --filter \"{}\" (cases are named like matmul/vit-b16/qkv/b64, \
             matmul/square/4096, softmax/vit-b16/b8)",
            args.filter.unwrap_or_default()
        );
    }
    let json = args
        .json
        .as_deref()
        .map(|path| OutputFile::check_report(path, args.force))
        .transpose()?;
    let plot_file = args
        .plot
        .as_deref()
        .map(|path| OutputFile::check_report(path, args.force))
        .transpose()?;

    let gpu = Gpu::new(ordinal).with_context(|| format!("opening {}", args.device))?;
    let device = measure::device_info(&gpu)?;
    outln!(
        "vitrt bench kernels: {} (sm_{}, driver {}, L2 {} MiB), {dtype}, median of {} reps \
         after {} warm-up, inputs rotated over more than 2x L2",
        device.name,
        device.compute_capability.replace('.', ""),
        device.driver,
        device.l2_bytes >> 20,
        args.reps,
        args.warmup.max(1),
    );
    let settings = measure::Settings {
        dtype,
        reps: args.reps,
        warmup: args.warmup,
        cases,
    };
    let results = measure::run(&gpu, &settings)?;
    let report = schema::BenchReport {
        schema: schema::SCHEMA.into(),
        tool: format!("vitrt {}", env!("CARGO_PKG_VERSION")),
        date: schema::utc_timestamp(std::time::SystemTime::now()),
        device,
        dtype: dtype.name().into(),
        kernels: results.kernels,
        models: Vec::new(),
        skipped: results.skipped,
    };
    print!("{}", table::render(&report.kernels, &report.skipped));
    if !report.skipped.is_empty() {
        outln!(
            "{} timing(s) skipped; the reasons are above on stderr{}",
            report.skipped.len(),
            if json.is_some() {
                " and in the JSON"
            } else {
                ""
            }
        );
    }

    if let Some(json) = &json {
        json.write_and_tell((serde_json::to_string_pretty(&report)? + "\n").as_bytes())?;
    }
    if let Some(plot_file) = &plot_file {
        let svg = plot::render(&report::figure(&report))?;
        plot_file.write_and_tell(svg.as_bytes())?;
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::cases::{catalogue, Kind};
    use super::*;
    use crate::report::schema::{BenchReport, DeviceInfo, KernelRow, SCHEMA};
    use crate::report::stats::Stats;

    /// A report of the whole catalogue with made-up timings: what a GPU run would hand to
    /// the table, the JSON and the plot.
    fn fake_report(dtype: DType) -> BenchReport {
        let mut kernels = Vec::new();
        for case in catalogue() {
            let shape = case.shape();
            let stats = |ms: f64| Stats::from_samples(&[ms * 0.9, ms, ms * 1.2]).unwrap();
            match case.kind {
                Kind::Matmul { m, .. } | Kind::Fp8Matmul { m, .. } => {
                    let baseline = if case.op() == "matmul" {
                        "cublas"
                    } else {
                        "vitrt-16bit"
                    };
                    for (epilogue, slower) in [("none", 1.0), ("bias+gelu", 1.1)] {
                        for (provider, speed) in [("vitrt", 0.8), (baseline, 1.0)] {
                            let ms = 1e-3 * m as f64 / speed * slower;
                            kernels.push(KernelRow::new(
                                case.op(),
                                &case.name,
                                provider,
                                Some(epilogue),
                                shape.clone(),
                                &stats(ms),
                                case.flops(),
                                None,
                            ));
                        }
                    }
                }
                Kind::LayernormMatmul { m, .. } | Kind::RowStatsMatmul { m, .. } => {
                    let (epilogue, baseline) = match case.kind {
                        Kind::LayernormMatmul { gelu: true, .. } => ("bias+gelu", "vitrt-unfused"),
                        Kind::LayernormMatmul { .. } => ("bias", "vitrt-unfused"),
                        _ => ("bias+residual", "vitrt-plain"),
                    };
                    for (provider, speed) in [("vitrt", 0.8), (baseline, 1.0)] {
                        kernels.push(KernelRow::new(
                            case.op(),
                            &case.name,
                            provider,
                            Some(epilogue),
                            shape.clone(),
                            &stats(1e-3 * m as f64 / speed),
                            case.flops(),
                            None,
                        ));
                    }
                }
                _ => {
                    let bytes = case.bytes(dtype).unwrap() as f64;
                    let ms = bytes / 3e9;
                    kernels.push(KernelRow::new(
                        case.op(),
                        &case.name,
                        "vitrt",
                        None,
                        shape,
                        &stats(ms),
                        None,
                        Some(bytes),
                    ));
                    kernels.push(KernelRow::new(
                        "copy",
                        &format!("{}/{}", case.op(), case.name),
                        "copy",
                        None,
                        vec![bytes as u64 / 2],
                        &stats(ms * 0.8),
                        None,
                        Some(bytes),
                    ));
                }
            }
        }
        BenchReport {
            schema: SCHEMA.into(),
            tool: format!("vitrt {}", env!("CARGO_PKG_VERSION")),
            date: schema::utc_timestamp(std::time::SystemTime::now()),
            device: DeviceInfo {
                name: "NVIDIA H200".into(),
                driver: "580.159.04".into(),
                compute_capability: "9.0".into(),
                l2_bytes: 62_914_560,
            },
            dtype: dtype.name().into(),
            kernels,
            models: Vec::new(),
            skipped: Vec::new(),
        }
    }

    #[test]
    fn a_whole_run_makes_a_table_line_and_a_plot_point_per_case() {
        let report = fake_report(DType::F16);
        let text = table::render(&report.kernels, &report.skipped);
        // A header, then a line per matmul case (16-bit and FP8) and epilogue, per
        // layernorm-folded and row-statistics matmul case, and per memory-bound case.
        assert_eq!(
            text.lines().count(),
            1 + (22 + 16) * 2 + 8 + 6 + 28,
            "{text}"
        );
        assert!(text.lines().skip(1).all(|l| l.contains("0.80x")), "{text}");

        let figure = report::figure(&report);
        // qkv, proj, fc1, fc2 and square, each without and with the epilogue, the FP8 qkv,
        // proj, fc1 and fc2 likewise, the layernorm-folded qkv and fc1, the row-statistics proj
        // and fc2, and the seven memory-bound ops.
        assert_eq!(figure.panels.len(), 5 * 2 + 4 * 2 + 2 + 2 + 7);
        let points: usize = figure
            .panels
            .iter()
            .flat_map(|p| &p.series)
            .map(|s| s.points.len())
            .sum();
        assert_eq!(points, 22 * 4 + 16 * 4 + 8 * 2 + 6 * 2 + 28);
        assert!(figure
            .panels
            .iter()
            .filter(|p| p.y_label == "GB/s")
            .all(|p| p.ceilings.len() == 1));
        let svg = plot::render(&figure).unwrap();
        // A legend entry per line: vitrt on every panel, cuBLAS on the 16-bit matmul ones (the
        // fake FP8 rows' baseline is our 16-bit program, the folded ones' our unfused pair, the
        // row-statistics ones' the plain residual matmul).
        let entries = |name: &str| svg.matches(&format!(">\n{name}\n</text>")).count();
        assert_eq!(
            (
                entries("vitrt"),
                entries("cublas"),
                entries("vitrt-16bit"),
                entries("vitrt-unfused"),
                entries("vitrt-plain")
            ),
            (5 * 2 + 4 * 2 + 2 + 2 + 7, 5 * 2, 4 * 2, 2, 2)
        );

        let json: serde_json::Value = serde_json::to_value(&report).unwrap();
        assert_eq!(
            json["kernels"].as_array().unwrap().len(),
            22 * 4 + 16 * 4 + 8 * 2 + 6 * 2 + 28 * 2
        );
    }
}
