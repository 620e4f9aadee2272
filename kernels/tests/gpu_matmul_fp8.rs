//! The FP8 matmul (`vitrt_kernels::matmul::gpu::matmul_fp8`, e4m3 A and B on the Hopper
//! ping-pong program) against its CPU twin (`matmul::cpu::matmul_fp8`), on quantised random
//! data: activations and weights drawn as floats, each row of A and each row of B scaled so
//! that its largest value is e4m3's 448 and rounded to e4m3 (per-row A scales, as dynamic
//! per-token quantisation makes them, or one scale for all of A, as a calibrated static scale),
//! the scales handed to the epilogue. Every output is poisoned first (0xFF bytes, NaN in f16,
//! bf16 and e4m3) between guard regions that must still hold the poison afterwards.
//!
//! Tolerance, per output element. The twin's accumulator is the exact sum rounded once to f32
//! (products of e4m3 values are exact, and so is their sum in f64). The GPU's is the tensor
//! core's: its FP8 path adds each wgmma's 32 products into an accumulator that keeps about 13
//! mantissa bits (truncating) across the whole of K, not fp32's 23. Each of the K / 32 additions
//! then errs by at most 2^-13 of a partial sum, itself at most S = Σ_k |A[m, k] · B[n, k]|, so
//!
//!     |acc_gpu - acc_twin| <= ceil(K / 32) · 2^-13 · S      (times the scales a_s · b_s)
//!
//! (1.2% of S at K = 3072 in the worst case of same-signed products; random signs stay far
//! below). A mistake of layout, a lost k-step or a wrong scale errs by a sizeable part of S and
//! fails it. The epilogue adds: the activation's slope (at most 1.13 for GELU; 1.2 allowed),
//! its approximation in the 16-bit epilogue (1e-6 absolute), and the store's rounding, which
//! may land one ulp apart on either side when the two values straddle a rounding boundary: one
//! ulp of the output type at the twin's value (f16 2^-10, bf16 2^-7 relative; e4m3 2^-3, its
//! subnormals 2^-9 apart). An e4m3 C must further hold the twin's very code for at least 90%
//! of its elements.
//!
//! Run on an H100 or H200: `cargo test --release -p vitrt-kernels --test gpu_matmul_fp8 --
//! --ignored --test-threads=1 --nocapture` (prints each case's worst error as a share of its
//! tolerance, and how often e4m3 codes differ).

mod common;

use common::{new_gpu, upload, GUARD_BYTES, POISON};
use rand::{rngs::StdRng, Rng, SeedableRng};
use rayon::prelude::*;
use vitrt_kernels::cuda::{DevPtr, DeviceBuffer, Gpu};
use vitrt_kernels::e4m3;
use vitrt_kernels::matmul::{
    cpu, gpu as matmul_gpu, ActivationScale, E4m3Ptr, Fp8Destination, Fp8Operands, Fp8Output,
    Fp8Problem, MatmulTile, FP8_TILES,
};
use vitrt_kernels::{Activation, DType};

/// One FP8 problem with its host operands.
struct Case {
    label: String,
    p: Fp8Problem,
    /// `[M, K]` and `[N, K]` e4m3 codes.
    a: Vec<u8>,
    b: Vec<u8>,
    a_scale: Vec<f32>,
    b_scale: Vec<f32>,
    /// Values of `p.half`.
    bias: Vec<f32>,
    residual: Vec<f32>,
    out_scale: f32,
    /// C is the residual's buffer (`x += f(x)`, as proj and fc2 run in the model).
    in_place: bool,
    /// A tile forced instead of the launcher's choice.
    tile: Option<MatmulTile>,
}

/// Rows of `cols` values uniform in `-range..range`, quantised to e4m3 with one scale a row
/// (`per_row`) or one for all: (codes, scales), value ≈ code · scale.
fn quantise(
    rows: usize,
    cols: usize,
    range: f32,
    per_row: bool,
    rng: &mut StdRng,
) -> (Vec<u8>, Vec<f32>) {
    let values: Vec<f32> = (0..rows * cols)
        .map(|_| rng.random_range(-range..range))
        .collect();
    let amax = |row: &[f32]| row.iter().fold(0.0f32, |m, v| m.max(v.abs())).max(1e-12);
    let scales: Vec<f32> = if per_row {
        values
            .chunks(cols.max(1))
            .map(|r| amax(r) / e4m3::MAX)
            .collect()
    } else {
        vec![amax(&values) / e4m3::MAX]
    };
    let codes = values
        .iter()
        .enumerate()
        .map(|(i, &v)| e4m3::encode(v / scales[if per_row { i / cols } else { 0 }]))
        .collect();
    (codes, scales)
}

