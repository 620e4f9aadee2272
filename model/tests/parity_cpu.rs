//! Every committed fixture (ViT and the other families) on the CPU backend, fused and unfused,
//! against PyTorch's float64 reference: every output (logits, or last_hidden_state,
//! pooler_output, image_embeds) and every hidden state within 1e-5 relative error.

use std::path::{Path, PathBuf};
use vitrt_model::parity::compare;
use vitrt_model::{Runner, VisionModel};
use vitrt_runtime::passes::{AttentionFusion, Fusion};
use vitrt_runtime::{CpuBackend, DType, HostTensor, Op};

fn fixtures() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/models");
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(&root)
        .expect("tests/fixtures/models exists")
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("config.json").exists() || p.join("open_clip_config.json").exists())
        .collect();
    dirs.sort();
    assert!(
        dirs.len() >= 18,
        "expected the eight ViT and ten family fixtures, found {}",
        dirs.len()
    );
    dirs
}

/// The first fixture in name order that is not AIMv2's (whose SwiGLU MLP has no activation
/// for a matmul to take in): the node counts below are a plain MLP's.
fn first_fixture_with_a_plain_mlp() -> PathBuf {
    fixtures()
        .into_iter()
        .find(|d| {
            !d.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("aimv2")
        })
        .unwrap()
}

fn reference(dir: &Path) -> Vec<HostTensor> {
    vitrt_weights::read_f32_tensors(&dir.join("reference.safetensors"))
        .unwrap()
        .into_iter()
        .map(|(name, shape, data)| HostTensor { name, shape, data })
        .collect()
}

