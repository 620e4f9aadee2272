//! The CLIP and SigLIP zero-shot fixtures, and the real-size random dual towers
//! VITRT_TEXT_MODELS names (scripts/gpu/gpu-zero-shot.sh), on the CUDA backend in f32, f16 and
//! bf16, fused and unfused (see common/text.rs), against PyTorch's float64 reference; in bf16
//! each real-size hidden state and embedding also no worse than PyTorch's own bf16
//! (torch-bf16-text.json), the scores reported beside it. Run on
//! the GPU machine (scripts/gpu/gpu-check.sh, scripts/gpu/gpu-zero-shot.sh).

mod common;

use common::text::{check, fixtures, torch_bf16};
use vitrt_runtime::backend::cuda::CudaBackend;
use vitrt_runtime::passes::{AttentionFusion, Fusion};
use vitrt_runtime::{Backend, DType};

fn cuda(dtype: DType) -> Box<dyn Backend> {
    Box::new(CudaBackend::new(0, dtype).unwrap())
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn text_towers_and_scores_match_pytorch_on_the_gpu() {
    let attention_unfused = Fusion {
        attention: AttentionFusion::Off,
        ..Fusion::ALL
    };
    let mut failures: Vec<(bool, String)> = Vec::new();
    for dir in fixtures() {
        let torch = torch_bf16(&dir);
        // The committed fixtures are tiny: there both bf16 errors are set by the rounding of
        // a few weights, which PyTorch's run shares, and which is lower is chance
        // (benchmarks/NOTES.md, 2026-11-25): reported. At real size (VITRT_TEXT_MODELS) a
        // hidden state, pooled output or embedding worse than PyTorch's bf16 fails the test.
        // The scores computed from the embeddings (`logits_per_image`, `probs`) are held to
        // their tolerance (common/text.rs, `limit`) and reported beside PyTorch's: scaled by
        // exp(logit_scale) = 100 and set by one or two of a dozen values, they landed on
        // either side of PyTorch's by chance (2026-11-25, H100: CLIP B/32 fused, probs 1.15e-2
        // against 1.03e-2 with every embedding and hidden state at 0.35 to 0.55 of PyTorch's
        // error, and the logits at 0.47).
        let real_size = !dir.starts_with(common::repo_root());
        // At real size, the graphs a run takes: fused, and attention unfused (the fallback for
        // head dims the fused kernel lacks). The plain graph (`--fusion none`), which exists to
        // be compared against, is checked on the fixtures: at real size its bf16 scores land on
        // either side of PyTorch's by chance (SigLIP B/16 logits 2.97e-2 against 2.74e-2 on
        // 2026-11-25, with its embeddings at half PyTorch's error; benchmarks/NOTES.md,
        // "unfused attention scores in f32").
        let fusions: &[Fusion] = if real_size {
            &[Fusion::ALL, attention_unfused]
        } else {
            &[Fusion::ALL, attention_unfused, Fusion::NONE]
        };
        for dtype in DType::ALL {
            for &fusion in fusions {
                for row in check(&dir, dtype, fusion, &cuda) {
                    let theirs = torch.get(&row.name).copied();
                    println!(
                        "{} {dtype} {fusion:?} {:24} {:.3e}  torch bf16 {}",
                        dir.file_name().unwrap().to_string_lossy(),
                        row.name,
                        row.relative_error,
                        theirs.map_or("-".to_string(), |t| format!("{t:.3e}"))
                    );
                    if dtype == DType::BF16 && theirs.is_some_and(|t| row.relative_error > t) {
                        let scores = matches!(row.name.as_str(), "logits_per_image" | "probs");
                        failures.push((
                            real_size && !scores,
                            format!(
                                "{} {fusion:?} {}: bf16 {:.3e} worse than PyTorch's {:.3e}",
                                dir.display(),
                                row.name,
                                row.relative_error,
                                theirs.unwrap_or(0.0)
                            ),
                        ));
                    }
                }
            }
        }
    }
    for (_, f) in &failures {
        println!("worse than PyTorch's bf16: {f}");
    }
    assert!(
        !failures.iter().any(|(real_size, _)| *real_size),
        "real-size tensors worse than PyTorch's bf16"
    );
}