impl Case {
    /// A case of `p` with operands like a ViT layer's: activations in [-4, 4] and weights in
    /// [-0.1, 0.1] before quantisation, bias and residual of `p.half` in [-1, 1].
    fn random(label: String, p: Fp8Problem, rng: &mut StdRng) -> Case {
        let per_row = p.activation_scale == ActivationScale::PerRow;
        let (a, a_scale) = quantise(p.m, p.k, 4.0, per_row, rng);
        let (b, b_scale) = quantise(p.n, p.k, 0.1, true, rng);
        let half = |n: usize, rng: &mut StdRng| -> Vec<f32> {
            (0..n)
                .map(|_| p.half.round(rng.random_range(-1.0f32..1.0)))
                .collect()
        };
        let bias = half(p.n, rng);
        let residual = if p.residual {
            half(p.m * p.n, rng)
        } else {
            Vec::new()
        };
        Case {
            label,
            p,
            a,
            b,
            a_scale,
            b_scale,
            bias,
            residual,
            // Outputs of a few units land across e4m3's range, the largest saturating.
            out_scale: 1.0 / 16.0,
            in_place: false,
            tile: None,
        }
    }

    /// What the twin stores, and each element's S = a_s · b_s · Σ_k |A · B| (the twin run on
    /// the codes' magnitudes, no epilogue, into bf16 for its range).
    fn twin(&self) -> (Vec<f32>, Vec<f32>) {
        let p = &self.p;
        let mut want = vec![0.0f32; p.m * p.n];
        cpu::matmul_fp8(
            p,
            &self.a,
            &self.b,
            &self.a_scale,
            &self.b_scale,
            Some(&self.bias),
            p.residual.then_some(self.residual.as_slice()),
            self.out_scale,
            &mut want,
        );
        let magnitude = |codes: &[u8]| -> Vec<u8> { codes.par_iter().map(|c| c & 0x7F).collect() };
        let plain = Fp8Problem {
            output: Fp8Output::Half,
            half: DType::BF16,
            bias: false,
            activation: Activation::None,
            residual: false,
            ..*p
        };
        let mut sums = vec![0.0f32; p.m * p.n];
        cpu::matmul_fp8(
            &plain,
            &magnitude(&self.a),
            &magnitude(&self.b),
            &self.a_scale,
            &self.b_scale,
            None,
            None,
            1.0,
            &mut sums,
        );
        (want, sums)
    }
}

/// Bytes on the device between two poisoned guard regions; the view starts after the first.
struct Guarded {
    buffer: DeviceBuffer,
    len_bytes: usize,
}

impl Guarded {
    fn new(gpu: &Gpu, contents: Option<&[u8]>, len_bytes: usize) -> Guarded {
        let mut bytes = vec![POISON; GUARD_BYTES + len_bytes + GUARD_BYTES];
        if let Some(contents) = contents {
            bytes[GUARD_BYTES..GUARD_BYTES + len_bytes].copy_from_slice(contents);
        }
        let buffer = gpu.alloc(bytes.len()).unwrap();
        gpu.upload(&buffer, 0, &bytes).unwrap();
        Guarded { buffer, len_bytes }
    }

    fn e4m3(&self) -> E4m3Ptr {
        E4m3Ptr::of(&self.buffer, GUARD_BYTES, self.len_bytes).unwrap()
    }

    fn typed(&self, dtype: DType) -> DevPtr {
        self.buffer
            .view(GUARD_BYTES, self.len_bytes / dtype.size_bytes(), dtype)
            .unwrap()
    }

    /// The bytes between the guards, after checking that the guards hold only poison.
    fn read(&self, gpu: &Gpu, label: &str) -> Vec<u8> {
        let mut bytes = vec![0u8; self.buffer.len_bytes()];
        gpu.download(&self.buffer, 0, &mut bytes).unwrap();
        let end = GUARD_BYTES + self.len_bytes;
        assert!(
            bytes[..GUARD_BYTES].iter().all(|&b| b == POISON),
            "{label}: wrote before C"
        );
        assert!(
            bytes[end..].iter().all(|&b| b == POISON),
            "{label}: wrote past the end of C"
        );
        bytes[GUARD_BYTES..end].to_vec()
    }
}

