//! A load generator for `vitrt serve` (`vitrt bench serve`): `concurrency` keep-alive HTTP/1.1
//! connections, each posting one image a request (the raw file as the body of
//! `/v1/classify`, or an OpenAI-style embeddings request built by [`embeddings_body`]) as
//! soon as its last answer came back, on a few threads. A Python client on the same cores
//! kept only 13-34 requests in flight of 256 asked (benchmarks/NOTES.md, 2026-11-27 "why
//! vitrt serve measured 0.49x classify"); this one keeps them all. It speaks plain HTTP/1.1
//! (answers with Content-Length or chunked), so it loads other servers too: the same
//! compiled client measures `vitrt serve` and a peer (scripts/gpu/gpu-serve-peers.sh).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

/// The JSON body of an OpenAI-style `POST /v1/embeddings` for one image: `{"model": MODEL,
/// "input": ["data:image/jpeg;base64,..."], "modality": "image", "encoding_format":
/// "base64"}`, the media type read from the file's first bytes (JPEG, PNG or WebP; anything
/// else is sent as `application/octet-stream` and left for the server to refuse).
/// `modality` is michaelfeil/infinity's extra field, without which it reads a data URI as
/// text; `vitrt serve` ignores it, as it ignores `model`. Base64 output is what the `openai`
/// client asks for unless told otherwise, and spares both servers formatting floats.
pub fn embeddings_body(model: &str, image: &[u8]) -> Vec<u8> {
    use base64::Engine as _;
    let media = if image.starts_with(&[0xFF, 0xD8, 0xFF]) {
        "image/jpeg"
    } else if image.starts_with(b"\x89PNG\r\n\x1a\n") {
        "image/png"
    } else if image.len() >= 12 && &image[..4] == b"RIFF" && &image[8..12] == b"WEBP" {
        "image/webp"
    } else {
        "application/octet-stream"
    };
    let uri = format!(
        "data:{media};base64,{}",
        base64::engine::general_purpose::STANDARD.encode(image)
    );
    let document = serde_json::json!({
        "model": model,
        "input": [uri],
        "modality": "image",
        "encoding_format": "base64",
    });
    serde_json::to_vec(&document).expect("a JSON value always serialises")
}

/// One connection's latencies and answers by status.
type ConnectionFigures = (Vec<Duration>, BTreeMap<u16, usize>);

