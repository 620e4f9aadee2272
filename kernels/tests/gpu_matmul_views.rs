//! The GPU matmul against its CPU twin on the products beside the linear layers: attention's
//! two products reading heads in place, the patch embedding, the f32 residual stream, a
//! residual that is the output itself, and split-K. The checks and tolerances are those of
//! gpu_matmul.rs (see its header), through the same harness (`common::matmul`).
//!
//! Run on a GPU machine: `cargo test --release -p vitrt-kernels --test gpu_matmul_views --
//! --ignored --test-threads=1`.

mod common;

use common::matmul::{attention_cases, epilogue_number, linear_case, random, run, Case, Worst};
use common::new_gpu;
use rand::{rngs::StdRng, SeedableRng};
use vitrt_kernels::matmul::tiles_for;
use vitrt_kernels::{Activation, DType, Epilogue, MatmulProblem, WeightLayout};

#[test]
#[ignore = "needs a CUDA GPU"]
fn attention_products_read_heads_in_place() {
    let gpu = new_gpu();
    let mut rng = StdRng::seed_from_u64(13);
    let mut worst = Worst::default();
    for dtype in DType::ALL {
        for (heads, dim) in [(3, 16), (3, 18), (2, 24), (2, 32), (12, 64), (2, 80)] {
            for fused in [true, false] {
                for tokens in [197, 7] {
                    for case in attention_cases(dtype, 2, heads, tokens, dim, fused, &mut rng) {
                        worst.record(dtype, run(&gpu, &case), &case.label);
                    }
                }
            }
        }
        // One token: m = n = k = 1 per head.
        for case in attention_cases(dtype, 3, 2, 1, 18, true, &mut rng) {
            worst.record(dtype, run(&gpu, &case), &case.label);
        }
    }
    worst.print("attention");
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn patch_embedding_writes_token_rows_after_the_prefix_rows() {
    // tokens[b, S + i, :] = patches[b, i, :] · Wᵀ + bias + pos[S + i, :]: C and R start S rows
    // in, R broadcasts over the batch; the S prefix rows of every image are left alone. S = 1
    // (CLS), 0 (SigLIP), 2 (DeiT), 5 (DINOv2 with 4 registers).
    let gpu = new_gpu();
    let mut rng = StdRng::seed_from_u64(14);
    let mut worst = Worst::default();
    let (batch, patches, patch_len, hidden) = (3, 196, 3 * 16 * 16, 96);
    for (dtype, prefix) in DType::ALL
        .into_iter()
        .flat_map(|d| [(d, 1), (d, 0), (d, 2), (d, 5)])
    {
        let tokens = patches + prefix;
        let problem = MatmulProblem::patch_projection(batch, prefix, patches, patch_len, hidden);
        let case = Case {
            label: format!("{dtype} patch embedding after {prefix} prefix rows"),
            dtype,
            problem,
            tile: None,
            a: random(dtype, batch * patches * patch_len, -1.0..1.0, &mut rng),
            b: random(dtype, hidden * patch_len, -0.1..0.1, &mut rng),
            bias: Some(random(dtype, hidden, -1.0..1.0, &mut rng)),
            residual: Some(random(dtype, tokens * hidden, -1.0..1.0, &mut rng)),
            c_len: batch * tokens * hidden,
            shift: 0,
            residual_in_place: false,
            c_dtype: dtype,
            residual_dtype: dtype,
        };
        worst.record(dtype, run(&gpu, &case), &case.label);
    }
    worst.print("patch embedding");
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn an_f32_residual_stream_matches_the_twin() {
    // Half-precision operands adding into an f32 residual stream (R and C f32), on every tile
    // (the 128x128 tile reads an f32 residual from global memory, the small one stages it),
    // every activation, plain, padded and misaligned rows, and in place; and the patch
    // projection writing f32 tokens with a half-precision residual (the position embeddings).
    let gpu = new_gpu();
    let mut rng = StdRng::seed_from_u64(16);
    let mut worst = Worst::default();
    let stream = |dtype: DType, mut case: Case, rng: &mut StdRng| {
        case.c_dtype = DType::F32;
        case.residual_dtype = DType::F32;
        // Residual values that f32 holds but f16/bf16 would round: the sum must keep them.
        if let Some(r) = case.residual.as_mut() {
            *r = random(DType::F32, r.len(), -2.0..2.0, rng);
        }
        case.label = format!("{} into an f32 stream", case.label);
        assert_ne!(dtype, DType::F32);
        case
    };
    let mut number = 0;
    for dtype in [DType::F16, DType::BF16] {
        for &tile in tiles_for(dtype) {
            for (shape, pad, shift) in [
                ((197, 198, 257), 0, 0),
                ((257, 1000, 197), 8, 0),
                ((7, 1, 64), 0, 1),
                ((1000, 768, 768), 0, 0),
            ] {
                let epilogue = Epilogue {
                    residual: true,
                    ..epilogue_number(number)
                };
                number += 1;
                let case = linear_case(
                    dtype,
                    shape,
                    WeightLayout::NK,
                    epilogue,
                    pad,
                    shift,
                    Some(tile),
                    &mut rng,
                );
                let case = stream(dtype, case, &mut rng);
                worst.record(dtype, run(&gpu, &case), &case.label);
            }
        }
        // In place: x += proj(h) with x in f32; then on the persistent Hopper tiles, with
        // enough tiles that each CTA walks several (3-4 on 132 SMs), so every barrier and
        // residual buffer goes round more than once.
        let epilogue = Epilogue {
            bias: true,
            residual: true,
            ..Epilogue::NONE
        };
        let mut in_place = vec![((197, 768, 768), None)];
        if gpu.compute_capability() == (9, 0) {
            let hopper = tiles_for(dtype).iter().filter(|t| t.program.uses_tma());
            in_place.extend(hopper.map(|&tile| ((9000, 768, 256), Some(tile))));
        }
        for (shape, tile) in in_place {
            let mut case = linear_case(
                dtype,
                shape,
                WeightLayout::NK,
                epilogue,
                0,
                0,
                tile,
                &mut rng,
            );
            case.problem.r = case.problem.c;
            let mut case = stream(dtype, case, &mut rng);
            case.residual = Some(random(DType::F32, case.c_len, -2.0..2.0, &mut rng));
            case.residual_in_place = true;
            case.label = format!("{} in place", case.label);
            worst.record(dtype, run(&gpu, &case), &case.label);
        }

        let (batch, patches, patch_len, hidden) = (2, 196, 3 * 16 * 16, 96);
        let case = Case {
            label: format!("{dtype} patch embedding into f32 tokens"),
            dtype,
            problem: MatmulProblem::patch_projection(batch, 1, patches, patch_len, hidden),
            tile: None,
            a: random(dtype, batch * patches * patch_len, -1.0..1.0, &mut rng),
            b: random(dtype, hidden * patch_len, -0.1..0.1, &mut rng),
            bias: Some(random(dtype, hidden, -1.0..1.0, &mut rng)),
            residual: Some(random(dtype, (patches + 1) * hidden, -1.0..1.0, &mut rng)),
            c_len: batch * (patches + 1) * hidden,
            shift: 0,
            residual_in_place: false,
            c_dtype: DType::F32,
            residual_dtype: dtype,
        };
        worst.record(dtype, run(&gpu, &case), &case.label);
    }
    if gpu.compute_capability() == (9, 0) {
        assert!(
            gpu.loaded_kernels()
                .iter()
                .any(|k| k.name.contains("_tmapp_") && k.name.ends_with("_rf32_cf32")),
            "the ping-pong tile's residual variant was never loaded"
        );
    }
    worst.print("f32 residual stream");
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn residual_may_be_the_output_itself() {
    // x = x + proj(h): the residual view is C's own view.
    // On sm_90 also the Hopper tiles with a 16-bit stream (R = C in the operands' type), with
    // enough tiles that each CTA walks several (3-4 on 132 SMs), so that every barrier and
    // residual buffer of the ping-pong tile's residual variant goes round more than once.
    let gpu = new_gpu();
    let mut rng = StdRng::seed_from_u64(15);
    let mut worst = Worst::default();
    for dtype in DType::ALL {
        let mut cases = vec![((197, 198, 257), 0, None), ((257, 1000, 7), 2, None)];
        if dtype != DType::F32 && gpu.compute_capability() == (9, 0) {
            let hopper = tiles_for(dtype).iter().filter(|t| t.program.uses_tma());
            cases.extend(hopper.map(|&tile| ((9000, 768, 256), 0, Some(tile))));
            cases.push(((9000, 768, 256), 0, None));
        }
        for (shape, pad, tile) in cases {
            let epilogue = Epilogue {
                bias: true,
                residual: true,
                ..Epilogue::NONE
            };
            let mut case = linear_case(
                dtype,
                shape,
                WeightLayout::NK,
                epilogue,
                pad,
                0,
                tile,
                &mut rng,
            );
            case.problem.r = case.problem.c;
            let (m, n) = (shape.0, shape.1);
            case.residual = Some(random(dtype, case.c_len, -2.0..2.0, &mut rng));
            case.residual_in_place = true;
            let tile = tile
                .map(|t| format!(" tile {}", t.name()))
                .unwrap_or_default();
            case.label = format!("{dtype} in-place residual {m}x{n} pad {pad}{tile}");
            worst.record(dtype, run(&gpu, &case), &case.label);
        }
    }
    if gpu.compute_capability() == (9, 0) {
        assert!(
            gpu.loaded_kernels()
                .iter()
                .any(|k| k.name.contains("_tmapp_") && k.name.ends_with("_res")),
            "the ping-pong tile's 16-bit residual variant was never loaded"
        );
    }
    worst.print("in-place residual");
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn split_k_matches_the_twin_and_leaves_its_counters_ready() {
    // Shapes with fewer 64x64 tiles than SMs and K of at least 1536, which the launcher splits
    // along K: batch-1 fc2 into an f32 stream in place, a K that ends inside a split, [K, N]
    // weights, and an activation with a half-precision C. Each runs twice: a counter left
    // non-zero by the first launch would keep the second from writing C at all.
    let gpu = new_gpu();
    let mut rng = StdRng::seed_from_u64(16);
    let mut worst = Worst::default();
    for dtype in [DType::F16, DType::BF16] {
        let small = *tiles_for(dtype)
            .iter()
            .find(|t| t.block_m == 64 && !t.program.is_hopper())
            .unwrap();
        let cases = [
            ((197, 768, 3072), WeightLayout::NK, Activation::None, true),
            ((100, 200, 2000), WeightLayout::NK, Activation::None, true),
            ((61, 100, 1999), WeightLayout::NK, Activation::Gelu, false),
            ((64, 96, 1600), WeightLayout::KN, Activation::None, false),
        ];
        for (shape, layout, activation, f32_stream) in cases {
            let epilogue = Epilogue {
                alpha: 1.0,
                bias: true,
                activation,
                residual: f32_stream,
            };
            for tile in [None, Some(small)] {
                let mut case = linear_case(dtype, shape, layout, epilogue, 0, 0, tile, &mut rng);
                if f32_stream {
                    case.problem.r = case.problem.c;
                    case.c_dtype = DType::F32;
                    case.residual_dtype = DType::F32;
                    case.residual = Some(random(DType::F32, case.c_len, -2.0..2.0, &mut rng));
                    case.residual_in_place = true;
                }
                case.label = format!("split-K {}", case.label);
                for _ in 0..2 {
                    worst.record(dtype, run(&gpu, &case), &case.label);
                }
            }
        }
    }
    worst.print("split-K");
}
