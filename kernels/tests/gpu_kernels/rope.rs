//! Rotary position embeddings against their twin.

use super::*;
use vitrt_kernels::rope::{self, RopeGrid};

#[test]
#[ignore = "needs a CUDA GPU"]
fn rope_matches_its_twin() {
    // Both sides take the same f32 angle (powf, one product order) and their own sin and cos,
    // a few f32 ulps apart; then one rounding of the output in f16/bf16. In place too.
    let mut rng = SmallRng::seed_from_u64(37);
    for dtype in DType::ALL {
        let (mut worst, mut cases) = (Worst::default(), 0);
        // (batch, prefix, rows, cols, heads, head_dim): DINOv3-B at 224 (CLS, 4 registers, 14x14),
        // a non-square grid, no prefix, odd sizes.
        for &(batch, prefix, rows, cols, heads, head_dim) in &[
            (2usize, 5usize, 14usize, 14usize, 12usize, 64usize),
            (3, 1, 6, 11, 4, 16),
            (1, 0, 3, 2, 2, 128),
            (5, 2, 1, 7, 3, 4),
        ] {
            let grid = RopeGrid {
                prefix_tokens: prefix,
                rows,
                cols,
                theta: 100.0,
            };
            let tokens = prefix + rows * cols;
            let n = batch * tokens * heads * head_dim;
            for in_place in [false, true] {
                let case = format!(
                    "rope {dtype} {batch}x({prefix}+{rows}x{cols}) heads {heads}x{head_dim} in place {in_place}"
                );
                let x = random(&mut rng, n, -3.0, 3.0, dtype);
                let (xb, xv) = upload(gpu(), dtype, &x, 0);
                let got = if in_place {
                    rope::gpu::rope(gpu(), dtype, xv, batch, tokens, heads, head_dim, &grid, xv)
                        .unwrap();
                    let mut raw = vec![0u8; n * dtype.size_bytes()];
                    gpu().download(&xb, 0, &mut raw).unwrap();
                    dtype.decode(&raw)
                } else {
                    let out = Poisoned::new(gpu(), dtype, n, 0);
                    rope::gpu::rope(
                        gpu(),
                        dtype,
                        xv,
                        batch,
                        tokens,
                        heads,
                        head_dim,
                        &grid,
                        out.view(),
                    )
                    .unwrap();
                    out.read(gpu(), &case)
                };
                let mut want = vec![0.0; n];
                rope::cpu::rope(&x, tokens, heads, head_dim, &grid, &mut want);
                want.iter_mut().for_each(|v| *v = dtype.round(*v));
                worst = merge(worst, compare(&case, &got, &want, tolerance(dtype), 1e-5));
                cases += 1;
            }
        }
        let grid = RopeGrid {
            prefix_tokens: 1,
            rows: 2,
            cols: 2,
            theta: 100.0,
        };
        let (_b, v) = upload(gpu(), dtype, &[0.0; 6 * 8], 0);
        let e = rope::gpu::rope(gpu(), dtype, v, 1, 6, 1, 8, &grid, v).unwrap_err();
        assert!(e.to_string().contains("5 tokens"), "{e}");
        report("rope", dtype, cases, worst);
    }
}
