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

/// Heads padded with zeros (as so400m's head dim 72 runs at 80 on the GPU's fused attention):
/// the fixture read as 4 heads of 8, built once as it is and once for a backend whose fused
/// attention refuses head dims that are no multiple of 16, so the projections write heads of
/// 16. Both graphs give the same outputs on the CPU.
#[test]
fn heads_padded_for_the_fused_attention_give_the_same_outputs() {
    let dir = tempfile::tempdir().unwrap();
    for entry in std::fs::read_dir(fixture()).unwrap() {
        let path = entry.unwrap().path();
        if path.is_file() {
            std::fs::copy(&path, dir.path().join(path.file_name().unwrap())).unwrap();
        }
    }
    let config = dir.path().join("config.json");
    let mut fields: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&config).unwrap()).unwrap();
    fields["num_attention_heads"] = 4.into();
    std::fs::write(&config, fields.to_string()).unwrap();
    let model = NaflexVisionModel::load(dir.path()).unwrap();
    let batch = inputs(&model, &reference());
    let no_head_dim_but_16s = |op: &vitrt_runtime::Op, _: &[&[usize]]| match op {
        vitrt_runtime::Op::Attention { head_dim, .. } if head_dim % 16 != 0 => {
            Err(format!("head dim {head_dim}"))
        }
        _ => Ok(()),
    };
    let any_head_dim = |_: &vitrt_runtime::Op, _: &[&[usize]]| Ok(());
    let backends: [vitrt_runtime::passes::Supports; 2] = [&any_head_dim, &no_head_dim_but_16s];
    let mut outputs = Vec::new();
    for supports in backends {
        let graph = model
            .build_graph(
                batch.batch,
                batch.max_patches,
                &OUTPUTS,
                true,
                Fusion::ALL,
                supports,
            )
            .unwrap();
        let head_dims: Vec<usize> = graph
            .nodes
            .iter()
            .filter_map(|n| match n.op {
                vitrt_runtime::Op::Attention { head_dim, .. } => Some(head_dim),
                _ => None,
            })
            .collect();
        let mut cpu = CpuBackend::new();
        let executor =
            Executor::new(graph, &mut cpu, &model, Precision::uniform(DType::F32)).unwrap();
        let named = batch.named();
        let feeds: Vec<(&str, &[f32])> = named.iter().map(|(n, v)| (*n, v.as_slice())).collect();
        outputs.push((head_dims, executor.run(&mut cpu, &feeds).unwrap()));
    }
    // Fused at 8 as they are; the encoder's two layers fused at 16 padded (the pooling head's
    // attention, one query, is never padded, and unfused there).
    assert!(outputs[0].0.iter().all(|&d| d == 8), "{:?}", outputs[0].0);
    assert_eq!(outputs[1].0, [16, 16]);
    let rows = compare(&outputs[1].1, &outputs[0].1).unwrap();
    assert_eq!(rows.len(), 5);
    for row in rows {
        assert!(
            row.relative_error < 1e-5,
            "{}: relative error {:.3e}",
            row.name,
            row.relative_error
        );
    }
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
        // f16 and bf16 are refused on the GPU for now (see half_precision_gpu_refusal).
        let refusal =
            vitrt_model::naflex::half_precision_gpu_refusal(&CudaBackend::new(0, dtype).unwrap());
        assert_eq!(refusal.is_some(), dtype != DType::F32, "{dtype}");
        if refusal.is_some() {
            continue;
        }
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

