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

/// A backend whose fused attention takes only head dims that are multiples of 16 gets the
/// text towers' heads (8 wide in both fixtures) padded to 16 with zeros, causal or not, as the
/// vision towers' (SigLIP so400m's 72 as 80 on the GPU). On the CPU, with such a backend's
/// answer imposed, the padded graph must match PyTorch as closely as the plain one.
#[test]
fn text_heads_padded_for_the_fused_kernel_compute_what_the_tower_computes() {
    use common::text::{compare_text_outputs, reference, tensor};
    use vitrt_model::text::{TextGraphOptions, TextModel, INPUT_IDS};
    use vitrt_runtime::{Executor, Op, Precision};
    let multiples_of_16 = |op: &Op, _: &[&[usize]]| match op {
        Op::Attention { head_dim, .. } if head_dim % 16 != 0 => Err("head dim".to_string()),
        _ => Ok(()),
    };
    for dir in fixtures().into_iter().take(2) {
        let refs = reference(&dir);
        let ids = tensor(&refs, "input_ids");
        let batch = ids.shape[0];
        let text = TextModel::load(&dir).unwrap();
        assert_eq!(
            text.padded_head_dim(batch, Fusion::ALL, &multiples_of_16),
            Some(16),
            "{}",
            dir.display()
        );
        let options = TextGraphOptions {
            all_outputs: true,
            normalize: false,
            fusion: Fusion::ALL,
        };
        let graph = text.build_graph(batch, options, &multiples_of_16).unwrap();
        let fused: Vec<usize> = graph
            .nodes
            .iter()
            .filter_map(|n| match n.op {
                Op::Attention { head_dim, .. } => Some(head_dim),
                _ => None,
            })
            .collect();
        assert_eq!(
            fused,
            vec![16; text.config.num_hidden_layers],
            "{}",
            dir.display()
        );
        let mut backend = CpuBackend::new();
        let precision = Precision::default_for(DType::F32);
        let executor = Executor::new(graph, &mut backend, &text, precision).unwrap();
        let outputs = executor
            .run(&mut backend, &[(INPUT_IDS, &ids.data)])
            .unwrap();
        let case = format!("{} padded", dir.display());
        for row in compare_text_outputs(outputs, &refs, &case) {
            assert!(
                row.relative_error < 1e-5,
                "{} padded: {} {:.2e}",
                dir.display(),
                row.name,
                row.relative_error
            );
        }
    }
}
