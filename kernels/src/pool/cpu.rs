//! The CPU twin of pool.cu.

use rayon::prelude::*;

/// `out[b, c] = mean(x[b, start..tokens, c])` for `x` `[B, tokens, cols]`: the token rows summed
/// in order in f32, then divided by their count, as pool.cu.
pub fn token_mean(x: &[f32], tokens: usize, start: usize, cols: usize, out: &mut [f32]) {
    assert!(start < tokens && cols > 0);
    assert!(x.len().is_multiple_of(tokens * cols));
    assert_eq!(out.len(), x.len() / tokens);
    let count = (tokens - start) as f32;
    out.par_chunks_mut(cols)
        .zip(x.par_chunks(tokens * cols))
        .for_each(|(o, image)| {
            for (c, o) in o.iter_mut().enumerate() {
                let mut sum = 0.0f32;
                for t in start..tokens {
                    sum += image[t * cols + c];
                }
                *o = sum / count;
            }
        });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_mean_averages_the_rows_from_start() {
        // 2 images of 3 tokens of 2 columns.
        let x = [
            1.0, 10.0, 2.0, 20.0, 4.0, 40.0, -1.0, 0.0, 3.0, 6.0, 5.0, 8.0,
        ];
        let mut out = [0.0; 4];
        token_mean(&x, 3, 0, 2, &mut out);
        assert_eq!(out, [7.0 / 3.0, 70.0 / 3.0, 7.0 / 3.0, 14.0 / 3.0]);
        token_mean(&x, 3, 1, 2, &mut out);
        assert_eq!(out, [3.0, 30.0, 4.0, 7.0]);
    }
}
