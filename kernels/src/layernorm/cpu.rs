//! The CPU twin of layernorm.cu: one program per row, statistics in f32.

use rayon::prelude::*;

/// `out[r, :] = (x[r, :] - mean) / sqrt(var + eps) * gamma + beta`, biased variance, as
/// torch.nn.LayerNorm. Two passes over the row, so a large mean does not cost precision.
pub fn layernorm(x: &[f32], gamma: &[f32], beta: &[f32], cols: usize, eps: f32, out: &mut [f32]) {
    assert!(cols > 0 && x.len().is_multiple_of(cols) && out.len() == x.len());
    assert!(gamma.len() == cols && beta.len() == cols);
    out.par_chunks_mut(cols)
        .zip(x.par_chunks(cols))
        .for_each(|(o, row)| {
            let mean = row.iter().sum::<f32>() / cols as f32;
            let var = row.iter().map(|v| (v - mean) * (v - mean)).sum::<f32>() / cols as f32;
            let inv_std = 1.0 / (var + eps).sqrt();
            for (((o, &v), &g), &b) in o.iter_mut().zip(row).zip(gamma).zip(beta) {
                *o = (v - mean) * inv_std * g + b;
            }
        });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layernorm_normalises_each_row() {
        let x = [1.0, 2.0, 3.0, 4.0, 10.0, 10.0, 10.0, 10.0];
        let (g, b) = ([1.0, 1.0, 2.0, 2.0], [0.0, 0.0, 0.0, 1.0]);
        let mut out = [0.0; 8];
        layernorm(&x, &g, &b, 4, 1e-5, &mut out);
        let inv = 1.0 / (1.25f32 + 1e-5).sqrt();
        let want = [
            -1.5 * inv,
            -0.5 * inv,
            1.0 * inv,
            3.0 * inv + 1.0,
            0.0,
            0.0,
            0.0,
            1.0,
        ];
        for (o, w) in out.iter().zip(want) {
            assert!((o - w).abs() < 1e-5, "{out:?}");
        }
    }
}
