//! SigLIP 2 NaFlex on the CPU backend against transformers' float64 reference
//! (tests/fixtures/naflex/siglip2-naflex, made by scripts/fixtures/make_naflex_fixture.py):
//! four images of different aspect ratios in one batch, so their sequence lengths differ
//! (24, 20, 16 and 21 of 24 patches). The position embeddings resized per image, every hidden
//! state, last_hidden_state and the masked pooling head's pooler_output, fused and unfused.

use std::path::{Path, PathBuf};
use vitrt_model::naflex::{NaflexInputs, NaflexVisionModel, OUTPUTS};
use vitrt_model::parity::compare;
use vitrt_runtime::passes::Fusion;
use vitrt_runtime::{CpuBackend, DType, Executor, HostTensor, Precision};

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/naflex/siglip2-naflex")
}

fn reference() -> Vec<HostTensor> {
    vitrt_weights::read_f32_tensors(&fixture().join("reference.safetensors"))
        .unwrap()
        .into_iter()
        .map(|(name, shape, data)| HostTensor { name, shape, data })
        .collect()
}

fn tensor<'a>(refs: &'a [HostTensor], name: &str) -> &'a HostTensor {
    refs.iter().find(|t| t.name == name).unwrap()
}

fn inputs(model: &NaflexVisionModel, refs: &[HostTensor]) -> NaflexInputs {
    let shapes: Vec<(usize, usize)> = tensor(refs, "spatial_shapes")
        .data
        .chunks(2)
        .map(|s| (s[0] as usize, s[1] as usize))
        .collect();
    NaflexInputs::new(
        model,
        tensor(refs, "pixel_values").data.clone(),
        &tensor(refs, "pixel_attention_mask").data,
        &shapes,
    )
    .unwrap()
}

fn relative_error(ours: &[f32], want: &[f32]) -> f64 {
    let scale = want.iter().map(|v| v.abs() as f64).fold(0.0, f64::max);
    let worst = ours
        .iter()
        .zip(want)
        .map(|(a, b)| (*a as f64 - *b as f64).abs())
        .fold(0.0, f64::max);
    worst / scale.max(1e-30)
}

#[test]
fn positions_are_resized_per_image_as_transformers_resizes_them() {
    let model = NaflexVisionModel::load(&fixture()).unwrap();
    let refs = reference();
    let batch = inputs(&model, &refs);
    assert_eq!(batch.key_padding.lengths(), [24, 20, 16, 21]);
    let want = tensor(&refs, "positions");
    let error = relative_error(&batch.positions, &want.data);
    println!("positions: relative error {error:.2e}");
    assert!(error < 1e-6, "positions: relative error {error:.3e}");
}

fn check(fusion: Fusion) {
    let model = NaflexVisionModel::load(&fixture()).unwrap();
    let refs = reference();
    let batch = inputs(&model, &refs);
    let graph = model
        .build_graph(
            batch.batch,
            batch.max_patches,
            &OUTPUTS,
            true,
            fusion,
            &|_, _| Ok(()),
        )
        .unwrap();
    let mut cpu = CpuBackend::new();
    let executor = Executor::new(graph, &mut cpu, &model, Precision::uniform(DType::F32)).unwrap();
    let named = batch.named();
    let feeds: Vec<(&str, &[f32])> = named.iter().map(|(n, v)| (*n, v.as_slice())).collect();
    let ours = executor.run(&mut cpu, &feeds).unwrap();
    let wanted: Vec<HostTensor> = refs
        .iter()
        .filter(|t| OUTPUTS.contains(&t.name.as_str()) || t.name.starts_with("hidden_states."))
        .cloned()
        .collect();
    assert_eq!(
        wanted.len(),
        2 + 3,
        "last_hidden_state, pooler_output, three hidden states"
    );
    let rows = compare(&ours, &wanted).unwrap();
    for row in rows {
        println!(
            "{fusion:?} {:20} relative error {:.2e}",
            row.name, row.relative_error
        );
        assert!(
            row.relative_error < 1e-5,
            "{fusion:?}: {} relative error {:.3e} (max abs {:.3e})",
            row.name,
            row.relative_error,
            row.max_abs_error
        );
    }
}

#[test]
fn every_output_matches_transformers_fused() {
    check(Fusion::ALL);
}

#[test]
fn every_output_matches_transformers_unfused() {
    check(Fusion::NONE);
}

#[test]
fn a_mask_that_disagrees_with_the_spatial_shapes_is_refused() {
    let model = NaflexVisionModel::load(&fixture()).unwrap();
    let refs = reference();
    let mut shapes = vec![(3, 8), (10, 2), (4, 4), (7, 3)];
    shapes[1] = (5, 3);
    let error = NaflexInputs::new(
        &model,
        tensor(&refs, "pixel_values").data.clone(),
        &tensor(&refs, "pixel_attention_mask").data,
        &shapes,
    )
    .err()
    .expect("a mismatch is an error");
    assert!(error.to_string().contains("image 1"), "{error}");
}

/// The same batch on the GPU in every dtype, fused (the masked fused attention kernel,
/// `attention_with_key_lengths`) and unfused (the additive mask through the scores matmul's
/// residual epilogue, then the softmax), within `parity::tolerance`.
#[test]
#[ignore = "needs a CUDA GPU"]
fn every_output_matches_transformers_on_the_gpu() {
    use vitrt_runtime::backend::cuda::CudaBackend;
    use vitrt_runtime::Backend;
    let model = NaflexVisionModel::load(&fixture()).unwrap();
    let refs = reference();
    let batch = inputs(&model, &refs);
    let wanted: Vec<HostTensor> = refs
        .iter()
        .filter(|t| OUTPUTS.contains(&t.name.as_str()) || t.name.starts_with("hidden_states."))
        .cloned()
        .collect();
    let mut failures = Vec::new();
    for dtype in DType::ALL {
        for fusion in [Fusion::ALL, Fusion::NONE] {
            let mut backend = CudaBackend::new(0, dtype).unwrap();
            let graph = model
                .build_graph(
                    batch.batch,
                    batch.max_patches,
                    &OUTPUTS,
                    true,
                    fusion,
                    &|op, shapes| backend.supports(op, shapes),
                )
                .unwrap();
            let executor =
                Executor::new(graph, &mut backend, &model, Precision::default_for(dtype)).unwrap();
            let named = batch.named();
            let feeds: Vec<(&str, &[f32])> =
                named.iter().map(|(n, v)| (*n, v.as_slice())).collect();
            let ours = executor.run(&mut backend, &feeds).unwrap();
            for row in compare(&ours, &wanted).unwrap() {
                println!(
                    "{dtype:4} {fusion:?} {:20} relative error {:.2e}",
                    row.name, row.relative_error
                );
                if row.relative_error > vitrt_model::parity::tolerance(dtype) {
                    failures.push(format!("{dtype} {fusion:?} {}", row.name));
                }
            }
        }
    }
    assert!(failures.is_empty(), "over tolerance: {failures:?}");
}
