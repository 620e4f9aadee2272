//! Helpers shared by the model crate's integration tests. Each test file compiles this module
//! on its own and uses only part of it.
#![allow(dead_code)]

pub mod jpeg_corpus;
pub mod text;

use std::path::{Path, PathBuf};
use vitrt_runtime::HostTensor;

/// The repository root: where the tests were built, unless VITRT_REPO_ROOT points elsewhere
/// (scripts/gpu/gpu-check.sh runs the executables from a copy of the repository on the GPU
/// machine).
pub fn repo_root() -> PathBuf {
    std::env::var_os("VITRT_REPO_ROOT")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join(".."))
}

/// A model of tests/fixtures/models.
pub fn fixture(name: &str) -> PathBuf {
    repo_root().join("tests/fixtures/models").join(name)
}

/// Each output's values as bits, for bitwise comparisons.
pub fn bits(outputs: &[HostTensor]) -> Vec<(String, Vec<u32>)> {
    outputs
        .iter()
        .map(|t| (t.name.clone(), t.data.iter().map(|v| v.to_bits()).collect()))
        .collect()
}

/// `len` values in [-1, 1) from a small LCG seeded by `seed`: different data every pass, so a
/// replay reading stale inputs shows.
pub fn pixels(len: usize, seed: u64) -> Vec<f32> {
    let mut state = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
    (0..len)
        .map(|_| {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            ((state >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}