/// One ulp of a value stored as `output` at `v`.
fn ulp(output: Fp8Output, half: DType, v: f64) -> f64 {
    let (mantissa_bits, min_exponent) = match (output, half) {
        (Fp8Output::E4m3, _) => (3, -6),
        (_, DType::F16) => (10, -14),
        _ => (7, -126),
    };
    let exponent = (v.abs().log2().floor() as i32).max(min_exponent);
    2f64.powi(exponent - mantissa_bits)
}

/// Runs the case on the GPU and compares it with the twin; returns the worst error as a share
/// of its tolerance, and the share of e4m3 codes unlike the twin's.
fn run(gpu: &Gpu, case: &Case) -> (f64, f64) {
    let p = &case.p;
    let (want, sums) = case.twin();
    let a = Guarded::new(gpu, Some(&case.a), case.a.len());
    let b = Guarded::new(gpu, Some(&case.b), case.b.len());
    let (_a_scale_buffer, a_scale) = upload(gpu, DType::F32, &case.a_scale, 0);
    let (_b_scale_buffer, b_scale) = upload(gpu, DType::F32, &case.b_scale, 0);
    let (_bias_buffer, bias) = upload(gpu, p.half, &case.bias, 0);
    let (_out_scale_buffer, out_scale) = upload(gpu, DType::F32, &[case.out_scale], 0);
    let c_bytes = p.m * p.n * if p.output == Fp8Output::E4m3 { 1 } else { 2 };
    let residual_bytes = p.half.encode(&case.residual);
    let c = Guarded::new(
        gpu,
        case.in_place.then_some(residual_bytes.as_slice()),
        c_bytes,
    );
    let separate_residual =
        (p.residual && !case.in_place).then(|| upload(gpu, p.half, &case.residual, 0));
    let residual = if case.in_place {
        Some(c.typed(p.half))
    } else {
        separate_residual.as_ref().map(|(_, view)| *view)
    };
    let ops = Fp8Operands {
        a: a.e4m3(),
        b: b.e4m3(),
        a_scale,
        b_scale,
        bias: Some(bias),
        residual,
        c: match p.output {
            Fp8Output::Half => Fp8Destination::Half(c.typed(p.half)),
            Fp8Output::E4m3 => Fp8Destination::E4m3 {
                c: c.e4m3(),
                scale: out_scale,
            },
        },
    };
    match case.tile {
        Some(tile) => matmul_gpu::matmul_fp8_with_tile(gpu, p, tile, &ops),
        None => matmul_gpu::matmul_fp8(gpu, p, &ops),
    }
    .unwrap_or_else(|e| panic!("{}: {e}", case.label));
    gpu.synchronize().unwrap();
    let raw = c.read(gpu, &case.label);
    let got: Vec<f32> = match p.output {
        Fp8Output::Half => p.half.decode(&raw),
        Fp8Output::E4m3 => e4m3::decode_slice(&raw),
    };

    let steps = p.k.div_ceil(32) as f64;
    let inverse = if p.output == Fp8Output::E4m3 {
        1.0 / case.out_scale as f64
    } else {
        1.0
    };
    let mut worst = 0.0f64;
    let mut failures = Vec::new();
    let mut codes_unlike = 0usize;
    for (i, (&g, &w)) in got.iter().zip(&want).enumerate() {
        let accumulation = steps * 2f64.powi(-13) * sums[i] as f64;
        let allowed =
            1.2 * (accumulation + 1e-6) * inverse + ulp(p.output, p.half, w as f64) + 1e-6;
        let d = (g as f64 - w as f64).abs();
        if g != w {
            codes_unlike += 1;
        }
        if d.is_nan() || d > allowed {
            if failures.len() < 8 {
                failures.push(format!(
                    "[{}, {}]: got {g}, want {w} (allowed {allowed:.3e}, S {})",
                    i / p.n,
                    i % p.n,
                    sums[i]
                ));
            }
            worst = f64::INFINITY;
        } else {
            worst = worst.max(d / allowed);
        }
    }
    assert!(
        failures.is_empty(),
        "{}: {} of {} outputs out of tolerance:\n{}",
        case.label,
        failures.len(),
        got.len(),
        failures.join("\n")
    );
    let unlike = codes_unlike as f64 / got.len().max(1) as f64;
    if p.output == Fp8Output::E4m3 {
        assert!(
            unlike <= 0.1,
            "{}: {:.1}% of the e4m3 codes differ from the twin's",
            case.label,
            100.0 * unlike
        );
    }
    println!(
        "{:<64} worst {:.3} of tolerance, {:.2}% unlike the twin",
        case.label,
        worst,
        100.0 * unlike
    );
    (worst, unlike)
}

