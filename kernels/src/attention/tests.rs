//! Unit tests of the attention's selection and launcher checks (the GPU runs are in
//! kernels/tests/gpu_attention.rs).

use super::config::*;
use super::gpu::*;
use super::problem::AttentionProblem;
use super::program::*;
use crate::cuda::{ArchRequirement, ParamKind};
use crate::types::{DType, Operand};

/// ViT-B/16's attention (12 heads of 64, 197 tokens) at `batch` images.
fn vit_b(batch: usize, head_dim: usize) -> AttentionProblem {
    let view = Operand {
        offset: 0,
        row_stride: 3 * 768,
        batch_stride: 197 * 3 * 768,
        head_stride: 64,
    };
    AttentionProblem {
        batch,
        heads: 12,
        tokens: 197,
        head_dim,
        scale: 0.125,
        causal: false,
        key_padding: false,
        q: view,
        k: view,
        v: view,
        o: view,
    }
}

const AMPERE: (u32, u32) = (8, 0);
const HOPPER: (u32, u32) = (9, 0);

#[test]
fn every_supported_case_is_registered() {
    let registered = instantiations();
    for dtype in DType::ALL {
        for head_dim in 1..=256 {
            if fused_attention_support(dtype, head_dim).is_ok() {
                for batch in [1, 8, 64, 256, 100_000] {
                    for causal in [false, true] {
                        for cc in [AMPERE, HOPPER] {
                            let p = AttentionProblem {
                                causal,
                                ..vit_b(batch, head_dim)
                            };
                            let config = AttentionConfig::select(dtype, &p, 132, cc);
                            assert_eq!(config.causal, causal);
                            assert!(registered.contains(&config.instantiation()), "{config:?}");
                        }
                    }
                }
            }
        }
    }
    // mma.sync: every head dim with one row group, those up to 64 also with two, causal or
    // not; wgmma: non-causal, two CTA sizes for every head dim, and two query passes up to 64.
    assert_eq!(registered.len(), 2 * (2 * (8 + 4) + 8 * 2 + 4));
}

#[test]
fn programs_are_named_apart() {
    let config = AttentionConfig {
        dtype: DType::BF16,
        head_dim: 64,
        program: AttentionProgram::MmaSync { row_groups: 2 },
        causal: false,
    };
    assert_eq!(config.instantiation().name, "attention_bf16_d64_bn64_w4_g2");
    assert_eq!(config.instantiation().template_args[5], "false");
    let causal = AttentionConfig {
        causal: true,
        ..config
    };
    assert_eq!(
        causal.instantiation().name,
        "attention_bf16_d64_bn64_w4_g2_causal"
    );
    assert_eq!(causal.instantiation().template_args[5], "true");
    // The kernel's static_assert: a warp's rows start in the key block they meet first.
    assert_eq!(BLOCK_N % (16 * 2), 0);
    let hopper = AttentionConfig {
        program: AttentionProgram::WGMMA,
        head_dim: 128,
        ..config
    };
    let instantiation = hopper.instantiation();
    // Q 32 KiB and four K and V stages of 64 keys, 128 KiB: over 100 KiB, so one CTA an
    // SM, with three stages and a producer warp, on a persistent grid.
    assert_eq!(
        instantiation.name,
        "attention_wgmma_bf16_d128_bn64_wg2_s3_pw_persist"
    );
    assert_eq!(
        instantiation.template_args[2..],
        ["64", "2", "3", "1", "true", "true"]
    );
    assert_eq!(hopper.grid(2560, 132), 132);
    assert_eq!(hopper.grid(40, 132), 40);
    // With the producer warpgroup's registers, 112 runs persistent too (no spill).
    let d112 = AttentionConfig {
        head_dim: 112,
        ..hopper
    };
    assert!(d112.instantiation().name.ends_with("_s3_pw_persist"));
    assert_eq!(d112.threads(), 384);
    assert_eq!(
        instantiation.params[..3]
            .iter()
            .map(|p| (p.name, p.kind))
            .collect::<Vec<_>>(),
        [
            ("q_map", ParamKind::TensorMap),
            ("k_map", ParamKind::TensorMap),
            ("v_map", ParamKind::TensorMap)
        ]
    );
    let vit_b = AttentionConfig {
        head_dim: 64,
        ..hopper
    };
    assert_eq!(
        vit_b.instantiation().name,
        "attention_wgmma_bf16_d64_bn64_wg2_s4"
    );
    // Two warpgroups and, with three stages, a producer warpgroup (persistent); with four,
    // no producer.
    assert_eq!(instantiation.block_threads, 384);
    assert_eq!(instantiation.min_blocks_per_sm, 1);
    assert_eq!(vit_b.instantiation().block_threads, 256);
    assert_eq!(instantiation.arch, ArchRequirement::Exactly(9, 0));
}

