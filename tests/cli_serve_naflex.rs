//! `vitrt serve` on SigLIP 2 NaFlex (tests/fixtures/naflex), on the CPU: its four images of
//! different aspect ratios (patch grids 3 x 8, 10 x 2, 4 x 4 and 7 x 3) embedded and scored
//! against zero-shot labels as `vitrt embed` and `vitrt zero-shot` do on the same files, one
//! image's results the same alone and batched with the others, a broken image a 400 naming it
//! while the requests beside it are answered, and what NaFlex has not (a classifier, a text
//! tower in the vision-only checkpoint, device decoding) refused by name. The server's
//! process is spawned as a user runs it and spoken to over plain HTTP/1.1.

mod common;

use base64::Engine as _;
use common::{stderr, temp, vitrt, vitrt_command};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

fn naflex_fixture(name: &str) -> PathBuf {
    common::root().join("tests/fixtures/naflex").join(name)
}

fn image(dir: &Path, i: usize) -> PathBuf {
    dir.join(format!("images/{i}.png"))
}

fn data_uri(path: &Path) -> String {
    let bytes = std::fs::read(path).unwrap();
    format!(
        "data:image/png;base64,{}",
        base64::engine::general_purpose::STANDARD.encode(bytes)
    )
}

/// A `vitrt serve` process on a free loopback port, ready (GET /health answered 200); killed
/// when dropped if it was not stopped.
struct Server {
    child: Child,
    address: String,
    /// Everything it wrote on standard error after its first line.
    log: Arc<Mutex<String>>,
}

