//! Bias and activation, SwiGLU (with the token mean of the pool family beside it) against their twins.

use super::*;
use vitrt_kernels::{activation, pool};

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
