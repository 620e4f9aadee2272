//! The non-matmul CUDA kernels against their CPU twins, on random data over ragged shapes, in
//! every dtype, with aligned and misaligned operands (which select the vector and the scalar
//! instantiations). Outputs are poisoned before each run (0xFF bytes: NaN in f32, f16 and
//! bf16) inside a guard region: every element must be written, and the guards untouched.
//!
//! Tolerances, as |gpu - twin| <= rtol * |twin| + atol, the twin's f32 result rounded to the
//! storage dtype:
//! - add, patchify and the token embedding do the same f32 arithmetic and one rounding on
//!   both sides, and the end-token gather copies: exact.
//! - layernorm and softmax reduce in a different order than the twin: f32 rtol 1e-4; f16 rtol
//!   2e-3 (two f16 ulps, 2^-10 each: the f32 results may straddle a rounding boundary); bf16
//!   rtol 1e-2 (a bf16 ulp is up to 2^-7 = 7.8e-3). Layernorm's atol is rtol times the
//!   largest output: its outputs near zero carry the rounding error of the row statistics,
//!   which are O(1) (and the twin's sequential f32 sum is the less accurate of the two on
//!   rows with a large mean: 2e-5 absolute seen on a row of 768 around 50). Softmax's atol is
//!   1e-6: its small outputs are computed with relative accuracy.
//!
//! Needs a CUDA GPU: `cargo test --release -p vitrt-kernels --test gpu_kernels -- --ignored`.

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::time::Instant;
mod common;

use common::{compare, gpu, largest, merge, random, report, tolerance, upload, Poisoned, Worst};
use vitrt_kernels::cuda::{Gpu, KernelError};
use vitrt_kernels::gather::{self, gpu::TOKEN_EMBEDDING_TYPES, EndToken};
use vitrt_kernels::patchify::gpu::PrefixRows;
use vitrt_kernels::{activation, add, layernorm, normalize, patchify, pool, softmax};
use vitrt_kernels::{Activation, DType};

// ---------------------------------------------------------------------------------------------
// Kernels against twins.

