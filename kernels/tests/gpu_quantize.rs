//! The e4m3 quantisation kernels against their CPU twins, bit for bit: every code and every
//! scale must be the twin's, not merely close (both take the same f32 operations in the same
//! order: `vitrt_kernels::quantize`'s documentation and e4m3.cuh).
//!
//! - `quantize::gpu::quantize_rows` (quantize.cu), per-row dynamic scales and a per-tensor
//!   static one, from f32, f16 and bf16 rows: 1 x 16, 197 x 768 (ViT-B/16's tokens), 50432 x
//!   768 (a batch of 256 images: more rows than the GPU holds groups at once), 7 x 3072 (fc2's
//!   input: eight warps a row) and rows too long for registers (streamed); aligned operands and
//!   ones an element off (scalar accesses). Rows of zeros, of tiny values (e4m3 subnormals), with
//!   an outlier, a NaN and an infinity are among the random ones.
//! - `layernorm::gpu::layernorm_e4m3` (layernorm.cu's e4m3 entry point) against
//!   `layernorm::cpu::layernorm_e4m3`, which adds the statistics in the program's order: the same
//!   shapes, rows around a large mean.
//! - `layernorm::gpu::layernorm_e4m3_static` (one calibrated scale for every row) against
//!   `layernorm::cpu::layernorm_e4m3_static`: the same shapes, with a scale that saturates the
//!   rows' largest values and one that leaves them in range.
//! - The launchers' argument checks.
//!
//! Codes are written between poisoned guards (0xFF, a NaN code the kernels never write): every
//! code must be written and nothing past them. Needs an sm_89 or later GPU (H100, H200):
//! `cargo test --release -p vitrt-kernels --test gpu_quantize -- --ignored --nocapture`.

mod common;

use common::{gpu, random, upload, Poisoned, GUARD_BYTES, POISON};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use vitrt_kernels::cuda::{DeviceBuffer, E4m3Ptr, Gpu, KernelError};
use vitrt_kernels::layernorm;
use vitrt_kernels::quantize::{self, ActivationScale, QuantizeProblem};
use vitrt_kernels::DType;

/// (rows, cols) of every case: the brief's ViT shapes, and rows streamed through the program
/// (past 2048 vectors of 16 bytes: 16400 halves, 8208 f32).
const SHAPES: [(usize, usize); 6] = [
    (1, 16),
    (197, 768),
    (50432, 768),
    (7, 3072),
    (3, 16400),
    (5, 8208),
];

/// E4M3 codes on the device between two poisoned guards.
struct GuardedCodes {
    buffer: DeviceBuffer,
    offset: usize,
    len: usize,
}

impl GuardedCodes {
    /// `len` codes starting `misalign` bytes past the first guard.
    fn new(gpu: &Gpu, len: usize, misalign: usize) -> GuardedCodes {
        let offset = GUARD_BYTES + misalign;
        let total = offset + len + GUARD_BYTES;
        let buffer = gpu.alloc(total).unwrap();
        gpu.upload(&buffer, 0, &vec![POISON; total]).unwrap();
        GuardedCodes {
            buffer,
            offset,
            len,
        }
    }

    fn view(&self) -> E4m3Ptr {
        E4m3Ptr::of(&self.buffer, self.offset, self.len).unwrap()
    }

    /// The codes, after checking that the guards still hold only poison.
    fn read(&self, gpu: &Gpu, case: &str) -> Vec<u8> {
        let mut bytes = vec![0u8; self.buffer.len_bytes()];
        gpu.download(&self.buffer, 0, &mut bytes).unwrap();
        let end = self.offset + self.len;
        assert!(
            bytes[..self.offset].iter().all(|&b| b == POISON),
            "{case}: wrote before the codes"
        );
        assert!(
            bytes[end..].iter().all(|&b| b == POISON),
            "{case}: wrote past the codes"
        );
        bytes[self.offset..end].to_vec()
    }
}

