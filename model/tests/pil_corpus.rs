//! PIL's verdict on real-world files: every JPEG, PNG and WebP of Pillow's own test images
//! (fetched by scripts/fixtures/fetch_pil_corpus.py into target/pil-corpus, or the folder
//! VITRT_PIL_CORPUS names) is decoded as `vitrt` decodes a file, and checked against what
//! Pillow made of it through transformers' `load_image` (open, `exif_transpose`,
//! `convert("RGB")`), as scripts/fixtures/record_pil_verdicts.py recorded it in
//! tests/fixtures/pil_corpus/verdicts.json: refused by both, or the same size and the same
//! pixels (SHA-256 of the RGB bytes). Files where vitrt deliberately differs carry a
//! `vitrt_differs` object: the reason, and the outcome vitrt must give instead ("refused").
//!
//! Without the corpus the test fails, naming the script, unless VITRT_PIL_CORPUS_OPTIONAL=1
//! says that skipping is allowed (it then says so loudly).
//!
//! The image fuzzer's committed corpus (fuzz/corpus/image_decode) is checked the same way,
//! against tests/fixtures/pil_corpus/fuzz_image_decode.json. Any other folder of files can be:
//! record it with
//! `scripts/fixtures/record_pil_verdicts.py --every-file --corpus DIR --out DIR.json`, then run
//! this test with VITRT_PIL_CORPUS=DIR VITRT_PIL_VERDICTS=DIR.json.

mod common;

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde_json::Value;
use sha2::{Digest, Sha256};
use vitrt_model::preprocess::{decode_image, ImageLimits, MAX_IMAGE_PIXELS};

const EXTENSIONS: [&str; 4] = ["jpg", "jpeg", "png", "webp"];

fn corpus_dir() -> PathBuf {
    std::env::var_os("VITRT_PIL_CORPUS")
        .map(PathBuf::from)
        .unwrap_or_else(|| common::repo_root().join("target/pil-corpus"))
}

/// The corpus's files (with `every_file`, all of them; else those named .jpg, .jpeg, .png or
/// .webp), as paths relative to `dir` with `/` separators, sorted.
fn corpus_files(dir: &Path, every_file: bool) -> Vec<String> {
    let mut found = Vec::new();
    let mut folders = vec![dir.to_path_buf()];
    while let Some(folder) = folders.pop() {
        for entry in std::fs::read_dir(&folder).expect("a readable corpus folder") {
            let path = entry.expect("a corpus entry").path();
            if path.is_dir() {
                folders.push(path);
                continue;
            }
            let extension = path.extension().and_then(|e| e.to_str()).unwrap_or("");
            if every_file || EXTENSIONS.contains(&extension.to_ascii_lowercase().as_str()) {
                let relative = path.strip_prefix(dir).unwrap();
                let parts: Vec<_> = relative.iter().map(|p| p.to_string_lossy()).collect();
                found.push(parts.join("/"));
            }
        }
    }
    found.sort();
    found
}

/// What one side made of a file.
#[derive(Debug, PartialEq, Eq)]
enum Outcome {
    Refused,
    Decoded {
        width: u64,
        height: u64,
        sha256: String,
    },
}

fn pil_outcome(verdict: &Value) -> Outcome {
    if verdict.get("refused").is_some() {
        return Outcome::Refused;
    }
    Outcome::Decoded {
        width: verdict["size"][0].as_u64().expect("size"),
        height: verdict["size"][1].as_u64().expect("size"),
        sha256: verdict["rgb_sha256"].as_str().expect("rgb_sha256").into(),
    }
}

/// vitrt's outcome and, when it refused, its message.
fn vitrt_outcome(path: &Path, name: &str) -> (Outcome, Option<String>) {
    let bytes = std::fs::read(path).expect("a readable corpus file");
    let limits = ImageLimits {
        max_pixels: MAX_IMAGE_PIXELS,
        ..ImageLimits::default()
    };
    match decode_image(&bytes, name, 3, false, &limits) {
        Ok(image) => (
            Outcome::Decoded {
                width: image.width as u64,
                height: image.height as u64,
                sha256: format!("{:x}", Sha256::digest(&image.pixels)),
            },
            None,
        ),
        Err(error) => (Outcome::Refused, Some(error.to_string())),
    }
}

#[test]
fn every_pil_test_image_gets_pils_verdict() {
    let dir = corpus_dir();
    if !dir.is_dir() {
        let message = format!(
            "the PIL corpus is not at {}: run `python3 scripts/fixtures/fetch_pil_corpus.py` \
             (or point VITRT_PIL_CORPUS at it)",
            dir.display()
        );
        if std::env::var("VITRT_PIL_CORPUS_OPTIONAL").as_deref() == Ok("1") {
            // Written to the process's stderr, which the test harness does not capture.
            let _ = writeln!(
                std::io::stderr(),
                "\n!!!! SKIPPED: {message}; VITRT_PIL_CORPUS_OPTIONAL=1 allows it\n"
            );
            return;
        }
        panic!("{message}");
    }
    // VITRT_PIL_VERDICTS checks another folder (VITRT_PIL_CORPUS) against its own record.
    match std::env::var_os("VITRT_PIL_VERDICTS") {
        Some(record) => check_corpus(&dir, Path::new(&record), true),
        None => check_corpus(
            &dir,
            &common::repo_root().join("tests/fixtures/pil_corpus/verdicts.json"),
            false,
        ),
    }
}

