//! The second round of bad input a new user tries (issue 32), end to end on the CPU: sizes
//! past every bound, labels longer than a format width, FIFOs, sockets and devices given as
//! files, outputs that are inputs or that a failed run would have emptied, models whose
//! scores are not finite, checkpoints the config does not describe, closed pipes, file names
//! that are not UTF-8 and folder entries that cannot be listed. Each must end in a clear
//! message and the right exit status, never a panic, a hang or a silently wrong answer.

mod common;

use common::*;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Runs `command` to the end, failing (and killing it) if it takes more than 60 s: a
/// blocking open of a FIFO would otherwise hang the test run. Its outputs are read as it runs.
fn finishes(mut command: Command) -> Output {
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("vitrt runs");
    let read = |mut pipe: Box<dyn std::io::Read + Send>| {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            pipe.read_to_end(&mut bytes).unwrap();
            bytes
        })
    };
    let stdout = read(Box::new(child.stdout.take().unwrap()));
    let stderr = read(Box::new(child.stderr.take().unwrap()));
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > Duration::from_secs(60) {
            child.kill().unwrap();
            panic!("vitrt did not end within 60 s: {command:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Output {
        status,
        stdout: stdout.join().unwrap(),
        stderr: stderr.join().unwrap(),
    }
}

fn run(args: &[&str], home: &Path) -> Output {
    finishes(vitrt_command(args, home))
}

fn demo() -> PathBuf {
    root().join("examples/digits-vit")
}

fn digit() -> PathBuf {
    digits().remove(0)
}

fn str(path: &Path) -> &str {
    path.to_str().unwrap()
}

fn mkfifo(path: &Path) {
    let status = Command::new("mkfifo").arg(path).status().unwrap();
    assert!(status.success());
}

/// A copy of the model folder `from` in `to`, with the tensors `edit` changes.
fn edited_model(from: &Path, to: &Path, edit: impl Fn(&str, &mut Vec<f32>)) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let path = entry.unwrap().path();
        if path.is_file() {
            std::fs::copy(&path, to.join(path.file_name().unwrap())).unwrap();
        }
    }
    let mut tensors = vitrt_weights::read_f32_tensors(&from.join("model.safetensors")).unwrap();
    for (name, _, values) in &mut tensors {
        edit(name, values);
    }
    vitrt_weights::write_f32_tensors(&to.join("model.safetensors"), &tensors).unwrap();
}

/// A copy of the model folder `from` in `to` whose config.json `edit` changes.
fn edited_config(from: &Path, to: &Path, edit: impl Fn(&mut serde_json::Value)) {
    edited_model(from, to, |_, _| {});
    let path = to.join("config.json");
    let mut config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    edit(&mut config);
    std::fs::write(&path, config.to_string()).unwrap();
}

#[test]
fn sizes_past_the_bounds_are_refused_not_allocated() {
    let dir = temp();
    let model = fixture("tiny-gelu");
    let image = digit();
    let cases: [(&[&str], &str); 5] = [
        (
            &[
                "bench",
                "model",
                "--device",
                "cpu",
                "--batch-sizes",
                "18446744073709551615",
            ],
            "1 to 65536 images",
        ),
        (
            &["profile", "--device", "cpu", "--batch-size", "100000000"],
            "1 to 65536 images",
        ),
        (
            &["classify", "--image-size", "1000000"],
            "1 to 16384 pixels",
        ),
        (
            &["classify", "--image-size", "4000000000"],
            "1 to 16384 pixels",
        ),
        (&["tune", "--reps", "18446744073709551615"], "0 to 1000000"),
    ];
    for (args, needle) in cases {
        let mut args = args.to_vec();
        args.extend(["--model", str(&model)]);
        if args[0] == "classify" {
            args.push(str(&image));
        }
        assert_usage_error(&run(&args, dir.path()), needle);
    }
    // Inside the side bound, past the patch bound (4096 / 8 = 512 patches a side): refused by
    // the model before its position table is resampled.
    let o = run(
        &[
            "classify",
            "--model",
            str(&model),
            "--image-size",
            "4096",
            str(&image),
        ],
        dir.path(),
    );
    assert_clean_failure(&o, "more than the limit of 16384");
}

