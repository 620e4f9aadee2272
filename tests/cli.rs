//! The `vitrt` binary end to end: the demo model, the parity fixtures, and every kind of bad
//! input, each of which must end in a one-line error and a non-zero exit, never a panic.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn fixture(name: &str) -> PathBuf {
    root().join("tests/fixtures/models").join(name)
}

/// vitrt with an empty, offline hub cache so no test can reach the network.
fn vitrt_command<S: AsRef<std::ffi::OsStr>>(args: &[S], hf_home: &Path) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_vitrt"));
    command
        .args(args)
        .env("HF_HOME", hf_home)
        .env_remove("HF_HUB_CACHE")
        .env("HF_HUB_OFFLINE", "1");
    command
}

/// Runs vitrt (see [`vitrt_command`]) to the end.
fn vitrt(args: &[&str], hf_home: &Path) -> Output {
    vitrt_command(args, hf_home).output().expect("vitrt runs")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Fails unless the run failed cleanly: non-zero exit, an "error:" line naming `needle`,
/// and no panic.
fn assert_clean_failure(o: &Output, needle: &str) {
    let err = stderr(o);
    assert!(
        !o.status.success(),
        "expected failure, got success; stderr: {err}"
    );
    assert_eq!(o.status.code(), Some(1), "exit code; stderr: {err}");
    assert!(!err.contains("panicked"), "panic: {err}");
    // Lines before the error may say which device was chosen, or which images failed.
    assert!(
        err.lines().last().is_some_and(|l| l.starts_with("error: ")),
        "no error line last: {err}"
    );
    assert!(
        err.contains(needle),
        "stderr should mention {needle:?}: {err}"
    );
}

/// Runs vitrt with `stdin` as its standard input.
fn vitrt_with_stdin(args: &[&str], hf_home: &Path, stdin: &str) -> Output {
    use std::io::Write;
    let mut child = vitrt_command(args, hf_home)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("vitrt runs");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

/// The shipped digits, sorted.
fn digits() -> Vec<PathBuf> {
    let mut images: Vec<PathBuf> = std::fs::read_dir(root().join("examples/digits"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "png"))
        .collect();
    images.sort();
    images
}

fn temp() -> tempfile::TempDir {
    tempfile::tempdir().unwrap()
}

#[test]
fn infer_writes_logits_matching_pytorch() {
    let dir = temp();
    let out = dir.path().join("out.safetensors");
    let model = fixture("tiny-gelu");
    let reference = model.join("reference.safetensors");
    let o = vitrt(
        &[
            "infer",
            "--model",
            model.to_str().unwrap(),
            "--input",
            reference.to_str().unwrap(),
            "--output",
            out.to_str().unwrap(),
            "--dump-activations",
        ],
        dir.path(),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let ours = vitrt_weights::read_f32_tensors(&out).unwrap();
    let refs = vitrt_weights::read_f32_tensors(&reference).unwrap();
    let names: Vec<&str> = ours.iter().map(|(n, _, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "hidden_states.0",
            "hidden_states.1",
            "hidden_states.2",
            "logits"
        ]
    );
    let (_, shape, logits) = ours.iter().find(|t| t.0 == "logits").unwrap();
    let (_, _, want) = refs.iter().find(|t| t.0 == "logits").unwrap();
    assert_eq!(shape, &vec![2, 10]);
    for (a, b) in logits.iter().zip(want) {
        assert!((a - b).abs() < 1e-4, "{a} vs {b}");
    }
}

#[test]
fn parity_passes_on_every_fixture_and_names_each_tensor() {
    let dir = temp();
    for name in [
        "tiny-gelu",
        "vitmodel-relu",
        "sharded",
        "headdim80-silu-1ch",
    ] {
        let model = fixture(name);
        let reference = model.join("reference.safetensors");
        let o = vitrt(
            &[
                "parity",
                "--model",
                model.to_str().unwrap(),
                "--reference",
                reference.to_str().unwrap(),
            ],
            dir.path(),
        );
        let stdout = String::from_utf8_lossy(&o.stdout);
        assert!(o.status.success(), "{name}: {}{}", stdout, stderr(&o));
        assert!(
            stdout.contains("hidden_states.0") && stdout.contains("parity: ok"),
            "{stdout}"
        );
    }
}

#[test]
fn parity_fails_when_the_model_differs_from_the_reference() {
    // The reference of one model against the weights of another with the same shapes.
    let dir = temp();
    let model = fixture("sharded");
    let reference = fixture("tiny-gelu").join("reference.safetensors");
    let o = vitrt(
        &[
            "parity",
            "--model",
            model.to_str().unwrap(),
            "--reference",
            reference.to_str().unwrap(),
        ],
        dir.path(),
    );
    assert!(!o.status.success());
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(stdout.contains("FAIL"), "{stdout}");
    assert!(
        stderr(&o).contains("parity failed for hidden_states.0"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn infer_refuses_pixels_of_the_wrong_shape_and_writes_nothing() {
    let dir = temp();
    let input = dir.path().join("in.safetensors");
    vitrt_weights::write_f32_tensors(
        &input,
        &[("pixel_values".into(), vec![1, 3, 16, 16], vec![0.5; 768])],
    )
    .unwrap();
    let out = dir.path().join("out.safetensors");
    let model = fixture("tiny-gelu");
    let o = vitrt(
        &[
            "infer",
            "--model",
            model.to_str().unwrap(),
            "--input",
            input.to_str().unwrap(),
            "--output",
            out.to_str().unwrap(),
        ],
        dir.path(),
    );
    assert_clean_failure(
        &o,
        "pixel_values has shape [1, 3, 16, 16]; this model takes [B, 3, 32, 32]",
    );
    assert!(!out.exists(), "nothing half-written");
}

#[test]
fn broken_models_are_clear_errors() {
    let dir = temp();
    let good = fixture("tiny-gelu");
    let make = |name: &str, edit: &dyn Fn(&Path)| -> PathBuf {
        let m = dir.path().join(name);
        std::fs::create_dir_all(&m).unwrap();
        for f in ["config.json", "model.safetensors"] {
            std::fs::copy(good.join(f), m.join(f)).unwrap();
        }
        edit(&m);
        m
    };
    let set_config = |m: &Path, key: &str, value: serde_json::Value| {
        let mut c: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(m.join("config.json")).unwrap()).unwrap();
        c[key] = value;
        std::fs::write(m.join("config.json"), c.to_string()).unwrap();
    };
    let cases: Vec<(PathBuf, &str)> = vec![
        (dir.path().join("does-not-exist"), "does-not-exist"),
        (
            make("no-config", &|m| {
                std::fs::remove_file(m.join("config.json")).unwrap()
            }),
            "config.json",
        ),
        (
            make("bad-json", &|m| {
                std::fs::write(m.join("config.json"), "{ not json").unwrap()
            }),
            "config.json",
        ),
        (
            make("mish", &|m| set_config(m, "hidden_act", "mish".into())),
            "unknown hidden_act \"mish\"",
        ),
        (
            make("heads", &|m| set_config(m, "num_attention_heads", 5.into())),
            "not divisible by num_attention_heads",
        ),
        (
            make("wider", &|m| set_config(m, "intermediate_size", 256.into())),
            "tensor vit.encoder.layer.0.intermediate.dense.bias has shape [128], expected [256]",
        ),
        (
            make("truncated", &|m| {
                let bytes = std::fs::read(m.join("model.safetensors")).unwrap();
                std::fs::write(m.join("model.safetensors"), &bytes[..bytes.len() / 2]).unwrap();
            }),
            "model.safetensors",
        ),
        (
            make("garbage", &|m| {
                std::fs::write(
                    m.join("model.safetensors"),
                    b"\xff\xff\xff\xff\xff\xff\xff\x7fjunk",
                )
                .unwrap()
            }),
            "model.safetensors",
        ),
        (
            make("more-layers", &|m| {
                set_config(m, "num_hidden_layers", 3.into())
            }),
            "missing tensor vit.encoder.layer.2",
        ),
    ];
    let reference = good.join("reference.safetensors");
    for (model, needle) in cases {
        let o = vitrt(
            &[
                "parity",
                "--model",
                model.to_str().unwrap(),
                "--reference",
                reference.to_str().unwrap(),
            ],
            dir.path(),
        );
        assert_clean_failure(&o, needle);
    }
}

#[test]
fn hub_ids_not_cached_fail_at_once_offline() {
    let dir = temp();
    let img = root().join("tests/fixtures/images");
    let any_image = std::fs::read_dir(&img)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "png"))
        .unwrap();
    let o = vitrt(
        &[
            "classify",
            "--model",
            "google/vit-base-patch16-224",
            "--offline",
            any_image.to_str().unwrap(),
        ],
        dir.path(),
    );
    assert_clean_failure(&o, "google/vit-base-patch16-224");
}

#[test]
fn classify_explains_bad_images_and_models_without_a_head() {
    let dir = temp();
    let model = fixture("tiny-gelu");
    let empty = dir.path().join("empty.png");
    std::fs::write(&empty, b"").unwrap();
    let text = dir.path().join("notes.jpg");
    std::fs::write(&text, b"this is not an image at all").unwrap();
    let missing = dir.path().join("missing.png");
    for (image, needle) in [
        (&empty, "empty.png"),
        (&text, "notes.jpg"),
        (&missing, "missing.png"),
    ] {
        let o = vitrt(
            &[
                "classify",
                "--model",
                model.to_str().unwrap(),
                image.to_str().unwrap(),
            ],
            dir.path(),
        );
        assert_clean_failure(&o, needle);
    }
    let base = fixture("vitmodel-relu");
    let png = dir.path().join("img.png");
    std::fs::copy(
        root()
            .join("examples/digits")
            .read_dir()
            .unwrap()
            .map(|e| e.unwrap().path())
            .find(|p| p.extension().is_some_and(|e| e == "png"))
            .unwrap(),
        &png,
    )
    .unwrap();
    let o = vitrt(
        &[
            "classify",
            "--model",
            base.to_str().unwrap(),
            png.to_str().unwrap(),
        ],
        dir.path(),
    );
    assert_clean_failure(&o, "vitrt infer");
}

#[test]
fn device_and_dtype_errors_are_clear() {
    let dir = temp();
    let model = fixture("tiny-gelu");
    let reference = model.join("reference.safetensors");
    let m = model.to_str().unwrap();
    let r = reference.to_str().unwrap();
    let o = vitrt(
        &[
            "parity",
            "--model",
            m,
            "--reference",
            r,
            "--residual-dtype",
            "bf16",
        ],
        dir.path(),
    );
    assert_clean_failure(&o, "stored as f32 or as the run's dtype (f32), not bf16");
    let o = vitrt(
        &["parity", "--model", m, "--reference", r, "--device", "tpu"],
        dir.path(),
    );
    assert_clean_failure(&o, "unknown device \"tpu\"");
    let o = vitrt(
        &[
            "parity",
            "--model",
            m,
            "--reference",
            r,
            "--device",
            "cuda:7",
        ],
        dir.path(),
    );
    // Without a GPU: no driver; with one: no device 7 (or NVRTC missing). Never a panic.
    assert_clean_failure(&o, "");
    assert!(
        stderr(&o).contains("CUDA") || stderr(&o).contains("NVRTC"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn bench_kernels_explains_what_it_cannot_do() {
    let dir = temp();
    let bench = |extra: &[&str]| {
        let mut args = vec!["bench", "kernels"];
        args.extend_from_slice(extra);
        vitrt(&args, dir.path())
    };
    let o = bench(&["--device", "cpu"]);
    assert_clean_failure(&o, "use --device cuda or cuda:N");
    assert_eq!(stderr(&o).lines().count(), 1, "one line: {}", stderr(&o));
    assert_clean_failure(&bench(&["--device", "tpu"]), "unknown device \"tpu\"");
    assert_clean_failure(&bench(&["--dtype", "f64"]), "unknown dtype \"f64\"");
    assert_clean_failure(&bench(&["--reps", "5"]), "at least 20");
    assert_clean_failure(&bench(&["--filter", "no such case"]), "no case matches");
    let missing = dir.path().join("no/such/folder/out.json");
    assert_clean_failure(
        &bench(&["--json", missing.to_str().unwrap()]),
        "is not a folder",
    );
    // Without a GPU: no driver; with one: no device 7 (or NVRTC missing). Never a panic.
    let o = bench(&["--device", "cuda:7", "--filter", "add/vit-b16/b1"]);
    assert_clean_failure(&o, "cuda:7");
    assert!(
        stderr(&o).contains("CUDA") || stderr(&o).contains("NVRTC"),
        "{}",
        stderr(&o)
    );
}

/// The README's first command: the shipped demo model on the shipped digits, offline. Its
/// predictions must equal PyTorch's (committed in examples/digits/expected.json).
#[test]
fn demo_model_classifies_the_shipped_digits_as_pytorch_does() {
    let _dir = temp();
    let digits = root().join("examples/digits");
    let expected: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(digits.join("expected.json")).unwrap())
            .unwrap();
    let mut images: Vec<PathBuf> = std::fs::read_dir(&digits)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "png"))
        .collect();
    images.sort();
    let mut args = vec![
        "classify",
        "--model",
        "examples/digits-vit",
        "--json",
        "--top-k",
        "1",
        "--batch-size",
        "16",
    ];
    let paths: Vec<String> = images
        .iter()
        .map(|p| p.strip_prefix(root()).unwrap().display().to_string())
        .collect();
    args.extend(paths.iter().map(String::as_str));
    let o = Command::new(env!("CARGO_BIN_EXE_vitrt"))
        .current_dir(root())
        .args(&args)
        .env("HF_HUB_OFFLINE", "1")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let report: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(report["device"], "cpu");
    let results = report["results"].as_array().unwrap();
    assert_eq!(results.len(), images.len());
    let want = expected["predictions"].as_array().unwrap();
    let mut correct = 0;
    for (result, path) in results.iter().zip(&images) {
        let file = path.file_name().unwrap().to_str().unwrap();
        let reference = want
            .iter()
            .find(|p| p["image"] == file)
            .unwrap_or_else(|| panic!("{file} not in expected.json"));
        let ours = &result["predictions"][0];
        assert_eq!(ours["label"], reference["label"], "{file}");
        let (p, q) = (
            ours["probability"].as_f64().unwrap(),
            reference["probability"].as_f64().unwrap(),
        );
        assert!(
            (p - q).abs() < 1e-3,
            "{file}: probability {p} vs PyTorch {q}"
        );
        if file.ends_with(&format!("label-{}.png", ours["label"].as_str().unwrap())) {
            correct += 1;
        }
    }
    let accuracy = correct as f64 / images.len() as f64;
    let stated = expected["accuracy_on_shipped"].as_f64().unwrap();
    assert!(
        (accuracy - stated).abs() < 1e-9,
        "accuracy {accuracy} vs stated {stated}"
    );
}

#[test]
fn profile_times_every_node_and_writes_json_and_a_trace() {
    let dir = temp();
    let model = fixture("tiny-gelu");
    let (json, trace) = (dir.path().join("p.json"), dir.path().join("t.json"));
    let o = vitrt(
        &[
            "profile",
            "--model",
            model.to_str().unwrap(),
            "--batch-size",
            "2",
            "--reps",
            "5",
            "--json",
            json.to_str().unwrap(),
            "--trace",
            trace.to_str().unwrap(),
        ],
        dir.path(),
    );
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{stdout}{}", stderr(&o));
    assert!(
        stdout.contains("layer.0.attention.qkv") && stdout.contains("share"),
        "{stdout}"
    );
    let profile: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let nodes = profile["nodes"].as_array().unwrap();
    assert!(nodes.len() > 10);
    let shares: f64 = nodes.iter().map(|n| n["share"].as_f64().unwrap()).sum();
    assert!((shares - 1.0).abs() < 1e-6, "shares add up to {shares}");
    let trace: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&trace).unwrap()).unwrap();
    assert_eq!(trace["traceEvents"].as_array().unwrap().len(), nodes.len());

    let o = vitrt(
        &[
            "profile",
            "--model",
            model.to_str().unwrap(),
            "--batch-size",
            "0",
        ],
        dir.path(),
    );
    assert_clean_failure(&o, "--batch-size must be at least 1");
}

#[test]
fn bench_model_reports_each_batch_size() {
    let dir = temp();
    let model = fixture("tiny-gelu");
    let json = dir.path().join("m.json");
    let o = vitrt(
        &[
            "bench",
            "model",
            "--model",
            model.to_str().unwrap(),
            "--batch-sizes",
            "1,3",
            "--reps",
            "5",
            "--json",
            json.to_str().unwrap(),
        ],
        dir.path(),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(report["schema"], "vitrt-bench/1");
    let rows = report["models"].as_array().unwrap();
    assert_eq!(rows.len(), 2);
    for (row, batch) in rows.iter().zip([1, 3]) {
        assert_eq!(row["batch"], batch);
        let median = row["median_ms"].as_f64().unwrap();
        let ips = row["images_per_s"].as_f64().unwrap();
        assert!((ips - batch as f64 / (median * 1e-3)).abs() < 1e-6 * ips);
    }
    let o = vitrt(
        &[
            "bench",
            "model",
            "--model",
            model.to_str().unwrap(),
            "--batch-sizes",
            "0",
        ],
        dir.path(),
    );
    assert_clean_failure(&o, "positive batch sizes");
}

#[test]
fn tune_explains_what_it_cannot_do() {
    let dir = temp();
    let model = fixture("tiny-gelu");
    let tune = |extra: &[&str]| {
        let mut args = vec!["tune", "--model", model.to_str().unwrap()];
        args.extend_from_slice(extra);
        vitrt(&args, dir.path())
    };
    assert_clean_failure(&tune(&["--batch-sizes", "1,0"]), "positive batch sizes");
    assert_clean_failure(&tune(&["--reps", "2"]), "at least 5");
    let o = tune(&["--device", "cpu"]);
    assert_clean_failure(&o, "use --device cuda or cuda:N");
    assert_eq!(stderr(&o).lines().count(), 1, "one line: {}", stderr(&o));
    assert_clean_failure(&tune(&["--device", "tpu"]), "unknown device \"tpu\"");
    assert_clean_failure(
        &tune(&["--dtype", "f16", "--residual-dtype", "bf16"]),
        "not bf16",
    );
    let missing = dir.path().join("no/such/folder/tune.json");
    assert_clean_failure(
        &tune(&["--json", missing.to_str().unwrap()]),
        "is not a folder",
    );
    let o = vitrt(
        &[
            "tune",
            "--model",
            dir.path().join("nothing").to_str().unwrap(),
        ],
        dir.path(),
    );
    assert_clean_failure(&o, "nothing");
    // Without a GPU: no driver; with one: no device 7 (or NVRTC missing). Never a panic.
    let o = tune(&["--device", "cuda:7"]);
    assert_clean_failure(&o, "cuda:7");
    assert!(
        stderr(&o).contains("CUDA") || stderr(&o).contains("NVRTC"),
        "{}",
        stderr(&o)
    );
    // A value clap cannot parse is a usage error (exit 2, as for every subcommand).
    let o = tune(&["--dtype", "f64"]);
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("unknown dtype \"f64\""),
        "{}",
        stderr(&o)
    );
}

#[test]
fn cuda_graphs_switch_is_accepted_everywhere_and_changes_nothing_on_the_cpu() {
    let dir = temp();
    let model = fixture("tiny-gelu");
    let m = model.to_str().unwrap();
    let reference = model.join("reference.safetensors");
    let mut outputs = Vec::new();
    for switch in ["on", "off"] {
        let out = dir.path().join(format!("out-{switch}.safetensors"));
        let o = vitrt(
            &[
                "infer",
                "--model",
                m,
                "--input",
                reference.to_str().unwrap(),
                "--output",
                out.to_str().unwrap(),
                "--cuda-graphs",
                switch,
            ],
            dir.path(),
        );
        assert!(o.status.success(), "{}", stderr(&o));
        assert!(
            !stderr(&o).contains("graph"),
            "the CPU says nothing of graphs: {}",
            stderr(&o)
        );
        outputs.push(std::fs::read(&out).unwrap());
    }
    assert_eq!(outputs[0], outputs[1]);
    let o = vitrt(
        &[
            "parity",
            "--model",
            m,
            "--reference",
            reference.to_str().unwrap(),
            "--cuda-graphs",
            "off",
        ],
        dir.path(),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let o = vitrt(
        &[
            "bench",
            "model",
            "--model",
            m,
            "--batch-sizes",
            "1",
            "--reps",
            "5",
            "--cuda-graphs",
            "on",
        ],
        dir.path(),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let o = vitrt(
        &["infer", "--model", m, "--cuda-graphs", "sometimes"],
        dir.path(),
    );
    assert!(!o.status.success());
    assert!(stderr(&o).contains("--cuda-graphs"), "{}", stderr(&o));
}

/// A folder of good and bad images: results for the good ones in input order, an error
/// record (and a line on stderr) for each bad one, exit 1 with a count at the end.
#[test]
fn classify_reports_bad_files_and_classifies_the_rest() {
    let dir = temp();
    let folder = dir.path().join("photos");
    std::fs::create_dir_all(folder.join("sub")).unwrap();
    let good = digits();
    for (i, image) in good.iter().take(5).enumerate() {
        std::fs::copy(image, folder.join(format!("{i}-good.png"))).unwrap();
    }
    std::fs::copy(&good[5], folder.join("sub/9-good.png")).unwrap();
    std::fs::write(folder.join("2-broken.png"), b"\x89PNG\r\n\x1a\nnot really").unwrap();
    std::fs::write(folder.join("notes.txt"), b"not an image, not listed").unwrap();
    let model = root().join("examples/digits-vit");
    let args = |format: &str| {
        vec![
            "classify".to_string(),
            "--model".into(),
            model.display().to_string(),
            "--format".into(),
            format.into(),
            "--batch-size".into(),
            "2".into(),
            "--workers".into(),
            "3".into(),
            folder.display().to_string(),
        ]
    };
    let run = |format: &str| {
        let a = args(format);
        let a: Vec<&str> = a.iter().map(String::as_str).collect();
        vitrt(&a, dir.path())
    };
    let o = run("jsonl");
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(err.contains("2-broken.png"), "{err}");
    assert!(
        err.lines().last().unwrap() == "error: 1 of 7 images could not be classified",
        "{err}"
    );
    let lines: Vec<serde_json::Value> = String::from_utf8(o.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let names: Vec<String> = lines
        .iter()
        .map(|l| {
            Path::new(l["image"].as_str().unwrap())
                .strip_prefix(&folder)
                .unwrap()
                .display()
                .to_string()
        })
        .collect();
    assert_eq!(
        names,
        [
            "0-good.png",
            "1-good.png",
            "2-broken.png",
            "2-good.png",
            "3-good.png",
            "4-good.png",
            "sub/9-good.png"
        ]
    );
    assert!(lines[2]["error"].as_str().unwrap().contains("2-broken.png"));
    assert_eq!(lines[0]["predictions"].as_array().unwrap().len(), 5);
    // The same records as CSV: a header, five rows per good image, one per bad one.
    let o = run("csv");
    assert_eq!(o.status.code(), Some(1));
    let text = String::from_utf8(o.stdout).unwrap();
    let rows: Vec<&str> = text.lines().collect();
    assert_eq!(rows[0], "image,rank,index,label,probability,error");
    assert_eq!(rows.len(), 1 + 6 * 5 + 1);
    assert!(rows.iter().any(|r| r.contains("2-broken.png,,,,,")));
    // And as one JSON document, as --json always wrote it.
    let o = run("json");
    let doc: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(doc["results"].as_array().unwrap().len(), 7);
    assert_eq!(doc["device"], "cpu");
}

#[test]
fn classify_fail_fast_stops_at_the_first_bad_file_in_input_order() {
    let dir = temp();
    let good = digits();
    let broken = dir.path().join("broken.jpg");
    std::fs::write(&broken, b"\xff\xd8\xff\xe0 truncated").unwrap();
    let mut paths: Vec<String> = good[..3].iter().map(|p| p.display().to_string()).collect();
    paths.push(broken.display().to_string());
    paths.extend(good[3..9].iter().map(|p| p.display().to_string()));
    let model = root().join("examples/digits-vit");
    let mut args = vec![
        "classify",
        "--model",
        model.to_str().unwrap(),
        "--format",
        "jsonl",
        "--fail-fast",
        "--batch-size",
        "2",
        "--workers",
        "4",
    ];
    args.extend(paths.iter().map(String::as_str));
    let o = vitrt(&args, dir.path());
    assert_clean_failure(&o, "--fail-fast");
    let out = String::from_utf8(o.stdout).unwrap();
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 4, "{out}");
    assert!(lines[3].contains("\"error\""), "{out}");
}

#[test]
fn classify_reads_paths_from_stdin_and_keeps_their_order() {
    let dir = temp();
    let images = digits();
    let listing: String = images[..7]
        .iter()
        .rev()
        .map(|p| format!("{}\n", p.display()))
        .collect();
    let model = root().join("examples/digits-vit");
    let o = vitrt_with_stdin(
        &[
            "classify",
            "--model",
            model.to_str().unwrap(),
            "--format",
            "jsonl",
            "--workers",
            "4",
            "--batch-size",
            "3",
            "--files-from",
            "-",
        ],
        dir.path(),
        &listing,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let got: Vec<String> = String::from_utf8(o.stdout)
        .unwrap()
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            v["image"].as_str().unwrap().to_string()
        })
        .collect();
    let want: Vec<String> = images[..7]
        .iter()
        .rev()
        .map(|p| p.display().to_string())
        .collect();
    assert_eq!(got, want);
}

#[test]
fn classify_refuses_images_over_the_pixel_limit_before_decoding() {
    let dir = temp();
    let image = digits()[0].clone();
    let model = root().join("examples/digits-vit");
    let o = vitrt(
        &[
            "classify",
            "--model",
            model.to_str().unwrap(),
            "--max-pixels",
            "10",
            image.to_str().unwrap(),
        ],
        dir.path(),
    );
    assert_clean_failure(&o, "1 of 1 images");
    assert!(stderr(&o).contains("--max-pixels"), "{}", stderr(&o));
}

/// `vitrt classify ... | head -1`: the reader goes away; vitrt ends quietly, no panic.
#[test]
fn classify_ends_quietly_when_stdout_is_closed() {
    let dir = temp();
    let model = root().join("examples/digits-vit");
    let digits = root().join("examples/digits");
    let mut child = vitrt_command(
        &[
            "classify",
            "--model",
            model.to_str().unwrap(),
            "--batch-size",
            "1",
            digits.to_str().unwrap(),
        ],
        dir.path(),
    )
    .stdout(std::process::Stdio::piped())
    .stderr(std::process::Stdio::piped())
    .spawn()
    .unwrap();
    // Read one line, then close the pipe.
    {
        use std::io::BufRead;
        let mut reader = std::io::BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        reader.read_line(&mut line).unwrap();
        assert!(line.starts_with("model "), "{line}");
    }
    let o = child.wait_with_output().unwrap();
    let err = stderr(&o);
    assert!(!err.contains("panicked"), "{err}");
    assert_eq!(o.status.code(), Some(0), "{err}");
}

/// A full disk is a one-line error and exit 1.
#[test]
fn classify_reports_a_full_disk() {
    let Ok(full) = std::fs::OpenOptions::new().write(true).open("/dev/full") else {
        return; // no /dev/full on this system
    };
    let dir = temp();
    let model = root().join("examples/digits-vit");
    let digits = root().join("examples/digits");
    let o = vitrt_command(
        &[
            "classify",
            "--model",
            model.to_str().unwrap(),
            "--format",
            "jsonl",
            digits.to_str().unwrap(),
        ],
        dir.path(),
    )
    .stdout(full)
    .output()
    .unwrap();
    assert_clean_failure(&o, "writing the results");
    assert!(stderr(&o).contains("No space left"), "{}", stderr(&o));
}

/// Fails if a message says a cause twice in a row ("X: X"), as a chain whose variants both
/// embed and return their cause does.
fn assert_each_cause_once(o: &Output) {
    // Without --device, a first line says which device was chosen.
    let err: String = stderr(o)
        .lines()
        .filter(|l| !l.starts_with("vitrt: running on "))
        .map(|l| format!("{l}\n"))
        .collect();
    let parts: Vec<&str> = err.trim_end().split(": ").collect();
    for pair in parts.windows(2) {
        assert_ne!(pair[0], pair[1], "a cause printed twice: {err}");
    }
    assert_eq!(err.lines().count(), 1, "one line: {err}");
}

/// `vitrt infer` on the tiny model with `extra` arguments, reading its reference pixels.
fn infer_tiny(extra: &[&str], dir: &Path) -> Output {
    let model = fixture("tiny-gelu");
    let reference = model.join("reference.safetensors");
    let mut args = vec![
        "infer",
        "--model",
        model.to_str().unwrap(),
        "--input",
        reference.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    vitrt(&args, dir)
}

fn logits_of(bytes: &[u8], dir: &Path) -> Vec<f32> {
    let file = dir.join("copy-of-stdout.safetensors");
    std::fs::write(&file, bytes).unwrap();
    let tensors = vitrt_weights::read_f32_tensors(&file).unwrap();
    let (_, shape, values) = tensors.into_iter().find(|t| t.0 == "logits").unwrap();
    assert_eq!(shape, vec![2, 10]);
    values
}

#[test]
fn infer_output_dash_and_dev_stdout_write_safetensors_to_stdout() {
    let dir = temp();
    let o = infer_tiny(&["--output", "-"], dir.path());
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("wrote stdout (logits)"),
        "{}",
        stderr(&o)
    );
    let logits = logits_of(&o.stdout, dir.path());

    let link_before = std::fs::symlink_metadata("/dev/stdout").ok();
    let o = infer_tiny(&["--output", "/dev/stdout"], dir.path());
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(logits_of(&o.stdout, dir.path()), logits);
    if let Some(before) = link_before {
        let after = std::fs::symlink_metadata("/dev/stdout").unwrap();
        assert_eq!(
            before.file_type().is_symlink(),
            after.file_type().is_symlink(),
            "/dev/stdout itself is left alone"
        );
    }
}

#[cfg(target_os = "linux")]
#[test]
fn infer_output_to_a_full_disk_is_a_one_line_error() {
    let dir = temp();
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .unwrap();
    let model = fixture("tiny-gelu");
    let reference = model.join("reference.safetensors");
    let o = vitrt_command(
        &[
            "infer",
            "--model",
            model.to_str().unwrap(),
            "--input",
            reference.to_str().unwrap(),
            "--output",
            "-",
        ],
        dir.path(),
    )
    .stdout(full)
    .output()
    .unwrap();
    assert_clean_failure(&o, "No space left on device");
    assert_each_cause_once(&o);
}

#[cfg(unix)]
#[test]
fn infer_refuses_devices_folders_and_fifos_before_running() {
    let dir = temp();
    // A model that does not exist: the output is refused before the model is looked at.
    let missing_model = dir.path().join("no-model");
    let refuse = |output: &str, needle: &str| {
        let o = vitrt(
            &[
                "infer",
                "--model",
                missing_model.to_str().unwrap(),
                "--input",
                "in.safetensors",
                "--output",
                output,
            ],
            dir.path(),
        );
        assert_clean_failure(&o, needle);
        assert!(!stderr(&o).contains("no-model"), "{}", stderr(&o));
    };
    refuse("/dev/full", "/dev/full: it is a device, not a regular file");
    let full = std::fs::metadata("/dev/full").unwrap();
    assert!(!full.file_type().is_file(), "/dev/full is still a device");
    refuse(dir.path().to_str().unwrap(), "it is a folder");
    let fifo = dir.path().join("fifo");
    let made = Command::new("mkfifo").arg(&fifo).status();
    if made.is_ok_and(|s| s.success()) {
        refuse(fifo.to_str().unwrap(), "it is a fifo, not a regular file");
    }
    let nested = dir.path().join("no/such/out.safetensors");
    refuse(
        nested.to_str().unwrap(),
        "is not a folder (it does not exist)",
    );
}

#[cfg(unix)]
#[test]
fn infer_writes_through_links_and_replaces_read_only_files_only_with_force() {
    use std::os::unix::fs::PermissionsExt;
    let dir = temp();
    let real = dir.path().join("real.safetensors");
    std::fs::write(&real, "old").unwrap();
    let link = dir.path().join("link.safetensors");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    let o = infer_tiny(&["--output", link.to_str().unwrap()], dir.path());
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(std::fs::symlink_metadata(&link)
        .unwrap()
        .file_type()
        .is_symlink());
    let written = std::fs::read(&real).unwrap();
    assert_eq!(logits_of(&written, dir.path()).len(), 20);

    std::fs::write(&real, "keep").unwrap();
    std::fs::set_permissions(&real, std::fs::Permissions::from_mode(0o444)).unwrap();
    let o = infer_tiny(&["--output", link.to_str().unwrap()], dir.path());
    assert_clean_failure(&o, "the file is read-only (--force replaces it)");
    assert_eq!(std::fs::read(&real).unwrap(), b"keep");
    let o = infer_tiny(&["--output", link.to_str().unwrap(), "--force"], dir.path());
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        logits_of(&std::fs::read(&real).unwrap(), dir.path()).len(),
        20
    );
    let leftovers: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".tmp"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

#[test]
fn report_files_are_checked_before_the_work() {
    let dir = temp();
    let model = fixture("tiny-gelu");
    let read_only = dir.path().join("ro.json");
    std::fs::write(&read_only, "keep").unwrap();
    let mut permissions = std::fs::metadata(&read_only).unwrap().permissions();
    permissions.set_readonly(true);
    std::fs::set_permissions(&read_only, permissions).unwrap();
    for flag in ["--json", "--trace"] {
        let o = vitrt(
            &[
                "profile",
                "--model",
                model.to_str().unwrap(),
                "--batch-size",
                "1",
                "--reps",
                "5",
                flag,
                read_only.to_str().unwrap(),
            ],
            dir.path(),
        );
        assert_clean_failure(&o, "read-only (--force replaces it)");
        assert!(!String::from_utf8_lossy(&o.stdout).contains("forward"));
    }
    assert_eq!(std::fs::read(&read_only).unwrap(), b"keep");
    let o = vitrt(
        &[
            "bench",
            "model",
            "--model",
            model.to_str().unwrap(),
            "--json",
            "-",
        ],
        dir.path(),
    );
    assert_clean_failure(&o, "cannot write to `-` here");
    let o = vitrt(
        &["bench", "kernels", "--json", dir.path().to_str().unwrap()],
        dir.path(),
    );
    assert_clean_failure(&o, "it is a folder");
}

#[test]
fn errors_say_each_cause_once() {
    let dir = temp();
    let model = fixture("tiny-gelu");
    let out = dir.path().join("out.safetensors");
    // --model naming a file.
    let o = vitrt(
        &[
            "infer",
            "--model",
            model.join("config.json").to_str().unwrap(),
            "--input",
            model.join("reference.safetensors").to_str().unwrap(),
            "--output",
            out.to_str().unwrap(),
        ],
        dir.path(),
    );
    assert_clean_failure(&o, "config.json");
    assert_each_cause_once(&o);
    // An input that exists but cannot be read as a file: an I/O error with its cause.
    #[cfg(target_os = "linux")]
    {
        let o = vitrt(
            &[
                "infer",
                "--model",
                model.to_str().unwrap(),
                "--input",
                "/proc/self/status",
                "--output",
                out.to_str().unwrap(),
            ],
            dir.path(),
        );
        assert_clean_failure(&o, "cannot read /proc/self/status: ");
        assert_each_cause_once(&o);
    }
    // An output folder that is a file.
    let file = dir.path().join("a-file");
    std::fs::write(&file, "").unwrap();
    let o = infer_tiny(
        &["--output", file.join("out.safetensors").to_str().unwrap()],
        dir.path(),
    );
    assert_clean_failure(&o, "is not a folder");
    assert_each_cause_once(&o);
}

#[test]
fn infer_and_parity_refuse_non_finite_pixels_naming_the_first() {
    let dir = temp();
    let model = fixture("tiny-gelu");
    let reference = model.join("reference.safetensors");
    let tensors = vitrt_weights::read_f32_tensors(&reference).unwrap();
    for (value, shown) in [
        (f32::NAN, "NaN"),
        (f32::INFINITY, "inf"),
        (f32::NEG_INFINITY, "-inf"),
    ] {
        let mut edited = tensors.clone();
        let (_, shape, pixels) = edited.iter_mut().find(|t| t.0 == "pixel_values").unwrap();
        assert_eq!(shape, &vec![2, 3, 32, 32]);
        // Image 1, channel 2, row 5, column 7; and a later one that must not be named.
        pixels[((3 + 2) * 32 + 5) * 32 + 7] = value;
        pixels[((3 + 2) * 32 + 9) * 32] = value;
        let input = dir.path().join("bad.safetensors");
        vitrt_weights::write_f32_tensors(&input, &edited).unwrap();
        let out = dir.path().join("out.safetensors");
        let needle = format!("pixel_values[1, 2, 5, 7] (as [b, c, y, x]) is {shown}");
        let o = vitrt(
            &[
                "infer",
                "--model",
                model.to_str().unwrap(),
                "--input",
                input.to_str().unwrap(),
                "--output",
                out.to_str().unwrap(),
            ],
            dir.path(),
        );
        assert_clean_failure(&o, &needle);
        assert!(!out.exists(), "nothing written");
        let o = vitrt(
            &[
                "parity",
                "--model",
                model.to_str().unwrap(),
                "--reference",
                input.to_str().unwrap(),
            ],
            dir.path(),
        );
        assert_clean_failure(&o, &needle);
    }
}

/// Every command's output: a reader that has gone (`| head` after its lines, here a pipe
/// closed before the first line) ends the run quietly with status 0, never a panic.
#[test]
fn a_closed_stdout_ends_any_command_quietly() {
    let dir = temp();
    let model = fixture("tiny-gelu");
    let reference = model.join("reference.safetensors");
    let digits = root().join("examples/digits");
    let demo = root().join("examples/digits-vit");
    let commands: [Vec<&str>; 3] = [
        vec![
            "parity",
            "--model",
            model.to_str().unwrap(),
            "--reference",
            reference.to_str().unwrap(),
        ],
        vec![
            "bench",
            "model",
            "--model",
            model.to_str().unwrap(),
            "--device",
            "cpu",
            "--batch-sizes",
            "1",
            "--reps",
            "5",
        ],
        vec![
            "classify",
            "--model",
            demo.to_str().unwrap(),
            digits.to_str().unwrap(),
        ],
    ];
    for args in commands {
        let mut child = vitrt_command(&args, dir.path())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        drop(child.stdout.take());
        let o = child.wait_with_output().unwrap();
        let err = stderr(&o);
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        assert_eq!(o.status.code(), Some(0), "{args:?}: {err}");
    }
}

/// A NaN weight gives no output and names the first tensor where a non-finite value appears.
#[test]
fn infer_traces_a_non_finite_result_to_its_first_layer() {
    let dir = temp();
    let model = dir.path().join("nan-model");
    std::fs::create_dir_all(&model).unwrap();
    let source = fixture("tiny-gelu");
    std::fs::copy(source.join("config.json"), model.join("config.json")).unwrap();
    let mut tensors = vitrt_weights::read_f32_tensors(&source.join("model.safetensors")).unwrap();
    let (_, _, bias) = tensors
        .iter_mut()
        .find(|(name, _, _)| name == "vit.encoder.layer.1.intermediate.dense.bias")
        .unwrap();
    bias[3] = f32::NAN;
    let weights = model.join("model.safetensors");
    std::fs::write(
        &weights,
        vitrt_weights::f32_tensors_bytes(&weights, &tensors).unwrap(),
    )
    .unwrap();
    let out = dir.path().join("out.safetensors");
    let reference = source.join("reference.safetensors");
    let o = vitrt(
        &[
            "infer",
            "--model",
            model.to_str().unwrap(),
            "--input",
            reference.to_str().unwrap(),
            "--output",
            out.to_str().unwrap(),
        ],
        dir.path(),
    );
    assert_clean_failure(
        &o,
        "hidden_states.2 (the output of encoder layer 1 (0-based))",
    );
    assert!(
        stderr(&o).contains("logits is NaN at [0, "),
        "{}",
        stderr(&o)
    );
    assert!(!out.exists(), "nothing is written");
}
