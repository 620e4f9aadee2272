//! Every committed fixture on the CPU backend, fused and unfused, against PyTorch's float64
//! reference: logits (or last_hidden_state) and every hidden state within 1e-5 relative error.

use std::path::{Path, PathBuf};
use vitrt_model::parity::compare;
use vitrt_model::{Runner, VitModel};
use vitrt_runtime::passes::Fusion;
use vitrt_runtime::{CpuBackend, HostTensor};

fn fixtures() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/models");
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(&root)
        .expect("tests/fixtures/models exists")
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("config.json").exists())
        .collect();
    dirs.sort();
    assert!(
        dirs.len() >= 8,
        "expected the eight committed fixtures, found {}",
        dirs.len()
    );
    dirs
}

fn reference(dir: &Path) -> Vec<HostTensor> {
    vitrt_weights::read_f32_tensors(&dir.join("reference.safetensors"))
        .unwrap()
        .into_iter()
        .map(|(name, shape, data)| HostTensor { name, shape, data })
        .collect()
}

fn check(dir: &Path, fusion: Fusion) {
    let name = dir.file_name().unwrap().to_string_lossy();
    let model = VitModel::load(dir).unwrap_or_else(|e| panic!("{name}: {e}"));
    let refs = reference(dir);
    let pixels = refs.iter().find(|t| t.name == "pixel_values").unwrap();
    let batch = pixels.shape[0];
    let wanted: Vec<HostTensor> = refs
        .iter()
        .filter(|t| {
            t.name == "logits"
                || t.name == "last_hidden_state"
                || t.name.starts_with("hidden_states.")
        })
        .cloned()
        .collect();
    let mut runner = Runner::new(model, Box::new(CpuBackend::new()), fusion);
    let ours = runner.run(&pixels.data, batch, true).unwrap();
    let rows = compare(&ours, &wanted).unwrap();
    assert_eq!(rows.len(), wanted.len());
    let worst = rows.iter().map(|r| r.relative_error).fold(0.0, f64::max);
    println!(
        "{name:28} {fusion:?}: worst relative error {worst:.2e} over {} tensors",
        rows.len()
    );
    for row in rows {
        assert!(
            row.relative_error < 1e-5,
            "{name} ({fusion:?}): {} relative error {:.3e} (max abs {:.3e})",
            row.name,
            row.relative_error,
            row.max_abs_error
        );
        assert_ne!(row.same_top1, Some(false), "{name}: top-1 differs");
    }
}

#[test]
fn every_fixture_matches_pytorch_fused() {
    for dir in fixtures() {
        check(&dir, Fusion::ALL);
    }
}

#[test]
fn every_fixture_matches_pytorch_unfused() {
    for dir in fixtures() {
        check(&dir, Fusion::NONE);
    }
}

#[test]
fn fused_and_unfused_graphs_differ_in_node_count() {
    let dir = &fixtures()[0];
    let model = VitModel::load(dir).unwrap();
    let opts = |fusion| vitrt_model::GraphOptions {
        hidden_states: false,
        fusion,
    };
    let fused = model.build_graph(2, opts(Fusion::ALL)).unwrap();
    let unfused = model.build_graph(2, opts(Fusion::NONE)).unwrap();
    let layers = model.config.num_hidden_layers;
    // Per layer: K and V projections, the activation and both residual adds disappear.
    assert_eq!(unfused.nodes.len() - fused.nodes.len(), 5 * layers);
}
