//! The online path against a tiny imitation of the hub's HTTP API served on a loopback port
//! (nothing leaves the machine): which files are fetched, where they land in the cache, and
//! that a later offline run finds them.
//!
//! The imitation answers the three requests hf-hub's sync API makes:
//! `GET /api/models/{repo}/revision/{rev}` (file list and commit),
//! `GET /{repo}/resolve/{rev}/{file}` with `Range: bytes=0-0` (commit, etag and size headers),
//! and the same with `Range: bytes=N-` (the content).
//! ureq does not honour NO_PROXY: if HTTP(S)_PROXY or ALL_PROXY is set, these tests cannot
//! reach the loopback server.

mod common;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::sync::{Arc, Mutex};

use common::*;
use vitrt_weights::{
    resolve_model_with, Checkpoint, HubSettings, ModelOrigin, ResolveOptions, WeightsError,
};

const COMMIT: &str = "abcdefabcdefabcdefabcdefabcdefabcdefabcd";

struct FakeHub {
    endpoint: String,
    /// Request lines received ("GET /path"), in order.
    requests: Arc<Mutex<Vec<String>>>,
}

impl FakeHub {
    fn start(repo_id: &'static str, files: BTreeMap<String, Vec<u8>>) -> FakeHub {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let endpoint = format!("http://{}", listener.local_addr().unwrap());
        let requests = Arc::new(Mutex::new(Vec::new()));
        let log = Arc::clone(&requests);
        // Serves until the test process ends; requests come one at a time.
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                serve(stream, repo_id, &files, &log);
            }
        });
        FakeHub { endpoint, requests }
    }

    fn requests(&self) -> Vec<String> {
        self.requests.lock().unwrap().clone()
    }

    fn settings(&self, cache_dir: &Path) -> HubSettings {
        HubSettings {
            cache_dir: cache_dir.to_path_buf(),
            endpoint: self.endpoint.clone(),
            token: None,
            offline: false,
            progress: false,
        }
    }
}

fn serve(
    stream: TcpStream,
    repo_id: &str,
    files: &BTreeMap<String, Vec<u8>>,
    log: &Mutex<Vec<String>>,
) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut request_line = String::new();
    if reader.read_line(&mut request_line).is_err() {
        return;
    }
    let mut range_start = 0usize;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
            break;
        }
        if let Some(value) = line.to_ascii_lowercase().strip_prefix("range: bytes=") {
            range_start = value.split('-').next().unwrap().trim().parse().unwrap();
        }
    }
    let mut parts = request_line.split_whitespace();
    let method = parts.next().unwrap_or("");
    let path = parts.next().unwrap_or("").to_string();
    log.lock().unwrap().push(format!("{method} {path}"));

    let info_prefix = format!("/api/models/{repo_id}/revision/");
    let resolve_prefix = format!("/{repo_id}/resolve/");
    let (status, headers, body) = if path.starts_with(&info_prefix) {
        let siblings: Vec<_> = files
            .keys()
            .map(|name| serde_json::json!({ "rfilename": name }))
            .collect();
        let body = serde_json::json!({ "sha": COMMIT, "siblings": siblings }).to_string();
        (
            "200 OK",
            vec![("Content-Type".to_string(), "application/json".to_string())],
            body.into_bytes(),
        )
    } else if let Some(rest) = path.strip_prefix(&resolve_prefix) {
        let file = rest
            .split_once('/')
            .map(|(_revision, file)| file)
            .unwrap_or("");
        match files.get(file) {
            Some(content) => {
                let size = content.len();
                let body = if range_start < size {
                    content[range_start..].to_vec()
                } else {
                    Vec::new()
                };
                let headers = vec![
                    ("X-Repo-Commit".to_string(), COMMIT.to_string()),
                    // One blob per file content; hex, as the hub's etags are.
                    (
                        "ETag".to_string(),
                        format!("\"{:016x}{:08x}\"", fingerprint(content), size),
                    ),
                    (
                        "Content-Range".to_string(),
                        format!("bytes {range_start}-{}/{size}", size.saturating_sub(1)),
                    ),
                ];
                ("206 Partial Content", headers, body)
            }
            None => ("404 Not Found", Vec::new(), b"Entry not found".to_vec()),
        }
    } else {
        (
            "404 Not Found",
            Vec::new(),
            b"Repository not found".to_vec(),
        )
    };

    let mut response = format!(
        "HTTP/1.1 {status}\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    for (name, value) in headers {
        response.push_str(&format!("{name}: {value}\r\n"));
    }
    response.push_str("\r\n");
    let mut stream = stream;
    let _ = stream.write_all(response.as_bytes());
    let _ = stream.write_all(&body);
    let _ = stream.flush();
}

