//! `vitrt bench serve`: a running `vitrt serve` under load, one image a request (the raw file
//! as the body of `/v1/classify`, or with `--embeddings MODEL` an OpenAI-style embeddings
//! request carrying the image as a data URI), from `--concurrency` keep-alive connections that
//! each post the next request as soon as the last is answered (`vitrt_server::load`): answers
//! by status, images/s and latency percentiles, on standard output and optionally as JSON.
//! The embeddings mode loads other servers as well (michaelfeil/infinity's `/embeddings`):
//! the same client measures both (scripts/gpu/gpu-serve-peers.sh).

use anyhow::{bail, Context, Result};
use clap::Args;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use vitrt_engine::pipeline;

#[derive(Args, Debug)]
pub struct ServeBenchArgs {
    /// The server: host:port (`http://` may lead).
    #[arg(long, default_value = "127.0.0.1:8080")]
    url: String,
    /// Open connections, each with one request in flight.
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u32).range(1..=65_536))]
    concurrency: u32,
    /// Requests in all.
    #[arg(long, default_value_t = 20_000, value_parser = clap::value_parser!(u64).range(1..=100_000_000))]
    requests: u64,
    /// Start no request after this many seconds (those in flight are awaited): bounds the
    /// time a slow server costs; the figures count the requests answered.
    #[arg(long, value_name = "SECONDS")]
    time_limit: Option<f64>,
    /// Client threads (default: 4).
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=256))]
    threads: u32,
    /// Write the figures here as JSON too.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Post OpenAI-style embeddings requests instead of raw images: one image a request as
    /// JSON `{"model": MODEL, "input": ["data:image/jpeg;base64,..."], "modality": "image",
    /// "encoding_format": "base64"}` (`modality` for infinity_emb; vitrt serve ignores it).
    #[arg(long, value_name = "MODEL")]
    embeddings: Option<String>,
    /// The route to post to (default: /v1/classify, or /v1/embeddings with --embeddings;
    /// infinity_emb serves /embeddings).
    #[arg(long)]
    path: Option<String>,
    /// Image files and folders, sent in turn (JPEG, PNG, WebP).
    images: Vec<PathBuf>,
}

pub fn run(args: ServeBenchArgs) -> Result<ExitCode> {
    let address = args
        .url
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .to_string();
    if address.contains('/') || !address.contains(':') {
        bail!("--url: give the server as host:port (got \"{}\")", args.url);
    }
    let inputs = pipeline::collect_inputs(&args.images, None)?;
    if inputs.paths.is_empty() {
        bail!("no images given: name image files or folders");
    }
    let mut bodies = inputs
        .paths
        .iter()
        .map(|p| std::fs::read(p).with_context(|| format!("reading {}", p.display())))
        .collect::<Result<Vec<_>>>()?;
    let (default_path, content_type) = match &args.embeddings {
        Some(model) => {
            for body in &mut bodies {
                *body = vitrt_server::load::embeddings_body(model, body);
            }
            ("/v1/embeddings", "application/json")
        }
        None => ("/v1/classify", "image/jpeg"),
    };
    let route = args.path.as_deref().unwrap_or(default_path);
    let time_limit = match args.time_limit {
        Some(s) if s.is_finite() && s > 0.0 => Some(std::time::Duration::from_secs_f64(s)),
        Some(s) => bail!("--time-limit: give a positive number of seconds (got {s})"),
        None => None,
    };
    if !route.starts_with('/') {
        bail!("--path: give a route that starts with / (got \"{route}\")");
    }
    let report = vitrt_server::load::run_load(
        &address,
        route,
        content_type,
        Arc::new(bodies),
        (
            args.concurrency as usize,
            args.requests as usize,
            args.threads as usize,
        ),
        time_limit,
    )
    .map_err(anyhow::Error::msg)?;
    let ms = |q: f64| report.percentile(q).as_secs_f64() * 1e3;
    println!(
        "{} requests at concurrency {}: {:.0} answered 200 a second; statuses {:?}; p50 {:.2} ms, \
         p90 {:.2} ms, p99 {:.2} ms; {:.2} s",
        report.requests,
        report.concurrency,
        report.ok_per_second(),
        report.statuses,
        ms(0.5),
        ms(0.9),
        ms(0.99),
        report.wall.as_secs_f64()
    );
    if let Some(path) = &args.json {
        let document = serde_json::json!({
            "concurrency": report.concurrency,
            "requests": report.requests,
            "statuses": report.statuses.iter().map(|(k, v)| (k.to_string(), serde_json::Value::from(*v))).collect::<serde_json::Map<_, _>>(),
            "requests_asked": args.requests,
            "wall_s": report.wall.as_secs_f64(),
            "images_per_s_answered_200": report.ok_per_second(),
            "latency_ms": {"p50": ms(0.5), "p90": ms(0.9), "p99": ms(0.99)},
            "client": "vitrt bench serve",
            "path": route,
            "body": if args.embeddings.is_some() { "embeddings" } else { "raw image" },
        });
        std::fs::write(path, serde_json::to_string_pretty(&document)? + "\n")
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(ExitCode::SUCCESS)
}
