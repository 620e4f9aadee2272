//! The fuzz targets' checks (`fuzz/checks.rs`) on the stable toolchain: every committed corpus
//! file of each target, then pseudo-random mutations of them, each of which must come back
//! (as `Ok` or `Err`, never a panic) within a time limit. The real fuzzers are in `fuzz/`
//! (`cargo +nightly fuzz run <target>`); what they find is committed to the corpus and replayed
//! here.

#[path = "../../fuzz/checks.rs"]
mod checks;
mod common;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

/// Mutated inputs per target.
const MUTATIONS_PER_TARGET: usize = 5000;
/// The most one input may take, in a debug build on a slow machine.
const TIME_LIMIT_PER_INPUT: Duration = Duration::from_secs(2);
/// Mutated inputs are kept to this size, as the fuzzers' `-max_len` would.
const MAX_INPUT_LEN: usize = 64 << 10;

fn corpus_files(target: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let dir = common::repo_root().join("fuzz/corpus").join(target);
    let mut paths: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()))
        .map(|entry| entry.expect("a corpus entry").path())
        .filter(|path| path.is_file())
        .collect();
    paths.sort();
    assert!(!paths.is_empty(), "{} holds no inputs", dir.display());
    paths
        .into_iter()
        .map(|path| {
            let bytes = std::fs::read(&path).expect("a readable corpus file");
            (path, bytes)
        })
        .collect()
}

/// One random edit of `input`: bit flips, interesting bytes, truncation, insertion,
/// duplication of a range, or splicing with another seed; sometimes several at once.
fn mutate(rng: &mut SmallRng, input: &[u8], seeds: &[(PathBuf, Vec<u8>)]) -> Vec<u8> {
    let mut out = input.to_vec();
    let edits = 1 + rng.random_range(0..4);
    for _ in 0..edits {
        let len = out.len();
        match rng.random_range(0..8) {
            0 | 1 if len > 0 => {
                let i = rng.random_range(0..len);
                out[i] ^= 1 << rng.random_range(0..8);
            }
            2 if len > 0 => {
                const INTERESTING: [u8; 10] =
                    [0, 1, 0x7f, 0x80, 0xff, b'"', b'{', b'[', b'-', b'9'];
                let i = rng.random_range(0..len);
                out[i] = INTERESTING[rng.random_range(0..INTERESTING.len())];
            }
            3 => out.truncate(rng.random_range(0..=len)),
            4 => {
                let at = rng.random_range(0..=len);
                let count = rng.random_range(1..16);
                let bytes: Vec<u8> = (0..count).map(|_| rng.random()).collect();
                out.splice(at..at, bytes);
            }
            5 if len > 0 => {
                let start = rng.random_range(0..len);
                let end = rng.random_range(start..=len.min(start + 256));
                let copy = out[start..end].to_vec();
                let at = rng.random_range(0..=len);
                out.splice(at..at, copy);
            }
            6 => {
                let other = &seeds[rng.random_range(0..seeds.len())].1;
                let cut = rng.random_range(0..=len);
                let from = rng.random_range(0..=other.len());
                out.truncate(cut);
                out.extend_from_slice(&other[from..]);
            }
            _ if len >= 8 => {
                // An 8-byte little-endian number: the safetensors header length, or any
                // other length field, made extreme.
                let i = rng.random_range(0..=len - 8);
                let value: u64 = match rng.random_range(0..3) {
                    0 => u64::MAX >> rng.random_range(0..64),
                    1 => rng.random(),
                    _ => rng.random_range(0..1 << 16),
                };
                out[i..i + 8].copy_from_slice(&value.to_le_bytes());
            }
            _ => out.push(rng.random()),
        }
    }
    out.truncate(MAX_INPUT_LEN);
    out
}

/// Runs one input, failing with its description if it panics or takes too long.
fn run_one(target: &str, what: &str, input: &[u8], slowest: &mut (Duration, String)) {
    let start = Instant::now();
    let outcome = catch_unwind(AssertUnwindSafe(|| checks::check(target, input)));
    let elapsed = start.elapsed();
    if outcome.is_err() {
        let path = std::env::temp_dir().join(format!("vitrt-fuzz-{target}-failure"));
        let _ = std::fs::write(&path, input);
        panic!(
            "{target}: {what} panicked; its {} bytes are in {}",
            input.len(),
            path.display()
        );
    }
    assert!(
        elapsed < TIME_LIMIT_PER_INPUT,
        "{target}: {what} took {elapsed:?} (limit {TIME_LIMIT_PER_INPUT:?})"
    );
    if elapsed > slowest.0 {
        *slowest = (elapsed, what.to_string());
    }
}

fn replay(target: &str, seed: u64) {
    let start = Instant::now();
    let seeds = corpus_files(target);
    let mut slowest = (Duration::ZERO, String::new());
    for (path, bytes) in &seeds {
        run_one(target, &path.display().to_string(), bytes, &mut slowest);
    }
    let mut rng = SmallRng::seed_from_u64(seed);
    for round in 0..MUTATIONS_PER_TARGET {
        let (path, bytes) = &seeds[rng.random_range(0..seeds.len())];
        let input = mutate(&mut rng, bytes, &seeds);
        let what = format!("mutation {round} (rng seed {seed}) of {}", path.display());
        run_one(target, &what, &input, &mut slowest);
    }
    eprintln!(
        "{target}: {} corpus files and {MUTATIONS_PER_TARGET} mutations in {:?}; slowest {:?} ({})",
        seeds.len(),
        start.elapsed(),
        slowest.0,
        slowest.1
    );
}

#[test]
fn every_target_has_a_corpus() {
    for target in checks::TARGETS {
        assert!(!corpus_files(target).is_empty());
    }
}

#[test]
fn safetensors_header_survives_corpus_and_mutations() {
    replay("safetensors_header", 0x5afe);
}

#[test]
fn vit_config_survives_corpus_and_mutations() {
    replay("vit_config", 0xc0f1);
}

#[test]
fn preprocessor_config_survives_corpus_and_mutations() {
    replay("preprocessor_config", 0x9e9e);
}

#[test]
fn image_decode_survives_corpus_and_mutations() {
    replay("image_decode", 0x1a6e);
}

#[test]
fn sharded_index_survives_corpus_and_mutations() {
    replay("sharded_index", 0x1dec);
}

#[test]
fn labels_file_survives_corpus_and_mutations() {
    replay("labels_file", 0x1abe);
}