fn fingerprint(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf29ce484222325u64, |hash, &b| {
        (hash ^ b as u64).wrapping_mul(0x100000001b3)
    })
}

fn model_bytes(name: &str, values: &[f32]) -> Vec<u8> {
    safetensors_bytes(&[f32_tensor(name, &[values.len()], values)], 0)
}

fn downloads(hub: &FakeHub) -> Vec<String> {
    // The content requests: every resolve request after its metadata probe. Counting resolve
    // requests per file is enough to see which files were fetched.
    let mut files: Vec<String> = hub
        .requests()
        .into_iter()
        .filter_map(|line| {
            line.split_once("/resolve/")
                .map(|(_, rest)| rest.split_once('/').unwrap().1.to_string())
        })
        .collect();
    files.dedup();
    files
}

#[test]
fn downloads_a_single_file_model_into_one_snapshot() {
    let files = BTreeMap::from([
        (
            "config.json".to_string(),
            br#"{"model_type":"vit"}"#.to_vec(),
        ),
        ("preprocessor_config.json".to_string(), b"{}".to_vec()),
        (
            "model.safetensors".to_string(),
            model_bytes("w", &[1.0, 2.0, 3.0]),
        ),
        ("pytorch_model.bin".to_string(), b"pickle".to_vec()),
        ("README.md".to_string(), b"# card".to_vec()),
        ("tokenizer.json".to_string(), b"{}".to_vec()),
        ("spiece.model".to_string(), b"pieces".to_vec()),
        ("vocab.txt".to_string(), b"a".to_vec()),
    ]);
    let hub = FakeHub::start("org/vit", files);
    let cache = tempfile::tempdir().unwrap();

    let resolved = resolve_model_with(
        "org/vit",
        &ResolveOptions::default(),
        &hub.settings(cache.path()),
    )
    .unwrap_or_else(|e| panic!("{e} (is an HTTP proxy set? see the file comment)"));
    let snapshot = cache.path().join("models--org--vit/snapshots").join(COMMIT);
    assert_eq!(resolved.dir, snapshot);
    assert_eq!(resolved.weights, snapshot.join("model.safetensors"));
    assert_eq!(
        resolved.preprocessor_config,
        Some(snapshot.join("preprocessor_config.json"))
    );
    assert_eq!(
        resolved.origin,
        ModelOrigin::Hub {
            repo: "org/vit".into(),
            revision: "main".into(),
            commit: COMMIT.into()
        }
    );
    assert_eq!(
        Checkpoint::open(&resolved.dir)
            .unwrap()
            .load_f32("w")
            .unwrap(),
        [1.0, 2.0, 3.0]
    );
    assert_eq!(
        std::fs::read_to_string(cache.path().join("models--org--vit/refs/main"))
            .unwrap()
            .trim(),
        COMMIT
    );
    // The tokenizer's files come too (zero-shot needs them); neither the PyTorch weights nor
    // unrelated files are fetched.
    assert_eq!(
        downloads(&hub),
        [
            "config.json",
            "preprocessor_config.json",
            "tokenizer.json",
            "spiece.model",
            "model.safetensors"
        ]
    );
    assert!(snapshot.join("tokenizer.json").is_file() && snapshot.join("spiece.model").is_file());
    assert!(hub.requests()[0].starts_with("GET /api/models/org/vit/revision/main"));

    // A second online run finds everything cached and downloads nothing more.
    let before = hub.requests().len();
    let again = resolve_model_with(
        "org/vit",
        &ResolveOptions::default(),
        &hub.settings(cache.path()),
    )
    .unwrap();
    assert_eq!(again, resolved);
    assert_eq!(
        hub.requests().len(),
        before + 1,
        "only the file listing is asked again"
    );

    // And an offline run finds the snapshot through the ref the online run wrote.
    let offline = ResolveOptions {
        revision: None,
        offline: true,
    };
    let closed = HubSettings {
        endpoint: "http://127.0.0.1:9".into(),
        ..hub.settings(cache.path())
    };
    assert_eq!(
        resolve_model_with("org/vit", &offline, &closed).unwrap(),
        resolved
    );
}