/// The image fuzzer's committed corpus (fuzz/corpus/image_decode): odd files the fuzzers
/// found, whatever their names.
#[test]
fn every_fuzz_corpus_image_gets_pils_verdict() {
    let root = common::repo_root();
    check_corpus(
        &root.join("fuzz/corpus/image_decode"),
        &root.join("tests/fixtures/pil_corpus/fuzz_image_decode.json"),
        true,
    );
}

/// Checks every file of `dir` against the verdicts recorded at `record_path`: the same files,
/// and each refused by both or decoded to the same pixels.
fn check_corpus(dir: &Path, record_path: &Path, every_file: bool) {
    let record = record_path.display();
    let text = std::fs::read_to_string(record_path).unwrap_or_else(|e| panic!("{record}: {e}"));
    let record_json: Value =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{record}: {e}"));
    let verdicts: BTreeMap<String, Value> = record_json["files"]
        .as_object()
        .expect("files")
        .iter()
        .map(|(name, verdict)| (name.clone(), verdict.clone()))
        .collect();
    let files = corpus_files(dir, every_file);
    let recorded: Vec<String> = verdicts.keys().cloned().collect();
    assert_eq!(
        files,
        recorded,
        "the files at {} are not those {record} was recorded for (Pillow {}): record them \
         with scripts/fixtures/record_pil_verdicts.py",
        dir.display(),
        record_json["pillow"]
    );

    let mut failures = Vec::new();
    for (name, verdict) in &verdicts {
        let (ours, message) = vitrt_outcome(&dir.join(name), name);
        let expected = match verdict.get("vitrt_differs") {
            Some(difference) => match difference["vitrt"].as_str() {
                Some("refused") => Outcome::Refused,
                other => panic!("{name}: vitrt_differs.vitrt is {other:?}"),
            },
            None => pil_outcome(verdict),
        };
        let said = match (&ours, &message) {
            (Outcome::Refused, Some(message)) => format!("refused: {message}"),
            (Outcome::Decoded { width, height, .. }, _) => format!("{width}x{height}"),
            (Outcome::Refused, None) => unreachable!(),
        };
        let agrees = ours == expected;
        println!("{} {name:50} {said}", if agrees { "ok  " } else { "FAIL" });
        if !agrees {
            let pil = verdict
                .get("refused")
                .map(|r| format!("refused: {r}"))
                .unwrap_or_else(|| format!("{} {:?}", verdict["mode"], verdict["size"]));
            failures.push(format!("{name}: vitrt {said}; PIL {pil}"));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} files differ from PIL's verdict:\n{}",
        failures.len(),
        verdicts.len(),
        failures.join("\n")
    );
}

/// The GPU decoding's host half on the same odd files: every file the coefficient reader
/// takes, the image kernels' CPU twins finish to exactly the host decoder's pixels (and the
/// host accepts it); and every file read as a scan for the device's entropy decoding, the
/// twins either mark for the host or finish to the host decoder's pixels. Everything else is
/// the host's to decode or refuse.
#[test]
fn the_device_paths_give_the_host_decoders_pixels_on_every_file_they_take() {
    use vitrt_model::preprocess::jpeg_coefficients::{read_jpeg, EntropyOn};
    let root = common::repo_root();
    let mut dirs = vec![(root.join("fuzz/corpus/image_decode"), true)];
    if corpus_dir().is_dir() {
        // Its absence fails every_pil_test_image_gets_pils_verdict.
        dirs.push((corpus_dir(), false));
    }
    let limits = ImageLimits {
        max_pixels: MAX_IMAGE_PIXELS,
        ..ImageLimits::default()
    };
    let (mut taken, mut scanned, mut marked, mut jpegs) = (0, 0, 0, 0);
    for (dir, every_file) in dirs {
        for name in corpus_files(&dir, every_file) {
            let bytes = std::fs::read(dir.join(&name)).expect("a readable corpus file");
            if bytes.starts_with(&[0xFF, 0xD8]) {
                jpegs += 1;
            }
            for entropy in [EntropyOn::Host, EntropyOn::Device] {
                let Ok(image) = read_jpeg(&bytes, &limits, entropy) else {
                    continue;
                };
                let twins = common::jpeg_corpus::twin_pixels(&image);
                if image.image.scan.is_some() {
                    scanned += 1;
                    if twins.is_err() {
                        marked += 1;
                        continue;
                    }
                } else if entropy == EntropyOn::Host {
                    taken += 1;
                }
                let host = decode_image(&bytes, &name, 3, false, &limits).unwrap_or_else(|e| {
                    panic!("{name}: taken by the {entropy:?} path, refused by the host: {e}")
                });
                assert_eq!(
                    (image.image.upright_size(), twins == Ok(host.pixels)),
                    ((host.height, host.width), true),
                    "{name}, entropy decoding on the {entropy:?}"
                );
            }
        }
    }
    eprintln!(
        "of {jpegs} JPEG files, the coefficient path took {taken}; {scanned} were read as \
         scans, {marked} of them marked for the host"
    );
    assert!(taken > 0 && scanned > 0);
}
