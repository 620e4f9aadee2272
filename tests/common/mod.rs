//! Helpers of the `vitrt` end-to-end tests (tests/cli_*.rs): the vitrt process with an empty,
//! offline hub cache, the fixtures, and the checks of a clean failure.
// Each test file is its own crate and uses only some of these.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

pub fn fixture(name: &str) -> PathBuf {
    root().join("tests/fixtures/models").join(name)
}

/// vitrt with an empty, offline hub cache so no test can reach the network.
pub fn vitrt_command<S: AsRef<std::ffi::OsStr>>(args: &[S], hf_home: &Path) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_vitrt"));
    command
        .args(args)
        .env("HF_HOME", hf_home)
        .env_remove("HF_HUB_CACHE")
        .env("HF_HUB_OFFLINE", "1");
    command
}

/// Runs vitrt (see [`vitrt_command`]) to the end.
pub fn vitrt(args: &[&str], hf_home: &Path) -> Output {
    vitrt_command(args, hf_home).output().expect("vitrt runs")
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Fails unless the run failed cleanly: non-zero exit, an "error:" line naming `needle`,
/// and no panic.
pub fn assert_clean_failure(o: &Output, needle: &str) {
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

/// Fails unless the argument parser refused the command line: exit status 2, its message
/// naming `needle`, and no panic.
pub fn assert_usage_error(o: &Output, needle: &str) {
    let err = stderr(o);
    assert_eq!(o.status.code(), Some(2), "exit code; stderr: {err}");
    assert!(!err.contains("panicked"), "panic: {err}");
    assert!(
        err.contains(needle),
        "stderr should mention {needle:?}: {err}"
    );
}

/// Runs vitrt with `stdin` as its standard input.
pub fn vitrt_with_stdin(args: &[&str], hf_home: &Path, stdin: &str) -> Output {
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
pub fn digits() -> Vec<PathBuf> {
    let mut images: Vec<PathBuf> = std::fs::read_dir(root().join("examples/digits"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "png"))
        .collect();
    images.sort();
    images
}

pub fn temp() -> tempfile::TempDir {
    tempfile::tempdir().unwrap()
}

/// Fails if a message says a cause twice in a row ("X: X"), as a chain whose variants both
/// embed and return their cause does.
pub fn assert_each_cause_once(o: &Output) {
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
pub fn infer_tiny(extra: &[&str], dir: &Path) -> Output {
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

pub fn logits_of(bytes: &[u8], dir: &Path) -> Vec<f32> {
    let file = dir.join("copy-of-stdout.safetensors");
    std::fs::write(&file, bytes).unwrap();
    let tensors = vitrt_weights::read_f32_tensors(&file).unwrap();
    let (_, shape, values) = tensors.into_iter().find(|t| t.0 == "logits").unwrap();
    assert_eq!(shape, vec![2, 10]);
    values
}
