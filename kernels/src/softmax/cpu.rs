//! The CPU twin of softmax.cu: one program per row, in f32.

use rayon::prelude::*;

/// `out[r, :] = softmax(scale * x[r, :])`, with the row maximum subtracted first.
pub fn softmax(x: &[f32], cols: usize, scale: f32, out: &mut [f32]) {
    assert!(cols > 0 && x.len().is_multiple_of(cols) && out.len() == x.len());
    out.par_chunks_mut(cols)
        .zip(x.par_chunks(cols))
        .for_each(|(o, row)| {
            let max = row.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(scale * v));
            let mut sum = 0.0f32;
            for (o, &v) in o.iter_mut().zip(row) {
                *o = (scale * v - max).exp();
                sum += *o;
            }
            let inv = 1.0 / sum;
            o.iter_mut().for_each(|v| *v *= inv);
        });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn softmax_is_stable_and_sums_to_one() {
        let x = [1000.0, 1001.0, 1002.0, -5.0, 0.0, 5.0];
        let mut out = [0.0; 6];
        softmax(&x, 3, 0.5, &mut out);
        let e = [(-1.0f32).exp(), (-0.5f32).exp(), 1.0];
        let s: f32 = e.iter().sum();
        for (o, w) in out[..3].iter().zip(e) {
            assert!((o - w / s).abs() < 1e-6);
        }
        assert!((out[3..].iter().sum::<f32>() - 1.0).abs() < 1e-6);
    }
}