/// What one load run measured.
#[derive(Clone, Debug)]
pub struct LoadReport {
    /// Requests answered: all asked for, or fewer where the time limit stopped the run.
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
/// runtime threads. With a `time_limit`, no request starts after it has passed since the
/// start (those in flight are still awaited), so a slow server costs a bounded time. A
/// connection that fails is an error naming why.
pub fn run_load(
    address: &str,
    path: &str,
    content_type: &str,
    bodies: Arc<Vec<Vec<u8>>>,
    (concurrency, requests, threads): (usize, usize, usize),
    time_limit: Option<Duration>,
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
    let deadline = time_limit.map(|limit| started + limit);
    let results: Vec<Result<ConnectionFigures, String>> = runtime.block_on(async {
        let tasks: Vec<_> = (0..concurrency)
            .map(|_| {
                let (next, bodies) = (Arc::clone(&next), Arc::clone(&bodies));
                let (address, path) = (address.to_string(), path.to_string());
                let content_type = content_type.to_string();
                tokio::spawn(async move {
                    let last = (requests, deadline);
                    connection(&address, &path, &content_type, &bodies, &next, last).await
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
        requests: latencies.len(),
        concurrency,
        statuses,
        wall,
        latencies,
    })
}

/// One keep-alive connection posting requests until `requests` have been taken by all, or
/// the deadline has passed.
async fn connection(
    address: &str,
    path: &str,
    content_type: &str,
    bodies: &[Vec<u8>],
    next: &AtomicUsize,
    (requests, deadline): (usize, Option<Instant>),
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
        if deadline.is_some_and(|d| Instant::now() >= d) {
            return Ok((latencies, statuses));
        }
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
            let sent = stream.get_mut().write_all(&request).await;
            // A server may answer (a 404, a 413) and close before it has read the whole body:
            // the write then fails, and the answer is still there to read; the connection is
            // opened anew after it.
            match read_answer(&mut stream).await {
                Ok((status, keep_alive)) => Ok((status, keep_alive && sent.is_ok())),
                Err(e) => Err(sent.err().unwrap_or(e)),
            }
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
    let (mut length, mut keep_alive, mut chunked) = (0usize, true, false);
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
            } else if name == "transfer-encoding" && value.to_ascii_lowercase().contains("chunked")
            {
                chunked = true;
            }
        }
    }
    if !chunked {
        let mut body = vec![0u8; length];
        stream.read_exact(&mut body).await?;
        return Ok((status, keep_alive));
    }
    // Chunks: a hexadecimal size line, the data, CRLF; a size of 0 ends them, then trailers
    // up to an empty line.
    loop {
        line.clear();
        if stream.read_line(&mut line).await? == 0 {
            return Err(bad("the answer's chunks end early"));
        }
        let size = line.trim_end().split(';').next().unwrap_or("").trim();
        let size = usize::from_str_radix(size, 16).map_err(|_| bad("a bad chunk size"))?;
        if size == 0 {
            loop {
                line.clear();
                if stream.read_line(&mut line).await? == 0 || line.trim_end().is_empty() {
                    return Ok((status, keep_alive));
                }
            }
        }
        let mut chunk = vec![0u8; size + 2];
        stream.read_exact(&mut chunk).await?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::net::TcpListener;

    #[test]
    fn an_embeddings_body_is_one_data_uri_with_its_media_type() {
        let jpeg = [0xFF, 0xD8, 0xFF, 0xE0, 1, 2, 3];
        let document: serde_json::Value =
            serde_json::from_slice(&embeddings_body("clip", &jpeg)).unwrap();
        assert_eq!(document["model"], "clip");
        assert_eq!(document["modality"], "image");
        assert_eq!(document["encoding_format"], "base64");
        assert_eq!(document["input"][0], "data:image/jpeg;base64,/9j/4AECAw==");
        let png = embeddings_body("m", b"\x89PNG\r\n\x1a\nrest");
        assert!(String::from_utf8(png)
            .unwrap()
            .contains("data:image/png;base64,"));
    }

    /// A server answering every request with a chunked body (as uvicorn may) on keep-alive
    /// connections: each answer is read whole, so the next request on the connection is
    /// answered too.
    #[test]
    fn chunked_answers_are_read_whole() {
        let runtime = tokio::runtime::Runtime::new().unwrap();
        let listener = runtime.block_on(TcpListener::bind("127.0.0.1:0")).unwrap();
        let address = listener.local_addr().unwrap().to_string();
        runtime.spawn(async move {
            loop {
                let (socket, _) = listener.accept().await.unwrap();
                tokio::spawn(async move {
                    let mut socket = BufReader::new(socket);
                    let mut line = String::new();
                    loop {
                        let mut length = 0;
                        loop {
                            line.clear();
                            if socket.read_line(&mut line).await.unwrap() == 0 {
                                return;
                            }
                            let lower = line.trim_end().to_ascii_lowercase();
                            if lower.is_empty() {
                                break;
                            }
                            if let Some(n) = lower.strip_prefix("content-length:") {
                                length = n.trim().parse().unwrap();
                            }
                        }
                        let mut body = vec![0u8; length];
                        socket.read_exact(&mut body).await.unwrap();
                        let answer = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n\
                                      5\r\nhello\r\n7;x=y\r\n, world\r\n0\r\n\r\n";
                        socket.get_mut().write_all(answer.as_bytes()).await.unwrap();
                    }
                });
            }
        });
        let bodies = Arc::new(vec![embeddings_body("m", b"\xFF\xD8\xFFjpeg")]);
        let report = run_load(
            &address,
            "/v1/embeddings",
            "application/json",
            bodies,
            (2, 10, 1),
            None,
        )
        .unwrap();
        assert_eq!(report.statuses.get(&200), Some(&10));
        assert_eq!(report.latencies.len(), 10);
    }
}