/// Panics with the first differences unless the GPU's codes and scales are the twin's, bit for
/// bit. `x` (the input values) and `cols` only describe a mismatch.
fn assert_identical(
    case: &str,
    cols: usize,
    x: &[f32],
    (got_codes, want_codes): (&[u8], &[u8]),
    (got_scales, want_scales): (&[f32], &[f32]),
) {
    let mut failures = Vec::new();
    let mut wrong_scales = 0;
    for (r, (g, w)) in got_scales.iter().zip(want_scales).enumerate() {
        if g.to_bits() != w.to_bits() {
            wrong_scales += 1;
            if failures.len() < 4 {
                failures.push(format!("scale of row {r}: gpu {g:e} twin {w:e}"));
            }
        }
    }
    let mut wrong_codes = 0;
    for (i, (g, w)) in got_codes.iter().zip(want_codes).enumerate() {
        if g != w {
            wrong_codes += 1;
            if failures.len() < 12 {
                failures.push(format!(
                    "row {} col {}: x {:e} gpu {g:#04x} twin {w:#04x}",
                    i / cols,
                    i % cols,
                    x[i]
                ));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{case}: {wrong_codes} of {} codes and {wrong_scales} of {} scales differ from the twin's:\n{}",
        want_codes.len(),
        want_scales.len(),
        failures.join("\n")
    );
}

/// `rows` x `cols` random values of `input` in [-4, 4], with rows of their own among them (as
/// many as there are rows, from 6): zeros, small values beside an outlier of 3000 (e4m3
/// subnormals once scaled), a NaN, an infinity, and large values (which a static scale
/// saturates).
fn rows_with_specials(rng: &mut SmallRng, input: DType, rows: usize, cols: usize) -> Vec<f32> {
    let mut x = random(rng, rows * cols, -4.0, 4.0, input);
    let special_row = |r: usize| r * rows / 6;
    if rows >= 6 {
        let row = |r: usize| special_row(r) * cols..(special_row(r) + 1) * cols;
        x[row(0)].iter_mut().for_each(|v| *v = 0.0);
        // Values up to 0.08 beside an outlier of 3000: below 2^-6 once scaled, e4m3 subnormals.
        x[row(1)]
            .iter_mut()
            .for_each(|v| *v = input.round(*v * 0.02));
        x[row(1).start + cols / 2] = 3000.0;
        x[row(2).start + 5] = f32::NAN;
        x[row(3).start + 7] = f32::NEG_INFINITY;
        x[row(4)]
            .iter_mut()
            .for_each(|v| *v = input.round(*v * 1000.0));
    }
    x
}

/// One quantisation on the GPU against the twin; returns the number of codes compared.
fn quantize_case(
    rng: &mut SmallRng,
    input: DType,
    scale: ActivationScale,
    (rows, cols): (usize, usize),
    misalign: usize,
) -> usize {
    let case = format!("quantize {input} {scale:?} {rows}x{cols} misalign {misalign}");
    let p = QuantizeProblem {
        rows,
        cols,
        input,
        scale,
    };
    let x = rows_with_specials(rng, input, rows, cols);
    let (_xb, xv) = upload(gpu(), input, &x, misalign);
    let codes = GuardedCodes::new(gpu(), rows * cols, misalign);
    // Per tensor: a scale under the data's amax / 448 (the large row's values saturate).
    let given = [rng.random_range(0.01f32..0.05)];
    let mut want_scales = match scale {
        ActivationScale::PerRow => vec![0.0; rows],
        ActivationScale::PerTensor => given.to_vec(),
    };
    let (scales_buffer, scales_view, poisoned) = match scale {
        ActivationScale::PerRow => {
            let poisoned = Poisoned::new(gpu(), DType::F32, rows, 0);
            (None, poisoned.view(), Some(poisoned))
        }
        ActivationScale::PerTensor => {
            let (buffer, view) = upload(gpu(), DType::F32, &given, 0);
            (Some(buffer), view, None)
        }
    };
    quantize::gpu::quantize_rows(gpu(), &p, xv, codes.view(), scales_view).unwrap();
    let got_codes = codes.read(gpu(), &case);
    let got_scales = match (&poisoned, &scales_buffer) {
        (Some(poisoned), _) => poisoned.read(gpu(), &case),
        (None, Some(buffer)) => {
            let mut bytes = vec![0u8; 4];
            gpu().download(buffer, 0, &mut bytes).unwrap();
            DType::F32.decode(&bytes)
        }
        (None, None) => unreachable!("one of the two is made above"),
    };
    let mut want_codes = vec![0u8; rows * cols];
    quantize::cpu::quantize_rows(&p, &x, &mut want_codes, &mut want_scales);
    assert_identical(
        &case,
        cols,
        &x,
        (&got_codes, &want_codes),
        (&got_scales, &want_scales),
    );
    if scale == ActivationScale::PerTensor {
        assert_eq!(got_scales, given, "{case}: the given scale was written to");
    }
    rows * cols
}

#[test]
#[ignore = "needs a CUDA GPU of compute capability 8.9 or later"]
fn per_row_quantisation_matches_its_twin_bit_for_bit() {
    let mut rng = SmallRng::seed_from_u64(80);
    for input in DType::ALL {
        let mut compared = 0;
        for shape in SHAPES {
            compared += quantize_case(&mut rng, input, ActivationScale::PerRow, shape, 0);
        }
        // One element off alignment: the scalar programs, in each layout.
        for shape in [(1, 16), (197, 768), (7, 3072), (3, 16400)] {
            compared += quantize_case(&mut rng, input, ActivationScale::PerRow, shape, 1);
        }
        println!("RESULT quantize per row  {input:<5} {compared:>9} codes identical");
    }
}

#[test]
#[ignore = "needs a CUDA GPU of compute capability 8.9 or later"]
fn per_tensor_quantisation_matches_its_twin_bit_for_bit() {
    let mut rng = SmallRng::seed_from_u64(81);
    for input in DType::ALL {
        let mut compared = 0;
        for shape in SHAPES {
            for misalign in [0, 1] {
                compared +=
                    quantize_case(&mut rng, input, ActivationScale::PerTensor, shape, misalign);
            }
        }
        println!("RESULT quantize static   {input:<5} {compared:>9} codes identical");
    }
}

/// One e4m3 layernorm on the GPU against its twin, rows around `shift`.
fn layernorm_case(rng: &mut SmallRng, input: DType, (rows, cols): (usize, usize), shift: f32) {
    let case = format!("layernorm_e4m3 {input} {rows}x{cols} around {shift}");
    let mut x = random(rng, rows * cols, shift - 4.0, shift + 4.0, input);
    if rows >= 3 {
        // A constant row (y = beta) and a row with a NaN (all NaN codes).
        x[..cols].iter_mut().for_each(|v| *v = input.round(shift));
        x[2 * cols + 3] = f32::NAN;
    }
    let gamma = random(rng, cols, 0.5, 1.5, DType::F32);
    let beta = random(rng, cols, -0.5, 0.5, DType::F32);
    let (_xb, xv) = upload(gpu(), input, &x, 0);
    let (_gb, gv) = upload(gpu(), DType::F32, &gamma, 0);
    let (_bb, bv) = upload(gpu(), DType::F32, &beta, 0);
    let codes = GuardedCodes::new(gpu(), rows * cols, 0);
    let scales = Poisoned::new(gpu(), DType::F32, rows, 0);
    layernorm::gpu::layernorm_e4m3(
        gpu(),
        xv,
        gv,
        bv,
        rows,
        cols,
        1e-5,
        codes.view(),
        scales.view(),
    )
    .unwrap();
    let got_codes = codes.read(gpu(), &case);
    let got_scales = scales.read(gpu(), &case);
    let mut want_codes = vec![0u8; rows * cols];
    let mut want_scales = vec![0.0f32; rows];
    layernorm::cpu::layernorm_e4m3(
        &x,
        &gamma,
        &beta,
        input,
        cols,
        1e-5,
        &mut want_codes,
        &mut want_scales,
    );
    assert_identical(
        &case,
        cols,
        &x,
        (&got_codes, &want_codes),
        (&got_scales, &want_scales),
    );
}

#[test]
#[ignore = "needs a CUDA GPU of compute capability 8.9 or later"]
fn layernorm_e4m3_matches_its_twin_bit_for_bit() {
    let mut rng = SmallRng::seed_from_u64(82);
    for input in DType::ALL {
        for shape in SHAPES {
            // A large common offset: the statistics' order of addition matters most there.
            for shift in [0.0, rng.random_range(-50.0..50.0f32)] {
                layernorm_case(&mut rng, input, shape, shift);
            }
        }
        // Every one-warp layout (rows of 1 to 8 vectors a lane) and the eight-warp ones.
        for cols in [256, 512, 1024, 1536, 2048, 4096, 8192, 16384] {
            layernorm_case(&mut rng, input, (9, cols), 1.0);
        }
        println!("RESULT layernorm_e4m3 {input:<5} identical codes and scales");
    }
}

/// One static-scale e4m3 layernorm on the GPU against its twin, rows around `shift`, every
/// row quantised with `scale`.
fn layernorm_static_case(
    rng: &mut SmallRng,
    input: DType,
    (rows, cols): (usize, usize),
    shift: f32,
    scale: f32,
) {
    let case = format!("layernorm_e4m3_static {input} {rows}x{cols} around {shift}, scale {scale}");
    let mut x = random(rng, rows * cols, shift - 4.0, shift + 4.0, input);
    if rows >= 3 {
        x[..cols].iter_mut().for_each(|v| *v = input.round(shift));
        x[2 * cols + 3] = f32::NAN;
    }
    let gamma = random(rng, cols, 0.5, 1.5, DType::F32);
    let beta = random(rng, cols, -0.5, 0.5, DType::F32);
    let (_xb, xv) = upload(gpu(), input, &x, 0);
    let (_gb, gv) = upload(gpu(), DType::F32, &gamma, 0);
    let (_bb, bv) = upload(gpu(), DType::F32, &beta, 0);
    let (_sb, sv) = upload(gpu(), DType::F32, &[scale], 0);
    let codes = GuardedCodes::new(gpu(), rows * cols, 0);
    layernorm::gpu::layernorm_e4m3_static(gpu(), xv, gv, bv, rows, cols, 1e-5, codes.view(), sv)
        .unwrap();
    let got_codes = codes.read(gpu(), &case);
    let mut want_codes = vec![0u8; rows * cols];
    layernorm::cpu::layernorm_e4m3_static(
        &x,
        &gamma,
        &beta,
        input,
        cols,
        1e-5,
        scale,
        &mut want_codes,
    );
    assert_identical(&case, cols, &x, (&got_codes, &want_codes), (&[], &[]));
}

#[test]
#[ignore = "needs a CUDA GPU of compute capability 8.9 or later"]
fn layernorm_e4m3_static_matches_its_twin_bit_for_bit() {
    let mut rng = SmallRng::seed_from_u64(83);
    for input in DType::ALL {
        for shape in SHAPES {
            for shift in [0.0, rng.random_range(-50.0..50.0f32)] {
                // y is about gamma · N(0, 1) + beta, |y| up to about 4: 4 / 448 keeps it in
                // range, 1 / 448 saturates the largest values.
                for scale in [4.0 / 448.0, 1.0 / 448.0] {
                    layernorm_static_case(&mut rng, input, shape, shift, scale);
                }
            }
        }
        for cols in [256, 512, 1024, 1536, 2048, 4096, 8192, 16384] {
            layernorm_static_case(&mut rng, input, (9, cols), 1.0, 0.01);
        }
        println!("RESULT layernorm_e4m3_static {input:<5} identical codes");
    }
}

fn expect_invalid(result: Result<(), KernelError>, needle: &str) {
    match result {
        Err(KernelError::InvalidArgument(message)) => {
            assert!(message.contains(needle), "{message:?} lacks {needle:?}")
        }
        other => panic!("expected an invalid-argument error about {needle:?}, got {other:?}"),
    }
}

#[test]
#[ignore = "needs a CUDA GPU of compute capability 8.9 or later"]
fn bad_arguments_are_errors_before_anything_is_launched() {
    let (rows, cols) = (4, 32);
    let x = vec![1.0f32; rows * cols];
    let (_xb, xv) = upload(gpu(), DType::F16, &x, 0);
    let (_x1b, x_off) = upload(gpu(), DType::F16, &x, 1);
    let (_gb, gv) = upload(gpu(), DType::F32, &x[..cols], 0);
    let codes = GuardedCodes::new(gpu(), rows * cols, 0);
    let codes_off = GuardedCodes::new(gpu(), rows * cols, 1);
    let scales = Poisoned::new(gpu(), DType::F32, rows, 0);
    let p = QuantizeProblem {
        rows,
        cols,
        input: DType::F16,
        scale: ActivationScale::PerRow,
    };
    let run = |p: &QuantizeProblem| {
        quantize::gpu::quantize_rows(gpu(), p, xv, codes.view(), scales.view())
    };
    expect_invalid(run(&QuantizeProblem { cols: 24, ..p }), "multiple of 16");
    expect_invalid(
        run(&QuantizeProblem {
            input: DType::BF16,
            ..p
        }),
        "holds f16",
    );
    expect_invalid(
        run(&QuantizeProblem {
            rows: rows + 1,
            ..p
        }),
        "needs",
    );
    let short = E4m3Ptr {
        len: rows * cols - 1,
        ..codes.view()
    };
    expect_invalid(
        quantize::gpu::quantize_rows(gpu(), &p, xv, short, scales.view()),
        "codes need",
    );
    let per_tensor_in_f16 = upload(gpu(), DType::F16, &[1.0], 0);
    expect_invalid(
        quantize::gpu::quantize_rows(
            gpu(),
            &QuantizeProblem {
                scale: ActivationScale::PerTensor,
                ..p
            },
            xv,
            codes.view(),
            per_tensor_in_f16.1,
        ),
        "per-tensor quantisation scale",
    );

    let layernorm = |x, codes, cols| {
        layernorm::gpu::layernorm_e4m3(gpu(), x, gv, gv, rows, cols, 1e-5, codes, scales.view())
    };
    expect_invalid(layernorm(xv, codes.view(), 24), "multiple of 16");
    expect_invalid(layernorm(x_off, codes.view(), cols), "x not");
    expect_invalid(layernorm(xv, codes_off.view(), cols), "the codes not");
    expect_invalid(
        layernorm::gpu::layernorm_e4m3(
            gpu(),
            xv,
            gv,
            gv,
            rows,
            cols,
            -1.0,
            codes.view(),
            scales.view(),
        ),
        "eps",
    );
    // The static entry point: the same checks, and its scale is one f32.
    let static_layernorm = |x, codes, scale| {
        layernorm::gpu::layernorm_e4m3_static(gpu(), x, gv, gv, rows, cols, 1e-5, codes, scale)
    };
    let (_one, one_scale) = upload(gpu(), DType::F32, &[0.01], 0);
    expect_invalid(static_layernorm(x_off, codes.view(), one_scale), "x not");
    expect_invalid(
        static_layernorm(xv, codes.view(), per_tensor_in_f16.1),
        "static scale",
    );
    // Nothing was written.
    assert!(codes
        .read(gpu(), "refused launches")
        .iter()
        .all(|&c| c == POISON));
    assert!(scales
        .read(gpu(), "refused launches")
        .iter()
        .all(|s| s.is_nan()));
}