/// A problem's epilogue, in words, for labels.
fn describe(p: &Fp8Problem) -> String {
    format!(
        "{}x{}x{} {} a_scale {:?}{}{}{} -> {}",
        p.m,
        p.n,
        p.k,
        p.half,
        p.activation_scale,
        if p.bias { " +bias" } else { "" },
        if p.activation != Activation::None {
            format!(" {}", p.activation.short_name())
        } else {
            String::new()
        },
        if p.residual { " +residual" } else { "" },
        p.output_name()
    )
}

#[test]
#[ignore = "needs an sm_90 GPU"]
fn fp8_matches_the_twin_on_vit_b_layers() {
    // ViT-B/16's four linear layers at batch 1, 8 and 64, each with its epilogue in the model:
    // qkv and fc1 (bias, GELU) write 16-bit activations, proj and fc2 add into a 16-bit
    // residual stream in place; fc1 also into e4m3 (what fc2 would read). Both activation
    // scale kinds and both 16-bit types. Batch 1 runs on the narrow tile, fc2's K = 3072 there
    // split four ways.
    let gpu = new_gpu();
    let mut rng = StdRng::seed_from_u64(38);
    let layers = [
        ("qkv", 2304, 768, false, Activation::None, Fp8Output::Half),
        ("proj", 768, 768, true, Activation::None, Fp8Output::Half),
        ("fc1", 3072, 768, false, Activation::Gelu, Fp8Output::Half),
        ("fc1", 3072, 768, false, Activation::Gelu, Fp8Output::E4m3),
        ("fc2", 768, 3072, true, Activation::None, Fp8Output::Half),
    ];
    let mut number = 0;
    for batch in [1, 8, 64] {
        for &(name, n, k, residual, activation, output) in &layers {
            for activation_scale in [ActivationScale::PerRow, ActivationScale::PerTensor] {
                let half = [DType::F16, DType::BF16][number % 2];
                number += 1;
                let p = Fp8Problem {
                    output,
                    activation_scale,
                    bias: true,
                    activation,
                    residual,
                    ..Fp8Problem::linear(197 * batch, n, k, half)
                };
                let label = format!("vit-b16/{name}/b{batch}: {}", describe(&p));
                let mut case = Case::random(label, p, &mut rng);
                case.in_place = residual;
                run(&gpu, &case);
            }
        }
    }
}

#[test]
#[ignore = "needs an sm_90 GPU"]
fn fp8_matches_the_twin_on_odd_shapes_on_every_tile_and_epilogue() {
    // M of one row, three rows and one past a tile; N not a multiple of either tile's width
    // (200 = 3 · 64 + 8; 776 = 6 · 128 + 8; 784 = 6 · 128 + 16, the e4m3 C's) and smaller than
    // one (16); K below one k-tile, not a
    // multiple of it (784 = 6 · 128 + 16) and long. Every tile forced, every epilogue, both
    // 16-bit types and both activation scale kinds in turn.
    let gpu = new_gpu();
    let mut rng = StdRng::seed_from_u64(39);
    let shapes = [
        (1, 200, 16),
        (3, 776, 784),
        (130, 200, 784),
        (130, 16, 48),
        (1, 776, 3072),
        (3, 64, 128),
        (130, 784, 48),
    ];
    // (bias, activation, residual, output)
    let epilogues = [
        (false, Activation::None, false, Fp8Output::Half),
        (true, Activation::None, false, Fp8Output::Half),
        (true, Activation::Gelu, false, Fp8Output::Half),
        (false, Activation::Silu, true, Fp8Output::Half),
        (true, Activation::None, true, Fp8Output::Half),
        (true, Activation::Gelu, false, Fp8Output::E4m3),
        (false, Activation::QuickGelu, false, Fp8Output::E4m3),
    ];
    let mut number = 0;
    for tile in FP8_TILES {
        for &(m, n, k) in &shapes {
            for &(bias, activation, residual, output) in &epilogues {
                if output == Fp8Output::E4m3 && n % 16 != 0 {
                    continue;
                }
                let p = Fp8Problem {
                    output,
                    activation_scale: [ActivationScale::PerRow, ActivationScale::PerTensor]
                        [number % 2],
                    bias,
                    activation,
                    residual,
                    ..Fp8Problem::linear(m, n, k, [DType::BF16, DType::F16][(number / 2) % 2])
                };
                number += 1;
                let label = format!("{} {}", tile.name(), describe(&p));
                let mut case = Case::random(label, p, &mut rng);
                case.tile = Some(tile);
                case.in_place = residual && number % 3 == 0;
                run(&gpu, &case);
            }
        }
    }
}

