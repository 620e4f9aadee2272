//! L2 normalisation of rows against its twin.

use super::*;
use vitrt_kernels::normalize;

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