/// The fixture's model at its input's size (which may differ from its config's: positions
/// are resampled), outputting what the reference holds.
fn load_at_input_size(dir: &Path, pixels: &HostTensor) -> VisionModel {
    let name = dir.file_name().unwrap().to_string_lossy();
    VisionModel::load(dir)
        .and_then(|m| m.with_input_size((pixels.shape[2], pixels.shape[3])))
        .unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn check(dir: &Path, fusion: Fusion) {
    let name = dir.file_name().unwrap().to_string_lossy();
    let refs = reference(dir);
    let pixels = refs.iter().find(|t| t.name == "pixel_values").unwrap();
    let batch = pixels.shape[0];
    let model = load_at_input_size(dir, pixels);
    let outputs = model.model_outputs();
    let wanted: Vec<HostTensor> = refs
        .iter()
        .filter(|t| {
            outputs.iter().any(|o| o.name() == t.name) || t.name.starts_with("hidden_states.")
        })
        .cloned()
        .collect();
    assert_eq!(
        wanted.len() + 1,
        refs.len(),
        "{name}: every reference tensor is one vitrt computes"
    );
    let mut runner = Runner::new(model, Box::new(CpuBackend::new()), fusion).with_outputs(outputs);
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
    // A plain MLP's activation fuses into its matmul (a SwiGLU gate does not): CLIP's.
    let dir = &first_fixture_with_a_plain_mlp();
    let model = VisionModel::load(dir).unwrap();
    let opts = |fusion| vitrt_model::GraphOptions {
        hidden_states: false,
        fusion,
        ..Default::default()
    };
    let fused = model.build_graph(2, opts(Fusion::ALL)).unwrap();
    let unfused = model.build_graph(2, opts(Fusion::NONE)).unwrap();
    let layers = model.config.num_hidden_layers;
    // Per layer: K and V projections, the activation and both residual adds disappear, and
    // scores, softmax and context become one node.
    assert_eq!(unfused.nodes.len() - fused.nodes.len(), 7 * layers);
    let attention_nodes = |g: &vitrt_runtime::Graph| {
        g.nodes
            .iter()
            .filter(|n| matches!(n.op, Op::Attention { .. }))
            .count()
    };
    assert_eq!(attention_nodes(&fused), layers);
    assert_eq!(attention_nodes(&unfused), 0);
}

/// Fusion::ALL with attention left as three nodes.
fn attention_unfused() -> Fusion {
    Fusion {
        attention: AttentionFusion::Off,
        ..Fusion::ALL
    }
}

#[test]
fn fused_attention_computes_what_scores_softmax_context_compute() {
    // On the CPU in f32 the two differ only in summation order (and exp2 for exp): every
    // output and hidden state of every fixture within 1e-5 of the largest value.
    for dir in fixtures() {
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        let refs = reference(&dir);
        let pixels = refs.iter().find(|t| t.name == "pixel_values").unwrap();
        let run = |fusion| {
            let model = load_at_input_size(&dir, pixels);
            let outputs = model.model_outputs();
            let mut runner =
                Runner::new(model, Box::new(CpuBackend::new()), fusion).with_outputs(outputs);
            runner.run(&pixels.data, pixels.shape[0], true).unwrap()
        };
        let (fused, unfused) = (run(Fusion::ALL), run(attention_unfused()));
        assert_eq!(fused.len(), unfused.len());
        for (a, b) in fused.iter().zip(&unfused) {
            assert_eq!((&a.name, &a.shape), (&b.name, &b.shape));
            let largest = b.data.iter().fold(0.0f32, |m, x| m.max(x.abs()));
            let worst = a
                .data
                .iter()
                .zip(&b.data)
                .fold(0.0f32, |m, (x, y)| m.max((x - y).abs()));
            assert!(
                worst <= 1e-5 * largest,
                "{name}: {} differs by {worst:.3e} (largest {largest:.3e})",
                a.name
            );
        }
    }
}

#[test]
fn fused_attention_is_an_option_of_its_own() {
    // --fusion all --attention unfused: every other fusion, attention in three nodes; and
    // --fusion none --attention fused: only attention fused, reading Q, K and V from the
    // three projections' outputs.
    let dir = &first_fixture_with_a_plain_mlp();
    let model = VisionModel::load(dir).unwrap();
    let layers = model.config.num_hidden_layers;
    let graph = |fusion| {
        let options = vitrt_model::GraphOptions {
            hidden_states: false,
            fusion,
            ..Default::default()
        };
        model.build_graph(2, options).unwrap()
    };
    let count = |g: &vitrt_runtime::Graph, kind: &str| {
        g.nodes.iter().filter(|n| n.op.kind_name() == kind).count()
    };
    let three_nodes = graph(attention_unfused());
    assert_eq!(count(&three_nodes, "attention"), 0);
    assert_eq!(count(&three_nodes, "softmax"), layers);
    let only_attention = graph(Fusion {
        attention: AttentionFusion::Required,
        ..Fusion::NONE
    });
    assert_eq!(count(&only_attention, "attention"), layers);
    assert_eq!(count(&only_attention, "softmax"), 0);
    // Q, K and V still come from three linear layers.
    assert_eq!(
        count(&only_attention, "linear"),
        3 * layers + count(&three_nodes, "linear") - layers
    );
}

/// The worst relative error per tensor of a fixture run on the CPU emulating `dtype` storage
/// (f32 arithmetic, every stored value rounded as the GPU stores it).
fn emulated_errors(dir: &Path, dtype: DType, residual: DType) -> Vec<(String, f64)> {
    let refs = reference(dir);
    let pixels = refs.iter().find(|t| t.name == "pixel_values").unwrap();
    let model = load_at_input_size(dir, pixels);
    let outputs = model.model_outputs();
    let wanted: Vec<HostTensor> = refs
        .iter()
        .filter(|t| t.name != "pixel_values")
        .cloned()
        .collect();
    let backend = CpuBackend::emulating(dtype);
    let mut runner = Runner::new(model, Box::new(backend), Fusion::ALL)
        .with_outputs(outputs)
        .with_residual(residual)
        .unwrap();
    let ours = runner.run(&pixels.data, pixels.shape[0], true).unwrap();
    let rows = compare(&ours, &wanted).unwrap();
    for row in &rows {
        assert_ne!(row.same_top1, Some(false), "{}: top-1 differs", row.name);
    }
    rows.into_iter()
        .map(|r| (r.name, r.relative_error))
        .collect()
}

#[test]
fn emulated_f16_runs_match_pytorch_within_the_half_precision_tolerance() {
    // The GPU's f16 figures (H200, 2026-11-22) sit within 1e-3 of these emulated ones. Both
    // residual streams: f16 (the default for f16 runs, as PyTorch stores it) and f32.
    for dir in fixtures() {
        for residual in [DType::F16, DType::F32] {
            for (name, error) in emulated_errors(&dir, DType::F16, residual) {
                assert!(
                    error < 1e-2,
                    "{} ({residual} stream): {name} {error:.3e}",
                    dir.display()
                );
            }
        }
    }
}

#[test]
fn an_f32_residual_stream_cuts_the_bf16_hidden_state_error() {
    // headdim80-silu-1ch has the largest bf16 error of the fixtures. Measured: 3.6e-3 with the
    // stream in f32, 5.7e-3 in bf16 (ViT-B/16's twelve blocks: 5.6e-3 against 1.37e-2).
    let dir = fixtures()
        .into_iter()
        .find(|d| d.ends_with("headdim80-silu-1ch"))
        .unwrap();
    let worst_hidden = |residual| {
        emulated_errors(&dir, DType::BF16, residual)
            .into_iter()
            .filter(|(name, _)| name.starts_with("hidden_states."))
            .map(|(_, e)| e)
            .fold(0.0, f64::max)
    };
    let (f32_stream, bf16_stream) = (worst_hidden(DType::F32), worst_hidden(DType::BF16));
    println!("bf16 hidden states: f32 stream {f32_stream:.3e}, bf16 stream {bf16_stream:.3e}");
    assert!(
        f32_stream < 0.75 * bf16_stream,
        "f32 stream {f32_stream:.3e}, bf16 stream {bf16_stream:.3e}"
    );
}

#[test]
fn heads_padded_for_the_fused_kernel_compute_what_the_model_computes() {
    // SigLIP's fixture has head dim 12; a backend whose fused attention takes multiples of 16
    // only gets heads padded to 16 with zeros. On the CPU, with such a backend's answer
    // imposed, the padded graph must match PyTorch as closely as the plain one.
    let dir =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/models/siglip-vision-head");
    let refs = reference(&dir);
    let pixels = refs.iter().find(|t| t.name == "pixel_values").unwrap();
    let model = load_at_input_size(&dir, pixels);
    let outputs = model.model_outputs();
    let multiples_of_16 = |op: &Op, _: &[&[usize]]| match op {
        Op::Attention { head_dim, .. } if head_dim % 16 != 0 => Err("head dim".to_string()),
        _ => Ok(()),
    };
    let batch = pixels.shape[0];
    assert_eq!(
        model.padded_head_dim(batch, Fusion::ALL, &multiples_of_16),
        Some(16)
    );
    assert_eq!(
        model.padded_head_dim(batch, attention_unfused(), &multiples_of_16),
        None
    );
    let options = vitrt_model::GraphOptions {
        hidden_states: true,
        fusion: Fusion::ALL,
        outputs,
    };
    let graph = model
        .build_graph_for(batch, options, &multiples_of_16)
        .unwrap();
    let fused: Vec<_> = graph
        .nodes
        .iter()
        .filter_map(|n| match n.op {
            Op::Attention { head_dim, .. } => Some(head_dim),
            _ => None,
        })
        .collect();
    assert_eq!(
        fused,
        vec![16; model.config.num_hidden_layers],
        "every block fused at 16"
    );
    let mut backend = CpuBackend::new();
    let precision = vitrt_runtime::Precision::default_for(DType::F32);
    let executor = vitrt_runtime::Executor::new(graph, &mut backend, &model, precision).unwrap();
    let ours = executor
        .run(&mut backend, &[("pixel_values", &pixels.data)])
        .unwrap();
    let wanted: Vec<HostTensor> = refs
        .into_iter()
        .filter(|t| t.name != "pixel_values")
        .collect();
    let rows = compare(&ours, &wanted).unwrap();
    assert_eq!(rows.len(), wanted.len());
    for row in rows {
        assert!(
            row.relative_error < 1e-5,
            "{}: relative error {:.3e}",
            row.name,
            row.relative_error
        );
    }
}

/// AIMv2's learned position table is added as it is (transformers never resamples it): another
/// input size is refused by name. The native checkpoint's sin-cos table is made for any grid,
/// and the head-less one has no pooler.
#[test]
fn aimv2_positions_are_learned_for_one_size_or_computed_for_any() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/models");
    let learned = VisionModel::load(&root.join("aimv2-vision-head")).unwrap();
    assert!(learned.with_input_size((28, 28)).is_ok());
    let learned = VisionModel::load(&root.join("aimv2-vision-head")).unwrap();
    let err = learned.with_input_size((35, 21)).err().expect("refused");
    assert!(
        err.to_string()
            .contains("transformers does not resample it"),
        "{err}"
    );
    let native = VisionModel::load(&root.join("aimv2-native-biases")).unwrap();
    let native = native.with_input_size((42, 14)).unwrap();
    assert_eq!(native.tokens(), 6 * 2);
    assert!(!native
        .available_outputs()
        .contains(vitrt_model::Output::PoolerOutput));
}

