//! The CPU twin of rmsnorm.cu: one program per row, the mean of squares in f32.

use rayon::prelude::*;

/// `out[r, :] = x[r, :] / sqrt(mean(x[r, :]²) + eps) * weight`, as transformers'
/// `Aimv2RMSNorm` computes it in f32: the row's scale from its mean of squares, then the
/// weight.
pub fn rmsnorm(x: &[f32], weight: &[f32], cols: usize, eps: f32, out: &mut [f32]) {
    assert!(cols > 0 && x.len().is_multiple_of(cols) && out.len() == x.len());
    assert!(weight.len() == cols);
    out.par_chunks_mut(cols)
        .zip(x.par_chunks(cols))
        .for_each(|(o, row)| {
            let mean_square = row.iter().map(|v| v * v).sum::<f32>() / cols as f32;
            let inv_rms = 1.0 / (mean_square + eps).sqrt();
            for ((o, &v), &w) in o.iter_mut().zip(row).zip(weight) {
                *o = v * inv_rms * w;
            }
        });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The definition in f64: what the f32 twin must come within rounding of.
    fn rmsnorm_f64(x: &[f32], weight: &[f32], cols: usize, eps: f64) -> Vec<f64> {
        x.chunks(cols)
            .flat_map(|row| {
                let mean_square =
                    row.iter().map(|&v| (v as f64) * (v as f64)).sum::<f64>() / cols as f64;
                let inv_rms = 1.0 / (mean_square + eps).sqrt();
                row.iter()
                    .zip(weight)
                    .map(move |(&v, &w)| v as f64 * inv_rms * w as f64)
            })
            .collect()
    }

    /// A few values of a fixed pseudo-random sequence in [lo, hi).
    fn values(n: usize, seed: u64, lo: f32, hi: f32) -> Vec<f32> {
        let mut state = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (0..n)
            .map(|_| {
                state = state
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let unit = (state >> 40) as f32 / (1u64 << 24) as f32;
                lo + (hi - lo) * unit
            })
            .collect()
    }

    #[test]
    fn rmsnorm_scales_each_row_by_its_root_mean_square() {
        // Rows [3, 4] and [0, 0]: a root mean square of sqrt(12.5), and a zero row that eps
        // keeps finite.
        let x = [3.0, 4.0, 0.0, 0.0];
        let weight = [1.0, 2.0];
        let mut out = [f32::NAN; 4];
        rmsnorm(&x, &weight, 2, 1e-6, &mut out);
        let inv = 1.0 / (12.5f32 + 1e-6).sqrt();
        let want = [3.0 * inv, 8.0 * inv, 0.0, 0.0];
        for (o, w) in out.iter().zip(want) {
            assert!((o - w).abs() < 1e-6, "{out:?}");
        }
    }

    #[test]
    fn rmsnorm_matches_its_f64_definition() {
        // Widths of AIMv2's sizes and odd ones; inputs with a large common offset, which
        // RMSNorm (unlike LayerNorm) does not subtract.
        for (case, &(rows, cols, shift)) in [
            (3, 1024, 0.0f32),
            (5, 1536, 0.0),
            (2, 3072, 30.0),
            (7, 17, -5.0),
            (1, 1, 2.0),
        ]
        .iter()
        .enumerate()
        {
            let x = values(rows * cols, case as u64, shift - 4.0, shift + 4.0);
            let weight = values(cols, 100 + case as u64, 0.5, 1.5);
            for eps in [1e-5f32, 1e-6] {
                let mut got = vec![0.0; rows * cols];
                rmsnorm(&x, &weight, cols, eps, &mut got);
                let want = rmsnorm_f64(&x, &weight, cols, eps as f64);
                let scale = want.iter().fold(0.0f64, |m, v| m.max(v.abs()));
                for (i, (&g, &w)) in got.iter().zip(&want).enumerate() {
                    let error = (g as f64 - w).abs();
                    assert!(
                        error <= 1e-5 * w.abs() + 1e-6 * scale,
                        "{rows}x{cols} eps {eps} [{i}]: {g} against {w}"
                    );
                }
            }
        }
    }

    #[test]
    fn rmsnorm_is_not_layernorm() {
        // A row with a mean: LayerNorm would subtract it, RMSNorm keeps it.
        let x = [1.0, 2.0, 3.0];
        let mut out = [0.0; 3];
        rmsnorm(&x, &[1.0; 3], 3, 0.0, &mut out);
        let rms = (14.0f32 / 3.0).sqrt();
        assert!(out.iter().zip(x).all(|(o, v)| (o - v / rms).abs() < 1e-6));
        assert!(out.iter().all(|&o| o > 0.0));
    }
}
