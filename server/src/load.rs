//! A load generator for `vitrt serve` (`vitrt bench serve`): `concurrency` keep-alive HTTP/1.1
//! connections, each posting one image a request (the raw file as the body of
//! `/v1/classify`) as soon as its last answer came back, on a few threads. A Python client
//! on the same cores kept only 13-34 requests in flight of 256 asked (benchmarks/NOTES.md,
//! 2026-11-27 "why vitrt serve measured 0.49x classify"); this one keeps them all.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

/// One connection's latencies and answers by status.
type ConnectionFigures = (Vec<Duration>, BTreeMap<u16, usize>);

/// What one load run measured.
#[derive(Clone, Debug)]
pub struct LoadReport {
    pub requests: usize,
    pub concurrency: usize,
    /// Answers by HTTP status.
    pub statuses: BTreeMap<u16, usize>,
    pub wall: Duration,
    /// Every request's time from its first byte sent to its answer's last byte, sorted.
    pub latencies: Vec<Duration>,
}

impl LoadReport {
    /// The latency below which a share `q` (0 to 1) of the requests were answered.
    pub fn percentile(&self, q: f64) -> Duration {
        if self.latencies.is_empty() {
            return Duration::ZERO;
        }
        let i = ((q * self.latencies.len() as f64) as usize).min(self.latencies.len() - 1);
        self.latencies[i]
    }

    /// Answers of status 200 per second of the run.
    pub fn ok_per_second(&self) -> f64 {
        self.statuses.get(&200).copied().unwrap_or(0) as f64 / self.wall.as_secs_f64().max(1e-9)
    }
}

/// Posts `requests` requests to `path` on `address` (host:port), the bodies taken in turn
/// from `bodies` (sent as `content_type`), over `concurrency` connections driven by `threads`
/// runtime threads. A connection that fails is an error naming why.
pub fn run_load(
    address: &str,
    path: &str,
    content_type: &str,
    bodies: Arc<Vec<Vec<u8>>>,
    (concurrency, requests, threads): (usize, usize, usize),
) -> Result<LoadReport, String> {
    if bodies.is_empty() || concurrency == 0 {
        return Err("no images to send, or no connections".into());
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads.max(1))
        .enable_io()
        .build()
        .map_err(|e| format!("starting the client's runtime: {e}"))?;
    let next = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let results: Vec<Result<ConnectionFigures, String>> = runtime.block_on(async {
        let tasks: Vec<_> = (0..concurrency)
            .map(|_| {
                let (next, bodies) = (Arc::clone(&next), Arc::clone(&bodies));
                let (address, path) = (address.to_string(), path.to_string());
                let content_type = content_type.to_string();
                tokio::spawn(async move {
                    connection(&address, &path, &content_type, &bodies, &next, requests).await
                })
            })
            .collect();
        let mut out = Vec::with_capacity(tasks.len());
        for task in tasks {
            out.push(
                task.await
                    .map_err(|e| format!("a connection's task failed: {e}"))?,
            );
        }
        Ok::<_, String>(out)
    })?;
    let wall = started.elapsed();
    let mut statuses = BTreeMap::new();
    let mut latencies = Vec::with_capacity(requests);
    for result in results {
        let (mine, codes) = result?;
        latencies.extend(mine);
        for (code, count) in codes {
            *statuses.entry(code).or_insert(0) += count;
        }
    }
    latencies.sort_unstable();
    Ok(LoadReport {
        requests,
        concurrency,
        statuses,
        wall,
        latencies,
    })
}

/// One keep-alive connection posting requests until `requests` have been taken by all.
async fn connection(
    address: &str,
    path: &str,
    content_type: &str,
    bodies: &[Vec<u8>],
    next: &AtomicUsize,
    requests: usize,
) -> Result<ConnectionFigures, String> {
    // No Nagle: a request written while the previous segment is unacknowledged would wait
    // for the server's delayed ACK, 40 ms (benchmarks/NOTES.md, 2026-11-27 "The 40 ms the
    // load generator waited").
    let connect = || async {
        let stream = TcpStream::connect(address)
            .await
            .map_err(|e| format!("connecting to {address}: {e}"))?;
        stream
            .set_nodelay(true)
            .map_err(|e| format!("TCP_NODELAY on {address}: {e}"))?;
        Ok::<_, String>(stream)
    };
    let mut stream = BufReader::new(connect().await?);
    let (mut latencies, mut statuses) = (Vec::new(), BTreeMap::new());
    loop {
        let i = next.fetch_add(1, Ordering::Relaxed);
        if i >= requests {
            return Ok((latencies, statuses));
        }
        let body = &bodies[i % bodies.len()];
        // The head and the body in one write.
        let mut request = format!(
            "POST {path} HTTP/1.1\r\nHost: {address}\r\nContent-Type: {content_type}\r\n\
             Content-Length: {}\r\n\r\n",
            body.len()
        )
        .into_bytes();
        request.extend_from_slice(body);
        let started = Instant::now();
        let answer = async {
            stream.get_mut().write_all(&request).await?;
            read_answer(&mut stream).await
        }
        .await;
        let (status, keep_alive) =
            answer.map_err(|e| format!("request {i} to {address}{path}: {e}"))?;
        latencies.push(started.elapsed());
        *statuses.entry(status).or_insert(0) += 1;
        if !keep_alive {
            stream = BufReader::new(connect().await?);
        }
    }
}

/// Reads one HTTP/1.1 answer: its status, and whether the connection stays open.
async fn read_answer(stream: &mut BufReader<TcpStream>) -> std::io::Result<(u16, bool)> {
    let bad = |what: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, what.to_string());
    let mut line = String::new();
    if stream.read_line(&mut line).await? == 0 {
        return Err(bad("the server closed the connection"));
    }
    let status: u16 = line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| bad("an answer without a status line"))?;
    let (mut length, mut keep_alive) = (0usize, true);
    loop {
        line.clear();
        if stream.read_line(&mut line).await? == 0 {
            return Err(bad("the answer's headers end early"));
        }
        let header = line.trim_end();
        if header.is_empty() {
            break;
        }
        if let Some((name, value)) = header.split_once(':') {
            let (name, value) = (name.trim().to_ascii_lowercase(), value.trim());
            if name == "content-length" {
                length = value.parse().map_err(|_| bad("a bad Content-Length"))?;
            } else if name == "connection" && value.eq_ignore_ascii_case("close") {
                keep_alive = false;
            }
        }
    }
    let mut body = vec![0u8; length];
    stream.read_exact(&mut body).await?;
    Ok((status, keep_alive))
}
