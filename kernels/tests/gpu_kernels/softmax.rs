//! Softmax (from f16/bf16 and from f32, in place, causal) against its twin.

use super::*;
use vitrt_kernels::softmax;

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