#[test]
fn hopper_takes_wgmma_where_it_was_measured_faster() {
    let program = |batch, tokens, head_dim, causal, cc| {
        let p = AttentionProblem {
            tokens,
            causal,
            ..vit_b(batch, head_dim)
        };
        AttentionConfig::select(DType::F16, &p, 132, cc).program
    };
    let wgmma = |batch, tokens, head_dim| {
        matches!(
            program(batch, tokens, head_dim, false, HOPPER),
            AttentionProgram::Wgmma { .. }
        )
    };
    let passes = |batch, tokens, head_dim| match program(batch, tokens, head_dim, false, HOPPER) {
        AttentionProgram::Wgmma { query_passes, .. } => query_passes,
        other => panic!("{other:?}"),
    };
    // ViT-B/16 (12 heads, 197 tokens): 1536 and 6144 CTAs of 128 rows at batches 64 and
    // 256, 192 and 24 at 8 and 1.
    assert!(wgmma(64, 197, 64) && wgmma(256, 197, 64));
    assert!(!wgmma(8, 197, 64) && !wgmma(1, 197, 64));
    // Its 197 keys fit four stages of 64: two query blocks a CTA (768 and 3072 CTAs).
    assert_eq!(passes(64, 197, 64), 2);
    assert_eq!(passes(256, 197, 64), 2);
    // One query block (nothing to share), or keys past the stages (DINOv2's 257).
    assert_eq!(passes(256, 128, 64), 1);
    assert_eq!(passes(256, 257, 64), 1);
    assert_eq!(passes(1, 577, 64), 1);
    assert_eq!(passes(256, 160, 80), 1, "two passes only up to head dim 64");
    // ViT-H/14 (head dim 80) and head dims 96 to 128 (three stages and a producer warp):
    // the same rule.
    assert!(wgmma(64, 257, 80) && !wgmma(8, 257, 80));
    assert!(wgmma(256, 197, 96) && wgmma(64, 577, 128) && wgmma(8, 577, 128));
    assert!(!wgmma(8, 197, 128));
    // Long sequences from batch 1 (CLIP L/14 at 336: 577 tokens).
    assert!(wgmma(1, 577, 64) && !wgmma(1, 511, 64));
    for batch in [1, 64, 256] {
        for head_dim in [16, 64, 80, 128] {
            assert!(matches!(
                program(batch, 197, head_dim, true, HOPPER),
                AttentionProgram::MmaSync { .. }
            ));
            assert!(matches!(
                program(batch, 197, head_dim, false, AMPERE),
                AttentionProgram::MmaSync { .. }
            ));
        }
    }
    let e = AttentionProgram::WGMMA
        .check(64, false, AMPERE)
        .unwrap_err();
    assert!(e.contains("9.0"), "{e}");
    let e = AttentionProgram::WGMMA.check(64, true, HOPPER).unwrap_err();
    assert!(e.contains("causal"), "{e}");
    for odd in [(3, 64), (2, 128)] {
        let odd = AttentionProgram::Wgmma {
            warpgroups: odd.0,
            block_n: odd.1,
            query_passes: 1,
        };
        assert!(odd.check(64, false, HOPPER).is_err());
    }
    let one_group_two_passes = AttentionProgram::Wgmma {
        warpgroups: 1,
        block_n: 64,
        query_passes: 2,
    };
    assert!(one_group_two_passes.check(64, false, HOPPER).is_err());
    assert_eq!(AttentionProgram::all_for(64, false, HOPPER).len(), 5);
    assert_eq!(AttentionProgram::all_for(80, false, HOPPER).len(), 3);
    assert_eq!(AttentionProgram::all_for(64, true, HOPPER).len(), 2);
    assert_eq!(AttentionProgram::all_for(64, false, AMPERE).len(), 2);
}