/// One layernorm of `rows` x `cols` values around `shift` (input and output `misalign`
/// elements off alignment) against its twin; gamma and beta are f32 in every run.
fn layernorm_case(
    rng: &mut SmallRng,
    input: DType,
    dtype: DType,
    (rows, cols, misalign): (usize, usize, usize),
    shift: f32,
) -> Worst {
    let case = format!("layernorm {input} to {dtype} {rows}x{cols} misalign {misalign}");
    let x = random(rng, rows * cols, shift - 4.0, shift + 4.0, input);
    let gamma = random(rng, cols, 0.5, 1.5, DType::F32);
    let beta = random(rng, cols, -0.5, 0.5, DType::F32);
    let (_xb, xv) = upload(gpu(), input, &x, misalign);
    let (_gb, gv) = upload(gpu(), DType::F32, &gamma, misalign);
    let (_bb, bv) = upload(gpu(), DType::F32, &beta, misalign);
    let out = Poisoned::new(gpu(), dtype, rows * cols, misalign);
    layernorm::gpu::layernorm(gpu(), dtype, xv, gv, bv, rows, cols, 1e-5, out.view()).unwrap();
    let got = out.read(gpu(), &case);
    let mut want = vec![0.0; rows * cols];
    layernorm::cpu::layernorm(&x, &gamma, &beta, cols, 1e-5, &mut want);
    want.iter_mut().for_each(|v| *v = dtype.round(*v));
    let atol = tolerance(dtype) * largest(&want);
    compare(&case, &got, &want, tolerance(dtype), atol)
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn layernorm_matches_its_twin() {
    let mut rng = SmallRng::seed_from_u64(1);
    // (input, output) storage: one dtype, or an f32 residual stream normalised into f16/bf16.
    let storage = [
        (DType::F32, DType::F32),
        (DType::F16, DType::F16),
        (DType::BF16, DType::BF16),
        (DType::F32, DType::F16),
        (DType::F32, DType::BF16),
    ];
    for (input, dtype) in storage {
        let (mut worst, mut cases) = (Worst::default(), 0);
        for &cols in &[768, 54, 1, 1000, 4099, 16, 18, 80, 1536, 3000, 16392, 197] {
            for &rows in &[1usize, 7, 197, 258] {
                for misalign in [0, 1] {
                    // A large common offset checks that the two-pass statistics lose nothing to the mean.
                    let shift = rng.random_range(-50.0..50.0f32);
                    let shape = (rows, cols, misalign);
                    worst = merge(worst, layernorm_case(&mut rng, input, dtype, shape, shift));
                    cases += 1;
                }
            }
        }
        // More rows than the GPU holds groups at once: each group walks several rows with the
        // gamma and beta it loaded once.
        for (rows, cols) in [(20011, 768), (40000, 64), (9000, 1000)] {
            let shape = (rows, cols, 0);
            worst = merge(worst, layernorm_case(&mut rng, input, dtype, shape, 0.0));
            cases += 1;
        }
        let op = if input == dtype {
            "layernorm".to_string()
        } else {
            format!("layernorm from {input}")
        };
        report(&op, dtype, cases, worst);
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn layernorm_in_place_matches_its_twin() {
    let mut rng = SmallRng::seed_from_u64(2);
    for dtype in DType::ALL {
        for &cols in &[768, 4099, 16392] {
            let rows = 9;
            let x = random(&mut rng, rows * cols, -3.0, 3.0, dtype);
            let gamma = random(&mut rng, cols, 0.5, 1.5, DType::F32);
            let beta = random(&mut rng, cols, -0.5, 0.5, DType::F32);
            let (xb, xv) = upload(gpu(), dtype, &x, 0);
            let (_gb, gv) = upload(gpu(), DType::F32, &gamma, 0);
            let (_bb, bv) = upload(gpu(), DType::F32, &beta, 0);
            layernorm::gpu::layernorm(gpu(), dtype, xv, gv, bv, rows, cols, 1e-6, xv).unwrap();
            let mut bytes = vec![0u8; xb.len_bytes()];
            gpu().download(&xb, 0, &mut bytes).unwrap();
            let mut want = vec![0.0; rows * cols];
            layernorm::cpu::layernorm(&x, &gamma, &beta, cols, 1e-6, &mut want);
            want.iter_mut().for_each(|v| *v = dtype.round(*v));
            compare(
                &format!("in-place layernorm {dtype} {cols}"),
                &dtype.decode(&bytes),
                &want,
                tolerance(dtype),
                1e-5,
            );
        }
    }
}

/// The softmax of `x` as the twin computes it, rounded to `dtype`.
fn softmax_twin(x: &[f32], cols: usize, scale: f32, dtype: DType) -> Vec<f32> {
    let mut want = vec![0.0; x.len()];
    softmax::cpu::softmax(x, cols, scale, &mut want);
    want.iter_mut().for_each(|v| *v = dtype.round(*v));
    want
}

/// Row lengths that are no whole number of 16-byte vectors (odd or even: 197, 198, 250, 383)
/// take the span program on sm_80+ when x and out are 16-byte aligned (rows of up to 512);
/// whole vectors (64, 160, 512, 2048) or a misaligned x or out take the row program. Row
/// counts that are no multiple of a span (8 rows in f16 / bf16, 4 in f32: 1, 7, 9, 300, 1001)
/// end in a partial span, copied element by element.
#[test]
#[ignore = "needs a CUDA GPU"]
fn softmax_matches_its_twin() {
    let mut rng = SmallRng::seed_from_u64(3);
    for dtype in DType::ALL {
        let (mut worst, mut cases) = (Worst::default(), 0);
        for &cols in &[
            197, 198, 1, 5, 7, 33, 160, 250, 257, 383, 511, 512, 513, 1000, 4099, 16392, 64, 2048,
        ] {
            for &rows in &[1usize, 7, 9, 197, 300, 1001] {
                if rows > 300 && cols > 1000 {
                    continue; // long rows: 300 of them are enough
                }
                // (x misaligned, out misaligned, scale), in elements: both aligned (the span
                // program where it applies, with a negative scale too), both misaligned, and
                // only the output misaligned (the row program).
                for (x_misalign, out_misalign, scale) in
                    [(0, 0, 0.125f32), (0, 0, -0.75), (1, 1, 1.0), (0, 1, 0.5)]
                {
                    let case = format!(
                        "softmax {dtype} {rows}x{cols} scale {scale} misalign x {x_misalign} \
                         out {out_misalign}"
                    );
                    // Rows far from zero check that the maximum is subtracted before exp.
                    let shift = if rng.random_bool(0.5) {
                        0.0
                    } else {
                        rng.random_range(-500.0..500.0f32)
                    };
                    let x = random(&mut rng, rows * cols, shift - 8.0, shift + 8.0, dtype);
                    let (_xb, xv) = upload(gpu(), dtype, &x, x_misalign);
                    let out = Poisoned::new(gpu(), dtype, rows * cols, out_misalign);
                    softmax::gpu::softmax(gpu(), dtype, xv, rows, cols, scale, out.view()).unwrap();
                    let got = out.read(gpu(), &case);
                    let want = softmax_twin(&x, cols, scale, dtype);
                    worst = merge(worst, compare(&case, &got, &want, tolerance(dtype), 1e-6));
                    cases += 1;
                }
            }
        }
        report("softmax", dtype, cases, worst);
        // The cases above must have reached the span program (197 columns: 7 elements a lane).
        if gpu().compute_capability() >= (8, 0) {
            let span = format!("softmax_{dtype}_span_l7_w4");
            assert!(
                gpu().loaded_kernels().iter().any(|k| k.name == span),
                "{span} never ran"
            );
        }
    }
}

/// f32 scores into f16 or bf16 probabilities (a bf16 run's unfused attention), plain and
/// causal: the row program at every layout (one warp or a block a row, streamed rows),
/// aligned and not.
#[test]
#[ignore = "needs a CUDA GPU"]
fn softmax_from_f32_matches_its_twin() {
    let mut rng = SmallRng::seed_from_u64(33);
    for dtype in [DType::F16, DType::BF16] {
        let (mut worst, mut cases) = (Worst::default(), 0);
        for &cols in &[1usize, 5, 64, 77, 197, 257, 1000, 4099] {
            for &matrices in &[1usize, 24] {
                let rows = matrices * cols;
                for causal in [false, true] {
                    for (x_misalign, out_misalign) in [(0, 0), (1, 1), (0, 1)] {
                        let case = format!(
                            "softmax f32 to {dtype} causal {causal} {rows}x{cols} misalign x \
                             {x_misalign} out {out_misalign}"
                        );
                        let mut x = random(&mut rng, rows * cols, -30.0, 30.0, DType::F32);
                        if causal {
                            for (r, row) in x.chunks_mut(cols).enumerate() {
                                row[r % cols + 1..].fill(f32::NAN);
                            }
                        }
                        let (_xb, xv) = upload(gpu(), DType::F32, &x, x_misalign);
                        let out = Poisoned::new(gpu(), dtype, rows * cols, out_misalign);
                        let mut want = vec![0.0; rows * cols];
                        if causal {
                            softmax::gpu::softmax_causal(
                                gpu(),
                                dtype,
                                xv,
                                rows,
                                cols,
                                cols,
                                0.125,
                                out.view(),
                            )
                            .unwrap_or_else(|e| panic!("{case}: {e}"));
                            softmax::cpu::softmax_causal(&x, cols, cols, 0.125, &mut want);
                        } else {
                            softmax::gpu::softmax(gpu(), dtype, xv, rows, cols, 0.125, out.view())
                                .unwrap_or_else(|e| panic!("{case}: {e}"));
                            softmax::cpu::softmax(&x, cols, 0.125, &mut want);
                        }
                        want.iter_mut().for_each(|v| *v = dtype.round(*v));
                        let got = out.read(gpu(), &case);
                        worst = merge(worst, compare(&case, &got, &want, tolerance(dtype), 1e-6));
                        cases += 1;
                    }
                }
            }
        }
        report("softmax from f32", dtype, cases, worst);
    }
}

/// In place (out = x), as the kernels allow: a span is read whole before any of it is written.
#[test]
#[ignore = "needs a CUDA GPU"]
fn softmax_in_place_matches_its_twin() {
    let mut rng = SmallRng::seed_from_u64(13);
    for dtype in DType::ALL {
        for &(rows, cols) in &[(1001usize, 197usize), (12 * 197, 197), (9, 33), (300, 4099)] {
            let case = format!("in-place softmax {dtype} {rows}x{cols}");
            let x = random(&mut rng, rows * cols, -8.0, 8.0, dtype);
            let (xb, xv) = upload(gpu(), dtype, &x, 0);
            softmax::gpu::softmax(gpu(), dtype, xv, rows, cols, 0.125, xv).unwrap();
            let mut bytes = vec![0u8; xb.len_bytes()];
            gpu().download(&xb, 0, &mut bytes).unwrap();
            let want = softmax_twin(&x, cols, 0.125, dtype);
            compare(&case, &dtype.decode(&bytes), &want, tolerance(dtype), 1e-6);
        }
    }
}

/// The causal softmax (text towers' unfused attention): `[matrices · queries, queries]`
/// scores, row r of query r % queries. The scores past each row's diagonal are NaN: they must
/// never be read into the result, and must come out as exactly 0. Row lengths as for the plain
/// softmax: 77 (CLIP) and other short odd rows take the span program when aligned, 64 and
/// 512 the row program's vectors, 513 and 1000 one warp or eight per row, 4099 the streamed
/// rows (two passes).
#[test]
#[ignore = "needs a CUDA GPU"]
fn causal_softmax_matches_its_twin() {
    let mut rng = SmallRng::seed_from_u64(23);
    for dtype in DType::ALL {
        let (mut worst, mut cases) = (Worst::default(), 0);
        for &queries in &[1usize, 5, 7, 33, 64, 77, 197, 250, 512, 513, 1000, 4099] {
            for &matrices in &[1usize, 3, 24] {
                if queries * queries * matrices > 4_000_000 && matrices > 1 {
                    continue; // long rows: one matrix is enough
                }
                let (rows, cols) = (matrices * queries, queries);
                for (x_misalign, out_misalign, scale) in
                    [(0, 0, 0.125f32), (0, 0, -0.75), (1, 1, 1.0), (0, 1, 0.5)]
                {
                    let case = format!(
                        "causal softmax {dtype} {matrices}x{queries}x{queries} scale {scale} \
                         misalign x {x_misalign} out {out_misalign}"
                    );
                    let mut x = random(&mut rng, rows * cols, -8.0, 8.0, dtype);
                    for (r, row) in x.chunks_mut(cols).enumerate() {
                        row[r % queries + 1..].fill(f32::NAN);
                    }
                    let (_xb, xv) = upload(gpu(), dtype, &x, x_misalign);
                    let out = Poisoned::new(gpu(), dtype, rows * cols, out_misalign);
                    softmax::gpu::softmax_causal(
                        gpu(),
                        dtype,
                        xv,
                        rows,
                        cols,
                        queries,
                        scale,
                        out.view(),
                    )
                    .unwrap_or_else(|e| panic!("{case}: {e}"));
                    let got = out.read(gpu(), &case);
                    let mut want = vec![0.0; rows * cols];
                    softmax::cpu::softmax_causal(&x, cols, queries, scale, &mut want);
                    want.iter_mut().for_each(|v| *v = dtype.round(*v));
                    for (r, row) in got.chunks(cols).enumerate() {
                        let q = r % queries;
                        assert!(
                            row[q + 1..].iter().all(|&p| p == 0.0),
                            "{case}: row {r} is not 0 past column {q}"
                        );
                    }
                    worst = merge(worst, compare(&case, &got, &want, tolerance(dtype), 1e-6));
                    cases += 1;
                }
            }
        }
        report("causal softmax", dtype, cases, worst);
        if gpu().compute_capability() >= (8, 0) {
            // 77 columns: 3 elements a lane.
            let span = format!("softmax_{dtype}_span_l3_w4_causal");
            assert!(
                gpu().loaded_kernels().iter().any(|k| k.name == span),
                "{span} never ran"
            );
        }
    }
    // In place, as the plain softmax allows.
    let dtype = DType::F16;
    let (queries, matrices) = (77, 24);
    let (rows, cols) = (matrices * queries, queries);
    let x = random(&mut rng, rows * cols, -8.0, 8.0, dtype);
    let (xb, xv) = upload(gpu(), dtype, &x, 0);
    softmax::gpu::softmax_causal(gpu(), dtype, xv, rows, cols, queries, 0.125, xv).unwrap();
    let mut bytes = vec![0u8; xb.len_bytes()];
    gpu().download(&xb, 0, &mut bytes).unwrap();
    let mut want = vec![0.0; rows * cols];
    softmax::cpu::softmax_causal(&x, cols, queries, 0.125, &mut want);
    want.iter_mut().for_each(|v| *v = dtype.round(*v));
    compare(
        "in-place causal softmax",
        &dtype.decode(&bytes),
        &want,
        tolerance(dtype),
        1e-6,
    );
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn add_matches_its_twin_exactly() {
    let mut rng = SmallRng::seed_from_u64(4);
    for dtype in DType::ALL {
        let mut cases = 0;
        for &n in &[
            1usize,
            7,
            197,
            198,
            257,
            1000,
            8191,
            8192,
            8193,
            (1 << 20) + 3,
        ] {
            for misalign in [0, 1] {
                let case = format!("add {dtype} n {n} misalign {misalign}");
                let a = random(&mut rng, n, -10.0, 10.0, dtype);
                let b = random(&mut rng, n, -10.0, 10.0, dtype);
                let (_ab, av) = upload(gpu(), dtype, &a, misalign);
                let (_bb, bv) = upload(gpu(), dtype, &b, 0);
                let out = Poisoned::new(gpu(), dtype, n, misalign);
                add::gpu::add(gpu(), dtype, av, bv, n, out.view()).unwrap();
                let got = out.read(gpu(), &case);
                let mut want = vec![0.0; n];
                add::cpu::add(&a, &b, &mut want);
                want.iter_mut().for_each(|v| *v = dtype.round(*v));
                compare(&case, &got, &want, 0.0, 0.0);
                cases += 1;
            }
        }
        // In place, as a residual add: out is a.
        let n = 12_345;
        let a = random(&mut rng, n, -10.0, 10.0, dtype);
        let b = random(&mut rng, n, -10.0, 10.0, dtype);
        let (ab, av) = upload(gpu(), dtype, &a, 0);
        let (_bb, bv) = upload(gpu(), dtype, &b, 0);
        add::gpu::add(gpu(), dtype, av, bv, n, av).unwrap();
        let mut bytes = vec![0u8; ab.len_bytes()];
        gpu().download(&ab, 0, &mut bytes).unwrap();
        let mut want = vec![0.0; n];
        add::cpu::add(&a, &b, &mut want);
        want.iter_mut().for_each(|v| *v = dtype.round(*v));
        compare(
            &format!("in-place add {dtype}"),
            &dtype.decode(&bytes),
            &want,
            0.0,
            0.0,
        );
        report("add", dtype, cases + 1, Worst::default());
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn add_into_an_f32_stream_matches_its_twin_exactly() {
    // A half-precision branch added into an f32 residual stream, either operand order, out of
    // place and in place (out = the stream). The twin adds the same values in f32: exact.
    let mut rng = SmallRng::seed_from_u64(6);
    for dtype in [DType::F16, DType::BF16] {
        let mut cases = 0;
        for &n in &[1usize, 7, 197, 1000, 8193, (1 << 20) + 3] {
            for misalign in [0, 1] {
                for stream_first in [true, false] {
                    for in_place in [false, true] {
                        let case = format!(
                            "add {dtype} into f32 n {n} misalign {misalign} stream first \
                             {stream_first} in place {in_place}"
                        );
                        let stream = random(&mut rng, n, -10.0, 10.0, DType::F32);
                        let branch = random(&mut rng, n, -10.0, 10.0, dtype);
                        let (sb, sv) = upload(gpu(), DType::F32, &stream, misalign);
                        let (_bb, bv) = upload(gpu(), dtype, &branch, 0);
                        let (a, b) = if stream_first { (sv, bv) } else { (bv, sv) };
                        let out = Poisoned::new(gpu(), DType::F32, n, misalign);
                        let target = if in_place { sv } else { out.view() };
                        add::gpu::add(gpu(), dtype, a, b, n, target).unwrap();
                        let got = if in_place {
                            let mut bytes = vec![0u8; sb.len_bytes()];
                            gpu().download(&sb, 0, &mut bytes).unwrap();
                            let start = misalign * 4;
                            DType::F32.decode(&bytes[start..start + n * 4])
                        } else {
                            out.read(gpu(), &case)
                        };
                        let mut want = vec![0.0; n];
                        add::cpu::add(&stream, &branch, &mut want);
                        compare(&case, &got, &want, 0.0, 0.0);
                        cases += 1;
                    }
                }
            }
        }
        report("add into f32", dtype, cases, Worst::default());
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn patchify_with_prefix_matches_its_twins_exactly() {
    let mut rng = SmallRng::seed_from_u64(5);
    // (batch, channels, height, width, patch, hidden, prefix rows): ViT-B/16 (CLS), small with
    // no prefix (SigLIP), odd patch with CLS and distillation tokens (DeiT), a size that drops a
    // remainder (as Conv2d does) with CLS and 4 registers (DINOv2), non-square.
    let shapes = [
        (2, 3, 224, 224, 16, 768, 1),
        (1, 3, 32, 32, 4, 54, 0),
        (3, 3, 30, 30, 6, 20, 2),
        (1, 1, 9, 9, 2, 7, 5),
        (2, 3, 64, 48, 8, 33, 1),
    ];
    // (operand dtype, token dtype): one dtype, or tokens in f32 (the start of a residual stream
    // kept in f32).
    let storage = [
        (DType::F32, DType::F32),
        (DType::F16, DType::F16),
        (DType::BF16, DType::BF16),
        (DType::F16, DType::F32),
        (DType::BF16, DType::F32),
    ];
    for (dtype, token_dtype) in storage {
        let mut cases = 0;
        for &(batch, channels, height, width, patch, hidden, prefix_rows) in &shapes {
            for misalign in [0, 1] {
                let case = format!("patchify {dtype} tokens {token_dtype} {batch}x{channels}x{height}x{width} p{patch} prefix {prefix_rows} misalign {misalign}");
                let n = (height / patch) * (width / patch);
                let tokens_per_image = n + prefix_rows;
                let pixels = random(
                    &mut rng,
                    batch * channels * height * width,
                    -2.0,
                    2.0,
                    DType::F32,
                );
                // At least one row is uploaded, so that the buffer exists; `count` says how
                // many the kernel reads.
                let prefix_buffer = random(&mut rng, prefix_rows.max(1) * hidden, -1.0, 1.0, dtype);
                let prefix = &prefix_buffer[..prefix_rows * hidden];
                let pos = random(&mut rng, tokens_per_image * hidden, -1.0, 1.0, dtype);
                let (_pb, pv) = upload(gpu(), DType::F32, &pixels, misalign);
                let (_cb, cv) = upload(gpu(), dtype, &prefix_buffer, 0);
                let (_ob, ov) = upload(gpu(), dtype, &pos, misalign);
                let patches =
                    Poisoned::new(gpu(), dtype, batch * n * channels * patch * patch, misalign);
                let tokens =
                    Poisoned::new(gpu(), token_dtype, batch * tokens_per_image * hidden, 0);
                patchify::gpu::patchify_with_prefix(
                    gpu(),
                    dtype,
                    pv,
                    batch,
                    channels,
                    height,
                    width,
                    patch,
                    PrefixRows {
                        rows: cv,
                        count: prefix_rows,
                    },
                    ov,
                    hidden,
                    tokens_per_image,
                    patches.view(),
                    tokens.view(),
                )
                .unwrap();

                let mut want = vec![0.0; batch * n * channels * patch * patch];
                patchify::cpu::patchify(&pixels, batch, channels, height, width, patch, &mut want);
                want.iter_mut().for_each(|v| *v = dtype.round(*v));
                compare(&case, &patches.read(gpu(), &case), &want, 0.0, 0.0);

                // Prefix rows are written; every other token row is left to the projection matmul.
                tokens.read(gpu(), &case);
                let mut raw = vec![0u8; tokens.buffer.len_bytes()];
                gpu().download(&tokens.buffer, 0, &mut raw).unwrap();
                let raw =
                    &raw[tokens.offset..tokens.offset + tokens.len * token_dtype.size_bytes()];
                let got = token_dtype.decode(raw);
                let mut want_tokens = vec![f32::NAN; batch * tokens_per_image * hidden];
                patchify::cpu::write_prefix_rows(
                    prefix,
                    &pos,
                    batch,
                    tokens_per_image,
                    hidden,
                    &mut want_tokens,
                );
                for (i, w) in want_tokens.iter().enumerate() {
                    if i % (tokens_per_image * hidden) < prefix_rows * hidden {
                        assert_eq!(got[i], token_dtype.round(*w), "{case}: prefix element {i}");
                    } else {
                        assert!(
                            Poisoned::untouched(raw, token_dtype, i),
                            "{case}: token element {i} was written"
                        );
                    }
                }
                cases += 1;
            }
        }
        report(
            &format!("patchify into {token_dtype}"),
            dtype,
            cases,
            Worst::default(),
        );
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn swiglu_and_token_mean_match_their_twins() {
    // SwiGLU: silu (expf) and a product on both sides, a few f32 ulps apart. Token mean: f32
    // sums in the same order, then one division: identical in f32, one rounding of the output
    // in f16/bf16.
    let mut rng = SmallRng::seed_from_u64(21);
    for dtype in DType::ALL {
        let (mut worst, mut cases) = (Worst::default(), 0);
        for &(rows, cols) in &[(1usize, 1usize), (5, 7), (257, 4096), (3, 1536)] {
            let case = format!("swiglu {dtype} {rows}x{cols}");
            let x = random(&mut rng, rows * 2 * cols, -4.0, 4.0, dtype);
            let (_xb, xv) = upload(gpu(), dtype, &x, 0);
            let out = Poisoned::new(gpu(), dtype, rows * cols, 1);
            activation::gpu::swiglu(gpu(), dtype, xv, rows, cols, out.view()).unwrap();
            let got = out.read(gpu(), &case);
            let mut want = vec![0.0; rows * cols];
            activation::cpu::swiglu(&x, cols, &mut want);
            want.iter_mut().for_each(|v| *v = dtype.round(*v));
            worst = merge(worst, compare(&case, &got, &want, tolerance(dtype), 1e-5));
            cases += 1;
        }
        // (batch, tokens, start, cols): DINOv2-B's patch mean after CLS and 4 registers, all
        // tokens of SigLIP so400m, odd sizes.
        for &(batch, tokens, start, cols) in &[
            (3usize, 261usize, 5usize, 768usize),
            (2, 729, 0, 1152),
            (1, 3, 1, 7),
            (300, 17, 1, 300),
        ] {
            // Tokens in the run's dtype, and in f32 (a residual stream kept in f32).
            for input in [dtype, DType::F32] {
                let case = format!(
                    "token_mean {dtype} from {input} {batch}x{tokens}x{cols} from token {start}"
                );
                let x = random(&mut rng, batch * tokens * cols, -2.0, 2.0, input);
                let (_xb, xv) = upload(gpu(), input, &x, 1);
                let out = Poisoned::new(gpu(), dtype, batch * cols, 0);
                pool::gpu::token_mean(gpu(), dtype, xv, batch, tokens, start, cols, out.view())
                    .unwrap();
                let got = out.read(gpu(), &case);
                let mut want = vec![0.0; batch * cols];
                pool::cpu::token_mean(&x, tokens, start, cols, &mut want);
                want.iter_mut().for_each(|v| *v = dtype.round(*v));
                worst = merge(worst, compare(&case, &got, &want, 0.0, 0.0));
                cases += 1;
            }
        }
        report("swiglu and token mean", dtype, cases, worst);
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn l2_normalize_matches_its_twin() {
    // The same fma order and shuffle tree on both sides, then sqrtf and one IEEE division:
    // identical in f32 up to the rounding of sqrtf (correctly rounded on both), one rounding
    // of the output in f16/bf16.
    let mut rng = SmallRng::seed_from_u64(31);
    for dtype in DType::ALL {
        let (mut worst, mut cases) = (Worst::default(), 0);
        // (rows, cols): a batch of CLIP-B embeddings, SigLIP so400m's, odd sizes.
        for &(rows, cols) in &[(256usize, 512usize), (3, 1152), (1, 1), (17, 33)] {
            for (input, output) in [(dtype, dtype), (DType::F32, dtype), (dtype, DType::F32)] {
                let case = format!("l2_normalize {dtype} {input}->{output} {rows}x{cols}");
                let x = random(&mut rng, rows * cols, -3.0, 3.0, input);
                let (_xb, xv) = upload(gpu(), input, &x, 0);
                let out = Poisoned::new(gpu(), output, rows * cols, 1);
                normalize::gpu::l2_normalize(gpu(), dtype, xv, rows, cols, out.view()).unwrap();
                let got = out.read(gpu(), &case);
                let mut want = vec![0.0; rows * cols];
                normalize::cpu::l2_normalize(&x, cols, &mut want);
                want.iter_mut().for_each(|v| *v = output.round(*v));
                worst = merge(worst, compare(&case, &got, &want, 1e-6, 1e-7));
                cases += 1;
            }
        }
        report("l2 normalize", dtype, cases, worst);
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn bias_activation_matches_its_twin() {
    // The same f32 add on both sides, then the activation: erff, tanhf and expf on the GPU
    // against the twin's formulas (erf in f64), a few f32 ulps apart. Tolerance as for the
    // row kernels; atol 1e-5 covers GELU's tail, where 1 + erf(x) cancels to ~1e-6.
    let mut rng = SmallRng::seed_from_u64(8);
    for dtype in DType::ALL {
        let (mut worst, mut cases) = (Worst::default(), 0);
        for act in Activation::ALL {
            for &cols in &[1usize, 7, 768, 1000, 3072] {
                for &rows in &[1usize, 5, 197] {
                    // Misaligned operands (and cols 1, 7, 1000 in f16/bf16) take the scalar
                    // instantiation; the rest the 16-byte one.
                    for misalign in [0, 1] {
                        let case = format!(
                            "bias_activation {} {dtype} {rows}x{cols} misalign {misalign}",
                            act.short_name()
                        );
                        let x = random(&mut rng, rows * cols, -4.0, 4.0, dtype);
                        let bias = random(&mut rng, cols, -1.0, 1.0, dtype);
                        let (_xb, xv) = upload(gpu(), dtype, &x, misalign);
                        let (_bb, bv) = upload(gpu(), dtype, &bias, misalign);
                        let out = Poisoned::new(gpu(), dtype, rows * cols, misalign);
                        activation::gpu::bias_activation(
                            gpu(),
                            dtype,
                            act,
                            xv,
                            bv,
                            rows,
                            cols,
                            out.view(),
                        )
                        .unwrap();
                        let got = out.read(gpu(), &case);
                        let mut want = vec![0.0; rows * cols];
                        activation::cpu::bias_activation(&x, &bias, act, &mut want);
                        want.iter_mut().for_each(|v| *v = dtype.round(*v));
                        worst = merge(worst, compare(&case, &got, &want, tolerance(dtype), 1e-5));
                        cases += 1;
                    }
                }
            }
        }
        // In place, as after a GEMM: out is x.
        let (rows, cols) = (197, 768);
        let x = random(&mut rng, rows * cols, -4.0, 4.0, dtype);
        let bias = random(&mut rng, cols, -1.0, 1.0, dtype);
        let (xb, xv) = upload(gpu(), dtype, &x, 0);
        let (_bb, bv) = upload(gpu(), dtype, &bias, 0);
        activation::gpu::bias_activation(gpu(), dtype, Activation::Gelu, xv, bv, rows, cols, xv)
            .unwrap();
        let mut bytes = vec![0u8; xb.len_bytes()];
        gpu().download(&xb, 0, &mut bytes).unwrap();
        let mut want = vec![0.0; rows * cols];
        activation::cpu::bias_activation(&x, &bias, Activation::Gelu, &mut want);
        want.iter_mut().for_each(|v| *v = dtype.round(*v));
        let case = format!("in-place bias_activation {dtype}");
        worst = merge(
            worst,
            compare(&case, &dtype.decode(&bytes), &want, tolerance(dtype), 1e-5),
        );
        report("bias_act", dtype, cases + 1, worst);
    }
}

/// Token ids as f32, integers in 0..vocab, with (when `bad`) a few that are not: -1, vocab,
/// 2.5, NaN, inf. Returns the ids and the rows that must come out NaN.
fn token_ids(rng: &mut SmallRng, rows: usize, vocab: usize, bad: bool) -> (Vec<f32>, Vec<usize>) {
    let mut ids: Vec<f32> = (0..rows)
        .map(|_| rng.random_range(0..vocab) as f32)
        .collect();
    // The first and last entries of the table, where they fit.
    ids[0] = (vocab - 1) as f32;
    if rows > 1 {
        ids[rows - 1] = 0.0;
    }
    let mut bad_rows = Vec::new();
    if bad {
        for (i, id) in [-1.0, vocab as f32, 2.5, f32::NAN, f32::INFINITY]
            .into_iter()
            .enumerate()
        {
            let r = (7 * i + 3) % rows;
            ids[r] = id;
            bad_rows.push(r);
        }
    }
    (ids, bad_rows)
}

/// f32 sums of the same rounded values and one rounding on both sides: exact. An id that is
/// not an integer in 0..vocab gives a NaN row (`compare` wants NaN where the twin has NaN).
#[test]
#[ignore = "needs a CUDA GPU"]
fn token_embedding_matches_its_twin() {
    let mut rng = SmallRng::seed_from_u64(31);
    for (table_dtype, out_dtype) in TOKEN_EMBEDDING_TYPES {
        let mut cases = 0;
        // (batch, tokens, dim, vocab): CLIP-B's text tower (77 x 512 of 49408), SigLIP's
        // (64 x 768), odd small ones.
        for &(batch, tokens, dim, vocab) in &[
            (2usize, 77usize, 512usize, 49_408usize),
            (3, 64, 768, 1000),
            (1, 1, 1, 1),
            (5, 7, 33, 10),
            (1, 13, 1153, 300),
        ] {
            for misalign in [0, 1] {
                for bad in [false, true] {
                    let case = format!(
                        "token_embedding {table_dtype} to {out_dtype} {batch}x{tokens}x{dim} \
                         vocab {vocab} misalign {misalign} bad ids {bad}"
                    );
                    let rows = batch * tokens;
                    let (ids, bad_rows) = token_ids(&mut rng, rows, vocab, bad && rows > 1);
                    let table = random(&mut rng, vocab * dim, -1.0, 1.0, table_dtype);
                    let positions = random(&mut rng, tokens * dim, -0.5, 0.5, table_dtype);
                    let (_ib, iv) = upload(gpu(), DType::F32, &ids, 0);
                    let (_tb, tv) = upload(gpu(), table_dtype, &table, misalign);
                    let (_pb, pv) = upload(gpu(), table_dtype, &positions, 0);
                    let out = Poisoned::new(gpu(), out_dtype, rows * dim, misalign);
                    gather::gpu::token_embedding(
                        gpu(),
                        table_dtype,
                        out_dtype,
                        iv,
                        tv,
                        pv,
                        rows,
                        tokens,
                        dim,
                        vocab,
                        out.view(),
                    )
                    .unwrap_or_else(|e| panic!("{case}: {e}"));
                    let got = out.read(gpu(), &case);
                    let mut want = vec![0.0; rows * dim];
                    gather::cpu::token_embedding(
                        &ids, &table, &positions, tokens, dim, vocab, &mut want,
                    );
                    want.iter_mut().for_each(|v| *v = out_dtype.round(*v));
                    for &r in &bad_rows {
                        assert!(
                            want[r * dim..(r + 1) * dim].iter().all(|x| x.is_nan()),
                            "{case}: the twin kept bad id {} of row {r}",
                            ids[r]
                        );
                    }
                    compare(&case, &got, &want, 0.0, 0.0);
                    cases += 1;
                }
            }
        }
        report(
            &format!("token_embedding to {out_dtype}"),
            table_dtype,
            cases,
            Worst::default(),
        );
    }
}

/// A copy of the row the rule picks: exact. Ids of a few values only, so that the largest
/// appears several times (ties go to the first); sequences with the end id several times,
/// once, never (position 0), and NaN ids (never the largest).
#[test]
#[ignore = "needs a CUDA GPU"]
fn end_token_rows_match_their_twin() {
    let mut rng = SmallRng::seed_from_u64(37);
    let end = 7u32;
    for dtype in DType::ALL {
        let mut cases = 0;
        // Sequence lengths below, at and past the block's 128 threads.
        for &(batch, tokens, dim) in &[
            (1usize, 1usize, 1usize),
            (5, 77, 512),
            (3, 64, 768),
            (4, 128, 33),
            (6, 300, 20),
        ] {
            let mut ids: Vec<f32> = (0..batch * tokens)
                .map(|_| rng.random_range(0..end) as f32)
                .collect();
            for (b, sequence) in ids.chunks_mut(tokens).enumerate() {
                match b % 6 {
                    // The end id (also the largest) twice: the first wins both rules.
                    0 => {
                        let p = rng.random_range(0..tokens);
                        sequence[p] = end as f32;
                        sequence[tokens - 1] = end as f32;
                    }
                    // CLIP's layout: the end token after the text, then padding with it.
                    1 => {
                        let p = tokens / 2;
                        sequence[p..].fill(end as f32);
                    }
                    // No end id; the largest id (6) several times or not at all.
                    2 => {}
                    // NaN ids around, the largest among them late.
                    3 => {
                        sequence.iter_mut().step_by(3).for_each(|x| *x = f32::NAN);
                        sequence[tokens - 1] = 100.0;
                    }
                    // Every id NaN: position 0 for both rules.
                    4 => sequence.fill(f32::NAN),
                    // A larger id than the end id before it: the rules disagree.
                    _ => {
                        sequence[0] = 50.0;
                        sequence[tokens - 1] = end as f32;
                    }
                }
            }
            let hidden = random(&mut rng, batch * tokens * dim, -3.0, 3.0, dtype);
            let (_hb, hv) = upload(gpu(), dtype, &hidden, 1);
            let (_ib, iv) = upload(gpu(), DType::F32, &ids, 0);
            for rule in [EndToken::HighestId, EndToken::FirstOf(end)] {
                let case = format!("end_token_rows {dtype} {batch}x{tokens}x{dim} {rule:?}");
                let out = Poisoned::new(gpu(), dtype, batch * dim, 1);
                gather::gpu::end_token_rows(
                    gpu(),
                    dtype,
                    hv,
                    iv,
                    batch,
                    tokens,
                    dim,
                    rule,
                    out.view(),
                )
                .unwrap_or_else(|e| panic!("{case}: {e}"));
                let got = out.read(gpu(), &case);
                let mut want = vec![0.0; batch * dim];
                gather::cpu::end_token_rows(&hidden, &ids, batch, tokens, dim, rule, &mut want);
                compare(&case, &got, &want, 0.0, 0.0);
                cases += 1;
            }
        }
        report("end_token_rows", dtype, cases, Worst::default());
    }
}

// ---------------------------------------------------------------------------------------------
// Bad input is an error, never a panic or a launch.

#[test]
#[ignore = "needs a CUDA GPU"]
fn bad_arguments_are_errors() {
    let g = gpu();
    let buffer = g.alloc(4096).unwrap();
    let f16 = buffer.view(0, 1024, DType::F16).unwrap();
    let f32 = buffer.view(0, 1024, DType::F32).unwrap();
    let short = buffer.view(0, 10, DType::F16).unwrap();
    let invalid = |r: Result<(), KernelError>| matches!(r, Err(KernelError::InvalidArgument(_)));
    assert!(
        invalid(add::gpu::add(g, DType::F16, f16, f32, 16, f16)),
        "mixed dtypes"
    );
    assert!(
        invalid(add::gpu::add(g, DType::F16, f16, f16, 1025, f16)),
        "n past the views"
    );
    assert!(
        invalid(softmax::gpu::softmax(
            g,
            DType::F16,
            f16,
            4,
            256,
            1.0,
            short
        )),
        "output too short"
    );
    assert!(
        invalid(softmax::gpu::softmax(g, DType::F16, f16, 4, 0, 1.0, f16)),
        "empty rows"
    );
    assert!(
        invalid(layernorm::gpu::layernorm(
            g,
            DType::F16,
            f16,
            short,
            f16,
            2,
            16,
            1e-5,
            f16
        )),
        "gamma too short"
    );
    assert!(
        invalid(layernorm::gpu::layernorm(
            g,
            DType::F16,
            f16,
            f16,
            f16,
            2,
            16,
            f32::NAN,
            f16
        )),
        "NaN eps"
    );
    assert!(
        invalid(patchify::gpu::patchify_with_prefix(
            g,
            DType::F16,
            f32,
            1,
            3,
            8,
            8,
            16,
            PrefixRows {
                rows: f16,
                count: 1
            },
            f16,
            8,
            1,
            f16,
            f16
        )),
        "patch > image"
    );
    assert!(
        invalid(patchify::gpu::patchify_with_prefix(
            g,
            DType::F16,
            f16,
            1,
            1,
            8,
            8,
            4,
            PrefixRows {
                rows: f16,
                count: 1
            },
            f16,
            8,
            5,
            f16,
            f16
        )),
        "f16 pixels"
    );
    assert!(
        buffer.view(4000, 100, DType::F32).is_err(),
        "view past the end"
    );
    let mut too_long = vec![0u8; 5000];
    assert!(
        invalid(g.download(&buffer, 0, &mut too_long)),
        "download past the end"
    );
    assert!(
        invalid(g.upload(&buffer, 4090, &[0u8; 7])),
        "upload past the end"
    );
    // Zero-sized work is a no-op, not an error.
    add::gpu::add(g, DType::F16, f16, f16, 0, f16).unwrap();
    softmax::gpu::softmax(g, DType::F16, f16, 0, 7, 1.0, f16).unwrap();
    g.alloc(0).unwrap();
    g.synchronize().unwrap();
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn text_tower_kernels_refuse_bad_arguments() {
    let g = gpu();
    let buffer = g.alloc(1 << 16).unwrap();
    let f16 = buffer.view(0, 8192, DType::F16).unwrap();
    let f32 = buffer.view(0, 4096, DType::F32).unwrap();
    let short_f32 = buffer.view(0, 10, DType::F32).unwrap();
    let short_f16 = buffer.view(0, 10, DType::F16).unwrap();
    let invalid = |r: Result<(), KernelError>| matches!(r, Err(KernelError::InvalidArgument(_)));
    let causal = |rows, cols, queries, out| {
        softmax::gpu::softmax_causal(g, DType::F16, f16, rows, cols, queries, 1.0, out)
    };
    assert!(invalid(causal(77, 77, 7, f16)), "queries != cols");
    assert!(invalid(causal(78, 77, 77, f16)), "rows no whole matrices");
    assert!(invalid(causal(77, 77, 77, short_f16)), "output too short");
    assert!(invalid(causal(7, 0, 0, f16)), "empty rows");
    causal(0, 77, 77, f16).unwrap();

    // token_embedding(table, out, ids, table, positions, rows, tokens, dim, vocab, out)
    let embed = |table_dtype, out_dtype, ids, table, out, rows, tokens, dim, vocab| {
        gather::gpu::token_embedding(
            g,
            table_dtype,
            out_dtype,
            ids,
            table,
            table,
            rows,
            tokens,
            dim,
            vocab,
            out,
        )
    };
    let (f, h) = (DType::F32, DType::F16);
    embed(h, h, f32, f16, f16, 8, 4, 16, 64).unwrap();
    embed(h, f, f32, f16, f32, 8, 4, 16, 64).unwrap();
    assert!(
        invalid(embed(h, DType::BF16, f32, f16, f16, 8, 4, 16, 64)),
        "f16 to bf16"
    );
    assert!(
        invalid(embed(f, h, f32, f32, f16, 8, 4, 16, 64)),
        "f32 to f16"
    );
    assert!(invalid(embed(h, h, f16, f16, f16, 8, 4, 16, 64)), "f16 ids");
    assert!(
        invalid(embed(h, h, short_f32, f16, f16, 16, 4, 16, 64)),
        "ids too short"
    );
    assert!(
        invalid(embed(h, h, f32, f16, f16, 8, 4, 16, 1000)),
        "table too short"
    );
    assert!(
        invalid(embed(h, h, f32, f16, short_f16, 8, 4, 16, 64)),
        "output too short"
    );
    assert!(
        invalid(embed(h, h, f32, f16, f16, 9, 4, 16, 64)),
        "ragged sequences"
    );
    assert!(
        invalid(embed(h, h, f32, f16, f16, 8, 0, 16, 64)),
        "0 tokens"
    );
    assert!(
        invalid(embed(h, h, f32, f16, f16, 8, 4, 16, 0)),
        "empty vocabulary"
    );
    assert!(
        invalid(embed(h, h, f32, f16, f16, 8, 4, 16, (1 << 24) + 1)),
        "vocabulary > 2^24"
    );

    let pick = |hidden, ids, batch, tokens, dim, rule, out| {
        gather::gpu::end_token_rows(g, DType::F16, hidden, ids, batch, tokens, dim, rule, out)
    };
    let rule = EndToken::FirstOf(3);
    pick(f16, f32, 2, 77, 16, rule, f16).unwrap();
    assert!(
        invalid(pick(short_f16, f32, 2, 77, 16, rule, f16)),
        "hidden too short"
    );
    assert!(
        invalid(pick(f16, short_f32, 2, 77, 16, rule, f16)),
        "ids too short"
    );
    assert!(invalid(pick(f16, f16, 2, 77, 16, rule, f16)), "f16 ids");
    assert!(
        invalid(pick(f16, f32, 2, 77, 16, rule, short_f16)),
        "output too short"
    );
    assert!(invalid(pick(f16, f32, 2, 0, 16, rule, f16)), "0 tokens");
    assert!(
        invalid(pick(f16, f32, 2, 77, 16, EndToken::FirstOf(1 << 25), f16)),
        "end id past 2^24"
    );
    pick(f16, f32, 0, 77, 16, EndToken::HighestId, f16).unwrap();
    g.synchronize().unwrap();
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn out_of_memory_says_how_much() {
    match gpu().alloc(1 << 50) {
        Err(KernelError::OutOfMemory { requested, free }) => {
            assert_eq!(requested, 1 << 50);
            assert!(free > 0 && free < requested, "free {free}");
        }
        other => panic!("expected OutOfMemory, got {other:?}"),
    }
}

// ---------------------------------------------------------------------------------------------
// Throughput, for the record (prints; asserts only that the kernels run). Bytes are the
// fewest the op must move: each input read once, each output written once. Tests named
// bench_* must run alone (scripts/gpu-check.sh does: `bench_ --ignored --test-threads=1`):
// run beside the other tests, they time the GPU shared with them.

#[test]
#[ignore = "needs a CUDA GPU"]
fn bench_bandwidth_of_vit_shapes() {
    let g = gpu();
    let mut rng = SmallRng::seed_from_u64(6);
    let dtype = DType::F16;
    let size = dtype.size_bytes();
    let time = |run: &dyn Fn()| {
        for _ in 0..5 {
            run();
        }
        g.synchronize().unwrap();
        let mut times: Vec<f64> = (0..7)
            .map(|_| {
                let t = Instant::now();
                for _ in 0..20 {
                    run();
                }
                g.synchronize().unwrap();
                t.elapsed().as_secs_f64() / 20.0
            })
            .collect();
        times.sort_by(f64::total_cmp);
        times[times.len() / 2]
    };

    let (rows, cols) = (12_608usize, 768usize);
    let x = random(&mut rng, rows * cols, -3.0, 3.0, dtype);
    let (_xb, xv) = upload(gpu(), dtype, &x, 0);
    // gamma and beta are f32 in every run.
    let (_gb, gv) = upload(gpu(), DType::F32, &x[..cols], 0);
    let out = g.alloc(rows * cols * size).unwrap();
    let ov = out.view(0, rows * cols, dtype).unwrap();
    let t =
        time(&|| layernorm::gpu::layernorm(g, dtype, xv, gv, gv, rows, cols, 1e-6, ov).unwrap());
    println!(
        "BANDWIDTH layernorm f16 [{rows},{cols}]: {:.1} us, {:.0} GB/s",
        t * 1e6,
        (2 * rows * cols * size) as f64 / t / 1e9
    );

    // Attention probabilities at batch 64 (12 heads x 197 queries x 197 keys) in f16 and bf16
    // (the span program on sm_80+), at batch 1 (2364 rows: a partial last span), and at batch
    // 64 with x and out one element off alignment: the row program with scalar accesses, what
    // every such shape ran before the span program, for an A/B within one run.
    for (softmax_dtype, rows, misalign, label) in [
        (DType::F16, 151_296usize, 0usize, ""),
        (DType::BF16, 151_296, 0, ""),
        (DType::F16, 12 * 197, 0, ""),
        (DType::F16, 151_296, 1, " misaligned (row program)"),
    ] {
        let cols = 197usize;
        let size = softmax_dtype.size_bytes();
        let x = random(&mut rng, rows * cols, -8.0, 8.0, softmax_dtype);
        let (_sb, sv) = upload(gpu(), softmax_dtype, &x, misalign);
        let out = Poisoned::new(gpu(), softmax_dtype, rows * cols, misalign);
        let ov = out.view();
        let t =
            time(&|| softmax::gpu::softmax(g, softmax_dtype, sv, rows, cols, 0.125, ov).unwrap());
        println!(
            "BANDWIDTH softmax {softmax_dtype} [{rows},{cols}]{label}: {:.1} us, {:.0} GB/s",
            t * 1e6,
            (2 * rows * cols * size) as f64 / t / 1e9
        );
    }

    let n = 12_608 * 768;
    let a = random(&mut rng, n, -3.0, 3.0, dtype);
    let (_ab, av) = upload(gpu(), dtype, &a, 0);
    let (_bb, bv) = upload(gpu(), dtype, &a, 0);
    let out = g.alloc(n * size).unwrap();
    let ov = out.view(0, n, dtype).unwrap();
    let t = time(&|| add::gpu::add(g, dtype, av, bv, n, ov).unwrap());
    println!(
        "BANDWIDTH add f16 n={n}: {:.1} us, {:.0} GB/s",
        t * 1e6,
        (3 * n * size) as f64 / t / 1e9
    );

    let (batch, hidden) = (64usize, 768usize);
    let pixels = random(&mut rng, batch * 3 * 224 * 224, -2.0, 2.0, DType::F32);
    let (_pb, pv) = upload(gpu(), DType::F32, &pixels, 0);
    let (_cb, cv) = upload(gpu(), dtype, &a[..197 * hidden], 0);
    let patches = g.alloc(batch * 196 * 768 * size).unwrap();
    let tokens = g.alloc(batch * 197 * hidden * size).unwrap();
    let patches_view = patches.view(0, batch * 196 * 768, dtype).unwrap();
    let tokens_view = tokens.view(0, batch * 197 * hidden, dtype).unwrap();
    let t = time(&|| {
        patchify::gpu::patchify_with_prefix(
            g,
            dtype,
            pv,
            batch,
            3,
            224,
            224,
            16,
            PrefixRows { rows: cv, count: 1 },
            cv,
            hidden,
            197,
            patches_view,
            tokens_view,
        )
        .unwrap()
    });
    let bytes = pixels.len() * 4 + batch * 196 * 768 * size;
    println!(
        "BANDWIDTH patchify f16 batch {batch}: {:.1} us, {:.0} GB/s",
        t * 1e6,
        bytes as f64 / t / 1e9
    );

    for k in g.loaded_kernels() {
        println!(
            "LOADED {:<40} regs {:>3} static smem {:>5} local {:>4}",
            k.name, k.registers, k.static_shared_bytes, k.local_bytes
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Runs everywhere: without a driver or a device, opening a GPU is a clear error.

#[test]
fn opening_a_missing_gpu_is_an_error_not_a_panic() {
    match Gpu::new(1000) {
        Err(KernelError::NoDevice { ordinal: 1000, .. }) | Err(KernelError::NoDriver(_)) => {}
        Err(other) => panic!("unexpected error: {other}"),
        Ok(_) => panic!("no machine has 1001 GPUs"),
    }
}
