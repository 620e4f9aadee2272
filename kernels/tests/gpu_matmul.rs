//! The GPU matmul against its CPU twin (`vitrt_kernels::matmul::cpu::matmul`), on random data.
//!
//! Every run poisons the whole output buffer first (0xFF bytes: NaN in f32, f16 and bf16), then
//! checks that every element the problem writes holds the right value and that every other
//! byte, the gaps between strided rows and a guard region after the last one, still holds the
//! poison.
//!
//! Tolerances, as the largest `|gpu - twin| / max(|twin|, rms(twin) / 10)` over the output (the
//! floor keeps cancellation-sized values from dividing by ~0):
//! - f32: 1e-4. Both sides accumulate in fp32 (the GPU with CUDA-core FMA, no TF32); what is
//!   left is summation order, ~1e-6 here.
//! - f16: 2e-3; bf16: 1e-2. The twin runs in f32 on the same f16/bf16-rounded inputs, so the
//!   products and sums match to fp32 rounding; the difference is the one cast of the result to
//!   the storage type, at most half an ulp: 2^-11 = 4.9e-4 (f16) and 2^-8 = 3.9e-3 (bf16)
//!   relative. The bounds leave 4x and 2.5x room for fp32 summation order and for the
//!   activation's slope (at most 1.13).
//!
//! Run on a GPU machine: `cargo test --release -p vitrt-kernels --test gpu_matmul -- --ignored
//! --test-threads=1` (add `--nocapture` to see worst errors and the speed table).

mod common;

use common::matmul::{epilogue_number, linear_case, random, run, strided, upload, Worst};
use common::new_gpu;
use rand::{rngs::StdRng, SeedableRng};
use vitrt_kernels::matmul::{self, tiles_for};
use vitrt_kernels::{Activation, DType, Epilogue, MatmulProblem, WeightLayout};

/// The shapes every dimension is drawn from: tiny, prime-ish, around 197 (ViT tokens), large.
const RAGGED: [usize; 6] = [1, 7, 197, 198, 257, 1000];

