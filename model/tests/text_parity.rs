//! The CLIP and SigLIP zero-shot fixtures on the CPU backend against PyTorch's float64
//! reference (see common/text.rs): the text tower layer by layer and the image-text scores, in
//! f32 (1e-4 relative; the twins compute in f32 as PyTorch does, so 1e-5 in practice), f16 and
//! bf16 (emulated: 1e-2 and 2e-2), fused and unfused, each image's top text identical. The
//! tokenizer's ids are model/tests/tokenizer.rs's.

mod common;

use common::text::{check, fixtures};
use vitrt_runtime::passes::Fusion;
use vitrt_runtime::{Backend, CpuBackend, DType};

fn cpu(dtype: DType) -> Box<dyn Backend> {
    Box::new(CpuBackend::emulating(dtype))
}

#[test]
fn text_towers_and_scores_match_pytorch_in_f32() {
    for dir in fixtures() {
        for fusion in [Fusion::ALL, Fusion::NONE] {
            let rows = check(&dir, DType::F32, fusion, &cpu);
            for row in rows {
                assert!(
                    row.relative_error < 1e-5,
                    "{}: {} {:.2e}",
                    dir.display(),
                    row.name,
                    row.relative_error
                );
            }
        }
    }
}

#[test]
fn text_towers_and_scores_match_pytorch_in_half_precision() {
    for dir in fixtures() {
        for dtype in [DType::F16, DType::BF16] {
            check(&dir, dtype, Fusion::ALL, &cpu);
        }
    }
}