#[test]
fn downloads_the_index_and_every_shard_when_there_is_no_single_file() {
    let files = BTreeMap::from([
        ("config.json".to_string(), b"{}".to_vec()),
        (
            "model.safetensors.index.json".to_string(),
            index_json(&[
                ("a", "model-00001-of-00002.safetensors"),
                ("b", "model-00002-of-00002.safetensors"),
            ])
            .into_bytes(),
        ),
        (
            "model-00001-of-00002.safetensors".to_string(),
            model_bytes("a", &[1.0]),
        ),
        (
            "model-00002-of-00002.safetensors".to_string(),
            model_bytes("b", &[2.0, 3.0]),
        ),
    ]);
    let hub = FakeHub::start("org/sharded", files);
    let cache = tempfile::tempdir().unwrap();
    let opts = ResolveOptions {
        revision: Some("v1.0".into()),
        offline: false,
    };

    let resolved = resolve_model_with("org/sharded", &opts, &hub.settings(cache.path())).unwrap();
    assert_eq!(
        resolved.weights,
        resolved.dir.join("model.safetensors.index.json")
    );
    assert_eq!(resolved.preprocessor_config, None);
    let checkpoint = Checkpoint::open(&resolved.dir).unwrap();
    assert_eq!(checkpoint.load_f32("b").unwrap(), [2.0, 3.0]);
    assert_eq!(
        downloads(&hub),
        [
            "config.json",
            "model.safetensors.index.json",
            "model-00001-of-00002.safetensors",
            "model-00002-of-00002.safetensors"
        ]
    );
    assert!(hub.requests()[0].starts_with("GET /api/models/org/sharded/revision/v1.0"));
    assert!(cache
        .path()
        .join("models--org--sharded/refs/v1.0")
        .is_file());
}

#[test]
fn a_pytorch_only_repo_is_refused_without_downloading_weights() {
    let files = BTreeMap::from([
        ("config.json".to_string(), b"{}".to_vec()),
        ("pytorch_model.bin".to_string(), b"pickle".to_vec()),
    ]);
    let hub = FakeHub::start("org/old", files);
    let cache = tempfile::tempdir().unwrap();
    let error = resolve_model_with(
        "org/old",
        &ResolveOptions::default(),
        &hub.settings(cache.path()),
    )
    .unwrap_err();
    assert!(
        matches!(error, WeightsError::UnusableRepo { .. }),
        "{error:?}"
    );
    let text = error.to_string();
    assert!(
        text.contains("pytorch_model.bin") && text.contains("safetensors weights are needed"),
        "{text}"
    );
    assert!(
        downloads(&hub).is_empty(),
        "nothing may be downloaded: {:?}",
        hub.requests()
    );
    assert!(!cache.path().join("models--org--old/snapshots").exists());
}

