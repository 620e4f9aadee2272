//! `vitrt`: classify images, run tensors and check parity with PyTorch, on the CPU or on an
//! NVIDIA GPU through our own kernels.

mod cli;
mod output_file;
mod report;

use vitrt_engine::startup;

use clap::Parser;
use std::process::ExitCode;

fn main() -> ExitCode {
    startup::start();
    let args = cli::Cli::parse();
    let result = cli::run(args);
    startup::mark("the rest of the command and its teardown (memory, context released)");
    startup::report();
    match result {
        Ok(code) => code,
        Err(e) => {
            // One line: the cause chain joined, as anyhow's alternate form prints it.
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
