//! Command-line interface: the subcommands and their dispatch. What they share (model
//! resolution, backend choice, `pixel_values` files) is in [`common`]; the flags of the commands
//! over many image files in [`images`]; what they run (opening, pipeline, batches, results)
//! is the engine's (`vitrt_engine`).

/// `println!` for command output: a closed standard output (the reader has gone, as after
/// `| head`) ends the process quietly with status 0, as Unix tools do; any other failure (a
/// full disk) returns an error from the enclosing function.
macro_rules! outln {
    ($($arg:tt)*) => {
        $crate::cli::common::write_stdout_line(format_args!($($arg)*))?
    };
}

mod bench;
mod calibrate;
mod classify;
pub mod common;
mod embed;
mod embed_text;
mod images;
mod infer;
mod output_dir;
mod parity;
mod profile;
mod quantize_report;
mod serve;
mod tune;
mod zero_shot;

use anyhow::Result;
use clap::{Parser, Subcommand};
use std::process::ExitCode;

#[derive(Parser, Debug)]
#[command(
    name = "vitrt",
    version,
    about = "Vision Transformer inference with our own GPU kernels"
)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Classify images with a ViTForImageClassification checkpoint.
    Classify(classify::ClassifyArgs),
    /// Embed images: one vector per image (pooled, projected, CLS or patch mean) to
    /// safetensors, NPY or JSON Lines.
    Embed(embed::EmbedArgs),
    /// Embed texts with the text tower of a CLIP or SigLIP checkpoint: one vector per text
    /// to safetensors, NPY or JSON Lines.
    EmbedText(embed_text::EmbedTextArgs),
    /// Label images with words (CLIP, SigLIP): the labels go into a template, are encoded
    /// by the text tower once, and each image gets its most probable labels.
    ZeroShot(zero_shot::ZeroShotArgs),
    /// Serve the model over HTTP: OpenAI-compatible /v1/embeddings, /v1/classify,
    /// /v1/zero-shot, /health and /metrics, with concurrent requests batched together.
    Serve(serve::ServeArgs),
    /// Run a model on `pixel_values` from a safetensors file and write its outputs.
    Infer(infer::InferArgs),
    /// Compare a model's outputs, layer by layer, with a reference written by
    /// scripts/fixtures/reference.py.
    Parity(parity::ParityArgs),
    /// Benchmarks: `vitrt bench kernels` times our kernels against cuBLAS and a memory copy.
    Bench(bench::BenchArgs),
    /// Time every graph node of a forward pass against cuBLAS and the memory bandwidth.
    Profile(profile::ProfileArgs),
    /// Time every candidate tile on the matmuls a model launches and keep the fastest.
    Tune(tune::TuneArgs),
    /// What FP8 costs a model, linear layer by linear layer, on calibration images, and which
    /// layers to keep in f16 for a budget (`--output` saves the choice for `--dtype fp8
    /// --fp8-layers`).
    QuantizeReport(quantize_report::QuantizeReportArgs),
    /// The static input scales of a model's FP8 linear layers, from an f32 run on calibration
    /// images (`--out` saves them for `--dtype fp8 --fp8-scales`).
    Calibrate(calibrate::CalibrateArgs),
}

pub fn run(cli: Cli) -> Result<ExitCode> {
    match cli.command {
        Command::Classify(args) => classify::run(args),
        Command::Embed(args) => embed::run(args),
        Command::ZeroShot(args) => zero_shot::run(args),
        Command::EmbedText(args) => embed_text::run(args),
        Command::Serve(args) => serve::run(args),
        Command::Infer(args) => infer::run(args),
        Command::Parity(args) => parity::run(args),
        Command::Bench(args) => bench::run(args),
        Command::Profile(args) => profile::run(args),
        Command::Tune(args) => tune::run(args),
        Command::QuantizeReport(args) => quantize_report::run(args),
        Command::Calibrate(args) => calibrate::run(args),
    }
}