/// The runner folds the block layernorms of a graph of one image (f16 with an f16 stream),
/// and the folded graph gives what the unfolded one gives, to f16's rounding; once a larger
/// batch's executor exists it no longer folds (a last batch of one image would upload a second
/// copy of the weights).
#[test]
fn the_runner_folds_layernorms_for_one_image_only() {
    let dir = root_fixture("tiny-gelu");
    let folded_nodes = |runner: &Runner, batch| {
        runner
            .executor(batch, false)
            .unwrap()
            .graph()
            .nodes
            .iter()
            .filter(|n| matches!(n.op, Op::LayerNormLinear { .. }))
            .count()
    };
    let runner = |batch_first: Option<usize>| {
        let model = VisionModel::load(&dir).unwrap();
        let backend = CpuBackend::emulating(DType::F16);
        let mut r = Runner::new(model, Box::new(backend), Fusion::ALL);
        if let Some(b) = batch_first {
            r.prepare(b, false).unwrap();
        }
        r.prepare(1, false).unwrap();
        r
    };
    let fresh = runner(None);
    assert!(
        folded_nodes(&fresh, 1) > 0,
        "a first graph of one image is folded"
    );
    let after_batch = runner(Some(3));
    assert_eq!(folded_nodes(&after_batch, 3), 0);
    assert_eq!(folded_nodes(&after_batch, 1), 0);
    // The folded and unfolded graphs of one image compute the same logits.
    let size = fresh.model.input_size();
    let pixels: Vec<f32> = (0..3 * size.0 * size.1)
        .map(|i| ((i * 37 % 101) as f32 / 50.0) - 1.0)
        .collect();
    let run = |mut r: Runner| r.run(&pixels, 1, false).unwrap().remove(0).data;
    let (a, b) = (run(fresh), run(after_batch));
    let scale = b.iter().fold(0f32, |m, v| m.max(v.abs()));
    for (x, y) in a.iter().zip(&b) {
        assert!((x - y).abs() <= 4e-3 * scale.max(1.0), "{a:?}\n{b:?}");
    }
}

fn root_fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/models")
        .join(name)
}
