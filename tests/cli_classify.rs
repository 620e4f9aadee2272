//! `vitrt classify` end to end: the demo model on the shipped digits as PyTorch classifies
//! them, bad images and files, paths from stdin, the pixel limit, closed stdout, full disks.

mod common;

use common::*;
use std::path::{Path, PathBuf};
use std::process::Command;

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

#[test]
fn every_family_with_a_head_classifies_with_its_own_labels_and_preprocessing() {
    // A timm checkpoint (labels from label_names, preprocessing from pretrained_cfg), DeiT
    // with its teacher, DINOv2's classifier, CLIP's and SigLIP's: each classifies real image
    // files through the whole pipeline, with its config's labels.
    let dir = temp();
    let images = root().join("tests/fixtures/images");
    for (model, labels) in [
        (
            "timm-vit-layerscale",
            &["north", "east", "south", "west", "up"][..],
        ),
        (
            "deit-distilled",
            &["ant", "bee", "cricket", "dragonfly", "earwig"],
        ),
        (
            "dinov2-classifier",
            &["granite", "basalt", "marble", "slate"],
        ),
        ("clip-classifier", &["day", "night", "dusk"]),
        ("siglip-classifier", &["calm", "storm"]),
    ] {
        let model_dir = fixture(model);
        let o = vitrt(
            &[
                "classify",
                "--model",
                model_dir.to_str().unwrap(),
                "--device",
                "cpu",
                "--format",
                "jsonl",
                "--top-k",
                "2",
                "--quiet",
                images.join("cat.jpg").to_str().unwrap(),
                images.join("coffee.png").to_str().unwrap(),
            ],
            dir.path(),
        );
        assert!(o.status.success(), "{model}: {}", stderr(&o));
        let stdout = String::from_utf8_lossy(&o.stdout);
        let records: Vec<serde_json::Value> = stdout
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(records.len(), 2, "{model}: {stdout}");
        for record in &records {
            let predictions = record["predictions"].as_array().unwrap();
            assert_eq!(predictions.len(), 2, "{model}: {record}");
            for p in predictions {
                let label = p["label"].as_str().unwrap();
                assert!(labels.contains(&label), "{model}: label {label}");
            }
        }
    }
}

/// `--decode gpu` needs a CUDA device: on the CPU it is a one-line error, while `--decode cpu`
/// runs as the default does.
#[test]
fn decode_gpu_without_a_gpu_is_a_clear_error() {
    let dir = temp();
    let model = root().join("examples/digits-vit");
    let image = digits()[0].clone();
    let (model, image) = (model.to_str().unwrap(), image.to_str().unwrap());
    let refused = vitrt(
        &[
            "classify", "--model", model, "--device", "cpu", "--decode", "gpu", image,
        ],
        dir.path(),
    );
    assert_clean_failure(&refused, "--decode gpu needs a CUDA device");
    let host = vitrt(
        &[
            "classify", "--model", model, "--device", "cpu", "--decode", "cpu", "--format",
            "jsonl", image,
        ],
        dir.path(),
    );
    let default = vitrt(
        &[
            "classify", "--model", model, "--device", "cpu", "--format", "jsonl", image,
        ],
        dir.path(),
    );
    assert!(host.status.success(), "{}", stderr(&host));
    assert_eq!(host.stdout, default.stdout);
}
