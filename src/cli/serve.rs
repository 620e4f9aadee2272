//! `vitrt serve`: the model behind HTTP (`vitrt_server`): OpenAI-compatible embeddings,
//! classification and zero-shot labels, with requests batched together on the device.

use super::common::{parse_batch_size, ModelArgs};
use super::images::{DecodeArg, LimitArgs};
use anyhow::{bail, Result};
use clap::Args;
use std::process::ExitCode;
use std::time::Duration;
use vitrt_engine::batched::DecodeOn;
use vitrt_server::fetch::{FetchOptions, Reach};
use vitrt_server::ServeOptions;

/// Which addresses `--allow-url-fetch` fetches from.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
enum UrlReach {
    /// Public addresses only.
    Public,
    /// Any address, loopback and private networks included.
    Any,
}

#[derive(Args, Debug)]
pub struct ServeArgs {
    #[command(flatten)]
    model: ModelArgs,
    /// The address to listen on. Default: loopback only; 0.0.0.0 listens on every interface
    /// (then use --api-key).
    #[arg(long, default_value = "127.0.0.1")]
    host: String,
    /// The port to listen on (0: any free port, said on stderr).
    #[arg(long, default_value_t = 8080)]
    port: u16,
    /// Most images per forward pass, from however many requests.
    #[arg(long, default_value_t = 64, value_parser = parse_batch_size)]
    max_batch_size: usize,
    /// Longest time the first image of a batch waits for images already admitted (being
    /// decoded), in milliseconds; a request alone runs at once.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u64).range(0..=10_000))]
    max_delay_ms: u64,
    /// Most images waiting for a batch; past it, requests are answered 429 with Retry-After.
    #[arg(long, default_value_t = 1024, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    max_queue: u64,
    /// Largest request body, in bytes; larger ones are answered 413.
    #[arg(long, default_value_t = 32 << 20, value_parser = clap::value_parser!(u64).range(1..=(1 << 32)))]
    max_body_bytes: u64,
    /// Require `Authorization: Bearer KEY` on every route but /health. Also read from the
    /// VITRT_API_KEY environment variable (which keeps it out of the process list).
    #[arg(long, env = "VITRT_API_KEY", hide_env_values = true)]
    api_key: Option<String>,
    /// A request not answered within this many milliseconds is answered 504.
    #[arg(long, default_value_t = 30_000, value_parser = clap::value_parser!(u64).range(1..=3_600_000))]
    request_timeout_ms: u64,
    /// Decoding threads. Default: the available cores on a GPU, half of them on the CPU.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=1024))]
    workers: Option<u32>,
    /// Where JPEGs are decoded: gpu (default on a CUDA device: each request's thread reads
    /// the file's markers and scan, the GPU decodes it in the batch, exactly as the host
    /// would), gpu-idct (the host entropy-decodes, the GPU does the rest) or cpu (everything
    /// on the host; the default elsewhere, and SigLIP 2 NaFlex's only one: each image is
    /// resized on the host to its own patch grid).
    #[arg(long, value_enum)]
    decode: Option<DecodeArg>,
    /// Let requests name image files in this folder as `file:NAME` (relative to it; links
    /// and `..` that lead outside it are refused). Without it the server reads no local file.
    #[arg(long, value_name = "DIR")]
    allow_local_files: Option<std::path::PathBuf>,
    /// Let requests name images by http:// or https:// URL, fetched by the server within
    /// --max-file-size and --url-fetch-timeout-ms. `public` (the default) fetches only from
    /// public addresses, refusing loopback, private and link-local ones (an internal service
    /// cannot be reached through the server); `any` fetches from any address. Without it the
    /// server fetches nothing.
    #[arg(long, value_enum, num_args = 0..=1, default_missing_value = "public", value_name = "REACH")]
    allow_url_fetch: Option<UrlReach>,
    /// The longest a URL's fetch may take, redirects (at most 5) included.
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..=600_000))]
    url_fetch_timeout_ms: u64,
    #[command(flatten)]
    limits: LimitArgs,
}

pub fn run(args: ServeArgs) -> Result<ExitCode> {
    if args.api_key.as_deref() == Some("") {
        bail!("--api-key is empty");
    }
    // Served outputs are the same bytes whatever else shares their batch: the kernels choose
    // their programs whatever the batch size (benchmarks/NOTES.md, 2026-11-27 "Batch
    // invariance on the GPU").
    let limits = args.limits.limits();
    let mut model = args.model.options()?;
    model.batch_invariant = true;
    vitrt_server::serve(ServeOptions {
        model,
        host: args.host,
        port: args.port,
        max_batch_size: args.max_batch_size,
        max_delay: Duration::from_millis(args.max_delay_ms),
        max_queue: args.max_queue as usize,
        max_body_bytes: args.max_body_bytes as usize,
        api_key: args.api_key,
        request_timeout: Duration::from_millis(args.request_timeout_ms),
        limits,
        workers: args.workers.map(|w| w as usize),
        allow_local_files: args.allow_local_files,
        decode: args.decode.map(DecodeOn::from),
        allow_url_fetch: args.allow_url_fetch.map(|reach| FetchOptions {
            reach: match reach {
                UrlReach::Public => Reach::Public,
                UrlReach::Any => Reach::Any,
            },
            max_bytes: limits.max_file_bytes,
            timeout: Duration::from_millis(args.url_fetch_timeout_ms),
        }),
    })?;
    Ok(ExitCode::SUCCESS)
}