#[test]
#[ignore = "needs an sm_90 GPU"]
fn fp8_e4m3_output_rounds_and_saturates_as_the_codec() {
    // Exact sums, so that the only rounding is the store's: A[m] = (x_m, 1, 0, ...) and
    // B[n] = (1, y_n, 0, ...) with x, y e4m3 values make acc = x_m + y_n exactly (an f32 with
    // at most 12 significant bits), and with unit scales C must hold e4m3::encode(x_m + y_n)
    // code for code: ties to even between neighbouring codes, saturation to ±448 from sums up
    // to 896, zeros and subnormals, on both tiles.
    let gpu = new_gpu();
    let values: Vec<u8> = (0u8..=0xFE)
        .filter(|&c| !e4m3::decode(c).is_nan())
        .collect();
    let (m, n, k) = (values.len(), 256usize, 32usize);
    let mut a = vec![0u8; m * k];
    let mut b = vec![0u8; n * k];
    for (i, &code) in values.iter().enumerate() {
        a[i * k] = code;
        a[i * k + 1] = e4m3::encode(1.0);
    }
    for j in 0..n {
        b[j * k] = e4m3::encode(1.0);
        b[j * k + 1] = values[(j * 7) % values.len()];
    }
    for tile in FP8_TILES {
        let p = Fp8Problem {
            output: Fp8Output::E4m3,
            ..Fp8Problem::linear(m, n, k, DType::BF16)
        };
        let case = Case {
            label: format!("{} e4m3 rounding", tile.name()),
            p,
            a: a.clone(),
            b: b.clone(),
            a_scale: vec![1.0; m],
            b_scale: vec![1.0; n],
            bias: vec![0.0; n],
            residual: Vec::new(),
            out_scale: 1.0,
            in_place: false,
            tile: Some(tile),
        };
        let (_, unlike) = run(&gpu, &case);
        assert_eq!(
            unlike, 0.0,
            "{}: every code as the codec rounds",
            case.label
        );
    }
}

#[test]
#[ignore = "needs an sm_90 GPU"]
fn fp8_refuses_what_its_program_cannot_take_with_the_reason() {
    let gpu = new_gpu();
    let attempt = |p: Fp8Problem, a_offset: usize, output: Option<Fp8Destination>| {
        let case = Case::random(describe(&p), p, &mut StdRng::seed_from_u64(1));
        let a = gpu.alloc(case.a.len() + 16).unwrap();
        let b = Guarded::new(&gpu, Some(&case.b), case.b.len());
        let (_s1, a_scale) = upload(&gpu, DType::F32, &case.a_scale, 0);
        let (_s2, b_scale) = upload(&gpu, DType::F32, &case.b_scale, 0);
        let c = Guarded::new(&gpu, None, p.m * p.n * 2);
        let ops = Fp8Operands {
            a: E4m3Ptr::of(&a, a_offset, case.a.len()).unwrap(),
            b: b.e4m3(),
            a_scale,
            b_scale,
            bias: None,
            residual: None,
            c: output.unwrap_or(Fp8Destination::Half(c.typed(p.half))),
        };
        matmul_gpu::matmul_fp8(&gpu, &p, &ops)
            .expect_err("refused")
            .to_string()
    };
    let e = attempt(Fp8Problem::linear(4, 64, 24, DType::F16), 0, None);
    assert!(e.contains("multiple of 16"), "{e}");
    let e = attempt(Fp8Problem::linear(4, 100, 32, DType::F16), 0, None);
    assert!(e.contains("C's rows"), "{e}");
    let e = attempt(Fp8Problem::linear(4, 64, 32, DType::F16), 8, None);
    assert!(e.contains("16-byte boundary"), "{e}");
    let e = attempt(
        Fp8Problem {
            output: Fp8Output::E4m3,
            ..Fp8Problem::linear(4, 64, 32, DType::F16)
        },
        0,
        None,
    );
    assert!(e.contains("destination"), "{e}");
}