impl Server {
    fn start(model: &Path, flags: &[&str], home: &Path) -> Server {
        let mut args = vec![
            "serve",
            "--model",
            model.to_str().unwrap(),
            "--device",
            "cpu",
            "--port",
            "0",
        ];
        args.extend_from_slice(flags);
        let mut child = vitrt_command(&args, home)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("vitrt serve starts");
        let mut lines = BufReader::new(child.stderr.take().unwrap());
        let mut first = String::new();
        lines.read_line(&mut first).unwrap();
        let address = first
            .split("listening on http://")
            .nth(1)
            .and_then(|rest| rest.split_whitespace().next())
            .unwrap_or_else(|| panic!("no address in {first:?}"))
            .to_string();
        let log = Arc::new(Mutex::new(String::new()));
        let sink = Arc::clone(&log);
        std::thread::spawn(move || {
            let mut line = String::new();
            while lines.read_line(&mut line).is_ok_and(|n| n > 0) {
                sink.lock().unwrap().push_str(&line);
                line.clear();
            }
        });
        let mut server = Server {
            child,
            address,
            log,
        };
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            if let Ok((200, _)) = server.try_request("GET", "/health", "", b"") {
                return server;
            }
            if let Ok(Some(status)) = server.child.try_wait() {
                panic!(
                    "the server exited ({status}) while loading: {}",
                    server.log()
                );
            }
            assert!(
                Instant::now() < deadline,
                "not ready in 120 s: {}",
                server.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    /// One request on a connection of its own: (status, body).
    fn try_request(
        &self,
        method: &str,
        path: &str,
        content_type: &str,
        body: &[u8],
    ) -> std::io::Result<(u16, Vec<u8>)> {
        let mut stream = TcpStream::connect(&self.address)?;
        stream.set_read_timeout(Some(Duration::from_secs(120)))?;
        let head = format!(
            "{method} {path} HTTP/1.1\r\nHost: {}\r\nContent-Type: {content_type}\r\n\
             Content-Length: {}\r\nConnection: close\r\n\r\n",
            self.address,
            body.len()
        );
        stream.write_all(head.as_bytes())?;
        stream.write_all(body)?;
        let mut answer = Vec::new();
        stream.read_to_end(&mut answer)?;
        let split = answer
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .ok_or_else(|| std::io::Error::other("an answer without a blank line"))?;
        let head = String::from_utf8_lossy(&answer[..split]).to_ascii_lowercase();
        assert!(
            !head.contains("transfer-encoding: chunked"),
            "a chunked answer: {head}"
        );
        let status = head
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| std::io::Error::other("an answer without a status"))?;
        Ok((status, answer[split + 4..].to_vec()))
    }

    /// POSTs `document` as JSON: (status, the answer's JSON).
    fn post(&self, path: &str, document: &Value) -> (u16, Value) {
        let body = serde_json::to_vec(document).unwrap();
        let (status, answer) = self
            .try_request("POST", path, "application/json", &body)
            .unwrap_or_else(|e| panic!("POST {path}: {e}; server: {}", self.log()));
        let parsed = serde_json::from_slice(&answer)
            .unwrap_or_else(|e| panic!("POST {path}: {e}: {}", String::from_utf8_lossy(&answer)));
        (status, parsed)
    }

    /// SIGTERM, and the exit status once it has finished what it accepted.
    fn stop(mut self) -> Option<i32> {
        let terminated = std::process::Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(terminated.success());
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status.code();
            }
            assert!(Instant::now() < deadline, "not stopped in 60 s");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// The embeddings of an answer of /v1/embeddings (floats), in order.
fn embeddings(answer: &Value) -> Vec<Vec<f32>> {
    answer["data"]
        .as_array()
        .unwrap_or_else(|| panic!("no data in {answer}"))
        .iter()
        .enumerate()
        .map(|(i, item)| {
            assert_eq!(item["index"], i);
            floats(&item["embedding"])
        })
        .collect()
}

fn floats(values: &Value) -> Vec<f32> {
    values
        .as_array()
        .unwrap_or_else(|| panic!("not a list: {values}"))
        .iter()
        .map(|v| v.as_f64().unwrap() as f32)
        .collect()
}

/// `vitrt embed --normalize` of `files`: one row each.
fn cli_embeddings(model: &Path, files: &[PathBuf], home: &Path) -> Vec<Vec<f32>> {
    let out = home.join("embeddings.jsonl");
    let mut args = vec![
        "embed".to_string(),
        "--model".into(),
        model.display().to_string(),
        "--device".into(),
        "cpu".into(),
        "--normalize".into(),
        "--force".into(),
        "--output".into(),
        out.display().to_string(),
    ];
    args.extend(files.iter().map(|f| f.display().to_string()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let o = vitrt(&args, home);
    assert!(o.status.success(), "{}", stderr(&o));
    std::fs::read_to_string(&out)
        .unwrap()
        .lines()
        .map(|line| floats(&serde_json::from_str::<Value>(line).unwrap()["embedding"]))
        .collect()
}

/// Each image's (label, probability) pairs, most probable first, of an answer of
/// `/v1/zero-shot` or of `vitrt zero-shot --json` (the same document).
fn predictions(answer: &Value) -> Vec<Vec<(String, f32)>> {
    answer["results"]
        .as_array()
        .unwrap_or_else(|| panic!("no results in {answer}"))
        .iter()
        .map(|result| {
            result["predictions"]
                .as_array()
                .unwrap()
                .iter()
                .map(|p| {
                    (
                        p["label"].as_str().unwrap().to_string(),
                        p["probability"].as_f64().unwrap() as f32,
                    )
                })
                .collect()
        })
        .collect()
}

/// Whether `got` is `want` within `tolerance` relative to `want`'s largest magnitude.
fn assert_close(got: &[f32], want: &[f32], tolerance: f32, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    let scale = want
        .iter()
        .fold(0f32, |m, v| m.max(v.abs()))
        .max(f32::MIN_POSITIVE);
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= tolerance * scale,
            "{what}: value {i} is {g}, expected {w} (within {tolerance} of {scale})"
        );
    }
}

/// The same labels in the same order, their probabilities within 1e-5 relative.
fn assert_same_predictions(got: &[(String, f32)], want: &[(String, f32)], what: &str) {
    let labels = |p: &[(String, f32)]| p.iter().map(|(l, _)| l.clone()).collect::<Vec<_>>();
    assert_eq!(labels(got), labels(want), "{what}: labels");
    let probs = |p: &[(String, f32)]| p.iter().map(|(_, v)| *v).collect::<Vec<_>>();
    assert_close(&probs(got), &probs(want), 1e-5, what);
}

const LABELS: [&str; 3] = [
    "a photo of a cat.",
    "a photo of a dog.",
    "a photo of a bird.",
];

#[test]
fn naflex_is_served_as_the_cli_runs_it() {
    let home = temp();
    let dir = naflex_fixture("siglip2-naflex-zero-shot");
    let files: Vec<PathBuf> = (0..4).map(|i| image(&dir, i)).collect();
    let images_dir = dir.join("images");
    let server = Server::start(
        &dir,
        &[
            "--max-batch-size",
            "8",
            "--allow-local-files",
            images_dir.to_str().unwrap(),
        ],
        home.path(),
    );

    // Two images of different aspect ratios (grids 3 x 8 and 10 x 2) in one request, so in
    // one batch, padded to max_num_patches: unit-length image_embeds, as `vitrt embed
    // --normalize` gives for the same files. The second as file:NAME.
    let (status, answer) = server.post(
        "/v1/embeddings",
        &json!({"model": "naflex", "input": [data_uri(&files[0]), "file:1.png"]}),
    );
    assert_eq!(status, 200, "{answer}");
    let served = embeddings(&answer);
    let cli = cli_embeddings(&dir, &files[..2], home.path());
    assert_eq!(served.len(), 2);
    for (i, (s, c)) in served.iter().zip(&cli).enumerate() {
        assert_close(s, c, 1e-5, &format!("image {i}'s embedding"));
        let norm = s.iter().map(|v| v * v).sum::<f32>().sqrt();
        assert!((norm - 1.0).abs() < 1e-4, "image {i}: norm {norm}");
    }

    // A text beside an image: the text tower's unit-length embedding, as `vitrt embed-text
    // --normalize` gives it.
    let text = "a photo of a cat.";
    let (status, answer) = server.post(
        "/v1/embeddings",
        &json!({"input": [text, data_uri(&files[0])]}),
    );
    assert_eq!(status, 200, "{answer}");
    assert!(
        answer["usage"]["prompt_tokens"].as_u64() > Some(0),
        "{answer}"
    );
    let served = embeddings(&answer);
    let o = vitrt(
        &[
            "embed-text",
            "--model",
            dir.to_str().unwrap(),
            "--device",
            "cpu",
            "--normalize",
            "--text",
            text,
            "-o",
            "-",
        ],
        home.path(),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let line = String::from_utf8(o.stdout).unwrap();
    let cli_text = floats(&serde_json::from_str::<Value>(line.trim()).unwrap()["embedding"]);
    assert_close(&served[0], &cli_text, 1e-5, "the text's embedding");
    assert_close(
        &served[1],
        &cli[0],
        1e-5,
        "image 0's embedding beside a text",
    );

    // Zero-shot labels through the text tower, as `vitrt zero-shot` scores them.
    let uris: Vec<String> = files.iter().map(|f| data_uri(f)).collect();
    let (status, answer) = server.post(
        "/v1/zero-shot",
        &json!({"images": uris, "labels": LABELS, "template": "{}", "top_k": 3}),
    );
    assert_eq!(status, 200, "{answer}");
    let served = predictions(&answer);
    let mut args = vec![
        "zero-shot".to_string(),
        "--model".into(),
        dir.display().to_string(),
        "--device".into(),
        "cpu".into(),
        "--labels".into(),
        LABELS.join(","),
        "--template".into(),
        "{}".into(),
        "--top-k".into(),
        "3".into(),
        "--json".into(),
    ];
    args.extend(files.iter().map(|f| f.display().to_string()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let o = vitrt(&args, home.path());
    assert!(o.status.success(), "{}", stderr(&o));
    let cli = predictions(&serde_json::from_slice(&o.stdout).unwrap());
    assert_eq!(served.len(), 4);
    for (i, (s, c)) in served.iter().zip(&cli).enumerate() {
        assert_eq!(s.len(), 3);
        assert_same_predictions(s, c, &format!("image {i}'s zero-shot scores"));
    }

    // Batch invariance: image 2 alone, then third in a batch with the three others, gives
    // the same embedding and the same scores.
    let (status, alone) = server.post("/v1/embeddings", &json!({"input": [uris[2].clone()]}));
    assert_eq!(status, 200, "{alone}");
    let batch = [&uris[0], &uris[1], &uris[2], &uris[3]];
    let (status, batched) = server.post("/v1/embeddings", &json!({"input": batch}));
    assert_eq!(status, 200, "{batched}");
    let batched_embeddings = embeddings(&batched);
    assert_close(
        &batched_embeddings[2],
        &embeddings(&alone)[0],
        1e-5,
        "image 2's embedding alone and in a batch of four",
    );
    let zero_shot = |images: Vec<&String>| {
        let (status, answer) = server.post(
            "/v1/zero-shot",
            &json!({"images": images, "labels": LABELS, "template": "{}", "top_k": 3}),
        );
        assert_eq!(status, 200, "{answer}");
        predictions(&answer)
    };
    let alone = zero_shot(vec![&uris[2]]);
    let batched = zero_shot(batch.to_vec());
    assert_same_predictions(
        &batched[2],
        &alone[0],
        "image 2's scores alone and in a batch of four",
    );

    // A broken image is a 400 naming it, while the request sent beside it is answered.
    let broken = format!(
        "data:image/png;base64,{}",
        base64::engine::general_purpose::STANDARD.encode(b"\x89PNG\r\n\x1a\nnot a png at all")
    );
    let (bad, good) = std::thread::scope(|scope| {
        let bad = scope.spawn(|| {
            server.post(
                "/v1/embeddings",
                &json!({"input": [uris[3].clone(), broken.clone()]}),
            )
        });
        let good = scope.spawn(|| server.post("/v1/embeddings", &json!({"input": [uris[3]]})));
        (bad.join().unwrap(), good.join().unwrap())
    });
    assert_eq!(bad.0, 400, "{}", bad.1);
    let message = bad.1.to_string();
    assert!(message.contains("input 1"), "{message}");
    assert_eq!(good.0, 200, "{}", good.1);
    assert_close(
        &embeddings(&good.1)[0],
        &batched_embeddings[3],
        1e-5,
        "image 3 beside a broken request",
    );

    // NaFlex has no classifier: /v1/classify refuses by name, as for any model without one.
    let (status, answer) = server.post("/v1/classify", &json!({"images": [uris[0].clone()]}));
    assert_eq!(status, 400);
    assert!(
        answer.to_string().contains("no classification head"),
        "{answer}"
    );

    // /health and /metrics keep working, and counted every answer.
    let (status, _) = server.try_request("GET", "/health", "", b"").unwrap();
    assert_eq!(status, 200);
    let (status, metrics) = server.try_request("GET", "/metrics", "", b"").unwrap();
    assert_eq!(status, 200);
    let metrics = String::from_utf8(metrics).unwrap();
    for counted in [
        "vitrt_requests_total{route=\"/v1/embeddings\",status=\"200\"}",
        "vitrt_requests_total{route=\"/v1/embeddings\",status=\"400\"}",
        "vitrt_requests_total{route=\"/v1/zero-shot\",status=\"200\"}",
        "vitrt_requests_total{route=\"/v1/classify\",status=\"400\"}",
    ] {
        assert!(metrics.contains(counted), "{counted} not in {metrics}");
    }
    let log = server.log();
    assert_eq!(server.stop(), Some(0), "{log}");
}

/// The vision-only checkpoint (no text tower): image embeddings as `vitrt embed` gives them;
/// texts and zero-shot labels refused by name.
#[test]
fn naflex_vision_only_embeds_images_and_refuses_texts() {
    let home = temp();
    let dir = naflex_fixture("siglip2-naflex");
    let files: Vec<PathBuf> = (0..4).map(|i| image(&dir, i)).collect();
    let server = Server::start(&dir, &["--max-batch-size", "4"], home.path());
    let uris: Vec<String> = files.iter().map(|f| data_uri(f)).collect();
    let (status, answer) = server.post("/v1/embeddings", &json!({"input": uris}));
    assert_eq!(status, 200, "{answer}");
    let served = embeddings(&answer);
    let cli = cli_embeddings(&dir, &files, home.path());
    assert_eq!(served.len(), 4);
    for (i, (s, c)) in served.iter().zip(&cli).enumerate() {
        assert_close(s, c, 1e-5, &format!("image {i}'s embedding"));
    }
    let (status, answer) = server.post("/v1/embeddings", &json!({"input": ["a cat"]}));
    assert_eq!(status, 400);
    assert!(answer.to_string().contains("no text tower"), "{answer}");
    let (status, answer) = server.post(
        "/v1/zero-shot",
        &json!({"images": [uris[0].clone()], "labels": "cat,dog"}),
    );
    assert_eq!(status, 400);
    assert!(answer.to_string().contains("both towers"), "{answer}");
    assert_eq!(server.stop(), Some(0));
}

/// Its images are decoded on the host, each to its own grid: the device's decoding is
/// refused by name, and the server exits 1.
#[test]
fn naflex_refuses_device_decoding_by_name() {
    let home = temp();
    let dir = naflex_fixture("siglip2-naflex");
    let o = vitrt(
        &[
            "serve",
            "--model",
            dir.to_str().unwrap(),
            "--device",
            "cpu",
            "--port",
            "0",
            "--decode",
            "gpu",
        ],
        home.path(),
    );
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("--decode gpu is not built for SigLIP 2 NaFlex"),
        "{}",
        stderr(&o)
    );
    assert!(!stderr(&o).contains("panicked"), "{}", stderr(&o));
}
