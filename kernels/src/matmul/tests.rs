//! Unit tests of the matmul's selection, configurations and launcher checks: selection picks
//! only registered instantiations, and the storage rules agree between them.

use crate::cuda::{DevPtr, KernelError};
use crate::matmul::config::*;
use crate::matmul::gpu::*;
use crate::matmul::problem::{Epilogue, MatmulProblem, WeightLayout};
use crate::matmul::selection::*;
use crate::types::{Activation, DType, Operand};

/// `configure` for a problem whose C and residual hold the operands' type.
fn configure_uniform(
    dtype: DType,
    p: &MatmulProblem,
    tile: MatmulTile,
    a: DevPtr,
    b: DevPtr,
) -> MatmulConfig {
    configure(dtype, p, tile, a, b, None, fake(0x3000, dtype))
}

fn fake(ptr: u64, dtype: DType) -> DevPtr {
    DevPtr {
        ptr,
        len: usize::MAX,
        dtype,
    }
}

#[test]
fn selection_only_picks_registered_instantiations() {
    let registered = instantiations();
    let dims = [1usize, 7, 18, 64, 197, 768, 1000, 3072, 12608];
    for dtype in DType::ALL {
        for &m in &dims {
            for &n in &dims {
                for (k, a_offset) in [(64usize, 0usize), (18, 0), (768, 3)] {
                    for layout in [WeightLayout::NK, WeightLayout::KN] {
                        for activation in Activation::EPILOGUE {
                            let mut p = MatmulProblem::linear(
                                m,
                                n,
                                k,
                                Epilogue {
                                    activation,
                                    ..Epilogue::NONE
                                },
                            );
                            p.a.offset = a_offset;
                            p.b_layout = layout;
                            let tile = select_tile(dtype, &p, 132, (8, 0));
                            let config = configure_uniform(
                                dtype,
                                &p,
                                tile,
                                fake(0x1000, dtype),
                                fake(0x2000, dtype),
                            );
                            assert!(registered.contains(&config.instantiation()), "{config:?}");
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn sixteen_byte_copies_only_where_every_row_is_aligned() {
    let dtype = DType::F16;
    let tile = TENSOR_CORE_TILES[0];
    let aligned = MatmulProblem::linear(197, 768, 768, Epilogue::NONE);
    let config = |p: &MatmulProblem, a: u64| {
        configure_uniform(dtype, p, tile, fake(a, dtype), fake(0x2000, dtype)).vec16
    };
    assert!(config(&aligned, 0x1000));
    assert!(!config(&aligned, 0x1002), "base pointer 2 bytes off");
    let mut odd_k = MatmulProblem::linear(197, 768, 18, Epilogue::NONE);
    assert!(
        !config(&odd_k, 0x1000),
        "rows of 18 halves are 36 bytes apart"
    );
    odd_k.a.row_stride = 24;
    odd_k.b.row_stride = 24;
    assert!(
        config(&odd_k, 0x1000),
        "padded rows: K itself need not be a multiple of 8"
    );
    let mut heads = MatmulProblem::linear(197, 197, 64, Epilogue::NONE);
    heads.heads = 12;
    heads.a.head_stride = 64;
    heads.b.head_stride = 64;
    assert!(config(&heads, 0x1000));
    heads.a.head_stride = 18;
    assert!(!config(&heads, 0x1000), "head 1 starts 36 bytes in");
    heads.heads = 1;
    assert!(
        config(&heads, 0x1000),
        "the head stride of a single head is never used"
    );
    assert!(
        !configure_uniform(
            DType::F32,
            &aligned,
            FMA_TILES[0],
            fake(0x1000, DType::F32),
            fake(0x2000, DType::F32)
        )
        .vec16
    );
    // Element loads only on the small tile.
    let unaligned = configure_uniform(
        dtype,
        &aligned,
        tile,
        fake(0x1002, dtype),
        fake(0x2000, dtype),
    );
    assert_eq!(unaligned.tile, SMALL_TENSOR_CORE_TILE);
    assert_eq!(
        configure_uniform(
            dtype,
            &aligned,
            tile,
            fake(0x1000, dtype),
            fake(0x2000, dtype)
        )
        .tile,
        tile
    );
}

#[test]
fn the_cost_model_prefers_full_waves_and_small_tiles_for_small_problems() {
    let big = MatmulProblem::linear(12608, 768, 768, Epilogue::NONE);
    let small = MatmulProblem::linear(197, 768, 768, Epilogue::NONE);
    let small_tile = select_tile(DType::F16, &small, 132, (8, 0));
    assert!(
        small_tile.block_m * small_tile.block_n < 128 * 128,
        "{small_tile:?}"
    );
    let big_tile = select_tile(DType::F16, &big, 132, (8, 0));
    assert!(big_tile.block_m >= 128, "{big_tile:?}");
}

#[test]
fn the_cost_model_picks_the_fastest_measured_hopper_tile_on_vit_b_shapes() {
    let pick = |n, k, activation, residual| {
        let epilogue = Epilogue {
            alpha: 1.0,
            bias: true,
            activation,
            residual,
        };
        let p = MatmulProblem::linear(12608, n, k, epilogue);
        select_tile(DType::F16, &p, 132, (9, 0)).name()
    };
    // Batch 64: the clustered ping-pong tile (its epilogue overlapped, A's loads shared),
    // fc2 included (594 tiles, 4.5 waves), where the cooperative 128x192 was slower by 18%.
    assert_eq!(
        pick(2304, 768, Activation::None, false),
        "tmapp128x128x64_s5_c2"
    );
    assert_eq!(
        pick(768, 768, Activation::None, true),
        "tmapp128x128x64_s5_c2"
    );
    assert_eq!(
        pick(3072, 768, Activation::Gelu, false),
        "tmapp128x128x64_s5_c2"
    );
    assert_eq!(
        pick(768, 3072, Activation::None, true),
        "tmapp128x128x64_s5_c2"
    );
    // Batch 8 (M = 1576): qkv and fc1 still fill the GPU with ping-pong tiles, and proj
    // and fc2 (78 tiles) take them too; under four waves, the single-CTA ones.
    for (n, k) in [(2304, 768), (768, 768), (3072, 768), (768, 3072)] {
        let p = MatmulProblem::linear(1576, n, k, Epilogue::NONE);
        assert_eq!(
            select_tile(DType::F16, &p, 132, (9, 0)).name(),
            "tmapp128x128x64_s5",
            "batch 8, n {n}, k {k}"
        );
    }
    for (n, k) in [(2304, 768), (768, 768), (3072, 768), (768, 3072)] {
        let p = MatmulProblem::linear(50432, n, k, Epilogue::NONE);
        assert_eq!(
            select_tile(DType::F16, &p, 132, (9, 0)).name(),
            "tmapp128x128x64_s5_c2",
            "batch 256, n {n}, k {k}"
        );
    }
    // Batch 1 (M = 197): every layer on the narrow ping-pong tile (72, 24, 96 and 24 tiles),
    // within one wave.
    let b1 = |n, k| {
        select_tile(
            DType::F16,
            &MatmulProblem::linear(197, n, k, Epilogue::NONE),
            132,
            (9, 0),
        )
    };
    for (n, k) in [(2304, 768), (768, 768), (3072, 768), (768, 3072)] {
        assert_eq!(b1(n, k), NARROW_PINGPONG_TILE, "batch 1, n {n}, k {k}");
    }
    // ViT-L/14's batch-1 qkv (M = 257, N = 3072): 144 narrow tiles, past one wave.
    assert_eq!(
        select_tile(
            DType::F16,
            &MatmulProblem::linear(257, 3072, 1024, Epilogue::NONE),
            132,
            (9, 0)
        )
        .name(),
        "tmapp128x128x64_s5"
    );
}

#[test]
fn split_k_fills_the_gpu_only_for_small_single_matrix_problems() {
    let small = SMALL_TENSOR_CORE_TILE;
    let plan = |m: usize, n: usize, k: usize, tile: MatmulTile| {
        let p = MatmulProblem::linear(m, n, k, Epilogue::NONE);
        let programs =
            (m.div_ceil(tile.block_m as usize) * n.div_ceil(tile.block_n as usize)) as u64;
        split_k(DType::F16, &p, tile, programs, 132)
    };
    // Batch-1 fc2 (48 tiles): 11 splits of 9 k-tiles fill the GPU's 528 CTA slots.
    assert_eq!(plan(197, 768, 3072, small), SplitK { splits: 11, k: 288 });
    // Batch-1 proj: K = 768 is too short to gain.
    assert_eq!(plan(197, 768, 768, small), SplitK::NONE);
    // A K that ends inside the last split: no split is left empty.
    let odd = plan(61, 100, 1999, small);
    assert!(odd.splits > 1 && (odd.splits - 1) * odd.k < 1999 && odd.splits * odd.k >= 1999);
    // Enough tiles, short K, another tile, f32, batched products: no split.
    assert_eq!(plan(197, 2304, 768, small), SplitK::NONE);
    assert_eq!(plan(197, 768, 96, small), SplitK::NONE);
    assert_eq!(plan(197, 768, 3072, TENSOR_CORE_TILES[0]), SplitK::NONE);
    let p = MatmulProblem::linear(197, 768, 3072, Epilogue::NONE);
    assert_eq!(split_k(DType::F32, &p, small, 48, 132), SplitK::NONE);
    let batched = MatmulProblem { heads: 12, ..p };
    assert_eq!(split_k(DType::F16, &batched, small, 48, 132), SplitK::NONE);
    // The deep tile (two CTAs per SM, BK 64): 5 splits of 10 k-tiles; the same K floor.
    let deep = DEEP_SMALL_TILE;
    assert_eq!(plan(197, 768, 3072, deep), SplitK { splits: 5, k: 640 });
    assert_eq!(plan(197, 768, 768, deep), SplitK::NONE);
    // The scratch holds every split's partial tile.
    for tile in [small, deep] {
        let fc2 = plan(197, 768, 3072, tile);
        assert!(48 * fc2.splits as usize * 64 * 64 * 4 <= split_k_partial_bytes(132));
    }
}

#[test]
fn the_narrow_ping_pong_tile_splits_k_into_equal_splits_that_fit_the_gpu() {
    let narrow = NARROW_PINGPONG_TILE;
    let plan = |m: usize, n: usize, k: usize, tile: MatmulTile| {
        let p = MatmulProblem::linear(m, n, k, Epilogue::NONE);
        let programs =
            (m.div_ceil(tile.block_m as usize) * n.div_ceil(tile.block_n as usize)) as u64;
        pingpong_split_k(&p, tile, programs, 132)
    };
    // Batch-1 fc2: 24 tiles, 48 k-tiles: 4 splits of 12 (5 would not divide them).
    assert_eq!(plan(197, 768, 3072, narrow), SplitK { splits: 4, k: 768 });
    // 8 tiles: up to 16 splits fit; 12 of 4 k-tiles is the most that divides 48.
    assert_eq!(plan(129, 200, 3072, narrow), SplitK { splits: 12, k: 256 });
    // Short K (proj, qkv, fc1), a prime number of k-tiles, too many tiles, another tile.
    assert_eq!(plan(197, 768, 768, narrow), SplitK::NONE);
    assert_eq!(plan(197, 768, 47 * 64, narrow), SplitK::NONE);
    assert_eq!(plan(1576, 768, 3072, narrow), SplitK::NONE);
    assert_eq!(plan(197, 768, 3072, TMA_TILES[2]), SplitK::NONE);
    // Every split's partial fits the scratch.
    let fc2 = plan(197, 768, 3072, narrow);
    assert!(24 * fc2.splits as usize * 128 * 64 * 4 <= split_k_partial_bytes(132));
}

#[test]
fn tensor_maps_get_only_rows_they_can_stride_over_even_a_single_row() {
    // A batch-1 classifier: one row of A, ten labels (C rows of 20 bytes, which no tensor map
    // can stride over, though a single row is never strided).
    let narrow = NARROW_PINGPONG_TILE;
    let (a, b) = (fake(0x1000, DType::F16), fake(0x2000, DType::F16));
    let c16 = fake(0x3000, DType::F16);
    let classifier = MatmulProblem::linear(1, 10, 64, Epilogue::NONE);
    assert_eq!(
        configure(DType::F16, &classifier, narrow, a, b, None, c16).tile,
        TMA_TILES[0]
    );
    // 1000 labels: C's rows are 2000 bytes, the narrow tile keeps it.
    let wide = MatmulProblem::linear(1, 1000, 64, Epilogue::NONE);
    assert_eq!(
        configure(DType::F16, &wide, narrow, a, b, None, c16).tile,
        narrow
    );
    // A and B rows of 36 elements (72 bytes): no tensor map and no 16-byte copy; and one row
    // of each (a 1 x 1 product of K 36), which only the tensor maps' own check catches.
    let odd_k = MatmulProblem::linear(1, 1000, 36, Epilogue::NONE);
    assert_eq!(
        configure(DType::F16, &odd_k, narrow, a, b, None, c16).tile,
        SMALL_TENSOR_CORE_TILE
    );
    let single = MatmulProblem::linear(1, 1, 36, Epilogue::NONE);
    assert!(!configure(DType::F16, &single, narrow, a, b, None, c16)
        .tile
        .program
        .uses_tma());
}

#[test]
fn batch_one_linear_layers_take_the_deep_small_tile_and_batch_eight_the_shallow_one() {
    // On sm_80 every batch-1 layer (on sm_90 the narrow ping-pong tile takes them, see the
    // Hopper test above).
    for (n, k) in [(2304, 768), (768, 768), (3072, 768), (768, 3072)] {
        let p = MatmulProblem::linear(197, n, k, Epilogue::NONE);
        assert_eq!(select_tile(DType::BF16, &p, 108, (8, 0)), DEEP_SMALL_TILE);
    }
    // Batch 8 on sm_80: 300 tiles of 64 x 64 for proj and fc2, past one round of the deep
    // tile.
    for k in [768, 3072] {
        let p = MatmulProblem::linear(8 * 197, 768, k, Epilogue::NONE);
        assert_eq!(
            select_tile(DType::F16, &p, 108, (8, 0)),
            SMALL_TENSOR_CORE_TILE
        );
    }
    // Batched products (attention's) and [K, N] weights never take it, even when forced.
    let batched = MatmulProblem {
        batch: 1,
        heads: 12,
        ..MatmulProblem::linear(197, 197, 64, Epilogue::NONE)
    };
    assert_ne!(
        select_tile(DType::F16, &batched, 132, (9, 0)),
        DEEP_SMALL_TILE
    );
    let kn = MatmulProblem {
        b_layout: WeightLayout::KN,
        ..MatmulProblem::linear(197, 768, 768, Epilogue::NONE)
    };
    assert_ne!(select_tile(DType::F16, &kn, 132, (9, 0)), DEEP_SMALL_TILE);
    let forced = configure_uniform(
        DType::F16,
        &kn,
        DEEP_SMALL_TILE,
        fake(0x1000, DType::F16),
        fake(0x2000, DType::F16),
    );
    assert_eq!(forced.tile, SMALL_TENSOR_CORE_TILE);
}

#[test]
fn hopper_tiles_are_chosen_only_on_sm90_for_nk_weights() {
    let big = MatmulProblem::linear(12608, 2304, 768, Epilogue::NONE);
    assert!(select_tile(DType::F16, &big, 132, (9, 0))
        .program
        .is_hopper());
    assert!(!select_tile(DType::F16, &big, 132, (8, 0))
        .program
        .is_hopper());
    assert!(!select_tile(DType::F16, &big, 132, (10, 0))
        .program
        .is_hopper());
    let kn = MatmulProblem {
        b_layout: WeightLayout::KN,
        ..big
    };
    assert!(!select_tile(DType::BF16, &kn, 132, (9, 0))
        .program
        .is_hopper());
    // Forced onto a [K, N] operand, a Hopper tile gives way to the mma.sync one.
    let forced = configure_uniform(
        DType::F16,
        &kn,
        WGMMA_TILES[0],
        fake(0x1000, DType::F16),
        fake(0x2000, DType::F16),
    );
    assert_eq!(forced.tile, TENSOR_CORE_TILES[0]);
    for tile in WGMMA_TILES {
        assert!(tile.runs_on((9, 0)) && !tile.runs_on((8, 0)) && !tile.runs_on((12, 0)));
        assert_eq!(tile.threads(), tile.block_m / 64 * 128);
    }
}

#[test]
fn the_ping_pong_tile_gives_way_where_its_tensor_map_epilogue_cannot_write_c() {
    let pingpong = TMA_TILES[2];
    assert!(pingpong.program == Program::TmaPingPong && pingpong.threads() == 384);
    let p = MatmulProblem::linear(12608, 3072, 768, Epilogue::NONE);
    let (a, b) = (fake(0x1000, DType::F16), fake(0x2000, DType::F16));
    let c16 = fake(0x3000, DType::F16);
    assert_eq!(
        configure(DType::F16, &p, pingpong, a, b, None, c16).tile,
        pingpong
    );
    // A residual in the operands' type takes the residual variant (a 16-bit stream); an
    // f32 C without an f32 residual, or C rows off 16-byte boundaries, the cooperative tile.
    let residual = Some(fake(0x4000, DType::F16));
    let same_type = configure(DType::F16, &p, pingpong, a, b, residual, c16);
    assert_eq!(same_type.tile, pingpong);
    assert!(same_type.pingpong_residual());
    assert_eq!(same_type.threads(), 384);
    assert_eq!(
        same_type.instantiation().name,
        "matmul_f16_tmapp_bn128_s5_g8_none_nk_res"
    );
    assert_eq!(
        configure(
            DType::F16,
            &p,
            pingpong,
            a,
            b,
            Some(fake(0x4002, DType::F16)),
            c16
        )
        .tile,
        TMA_TILES[0],
        "R rows off 16-byte boundaries"
    );
    let c32 = fake(0x3000, DType::F32);
    assert_eq!(
        configure(DType::F16, &p, pingpong, a, b, None, c32).tile,
        TMA_TILES[0]
    );
    let odd_rows = MatmulProblem {
        c: Operand {
            row_stride: 3080,
            ..p.c
        },
        ..p
    };
    assert_eq!(
        configure(DType::F16, &odd_rows, pingpong, a, b, None, c16).tile,
        pingpong
    );
    let odd_rows = MatmulProblem {
        c: Operand {
            row_stride: 3073,
            ..p.c
        },
        ..p
    };
    assert_eq!(
        configure(DType::F16, &odd_rows, pingpong, a, b, None, c16).tile,
        TMA_TILES[0]
    );
    // The f32 residual stream, R and C with 16-byte rows, takes its residual variant.
    let r32 = Some(fake(0x5000, DType::F32));
    let residual_problem = MatmulProblem {
        epilogue: Epilogue {
            residual: true,
            ..p.epilogue
        },
        ..p
    };
    let config = configure(DType::F16, &residual_problem, pingpong, a, b, r32, c32);
    assert_eq!(config.tile, pingpong);
    assert!(config.pingpong_residual());
    assert_eq!(config.threads(), 384);
    assert!(config.shared_bytes() <= SM90_SHARED_BYTES);
    let odd_residual = MatmulProblem {
        r: Operand {
            row_stride: 3073,
            ..p.c
        },
        ..residual_problem
    };
    assert_eq!(
        configure(DType::F16, &odd_residual, pingpong, a, b, r32, c32).tile,
        TMA_TILES[0]
    );
    // Uniform storage and the residual stream are registered, nothing else.
    let registered: Vec<String> = instantiations().into_iter().map(|i| i.name).collect();
    assert!(registered
        .iter()
        .any(|n| n == "matmul_f16_tmapp_bn128_s5_g8_gelu_nk"));
    let stages = config.pingpong_residual_stages();
    assert!(registered
        .iter()
        .any(|n| *n == format!("matmul_f16_tmapp_bn128_s{stages}_g8_none_nk_rf32_cf32")));
    assert_eq!(stages, 5);
    assert!(registered
        .iter()
        .any(|n| *n == format!("matmul_bf16_tmapp_bn128_s{stages}_g8_none_nk_res")));
    assert!(!registered
        .iter()
        .any(|n| n.contains("tmapp") && n.contains("_rf16")));
}

#[test]
fn every_tile_fits_the_shared_memory_of_sm80_and_sm90() {
    // sm_80 lets a block use up to 163 KiB of dynamic shared memory, sm_90 227 KiB (the
    // Hopper tiles run only there); an SM has 228 KiB, of which each CTA's 1 KiB is reserved.
    for config in instantiations_configs() {
        let bytes = config.shared_bytes();
        let limit = if config.tile.program.is_hopper() {
            227
        } else {
            163
        } * 1024;
        assert!(bytes <= limit, "{config:?} needs {bytes} bytes");
        let per_sm = (bytes + 1024) * config.tile.ctas_per_sm;
        assert!(
            per_sm <= 228 * 1024,
            "{config:?}: {} CTAs need {per_sm} bytes",
            config.tile.ctas_per_sm
        );
    }
}

fn instantiations_configs() -> Vec<MatmulConfig> {
    let mut all = Vec::new();
    for dtype in DType::ALL {
        for &tile in tiles_for(dtype) {
            for residual in [dtype, DType::F32] {
                all.push(MatmulConfig {
                    dtype,
                    residual,
                    output: residual,
                    tile,
                    activation: Activation::None,
                    b_layout: WeightLayout::NK,
                    vec16: tile.program.is_hopper(),
                    with_residual: false,
                });
            }
        }
    }
    all
}

#[test]
fn bad_views_are_errors_before_anything_is_launched() {
    let dtype = DType::F16;
    let view = |len: usize| DevPtr {
        ptr: 0x1000,
        len,
        dtype,
    };
    let epilogue = Epilogue {
        bias: true,
        residual: true,
        ..Epilogue::NONE
    };
    let p = MatmulProblem::linear(4, 5, 6, epilogue);
    let ok = validate(
        dtype,
        &p,
        view(24),
        view(30),
        Some(view(5)),
        Some(view(20)),
        view(20),
    );
    assert!(ok.is_ok());
    let message = |r: Result<_, KernelError>| match r {
        Err(KernelError::InvalidArgument(m)) => m,
        other => panic!("expected an invalid-argument error, got {other:?}"),
    };
    let e = message(validate(
        dtype,
        &p,
        view(23),
        view(30),
        Some(view(5)),
        Some(view(20)),
        view(20),
    ));
    assert!(e.contains("A needs 24"), "{e}");
    let e = message(validate(
        dtype,
        &p,
        view(24),
        view(30),
        None,
        Some(view(20)),
        view(20),
    ));
    assert!(e.contains("bias"), "{e}");
    let e = message(validate(
        dtype,
        &p,
        view(24),
        view(30),
        Some(view(5)),
        Some(view(19)),
        view(20),
    ));
    assert!(e.contains("residual"), "{e}");
    let bf16_c = DevPtr {
        dtype: DType::BF16,
        ..view(20)
    };
    let e = message(validate(
        dtype,
        &p,
        view(24),
        view(30),
        Some(view(5)),
        Some(view(20)),
        bf16_c,
    ));
    assert!(e.contains("matmul C holds bf16"), "{e}");
    let f32_c = DevPtr {
        dtype: DType::F32,
        ..view(20)
    };
    // An epilogue without bias ignores a bias view, whatever it holds.
    let plain = MatmulProblem::linear(4, 5, 6, Epilogue::NONE);
    let (bias, residual) = validate(
        dtype,
        &plain,
        view(24),
        view(30),
        Some(f32_c),
        None,
        view(20),
    )
    .unwrap();
    assert_eq!((bias, residual), (None, None));
}

#[test]
fn instantiation_names_spell_the_meta_parameters() {
    let config = MatmulConfig {
        dtype: DType::BF16,
        residual: DType::BF16,
        output: DType::BF16,
        tile: TENSOR_CORE_TILES[0],
        activation: Activation::Gelu,
        b_layout: WeightLayout::KN,
        vec16: true,
        with_residual: false,
    };
    let inst = config.instantiation();
    assert_eq!(
        inst.name,
        "matmul_bf16_bm128_bn128_bk32_g8_s4_w2x2_gelu_kn_v16"
    );
    assert!(inst.program_source().contains(
        "matmul_block<__nv_bfloat16, __nv_bfloat16, __nv_bfloat16, 128, 128, 32, 8, 4, 2, 2, \
         Act::Gelu, true, true>("
    ));
    let stream = MatmulConfig {
        residual: DType::F32,
        output: DType::F32,
        activation: Activation::None,
        b_layout: WeightLayout::NK,
        ..config
    };
    assert_eq!(
        stream.instantiation().name,
        "matmul_bf16_bm128_bn128_bk32_g8_s4_w2x2_none_nk_v16_rf32_cf32"
    );
}

#[test]
fn mixed_storage_is_checked_against_what_is_built() {
    let dtype = DType::BF16;
    let view = |dtype: DType| DevPtr {
        ptr: 0x1000,
        len: 1 << 20,
        dtype,
    };
    let registered = instantiations();
    let stream = Epilogue {
        bias: true,
        residual: true,
        ..Epilogue::NONE
    };
    let p = MatmulProblem::linear(197, 768, 768, stream);
    let (a, b, bias) = (view(dtype), view(dtype), Some(view(dtype)));
    for (residual, c) in [
        (DType::F32, DType::F32),
        (DType::BF16, DType::F32),
        (DType::BF16, DType::BF16),
    ] {
        validate(dtype, &p, a, b, bias, Some(view(residual)), view(c)).unwrap();
        let tile = select_tile(dtype, &p, 132, (8, 0));
        let config = configure(dtype, &p, tile, a, b, Some(view(residual)), view(c));
        assert_eq!((config.residual, config.output), (residual, c));
        assert!(registered.contains(&config.instantiation()), "{config:?}");
    }
    let e = validate(
        dtype,
        &p,
        a,
        b,
        bias,
        Some(view(DType::F32)),
        view(DType::BF16),
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("C holds bf16, residual f32"), "{e}");
    let gelu = MatmulProblem::linear(
        197,
        768,
        768,
        Epilogue {
            activation: Activation::Gelu,
            ..stream
        },
    );
    validate(
        dtype,
        &gelu,
        a,
        b,
        bias,
        Some(view(DType::F32)),
        view(DType::F32),
    )
    .unwrap();
    assert!(validate(
        dtype,
        &gelu,
        a,
        b,
        bias,
        Some(view(dtype)),
        view(DType::F32)
    )
    .is_err());
    assert!(validate(
        DType::F32,
        &p,
        view(DType::F32),
        view(DType::F32),
        None,
        None,
        view(dtype)
    )
    .is_err());
}

#[test]
fn fp8_selection_takes_the_narrow_tile_within_one_wave_and_the_wide_one_past_it() {
    use crate::matmul::fp8::FP8_K_MULTIPLE;
    // ViT-B/16 (197 tokens) and ViT-L/16 (hidden 1024, MLP 4096) at batch 1 to 256 on 132 SMs.
    let linears: [(usize, usize); 8] = [
        (2304, 768),
        (768, 768),
        (3072, 768),
        (768, 3072),
        (3072, 1024),
        (1024, 1024),
        (4096, 1024),
        (1024, 4096),
    ];
    for (n, k) in linears {
        assert!(k.is_multiple_of(FP8_K_MULTIPLE));
        for batch in [1usize, 8, 64, 256] {
            let m = 197 * batch;
            let tile = select_fp8_tile(m, n, k, 132);
            assert!(FP8_TILES.contains(&tile));
            let narrow_programs = m.div_ceil(128) * n.div_ceil(64);
            if batch == 1 {
                // Two row tiles: at most 2 · 4096 / 64 = 128 narrow tiles, one wave.
                assert_eq!(tile, FP8_NARROW_PINGPONG_TILE, "{m}x{n}x{k}");
            } else {
                assert!(narrow_programs > 132);
                assert_eq!(tile, FP8_PINGPONG_TILE, "{m}x{n}x{k}");
            }
        }
    }
}

#[test]
fn fp8_tiles_are_the_16_bit_tiles_byte_for_byte() {
    // A stage row is 128 bytes either way: 128 e4m3 values against 64 16-bit ones.
    assert_eq!(FP8_PINGPONG_TILE.block_k, 2 * TMA_TILES[2].block_k);
    assert_eq!(
        (FP8_PINGPONG_TILE.block_n, FP8_PINGPONG_TILE.stages),
        (TMA_TILES[2].block_n, TMA_TILES[2].stages)
    );
    assert_eq!(
        FP8_NARROW_PINGPONG_TILE.block_k,
        2 * NARROW_PINGPONG_TILE.block_k
    );
    assert_eq!(
        FP8_NARROW_PINGPONG_TILE.threads(),
        NARROW_PINGPONG_TILE.threads()
    );
    assert!(FP8_TILES
        .iter()
        .all(|t| t.runs_on((9, 0)) && !t.runs_on((8, 0))));
}

#[test]
fn every_fp8_instantiation_fits_sm90_shared_memory_and_is_registered_once() {
    use crate::matmul::fp8::Fp8Output;
    use crate::matmul::tma_pingpong_fp8::{fits_sm90, Fp8Config};
    let registered = instantiations();
    let mut count = 0;
    for tile in FP8_TILES {
        for half in [DType::F16, DType::BF16] {
            for activation in Activation::EPILOGUE {
                for (output, residual) in [
                    (Fp8Output::Half, false),
                    (Fp8Output::Half, true),
                    (Fp8Output::E4m3, false),
                ] {
                    let config = Fp8Config {
                        half,
                        output,
                        residual,
                        activation,
                        tile,
                    };
                    assert!(
                        fits_sm90(&config),
                        "{config:?}: {} bytes",
                        config.shared_bytes()
                    );
                    let inst = config.instantiation();
                    assert_eq!(
                        registered.iter().filter(|i| **i == inst).count(),
                        1,
                        "{}",
                        inst.name
                    );
                    let producer = if tile.block_n == 128 { 128 } else { 32 };
                    let loader = if residual && tile.block_n == 64 {
                        32
                    } else {
                        0
                    };
                    assert_eq!(inst.block_threads, 256 + producer + loader);
                    count += 1;
                }
            }
        }
    }
    assert_eq!(count, 72);
}

#[test]
fn fp8_instantiation_names_spell_the_meta_parameters() {
    use crate::matmul::fp8::Fp8Output;
    use crate::matmul::tma_pingpong_fp8::Fp8Config;
    let config = Fp8Config {
        half: DType::BF16,
        output: Fp8Output::E4m3,
        residual: false,
        activation: Activation::Gelu,
        tile: FP8_PINGPONG_TILE,
    };
    let inst = config.instantiation();
    assert_eq!(inst.name, "matmul_e4m3_tmapp_bn128_s5_g8_gelu_bf16_ce4m3");
    assert_eq!(inst.function, "matmul_block_tma_pingpong_fp8");
    assert_eq!(
        inst.template_args[..2],
        ["__nv_bfloat16", "vitrt_matmul::E4m3"]
    );
    let narrow = Fp8Config {
        output: Fp8Output::Half,
        residual: true,
        activation: Activation::None,
        tile: FP8_NARROW_PINGPONG_TILE,
        ..config
    };
    let inst = narrow.instantiation();
    assert_eq!(inst.name, "matmul_e4m3_tmapp_bn64_s8_g8_sk_none_bf16_res");
    assert_eq!(inst.function, "matmul_block_tma_pingpong_fp8_residual");
    assert_eq!(inst.template_args.last().map(String::as_str), Some("true"));
}

#[test]
fn layernorm_selection_takes_the_narrow_tile_within_one_wave_where_it_is_cheaper() {
    // ViT-B/16's qkv and fc1 (the layers a layernorm feeds) and ViT-L/16's at batch 1 to 256
    // on 132 SMs: batch 1 on the narrow tile (as select_tile picks for the 16-bit ping-pong
    // program), from batch 8 the wide one; never a clustered or split tile.
    for (n, k) in [(2304, 768), (3072, 768), (3072, 1024), (4096, 1024)] {
        for batch in [1usize, 8, 64, 256] {
            let m = 197 * batch;
            let tile = select_layernorm_tile(m, n, k, 132);
            assert!(LAYERNORM_TILES.contains(&tile));
            assert_eq!(tile.cluster, 1);
            let want = if batch == 1 {
                NARROW_PINGPONG_TILE
            } else {
                TMA_TILES[2]
            };
            assert_eq!(tile, want, "{m}x{n}x{k}");
            let p = MatmulProblem::linear(m, n, k, Epilogue::NONE);
            assert_eq!(
                select_tile(DType::F16, &p, 132, (9, 0)).block_n,
                tile.block_n
            );
        }
    }
    // Batch-invariant selection chooses as for INVARIANT_ROWS rows: the wide tile.
    assert_eq!(
        select_layernorm_tile(INVARIANT_ROWS, 64, 1024, 132),
        TMA_TILES[2]
    );
}

#[test]
fn every_layernorm_instantiation_fits_sm90_shared_memory_and_is_registered_once() {
    use crate::matmul::tma_pingpong_layernorm::{fits_sm90, LayernormConfig};
    let registered = instantiations();
    let mut count = 0;
    for tile in LAYERNORM_TILES {
        assert!(tile.runs_on((9, 0)) && !tile.runs_on((8, 0)));
        for dtype in [DType::F16, DType::BF16] {
            for activation in Activation::EPILOGUE {
                let config = LayernormConfig {
                    dtype,
                    activation,
                    tile,
                };
                assert!(
                    fits_sm90(&config),
                    "{config:?}: {} bytes",
                    config.shared_bytes()
                );
                let inst = config.instantiation();
                assert_eq!(
                    registered.iter().filter(|i| **i == inst).count(),
                    1,
                    "{}",
                    inst.name
                );
                assert_eq!(
                    inst.block_threads,
                    if tile.block_n == 128 { 384 } else { 288 }
                );
                count += 1;
            }
        }
    }
    assert_eq!(count, 24);
}

#[test]
fn layernorm_instantiation_names_spell_the_meta_parameters() {
    use crate::matmul::tma_pingpong_layernorm::LayernormConfig;
    let config = LayernormConfig {
        dtype: DType::BF16,
        activation: Activation::Gelu,
        tile: TMA_TILES[2],
    };
    let inst = config.instantiation();
    assert_eq!(inst.name, "matmul_bf16_tmapp_ln_bn128_s5_g8_gelu");
    assert_eq!(inst.function, "matmul_block_tma_pingpong_layernorm");
    assert_eq!(
        inst.template_args,
        ["__nv_bfloat16", "128", "5", "8", "Act::Gelu"]
    );
    let narrow = LayernormConfig {
        dtype: DType::F16,
        activation: Activation::None,
        tile: NARROW_PINGPONG_TILE,
    };
    assert_eq!(
        narrow.instantiation().name,
        "matmul_f16_tmapp_ln_bn64_s8_g8_none"
    );
}

#[test]
fn every_row_statistics_instantiation_is_registered_once_beside_its_stream16_twin() {
    let registered = instantiations();
    let mut count = 0;
    for tile in ROW_STATISTICS_TILES {
        assert_eq!(tile.program, Program::TmaPingPong);
        for dtype in [DType::F16, DType::BF16] {
            for activation in Activation::EPILOGUE {
                let config = MatmulConfig {
                    dtype,
                    residual: dtype,
                    output: dtype,
                    tile,
                    activation,
                    b_layout: WeightLayout::NK,
                    vec16: true,
                    with_residual: true,
                };
                assert!(config.is_pingpong_stream16());
                let plain = config.instantiation();
                let stats = config.row_stats_instantiation();
                assert_eq!(stats.name, format!("{}_stats", plain.name));
                assert_eq!(stats.function, "matmul_block_tma_pingpong_stream16_stats");
                // The same program: template arguments, threads; one parameter more.
                assert_eq!(stats.template_args, plain.template_args);
                assert_eq!(stats.block_threads, plain.block_threads);
                assert_eq!(stats.params.len(), plain.params.len() + 1);
                for inst in [&plain, &stats] {
                    assert_eq!(
                        registered.iter().filter(|i| *i == inst).count(),
                        1,
                        "{}",
                        inst.name
                    );
                }
                count += 1;
            }
        }
    }
    assert_eq!(count, 3 * 2 * Activation::EPILOGUE.len());
}

#[test]
fn row_statistics_selection_keeps_to_the_stream16_tiles_by_select_tiles_rule() {
    // ViT-B/16's proj (K 768) and fc2 (K 3072) into the stream at batch 1 to 256 on 132 SMs:
    // batch 1 on the narrow tile, as select_tile picks it; always one of the 16-bit ping-pong
    // tiles, and where select_tile's choice is one of them, that one.
    for k in [768, 3072] {
        for batch in [1usize, 8, 64, 256] {
            let m = 197 * batch;
            let tile = select_row_statistics_tile(m, 768, k, 132);
            assert!(ROW_STATISTICS_TILES.contains(&tile), "{m}x768x{k}");
            if batch == 1 {
                assert_eq!(tile, NARROW_PINGPONG_TILE, "{m}x768x{k}");
            }
            let p = MatmulProblem::linear(
                m,
                768,
                k,
                Epilogue {
                    residual: true,
                    ..Epilogue::NONE
                },
            );
            let general = select_tile(DType::BF16, &p, 132, (9, 0));
            if ROW_STATISTICS_TILES.contains(&general) {
                assert_eq!(tile, general, "{m}x768x{k}");
            }
        }
    }
    // Batch-invariant selection chooses as for INVARIANT_ROWS rows: never the narrow tile.
    assert_ne!(
        select_row_statistics_tile(INVARIANT_ROWS, 768, 768, 132),
        NARROW_PINGPONG_TILE
    );
}

#[test]
fn row_statistics_problems_the_program_does_not_take_are_refused_with_the_reason() {
    let stream = |n: usize, residual: bool| {
        MatmulProblem::linear(
            197,
            n,
            768,
            Epilogue {
                bias: true,
                residual,
                ..Epilogue::NONE
            },
        )
    };
    assert_eq!(
        row_statistics_problem_support(DType::BF16, &stream(768, true)),
        Ok(())
    );
    for (dtype, p, reason) in [
        (DType::F32, stream(768, true), "f16 or bf16"),
        (DType::F16, stream(768, false), "residual"),
        (DType::F16, stream(776, true), "multiple of 64"),
    ] {
        let e = row_statistics_problem_support(dtype, &p).unwrap_err();
        assert!(e.contains(reason), "{e}");
    }
    let batched = MatmulProblem {
        batch: 2,
        ..stream(768, true)
    };
    assert!(row_statistics_problem_support(DType::F16, &batched)
        .unwrap_err()
        .contains("one [M, K] x [N, K]"));
}

#[test]
fn ping_pong_tiles_have_a_producer_warpgroup_exactly_where_the_kernel_gives_registers() {
    // tma_pingpong.cu's kProducerWarpgroup is BN == 128: the launch's threads must agree.
    let pingpong = TMA_TILES
        .iter()
        .chain(FP8_TILES.iter())
        .chain(LAYERNORM_TILES.iter())
        .chain(ROW_STATISTICS_TILES.iter())
        .filter(|t| t.program == Program::TmaPingPong);
    let mut seen = 0;
    for tile in pingpong {
        assert_eq!(
            tile.pingpong_producer_warpgroup(),
            tile.block_n == 128,
            "{}",
            tile.name()
        );
        assert_eq!(
            tile.threads(),
            if tile.block_n == 128 { 384 } else { 288 },
            "{}",
            tile.name()
        );
        seen += 1;
    }
    assert!(seen >= 4, "{seen} ping-pong tiles");
    assert!(
        !TMA_TILES[0].pingpong_producer_warpgroup(),
        "a cooperative tile"
    );
}