#[test]
fn an_open_clip_repo_downloads_its_own_config_and_safetensors() {
    let files = BTreeMap::from([
        (
            "open_clip_config.json".to_string(),
            br#"{"model_cfg": {}}"#.to_vec(),
        ),
        (
            "open_clip_model.safetensors".to_string(),
            model_bytes("visual.proj", &[1.0, 2.0]),
        ),
        (
            "open_clip_pytorch_model.bin".to_string(),
            b"pickle".to_vec(),
        ),
        ("tokenizer.json".to_string(), b"{}".to_vec()),
    ]);
    let hub = FakeHub::start("org/clip", files);
    let cache = tempfile::tempdir().unwrap();
    let resolved = resolve_model_with(
        "org/clip",
        &ResolveOptions::default(),
        &hub.settings(cache.path()),
    )
    .unwrap_or_else(|e| panic!("{e} (is an HTTP proxy set? see the file comment)"));
    let snapshot = cache
        .path()
        .join("models--org--clip/snapshots")
        .join(COMMIT);
    assert_eq!(resolved.config, snapshot.join("open_clip_config.json"));
    assert_eq!(
        resolved.weights,
        snapshot.join("open_clip_model.safetensors")
    );
    assert_eq!(
        downloads(&hub),
        [
            "open_clip_config.json",
            "tokenizer.json",
            "open_clip_model.safetensors"
        ]
    );
    assert_eq!(
        Checkpoint::open(&resolved.dir)
            .unwrap()
            .load_f32("visual.proj")
            .unwrap(),
        [1.0, 2.0]
    );
}

#[test]
fn an_open_clip_repo_with_only_its_pickle_is_refused_without_downloading() {
    let files = BTreeMap::from([
        (
            "open_clip_config.json".to_string(),
            br#"{"model_cfg": {}}"#.to_vec(),
        ),
        (
            "open_clip_pytorch_model.bin".to_string(),
            b"pickle".to_vec(),
        ),
    ]);
    let hub = FakeHub::start("org/pickled", files);
    let cache = tempfile::tempdir().unwrap();
    let error = resolve_model_with(
        "org/pickled",
        &ResolveOptions::default(),
        &hub.settings(cache.path()),
    )
    .unwrap_err();
    let text = error.to_string();
    assert!(
        text.contains("open_clip_pytorch_model.bin")
            && text.contains("open_clip_model.safetensors"),
        "{text}"
    );
    assert!(downloads(&hub).is_empty(), "{:?}", hub.requests());
}

#[test]
fn a_repo_without_config_is_refused() {
    let files = BTreeMap::from([("model.safetensors".to_string(), model_bytes("w", &[1.0]))]);
    let hub = FakeHub::start("org/noconfig", files);
    let cache = tempfile::tempdir().unwrap();
    let error = resolve_model_with(
        "org/noconfig",
        &ResolveOptions::default(),
        &hub.settings(cache.path()),
    )
    .unwrap_err();
    assert!(
        matches!(error, WeightsError::UnusableRepo { .. }),
        "{error:?}"
    );
    assert!(error.to_string().contains("config.json"), "{error}");
}

#[test]
fn an_unknown_repo_is_a_hub_error_naming_it() {
    let hub = FakeHub::start("org/exists", BTreeMap::new());
    let cache = tempfile::tempdir().unwrap();
    let error = resolve_model_with(
        "org/missing",
        &ResolveOptions::default(),
        &hub.settings(cache.path()),
    )
    .unwrap_err();
    assert!(matches!(error, WeightsError::Hub { .. }), "{error:?}");
    let text = error.to_string();
    assert!(
        text.contains("`org/missing`") && text.contains("404"),
        "{text}"
    );
}

#[test]
fn an_index_naming_a_shard_the_repo_lacks_is_refused() {
    let files = BTreeMap::from([
        ("config.json".to_string(), b"{}".to_vec()),
        (
            "model.safetensors.index.json".to_string(),
            index_json(&[("a", "model-00001-of-00002.safetensors")]).into_bytes(),
        ),
    ]);
    let hub = FakeHub::start("org/badindex", files);
    let cache = tempfile::tempdir().unwrap();
    let error = resolve_model_with(
        "org/badindex",
        &ResolveOptions::default(),
        &hub.settings(cache.path()),
    )
    .unwrap_err();
    assert!(
        matches!(error, WeightsError::UnusableRepo { .. }),
        "{error:?}"
    );
    assert!(
        error
            .to_string()
            .contains("model-00001-of-00002.safetensors"),
        "{error}"
    );
}
