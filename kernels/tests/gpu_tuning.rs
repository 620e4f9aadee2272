//! The matmul autotuner on the GPU: tuning a small problem times every candidate, stores the
//! best in the tuning file, and a later launch of the same problem, on a fresh Gpu reading
//! that file, runs on the stored tile and still matches the CPU twin. Also: a stored tile
//! that is not the heuristic's is obeyed, and one of another source hash is not.
//!
//! Run on a GPU machine: `cargo test --release -p vitrt-kernels --test gpu_tuning --
//! --ignored --test-threads=1`.

mod common;

use common::matmul::Uploaded;
use common::new_gpu;
use std::path::PathBuf;
use vitrt_kernels::cuda::Gpu;
use vitrt_kernels::matmul::cpu::{self, MatmulTiles};
use vitrt_kernels::matmul::{
    self, matmul_candidates, MatmulCase, MatmulStorage, MatmulTile, TileSource, TuneSettings,
    TunedChoice, TuningKey, TuningTable,
};
use vitrt_kernels::{DType, Epilogue, MatmulProblem};

fn scratch_file(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("vitrt-gpu-tuning-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir.join("tuning.json")
}

const DTYPE: DType = DType::F16;
const STORAGE: MatmulStorage = MatmulStorage {
    output: DType::F16,
    residual: None,
};

/// A batch-1 ViT projection-like problem, small enough to tune in a moment.
fn problem() -> MatmulProblem {
    MatmulProblem::linear(
        197,
        384,
        256,
        Epilogue {
            bias: true,
            ..Epilogue::NONE
        },
    )
}

fn values(n: usize, seed: u32, scale: f32) -> Vec<f32> {
    (0..n)
        .map(|i| {
            let x = (i as u32).wrapping_mul(2_654_435_761).wrapping_add(seed) >> 8;
            DTYPE.round((x as f32 / (1u32 << 24) as f32 * 2.0 - 1.0) * scale)
        })
        .collect()
}

/// `data` in `DTYPE` on the device, at the start of its buffer.
fn upload(gpu: &Gpu, data: &[f32]) -> Uploaded {
    common::matmul::upload(gpu, DTYPE, data, 0)
}

/// Runs `problem()` through `matmul::gpu::matmul` (the tuned-or-heuristic path), or on `forced`
/// through `matmul_with_tile`, and returns the largest error against the CPU twin, relative to
/// the output's largest magnitude.
fn matmul_against_twin(gpu: &Gpu, forced: Option<MatmulTile>) -> f64 {
    let p = problem();
    let (a, b, bias) = (
        values(p.m * p.k, 1, 1.0),
        values(p.n * p.k, 2, 1.0 / 16.0),
        values(p.n, 3, 1.0),
    );
    let (da, db, dbias) = (upload(gpu, &a), upload(gpu, &b), upload(gpu, &bias));
    let c = upload(gpu, &vec![0.0; p.m * p.n]);
    match forced {
        None => matmul::gpu::matmul(
            gpu,
            DTYPE,
            &p,
            da.view,
            db.view,
            Some(dbias.view),
            None,
            c.view,
        ),
        Some(tile) => matmul::gpu::matmul_with_tile(
            gpu,
            DTYPE,
            &p,
            tile,
            da.view,
            db.view,
            Some(dbias.view),
            None,
            c.view,
        ),
    }
    .unwrap();
    let mut bytes = vec![0u8; p.m * p.n * DTYPE.size_bytes()];
    gpu.download(&c._buffer, 0, &mut bytes).unwrap();
    let ours = DTYPE.decode(&bytes);
    let mut twin = vec![0.0f32; p.m * p.n];
    cpu::matmul(
        &p,
        MatmulTiles::default(),
        &a,
        &b,
        Some(&bias),
        None,
        &mut twin,
    );
    let twin: Vec<f32> = twin.into_iter().map(|x| DTYPE.round(x)).collect();
    let scale = twin.iter().fold(1e-6f64, |m, &x| m.max(x.abs() as f64));
    ours.iter()
        .zip(&twin)
        .map(|(&o, &t)| (o as f64 - t as f64).abs() / scale)
        .fold(0.0, f64::max)
}

/// The name of the one matmul kernel `gpu` has loaded.
fn loaded_matmul_kernel(gpu: &Gpu) -> String {
    let names: Vec<String> = gpu
        .loaded_kernels()
        .into_iter()
        .map(|k| k.name)
        .filter(|n| n.starts_with("matmul_"))
        .collect();
    assert_eq!(names.len(), 1, "one matmul kernel loaded: {names:?}");
    names[0].clone()
}

/// The kernel `problem()` runs on when `tile` is forced, on a Gpu of its own: what a launch that
/// obeys a stored `tile` must load. (Instantiation names spell each program's parameters in its
/// own way, so the name is asked of a launch rather than spelled here.)
fn kernel_of_tile(tile: MatmulTile) -> String {
    let gpu = new_gpu();
    matmul_against_twin(&gpu, Some(tile));
    loaded_matmul_kernel(&gpu)
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn tuning_stores_the_best_tile_and_later_launches_use_it() {
    let path = scratch_file("store");
    let tuner = new_gpu();
    assert_eq!(matmul::use_tuning_file(&tuner, &path), None);
    let case = MatmulCase {
        dtype: DTYPE,
        problem: problem(),
        storage: STORAGE,
    };
    let tuning = matmul::tune_matmul(&tuner, &case, TuneSettings { warmup: 2, reps: 7 }).unwrap();
    let candidates = matmul_candidates(&tuner, DTYPE);
    assert_eq!(
        tuning.times.len(),
        candidates.len(),
        "every candidate timed"
    );
    assert!(tuning
        .times
        .iter()
        .all(|t| t.median_ms.is_finite() && t.median_ms > 0.0));
    assert!(tuning.best_ms <= tuning.heuristic_ms);
    println!(
        "heuristic {} {:.4} ms, best {} {:.4} ms",
        tuning.heuristic.name(),
        tuning.heuristic_ms,
        tuning.best.name(),
        tuning.best_ms
    );
    assert_eq!(matmul::store_matmul_tuning(&tuner, &tuning).unwrap(), path);

    let (table, problem_message) = TuningTable::load(&path);
    assert_eq!(problem_message, None);
    let stored = table.lookup(&tuning.key, &tuning.source_hash).unwrap();
    assert_eq!(stored.choice, tuning.best.name());

    // The tuning Gpu uses it at once; a fresh one reading the file does too.
    assert_eq!(
        matmul::matmul_choice(&tuner, DTYPE, &problem(), STORAGE).unwrap(),
        (tuning.best, TileSource::Tuned)
    );
    let later = new_gpu();
    assert_eq!(matmul::use_tuning_file(&later, &path), None);
    assert_eq!(
        matmul::matmul_choice(&later, DTYPE, &problem(), STORAGE).unwrap(),
        (tuning.best, TileSource::Tuned)
    );
    let error = matmul_against_twin(&later, None);
    assert!(
        error < 2e-3,
        "tuned matmul differs from the twin: {error:.3e}"
    );
    assert_eq!(
        loaded_matmul_kernel(&later),
        kernel_of_tile(tuning.best),
        "the launch is not on the tuned {}",
        tuning.best.name()
    );
    let _ = std::fs::remove_dir_all(path.parent().unwrap());
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_stored_tile_other_than_the_heuristics_is_obeyed_and_a_stale_one_is_not() {
    let path = scratch_file("forced");
    let probe = new_gpu();
    let candidates = matmul_candidates(&probe, DTYPE);
    let heuristic = matmul::matmul_tile_for(&probe, DTYPE, &problem()).unwrap();
    let other = *candidates
        .iter()
        .find(|&&t| t != heuristic)
        .expect("at least two f16 candidates");
    let key = TuningKey::matmul(
        &problem(),
        DTYPE,
        STORAGE,
        probe.compute_capability(),
        probe.name(),
    );
    let hash = matmul::matmul_source_hash(&candidates);
    let choice = |tile: MatmulTile| TunedChoice {
        choice: tile.name(),
        median_ms: 0.01,
    };

    let mut table = TuningTable::empty(Some(path.clone()));
    table.insert(key.clone(), &hash, choice(other));
    table.save().unwrap();
    let forced = new_gpu();
    assert_eq!(matmul::use_tuning_file(&forced, &path), None);
    assert_eq!(
        matmul::matmul_choice(&forced, DTYPE, &problem(), STORAGE).unwrap(),
        (other, TileSource::Tuned)
    );
    let error = matmul_against_twin(&forced, None);
    assert!(
        error < 2e-3,
        "{} differs from the twin: {error:.3e}",
        other.name()
    );
    assert_eq!(
        loaded_matmul_kernel(&forced),
        kernel_of_tile(other),
        "the launch is not on the stored {}",
        other.name()
    );

    // The same entry under another source hash is ignored: the heuristic decides. (A file of
    // its own: saves merge into a file, and the entry above would still be there.)
    let stale_path = scratch_file("stale");
    let mut stale = TuningTable::empty(Some(stale_path.clone()));
    stale.insert(key, "0123456789abcdef0123456789abcdef", choice(other));
    stale.save().unwrap();
    let fresh = new_gpu();
    assert_eq!(matmul::use_tuning_file(&fresh, &stale_path), None);
    assert_eq!(
        matmul::matmul_choice(&fresh, DTYPE, &problem(), STORAGE).unwrap(),
        (heuristic, TileSource::Heuristic)
    );
    let _ = std::fs::remove_dir_all(path.parent().unwrap());
    let _ = std::fs::remove_dir_all(stale_path.parent().unwrap());
}
