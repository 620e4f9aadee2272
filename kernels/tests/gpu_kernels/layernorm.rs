//! Layernorm (and in place) against its twin.

use super::*;
use vitrt_kernels::layernorm;

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
