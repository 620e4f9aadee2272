//! `vitrt`: classify images, run tensors and check parity with PyTorch, on the CPU or on an
//! NVIDIA GPU through our own kernels.

mod cli;
mod output_file;
mod pipeline;
mod report;

use clap::Parser;
use std::process::ExitCode;

fn main() -> ExitCode {
    let args = cli::Cli::parse();
    match cli::run(args) {
        Ok(code) => code,
        Err(e) => {
            // One line: the cause chain joined, as anyhow's alternate form prints it.
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
