//! Position embeddings at another grid size: the patch part of a position table resampled as
//! transformers' `interpolate_pos_encoding` does it, with `torch.nn.functional.interpolate`
//! (`mode="bicubic"`, `align_corners=False`), plain or antialiased (DINOv2 with registers).
//!
//! This runs once per model and image size, on the host, in f64: it prepares a parameter, like
//! reading it from the checkpoint, and computes nothing per image. torch resamples in f32; the
//! results differ by f32 rounding only (about 1e-7 relative).

/// How the grid is resampled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Resampling {
    /// torch's bicubic, Keys' kernel with a = -0.75 on the 4 nearest samples (edge samples
    /// repeated).
    Bicubic,
    /// torch's `antialias=True` bicubic: a = -0.5, the kernel widened by the scale when
    /// shrinking, weights normalised (as PIL).
    BicubicAntialiased,
}

/// The samples and weights that make one output position along one axis.
struct Taps {
    indices: Vec<usize>,
    weights: Vec<f64>,
}

fn cubic(x: f64, a: f64) -> f64 {
    let x = x.abs();
    if x <= 1.0 {
        ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0
    } else if x < 2.0 {
        ((a * x - 5.0 * a) * x + 8.0 * a) * x - 4.0 * a
    } else {
        0.0
    }
}

/// torch's `upsample_bicubic2d`: source position `scale·(i + 0.5) - 0.5` (no clamp), its
/// floor and the three around it, clamped to the edge.
fn bicubic_taps(input: usize, output: usize) -> Vec<Taps> {
    let scale = input as f64 / output as f64;
    (0..output)
        .map(|i| {
            let real = scale * (i as f64 + 0.5) - 0.5;
            let floor = real.floor();
            let t = real - floor;
            let a = -0.75;
            let weights = vec![
                cubic(t + 1.0, a),
                cubic(t, a),
                cubic(1.0 - t, a),
                cubic(2.0 - t, a),
            ];
            let indices = (-1..3)
                .map(|k| (floor as i64 + k).clamp(0, input as i64 - 1) as usize)
                .collect();
            Taps { indices, weights }
        })
        .collect()
}

/// torch's `_upsample_bicubic2d_aa` (PIL's filter): centre `scale·(i + 0.5)`, support
/// `2·scale` when shrinking, samples inside the image only, weights normalised.
fn antialiased_taps(input: usize, output: usize) -> Vec<Taps> {
    let scale = input as f64 / output as f64;
    let (support, invscale) = if scale >= 1.0 {
        (2.0 * scale, 1.0 / scale)
    } else {
        (2.0, 1.0)
    };
    (0..output)
        .map(|i| {
            let center = scale * (i as f64 + 0.5);
            // Truncation toward zero, as the int64 casts in torch.
            let start = ((center - support + 0.5) as i64).max(0) as usize;
            let end = ((center + support + 0.5) as i64).min(input as i64) as usize;
            let mut weights: Vec<f64> = (start..end)
                .map(|j| cubic((j as f64 - center + 0.5) * invscale, -0.5))
                .collect();
            let total: f64 = weights.iter().sum();
            if total != 0.0 {
                weights.iter_mut().for_each(|w| *w /= total);
            }
            Taps {
                indices: (start..end).collect(),
                weights,
            }
        })
        .collect()
}

/// Resamples `grid`, `[in_h, in_w, dim]` row-major (the patch rows of a position table), to
/// `[out_h, out_w, dim]`.
pub fn resample_grid(
    grid: &[f32],
    (in_h, in_w): (usize, usize),
    (out_h, out_w): (usize, usize),
    dim: usize,
    resampling: Resampling,
) -> Vec<f32> {
    assert_eq!(grid.len(), in_h * in_w * dim);
    let taps = |input, output| match resampling {
        Resampling::Bicubic => bicubic_taps(input, output),
        Resampling::BicubicAntialiased => antialiased_taps(input, output),
    };
    let (rows, cols) = (taps(in_h, out_h), taps(in_w, out_w));
    let mut out = vec![0.0f32; out_h * out_w * dim];
    let mut acc = vec![0.0f64; dim];
    for (y, row) in rows.iter().enumerate() {
        for (x, col) in cols.iter().enumerate() {
            acc.iter_mut().for_each(|a| *a = 0.0);
            for (&iy, &wy) in row.indices.iter().zip(&row.weights) {
                for (&ix, &wx) in col.indices.iter().zip(&col.weights) {
                    let w = wy * wx;
                    let src = &grid[(iy * in_w + ix) * dim..][..dim];
                    for (a, &v) in acc.iter_mut().zip(src) {
                        *a += w * v as f64;
                    }
                }
            }
            let dst = &mut out[(y * out_w + x) * dim..][..dim];
            for (d, a) in dst.iter_mut().zip(&acc) {
                *d = *a as f32;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_size_is_the_identity() {
        let grid: Vec<f32> = (0..3 * 4 * 2).map(|i| i as f32 * 0.5 - 3.0).collect();
        for resampling in [Resampling::Bicubic, Resampling::BicubicAntialiased] {
            assert_eq!(
                resample_grid(&grid, (3, 4), (3, 4), 2, resampling),
                grid,
                "{resampling:?}"
            );
        }
    }

    #[test]
    fn a_constant_stays_constant_and_a_ramp_stays_a_ramp_inside() {
        let constant = vec![2.5f32; 5 * 5];
        for resampling in [Resampling::Bicubic, Resampling::BicubicAntialiased] {
            for out in [(2, 3), (7, 9), (5, 12)] {
                let r = resample_grid(&constant, (5, 5), out, 1, resampling);
                assert!(r.iter().all(|v| (v - 2.5).abs() < 1e-6), "{resampling:?}");
            }
        }
        // Upsampling a ramp 4 -> 8 along x, as torch gives it (a = -0.75 does not reproduce
        // linear functions; the edge samples repeat).
        let ramp: Vec<f32> = (0..4).map(|x| x as f32).collect();
        let r = resample_grid(&ramp, (1, 4), (1, 8), 1, Resampling::Bicubic);
        let want = [
            -0.105_468_75_f32,
            0.191_406_25,
            0.667_968_75,
            1.296_875,
            1.703_125,
            2.332_031_3,
            2.808_593_8,
            3.105_468_8,
        ];
        for (got, want) in r.iter().zip(want) {
            assert!((got - want).abs() < 1e-6, "{r:?}");
        }
    }

    #[test]
    fn known_torch_values() {
        // torch.nn.functional.interpolate(torch.arange(16.).reshape(1,1,4,4), size=(2,3),
        // mode="bicubic", align_corners=False) and the same with antialias=True.
        let grid: Vec<f32> = (0..16).map(|i| i as f32).collect();
        let plain = resample_grid(&grid, (4, 4), (2, 3), 1, Resampling::Bicubic);
        let want_plain = [
            1.751_157_9_f32,
            3.125,
            4.498_843_7,
            10.501_16,
            11.875,
            13.248_845,
        ];
        for (g, w) in plain.iter().zip(want_plain) {
            assert!((g - w).abs() < 1e-5, "{plain:?}");
        }
        let aa = resample_grid(&grid, (4, 4), (2, 3), 1, Resampling::BicubicAntialiased);
        let want_aa = [
            2.537_038_6_f32,
            3.847_107_4,
            5.157_176,
            9.842_823,
            11.152_892,
            12.462_962,
        ];
        for (g, w) in aa.iter().zip(want_aa) {
            assert!((g - w).abs() < 1e-5, "{aa:?}");
        }
    }
}