#[test]
fn labels_longer_than_a_format_width_are_tabled_and_tokenized_cut() {
    let dir = temp();
    let model = fixture("clip-zero-shot");
    let long = "a very long label ".repeat(4_000);
    let labels = dir.path().join("labels.txt");
    std::fs::write(&labels, format!("cat\n{long}\n")).unwrap();
    let image = root().join("tests/fixtures/images/cat.jpg");
    let o = run(
        &[
            "zero-shot",
            "--model",
            str(&model),
            "--device",
            "cpu",
            "--labels-file",
            str(&labels),
            str(&image),
        ],
        dir.path(),
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let table = String::from_utf8(o.stdout).unwrap();
    assert!(
        table.contains(long.trim()),
        "the long label is in the table"
    );
}

#[cfg(unix)]
#[test]
fn fifos_sockets_and_devices_are_refused_without_blocking() {
    let dir = temp();
    let fifo = dir.path().join("x.jpg");
    mkfifo(&fifo);
    let socket = dir.path().join("s.png");
    let _listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
    let list = dir.path().join("list.txt");
    std::fs::write(&list, format!("{}\n", fifo.display())).unwrap();
    let image = digit();
    let (demo, image) = (demo(), image);
    let o = run(
        &[
            "classify",
            "--model",
            str(&demo),
            "--format",
            "jsonl",
            str(&fifo),
            str(&socket),
            "/dev/zero",
            str(&image),
            "--files-from",
            str(&list),
        ],
        dir.path(),
    );
    assert_clean_failure(&o, "4 of 5 images could not be classified");
    let err = stderr(&o);
    assert!(err.contains("x.jpg: a fifo, not a regular file"), "{err}");
    assert!(err.contains("s.png: a socket, not a regular file"), "{err}");
    assert!(
        err.contains("/dev/zero: a device, not a regular file"),
        "{err}"
    );
    let lines = String::from_utf8(o.stdout).unwrap();
    assert_eq!(lines.lines().count(), 5, "{lines}");

    // A FIFO as infer's input, and as the --stats file (refused before the run).
    let o = run(
        &[
            "infer",
            "--model",
            str(&fixture("tiny-gelu")),
            "--input",
            str(&fifo),
            "--output",
            str(&dir.path().join("out.safetensors")),
        ],
        dir.path(),
    );
    assert_clean_failure(&o, "a fifo, not a regular file");
    let stats = dir.path().join("stats.json");
    mkfifo(&stats);
    let o = run(
        &[
            "classify",
            "--model",
            str(&demo),
            "--stats",
            str(&stats),
            str(&image),
        ],
        dir.path(),
    );
    assert_clean_failure(&o, "it is a fifo, not a regular file");
}

#[test]
fn outputs_never_lose_data() {
    let dir = temp();
    let demo = demo();
    let image = dir.path().join("s.png");
    std::fs::copy(digit(), &image).unwrap();
    let before = std::fs::read(&image).unwrap();
    // The output is the input: refused before anything is read or written.
    let o = run(
        &[
            "embed",
            "--model",
            str(&demo),
            "--output",
            str(&image),
            "--format",
            "jsonl",
            str(&image),
        ],
        dir.path(),
    );
    assert_clean_failure(&o, "is the output file");
    assert_eq!(std::fs::read(&image).unwrap(), before);

    // A killed run's temporary files are removed when a later run writes to the folder;
    // the .npy and its paths file are written as a unit.
    let stale = dir.path().join(".e.npy.vitrt-AbC123.tmp");
    std::fs::write(&stale, "left by kill -9").unwrap();
    std::fs::File::options()
        .write(true)
        .open(&stale)
        .unwrap()
        .set_modified(std::time::SystemTime::now() - Duration::from_secs(7200))
        .unwrap();
    let npy = dir.path().join("e.npy");
    let o = run(
        &[
            "embed",
            "--model",
            str(&demo),
            "--output",
            str(&npy),
            str(&image),
        ],
        dir.path(),
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(!stale.exists(), "the stale temporary file is still there");
    let names = std::fs::read_to_string(dir.path().join("e.npy.images.txt")).unwrap();
    assert_eq!(names, format!("{}\n", image.display()));
    let mut left: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    left.sort();
    assert_eq!(left, ["e.npy", "e.npy.images.txt", "s.png"]);
}

#[test]
fn scores_that_are_not_finite_fail_the_run() {
    let dir = temp();
    let nan_classifier = dir.path().join("nan-classifier");
    edited_model(&demo(), &nan_classifier, |name, values| {
        if name == "classifier.bias" {
            values.fill(f32::NAN);
        }
    });
    let images = digits();
    let (a, b) = (str(&images[0]), str(&images[1]));
    let model = str(&nan_classifier);
    let o = run(
        &["classify", "--model", model, "--format", "jsonl", a, b],
        dir.path(),
    );
    assert_clean_failure(&o, "2 of 2 images could not be classified");
    assert_eq!(String::from_utf8(o.stdout).unwrap().lines().count(), 2);
    let o = run(
        &[
            "classify",
            "--model",
            model,
            "--format",
            "jsonl",
            "--batch-size",
            "2",
            "--fail-fast",
            a,
            b,
        ],
        dir.path(),
    );
    assert_clean_failure(&o, "stopped at the first image that failed");
    let lines = String::from_utf8(o.stdout).unwrap();
    assert_eq!(
        lines.lines().count(),
        1,
        "nothing after the first failure: {lines}"
    );
    assert!(lines.contains("non-finite score"), "{lines}");

    let nan_scale = dir.path().join("nan-scale");
    edited_model(&fixture("clip-zero-shot"), &nan_scale, |name, values| {
        if name == "logit_scale" {
            values.fill(f32::NAN);
        }
    });
    let o = run(
        &[
            "zero-shot",
            "--model",
            str(&nan_scale),
            "--device",
            "cpu",
            "--labels",
            "cat,dog",
            a,
        ],
        dir.path(),
    );
    assert_clean_failure(&o, "1 of 1 images could not be classified");
}

#[test]
fn a_config_that_does_not_describe_its_checkpoint_is_refused() {
    let dir = temp();
    let image = digit();
    let fewer_layers = dir.path().join("fewer-layers");
    edited_config(&demo(), &fewer_layers, |config| {
        config["num_hidden_layers"] = 1.into();
    });
    let o = run(
        &["classify", "--model", str(&fewer_layers), str(&image)],
        dir.path(),
    );
    assert_clean_failure(
        &o,
        "holds 4 encoder layers but config.json's num_hidden_layers is 1",
    );

    let short_labels = dir.path().join("short-labels");
    edited_config(&demo(), &short_labels, |config| {
        config["id2label"].as_object_mut().unwrap().remove("9");
    });
    let o = run(
        &["classify", "--model", str(&short_labels), str(&image)],
        dir.path(),
    );
    assert_clean_failure(&o, "id2label names 9 classes");
}

/// Binary and embedding outputs to a reader that has gone end quietly with status 0.
#[test]
fn a_closed_stdout_ends_binary_outputs_quietly() {
    let dir = temp();
    let (demo, image) = (demo(), digit());
    let clip = fixture("clip-zero-shot");
    let tiny = fixture("tiny-gelu");
    let reference = tiny.join("reference.safetensors");
    let commands: [Vec<&str>; 3] = [
        vec![
            "embed",
            "--model",
            str(&demo),
            "--output",
            "-",
            "--format",
            "safetensors",
            str(&image),
        ],
        vec![
            "embed-text",
            "--model",
            str(&clip),
            "--device",
            "cpu",
            "--text",
            "a cat",
            "--output",
            "-",
        ],
        vec![
            "infer",
            "--model",
            str(&tiny),
            "--input",
            str(&reference),
            "--output",
            "-",
        ],
    ];
    for args in commands {
        let mut child = vitrt_command(&args, dir.path())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        drop(child.stdout.take());
        let o = child.wait_with_output().unwrap();
        let err = stderr(&o);
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        assert_eq!(o.status.code(), Some(0), "{args:?}: {err}");
    }
}

#[cfg(unix)]
#[test]
fn names_that_are_not_utf8_stay_apart_and_unlisted_entries_keep_their_place() {
    use std::os::unix::ffi::OsStrExt;
    let dir = temp();
    let folder = dir.path().join("images");
    std::fs::create_dir(&folder).unwrap();
    let images = digits();
    std::fs::copy(&images[0], folder.join("a.png")).unwrap();
    std::os::unix::fs::symlink(folder.join("nowhere.png"), folder.join("b.png")).unwrap();
    for name in [&b"c\xfe.png"[..], b"c\xff.png"] {
        std::fs::copy(&images[1], folder.join(std::ffi::OsStr::from_bytes(name))).unwrap();
    }
    let o = run(
        &[
            "classify",
            "--model",
            str(&demo()),
            "--format",
            "jsonl",
            str(&folder),
        ],
        dir.path(),
    );
    assert_clean_failure(&o, "1 of 4 images could not be classified");
    let names: Vec<String> = String::from_utf8(o.stdout)
        .unwrap()
        .lines()
        .map(|line| {
            let record: serde_json::Value = serde_json::from_str(line).unwrap();
            let image = record["image"].as_str().unwrap();
            image.rsplit('/').next().unwrap().to_string()
        })
        .collect();
    assert_eq!(names, ["a.png", "b.png", r"c\xFE.png", r"c\xFF.png"]);

    // --fail-fast stops at the unlisted entry, after the image listed before it.
    let o = run(
        &[
            "classify",
            "--model",
            str(&demo()),
            "--format",
            "jsonl",
            "--fail-fast",
            str(&folder),
        ],
        dir.path(),
    );
    assert_clean_failure(&o, "stopped at the first image that failed");
    let lines = String::from_utf8(o.stdout).unwrap();
    assert_eq!(lines.lines().count(), 2, "{lines}");
    assert!(
        lines.lines().nth(1).unwrap().contains("cannot list"),
        "{lines}"
    );
}