/// Siglip2ImageProcessor (PIL) on the fixture's four image files: the same patch rows, mask
/// and grids as transformers made, and then the same outputs.
#[test]
fn the_processor_makes_transformers_patch_rows_from_image_files() {
    use vitrt_model::preprocess::naflex::NaflexProcessor;
    let dir = fixture();
    let processor = NaflexProcessor::from_json_file(&dir.join("preprocessor_config.json")).unwrap();
    assert_eq!((processor.patch_size, processor.max_num_patches), (4, 24));
    let files: Vec<PathBuf> = (0..4)
        .map(|i| dir.join(format!("images/{i}.png")))
        .collect();
    let paths: Vec<&Path> = files.iter().map(PathBuf::as_path).collect();
    let batch = processor.preprocess_files(&paths).unwrap();
    let refs = reference();
    assert_eq!(
        batch.spatial_shapes,
        [(3, 8), (10, 2), (4, 4), (7, 3)],
        "each image's grid"
    );
    assert_eq!(
        batch.pixel_attention_mask,
        tensor(&refs, "pixel_attention_mask").data
    );
    let want = &tensor(&refs, "pixel_values").data;
    let worst = batch
        .pixel_values
        .iter()
        .zip(want)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0f32, f32::max);
    println!("pixel_values: max abs error {worst:.2e}");
    assert_eq!(batch.pixel_values.len(), want.len());
    assert!(worst <= 1e-6, "pixel_values differ by up to {worst}");
}

fn zero_shot_fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/naflex/siglip2-naflex-zero-shot")
}

/// Siglip2Model's zero-shot scores: the text tower (SigLIP's, with Gemma's tokenizer) encodes
/// the prompts, the NaFlex tower the four images, and the scores are transformers'.
#[test]
fn zero_shot_scores_match_siglip2_model() {
    use vitrt_model::naflex::NaflexRunner;
    use vitrt_model::text::{TextEncoder, TextModel, TextTokenizer};
    use vitrt_model::ZeroShotLabels;
    let dir = zero_shot_fixture();
    let refs: Vec<HostTensor> = vitrt_weights::read_f32_tensors(&dir.join("reference.safetensors"))
        .unwrap()
        .into_iter()
        .map(|(name, shape, data)| HostTensor { name, shape, data })
        .collect();
    let text = TextModel::load(&dir).unwrap();
    let rule = text.score_rule().unwrap();
    let tokenizer =
        TextTokenizer::from_checkpoint(&dir, text.context(), text.config.family).unwrap();
    let prompts = [
        "a photo of a cat.",
        "a photo of a dog.",
        "a photo of a bird.",
        "",
    ];
    let tokens = tokenizer.encode(&prompts.map(String::from)).unwrap();
    let ids_ref = tensor(&refs, "input_ids");
    let ids: Vec<u32> = ids_ref.data.iter().map(|&v| v as u32).collect();
    assert_eq!(tokens.ids, ids, "Gemma's ids");
    let mut encoder = TextEncoder::new(text, Box::new(CpuBackend::new()), Fusion::ALL);
    let run = |normalize| vitrt_model::text::TextRun {
        all_outputs: false,
        normalize,
    };
    let text_embeds = encoder.run(&ids, prompts.len(), run(false)).unwrap();
    let unit = encoder
        .run(&ids, prompts.len(), run(true))
        .unwrap()
        .remove(0)
        .data;

    let model = NaflexVisionModel::load(&dir).unwrap();
    let batch = inputs(&model, &refs);
    let mut runner = NaflexRunner::new(model, Box::new(CpuBackend::new()), Fusion::ALL);
    runner
        .set_zero_shot(ZeroShotLabels {
            text_embeds: unit,
            labels: prompts.len(),
            rule,
        })
        .unwrap();
    let mut ours = runner
        .run(
            &batch,
            &["image_embeds", "logits_per_image", "probs"],
            false,
        )
        .unwrap();
    ours.push(HostTensor {
        name: "text_embeds".into(),
        ..text_embeds[0].clone()
    });
    let wanted: Vec<HostTensor> = ["image_embeds", "text_embeds", "logits_per_image", "probs"]
        .iter()
        .map(|n| tensor(&refs, n).clone())
        .collect();
    for row in compare(&ours, &wanted).unwrap() {
        println!("{:18} relative error {:.2e}", row.name, row.relative_error);
        assert!(
            row.relative_error < 1e-5,
            "{}: relative error {:.3e}",
            row.name,
            row.relative_error
        );
    }
    assert_eq!(
        runner.default_outputs(),
        [
            "last_hidden_state",
            "pooler_output",
            "logits_per_image",
            "probs"
        ]
    );
}
