//! RMSNorm (and in place) against its twin.

use super::*;
use vitrt_kernels::rmsnorm;

/// One RMSNorm of `rows` x `cols` values around `shift` (input and output `misalign` elements
/// off alignment) against its twin; the weight is f32 in every run.
fn rmsnorm_case(
    rng: &mut SmallRng,
    input: DType,
    dtype: DType,
    (rows, cols, misalign): (usize, usize, usize),
    shift: f32,
) -> Worst {
    let case = format!("rmsnorm {input} to {dtype} {rows}x{cols} misalign {misalign}");
    let x = random(rng, rows * cols, shift - 4.0, shift + 4.0, input);
    let weight = random(rng, cols, 0.5, 1.5, DType::F32);
    let (_xb, xv) = upload(gpu(), input, &x, misalign);
    let (_wb, wv) = upload(gpu(), DType::F32, &weight, misalign);
    let out = Poisoned::new(gpu(), dtype, rows * cols, misalign);
    rmsnorm::gpu::rmsnorm(gpu(), dtype, xv, wv, rows, cols, 1e-5, out.view()).unwrap();
    let got = out.read(gpu(), &case);
    let mut want = vec![0.0; rows * cols];
    rmsnorm::cpu::rmsnorm(&x, &weight, cols, 1e-5, &mut want);
    want.iter_mut().for_each(|v| *v = dtype.round(*v));
    let atol = tolerance(dtype) * largest(&want);
    compare(&case, &got, &want, tolerance(dtype), atol)
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn rmsnorm_matches_its_twin() {
    let mut rng = SmallRng::seed_from_u64(11);
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
        // AIMv2's widths (1024, 1536, 2048, 3072) among ragged ones.
        for &cols in &[1024, 54, 1, 1536, 4099, 16, 18, 3072, 2048, 16392, 197] {
            for &rows in &[1usize, 7, 256, 258] {
                for misalign in [0, 1] {
                    // RMSNorm keeps a common offset: rows far from zero and around it.
                    let shift = rng.random_range(-20.0..20.0f32);
                    let shape = (rows, cols, misalign);
                    worst = merge(worst, rmsnorm_case(&mut rng, input, dtype, shape, shift));
                    cases += 1;
                }
            }
        }
        // More rows than the GPU holds groups at once: each group walks several rows with the
        // weights it loaded once.
        for (rows, cols) in [(20011, 1024), (40000, 64), (9000, 1000)] {
            let shape = (rows, cols, 0);
            worst = merge(worst, rmsnorm_case(&mut rng, input, dtype, shape, 0.0));
            cases += 1;
        }
        let op = if input == dtype {
            "rmsnorm".to_string()
        } else {
            format!("rmsnorm from {input}")
        };
        report(&op, dtype, cases, worst);
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn rmsnorm_in_place_matches_its_twin() {
    let mut rng = SmallRng::seed_from_u64(12);
    for dtype in DType::ALL {
        for &cols in &[1024, 4099, 16392] {
            let rows = 9;
            let x = random(&mut rng, rows * cols, -3.0, 3.0, dtype);
            let weight = random(&mut rng, cols, 0.5, 1.5, DType::F32);
            let (xb, xv) = upload(gpu(), dtype, &x, 0);
            let (_wb, wv) = upload(gpu(), DType::F32, &weight, 0);
            rmsnorm::gpu::rmsnorm(gpu(), dtype, xv, wv, rows, cols, 1e-6, xv).unwrap();
            let mut bytes = vec![0u8; xb.len_bytes()];
            gpu().download(&xb, 0, &mut bytes).unwrap();
            let mut want = vec![0.0; rows * cols];
            rmsnorm::cpu::rmsnorm(&x, &weight, cols, 1e-6, &mut want);
            want.iter_mut().for_each(|v| *v = dtype.round(*v));
            compare(
                &format!("in-place rmsnorm {dtype} {cols}"),
                &dtype.decode(&bytes),
                &want,
                tolerance(dtype),
                1e-5,
            );
        }
    }
}