#[test]
#[ignore = "needs a CUDA GPU"]
fn linear_layers_match_the_twin_on_ragged_shapes() {
    let gpu = new_gpu();
    let mut rng = StdRng::seed_from_u64(11);
    // Every size of RAGGED appears as m, as n and as k, against small and large partners.
    let shapes = [
        (1, 1, 1),
        (1, 7, 197),
        (7, 1, 1000),
        (7, 257, 7),
        (197, 198, 257),
        (198, 197, 7),
        (257, 1000, 1),
        (1000, 257, 198),
        (7, 1000, 257),
        (257, 7, 198),
        (198, 1, 1000),
        (1, 257, 198),
        (197, 1000, 197),
        (1000, 198, 257),
        (1000, 1000, 1000),
    ];
    for &(m, n, k) in &shapes {
        assert!([m, n, k].iter().all(|d| RAGGED.contains(d)));
    }
    let mut worst = Worst::default();
    let mut number = 0;
    for dtype in DType::ALL {
        for layout in [WeightLayout::NK, WeightLayout::KN] {
            for &shape in &shapes {
                // Plain rows; padded rows and offsets (16-byte copies off, gaps in C); then
                // misaligned base pointers.
                let (pad, shift) = [(0, 0), (5, 0), (0, 1)][number % 3];
                let case = linear_case(
                    dtype,
                    shape,
                    layout,
                    epilogue_number(number),
                    pad,
                    shift,
                    None,
                    &mut rng,
                );
                worst.record(dtype, run(&gpu, &case), &case.label);
                number += 1;
            }
        }
    }
    worst.print("linear");
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn every_tile_shape_matches_the_twin() {
    // The launcher's choice covers only some tiles on the shapes above; force each one, with
    // the whole epilogue, on plain and padded rows. (Rows that rule out 16-byte copies send
    // every f16/bf16 tile to the small one; the other tests cover that path.)
    let gpu = new_gpu();
    let mut rng = StdRng::seed_from_u64(12);
    let mut worst = Worst::default();
    let full = Epilogue {
        alpha: 0.5,
        bias: true,
        activation: Activation::Gelu,
        residual: true,
    };
    for dtype in DType::ALL {
        for &tile in tiles_for(dtype) {
            for layout in [WeightLayout::NK, WeightLayout::KN] {
                for (shape, pad) in [((197, 198, 257), 0), ((257, 1000, 197), 8), ((7, 1, 64), 0)] {
                    let case =
                        linear_case(dtype, shape, layout, full, pad, 0, Some(tile), &mut rng);
                    worst.record(dtype, run(&gpu, &case), &case.label);
                }
            }
        }
    }
    worst.print("tiles");
}

/// One unit in the last place of `v` stored as `dtype` (16-bit types only), with the smallest
/// subnormal's spacing as the floor.
fn ulp(dtype: DType, v: f64) -> f64 {
    let (mantissa_bits, min_exponent) = match dtype {
        DType::F16 => (10, -14),
        DType::BF16 => (7, -126),
        DType::F32 | DType::E4M3 => unreachable!("16-bit outputs only"),
    };
    let exponent = (v.abs().log2().floor() as i32).max(min_exponent);
    2f64.powi(exponent - mantissa_bits)
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn activations_into_16_bit_outputs_are_within_an_ulp_of_exact() {
    // The epilogues of 16-bit outputs compute GELU with an approximate erf (Abramowitz-Stegun
    // 7.1.26 on MUFU operations) and SiLU/QuickGELU with approximate exp and reciprocal. The
    // twin tests bound errors relative to the output's scale, which cannot see a tail value
    // (GELU(-4) = -1.3e-4) gone wrong. Here every tile computes act(x_m + y_n) on a dense
    // sweep of x in [-10, 10] (A[m] = (x_m, 1, 0...), B[n] = (1, y_n, 0...): exact sums), and
    // each output must lie within one ulp of the exact activation rounded to nothing, plus
    // 1e-6 absolute for the approximations' own error (A-S: 1.5e-7 of erf).
    let gpu = new_gpu();
    let (m, n, k) = (2048usize, 128usize, 64usize);
    for dtype in [DType::F16, DType::BF16] {
        let xs: Vec<f32> = (0..m)
            .map(|i| dtype.round(-10.0 + 20.0 * i as f32 / (m - 1) as f32))
            .collect();
        let ys: Vec<f32> = (0..n)
            .map(|j| dtype.round(0.01 * j as f32 / n as f32))
            .collect();
        let mut a = vec![0.0f32; m * k];
        for (i, &x) in xs.iter().enumerate() {
            a[i * k] = x;
            a[i * k + 1] = 1.0;
        }
        let mut b = vec![0.0f32; n * k];
        for (j, &y) in ys.iter().enumerate() {
            b[j * k] = 1.0;
            b[j * k + 1] = y;
        }
        let a_dev = upload(&gpu, dtype, &a, 0);
        let b_dev = upload(&gpu, dtype, &b, 0);
        let c_buffer = gpu.alloc(m * n * dtype.size_bytes()).unwrap();
        let c_view = c_buffer.view(0, m * n, dtype).unwrap();
        for activation in [
            Activation::Gelu,
            Activation::GeluTanh,
            Activation::QuickGelu,
            Activation::Silu,
        ] {
            for &tile in tiles_for(dtype) {
                if !tile.runs_on(gpu.compute_capability()) {
                    continue;
                }
                let problem = MatmulProblem {
                    batch: 1,
                    heads: 1,
                    m,
                    n,
                    k,
                    a: strided(k, 0, 0),
                    b: strided(k, 0, 0),
                    b_layout: WeightLayout::NK,
                    c: strided(n, 0, 0),
                    r: strided(n, 0, 0),
                    epilogue: Epilogue {
                        alpha: 1.0,
                        bias: false,
                        activation,
                        residual: false,
                    },
                };
                matmul::gpu::matmul_with_tile(
                    &gpu, dtype, &problem, tile, a_dev.view, b_dev.view, None, None, c_view,
                )
                .unwrap_or_else(|e| panic!("{dtype} {activation:?} tile {}: {e}", tile.name()));
                let mut bytes = vec![0u8; m * n * dtype.size_bytes()];
                gpu.download(&c_buffer, 0, &mut bytes).unwrap();
                let got = dtype.decode(&bytes);
                let mut worst = (0.0f64, 0.0f32, 0.0f64, 0.0f32);
                for (i, &x) in xs.iter().enumerate() {
                    for (j, &y) in ys.iter().enumerate() {
                        let v = x + y;
                        let exact = activation.apply(v) as f64;
                        let g = got[i * n + j] as f64;
                        let allowed = ulp(dtype, exact) + 1e-6;
                        let ratio = (g - exact).abs() / allowed;
                        if ratio > worst.0 || ratio.is_nan() {
                            worst = (ratio, v, exact, got[i * n + j]);
                        }
                    }
                }
                let (ratio, v, exact, g) = worst;
                println!(
                    "{dtype} {activation:?} tile {}: worst {ratio:.2} of the allowance (x = {v}: exact {exact:e}, got {g:e})",
                    tile.name()
                );
                assert!(
                    ratio <= 1.0,
                    "{dtype} {activation:?} tile {}: at x = {v} got {g:e}, exact {exact:e} (more than an ulp + 1e-6 away)",
                    tile.name()
                );
            }
        }
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn hopper_tiles_match_the_twin() {
    // The wgmma tiles take only 16-byte aligned rows of [N, K] weights, so their shapes keep
    // every row stride and A/B offset a multiple of 8 elements (pads of 16 and 32 offset A by
    // pad / 2) while M, N and K stay ragged: K past the last whole 64-wide k-tile, N inside the
    // last column tile, M inside the last row tile, padded rows, C and residual views that rule
    // out vector epilogues, every epilogue, C and residual in the operands' type or in f32.
    let gpu = new_gpu();
    if gpu.compute_capability() != (9, 0) {
        eprintln!("SKIPPED: the Hopper tiles need an sm_90 GPU");
        return;
    }
    let mut rng = StdRng::seed_from_u64(19);
    let mut worst = Worst::default();
    let mut number = 0;
    for dtype in [DType::F16, DType::BF16] {
        for &tile in tiles_for(dtype).iter().filter(|t| t.program.is_hopper()) {
            for (shape, pad) in [
                ((197, 200, 264), 0),
                ((257, 1000, 200), 32),
                ((1, 8, 8), 0),
                ((300, 2304, 768), 0),
                ((129, 200, 3072), 16),
                ((64, 64, 0), 0),
                // An odd number of 128-column tiles: the clustered tile's last pair has its
                // second tile past N.
                ((520, 384, 136), 0),
                // More pairs of tiles than clusters fit at once: walks of two pairs.
                ((2048, 1280, 192), 16),
            ] {
                for f32_stream in [false, true] {
                    let epilogue = epilogue_number(number);
                    number += 1;
                    let mut case = linear_case(
                        dtype,
                        shape,
                        WeightLayout::NK,
                        epilogue,
                        pad,
                        0,
                        Some(tile),
                        &mut rng,
                    );
                    if f32_stream && epilogue.residual {
                        case.c_dtype = DType::F32;
                        case.residual_dtype = DType::F32;
                        if let Some(r) = case.residual.as_mut() {
                            *r = random(DType::F32, r.len(), -2.0..2.0, &mut rng);
                        }
                        case.label = format!("{} into an f32 stream", case.label);
                    }
                    worst.record(dtype, run(&gpu, &case), &case.label);
                }
            }
        }
    }
    let loaded = gpu.loaded_kernels();
    assert!(
        loaded.iter().any(|k| k.name.contains("_wg_")),
        "no wgmma instantiation was loaded: the forced Hopper tiles fell back to mma.sync"
    );
    worst.print("hopper tiles");
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn the_narrow_tile_splits_k_and_matches_the_twin() {
    // Batch 1's fc2 (24 narrow tiles, 48 k-tiles: 4 splits of 12) and a ragged cousin (8 tiles,
    // 12 splits of 4), each into the f32 residual stream, into a 16-bit residual and plainly,
    // with GELU where there is no residual. Twice each: the second launch finds the counters
    // the first one's last splits reset.
    let gpu = new_gpu();
    if gpu.compute_capability() != (9, 0) {
        eprintln!("SKIPPED: the narrow ping-pong tile needs an sm_90 GPU");
        return;
    }
    let mut rng = StdRng::seed_from_u64(28);
    let mut worst = Worst::default();
    for dtype in [DType::F16, DType::BF16] {
        let narrow = *tiles_for(dtype)
            .iter()
            .find(|t| t.name() == "tmapp128x64x64_s8")
            .expect("the narrow ping-pong tile is registered");
        for shape in [(197, 768, 3072), (129, 200, 3072)] {
            for (residual, f32_stream) in [(true, true), (true, false), (false, false)] {
                let epilogue = Epilogue {
                    alpha: 1.0,
                    bias: true,
                    activation: if residual {
                        Activation::None
                    } else {
                        Activation::Gelu
                    },
                    residual,
                };
                let mut case = linear_case(
                    dtype,
                    shape,
                    WeightLayout::NK,
                    epilogue,
                    0,
                    0,
                    Some(narrow),
                    &mut rng,
                );
                if f32_stream {
                    case.c_dtype = DType::F32;
                    case.residual_dtype = DType::F32;
                    if let Some(r) = case.residual.as_mut() {
                        *r = random(DType::F32, r.len(), -2.0..2.0, &mut rng);
                    }
                    case.label = format!("{} into an f32 stream", case.label);
                }
                for _ in 0..2 {
                    worst.record(dtype, run(&gpu, &case), &case.label);
                }
            }
        }
    }
    assert!(
        gpu.loaded_kernels()
            .iter()
            .any(|k| k.name.contains("tmapp_bn64") && k.name.contains("_sk_")),
        "the narrow tile's split-K instantiation was not loaded"
    );
    worst.print("narrow tile, split K");
}