#[test]
fn a_scale_that_is_not_positive_takes_mma_sync() {
    for scale in [0.0, -0.125, -0.0] {
        let p = AttentionProblem {
            scale,
            ..vit_b(256, 64)
        };
        let config = AttentionConfig::select(DType::F16, &p, 132, HOPPER);
        assert!(
            matches!(config.program, AttentionProgram::MmaSync { .. }),
            "{scale}: {config:?}"
        );
        let e = AttentionProgram::WGMMA.check_scale(scale).unwrap_err();
        assert!(e.contains("positive softmax scale"), "{e}");
    }
    assert!(AttentionProgram::WGMMA.check_scale(0.125).is_ok());
    assert!(AttentionProgram::MmaSync { row_groups: 1 }
        .check_scale(-1.0)
        .is_ok());
}

#[test]
fn two_row_groups_only_for_small_heads_and_many_ctas() {
    let groups = |batch, head_dim| match AttentionConfig::select(
        DType::F16,
        &vit_b(batch, head_dim),
        132,
        AMPERE,
    )
    .program
    {
        AttentionProgram::MmaSync { row_groups } => row_groups,
        other => panic!("{other:?} on sm_80"),
    };
    // ViT-B/16 on 132 SMs: 24, 192, 1536 and 6144 CTAs of two row groups.
    assert_eq!(groups(1, 64), 1);
    assert_eq!(groups(8, 64), 1);
    assert_eq!(groups(64, 64), 2);
    assert_eq!(groups(256, 64), 2);
    assert_eq!(groups(256, 80), 1, "two groups of 80 would spill");
    assert_eq!(groups(256, 128), 1);
}

#[test]
fn two_passes_need_every_key_resident() {
    let two_passes = AttentionProgram::Wgmma {
        warpgroups: 2,
        block_n: 64,
        query_passes: 2,
    };
    // Head dim 64: four stages of 64 keys.
    assert_eq!(two_passes.wgmma_stages(64), 4);
    assert!(two_passes.check_tokens(64, 256).is_ok());
    let e = two_passes.check_tokens(64, 257).unwrap_err();
    assert!(e.contains("256") && e.contains("257"), "{e}");
    assert!(two_passes.check(64, false, HOPPER).is_ok());
    let e = two_passes.check(80, false, HOPPER).unwrap_err();
    assert!(e.contains("80"), "{e}");
    assert!(AttentionProgram::WGMMA.check_tokens(64, 100_000).is_ok());
}

#[test]
fn support_names_the_reason() {
    assert!(fused_attention_support(DType::F16, 64).is_ok());
    assert!(fused_attention_support(DType::BF16, 80).is_ok());
    let e = fused_attention_support(DType::F32, 64).unwrap_err();
    assert!(e.contains("f32"), "{e}");
    let e = fused_attention_support(DType::F16, 72).unwrap_err();
    assert!(e.contains("72"), "{e}");
}

#[test]
fn shared_memory_fits_a_block() {
    for head_dim in ATTENTION_HEAD_DIMS {
        for (cc, limit) in [(AMPERE, 163), (HOPPER, 227)] {
            for program in AttentionProgram::all_for(head_dim, false, cc) {
                let config = AttentionConfig {
                    dtype: DType::F16,
                    head_dim: head_dim as u32,
                    program,
                    causal: false,
                };
                // Opt-in shared memory per block: 163 KiB on sm_80, 227 KiB on sm_90.
                assert!(config.shared_bytes() <= limit * 1024, "{config:?}");
            }
        }
    }
}

#[test]
fn rows_must_be_16_byte_aligned() {
    let qkv = Operand {
        offset: 0,
        row_stride: 3 * 768,
        batch_stride: 197 * 3 * 768,
        head_stride: 64,
    };
    let extents = (64, 12, 197);
    assert!(attention_rows_aligned(0x1000, DType::F16, &qkv, extents));
    assert!(!attention_rows_aligned(0x1002, DType::F16, &qkv, extents));
    let odd_rows = Operand {
        row_stride: 3 * 768 + 2,
        ..qkv
    };
    assert!(!attention_rows_aligned(
        0x1000,
        DType::F16,
        &odd_rows,
        extents
    ));
    assert!(
        attention_rows_aligned(0x1000, DType::F16, &odd_rows, (64, 12, 1)),
        "one token: the row stride is never used"
    );
}
