//! Folding a layernorm's gamma and beta into the linear layer that reads it, for the
//! layernorm-folded matmul ([`crate::matmul::LayernormMatmulProblem`]): done once when the
//! weights load. Weights are `[N, K]` (as a Hugging Face Linear stores them), f32 on the host.
//!
//! The caller rounds the folded weight to the model's 16-bit type, then takes the column sums
//! of the rounded values ([`column_sums`]), so that `mean · cs[n]` cancels exactly the mean's
//! share of the product the device accumulates from those same values.

/// `W'[n, k] = W[n, k] · gamma[k]` (f32 products). Panics if `weight` or `gamma` are shorter
/// than `n · k` and `k`.
pub fn fold_weight(weight: &[f32], gamma: &[f32], n: usize, k: usize) -> Vec<f32> {
    assert!(
        weight.len() >= n * k && gamma.len() >= k,
        "fold_weight: {n} x {k} weights need {} values and gamma {k}; got {} and {}",
        n * k,
        weight.len(),
        gamma.len()
    );
    weight[..n * k]
        .chunks_exact(k.max(1))
        .take(n)
        .flat_map(|row| row.iter().zip(gamma).map(|(w, g)| w * g))
        .collect()
}

/// `b'[n] = b[n] + Σ_k W[n, k] · beta[k]` from the unfolded weight, the sum in f64, then
/// rounded once to f32 (`bias` None: b = 0). Panics if an operand is shorter than the shape
/// asks.
pub fn fold_bias(
    weight: &[f32],
    beta: &[f32],
    bias: Option<&[f32]>,
    n: usize,
    k: usize,
) -> Vec<f32> {
    assert!(
        weight.len() >= n * k && beta.len() >= k && bias.is_none_or(|b| b.len() >= n),
        "fold_bias: {n} x {k} weights need {} values, beta {k} and the bias {n}",
        n * k
    );
    (0..n)
        .map(|j| {
            let row = &weight[j * k..(j + 1) * k];
            let shift: f64 = row
                .iter()
                .zip(beta)
                .map(|(&w, &b)| w as f64 * b as f64)
                .sum();
            (bias.map_or(0.0, |b| b[j] as f64) + shift) as f32
        })
        .collect()
}

/// `cs[n] = Σ_k W'[n, k]` of the folded weight as stored (already rounded to its 16-bit
/// type), the sum in f64, then rounded once to f32.
pub fn column_sums(rounded_weight: &[f32], n: usize, k: usize) -> Vec<f32> {
    assert!(
        rounded_weight.len() >= n * k,
        "column_sums: {n} x {k} weights need {} values; got {}",
        n * k,
        rounded_weight.len()
    );
    (0..n)
        .map(|j| {
            rounded_weight[j * k..(j + 1) * k]
                .iter()
                .map(|&w| w as f64)
                .sum::<f64>() as f32
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fold_weight_scales_each_column_by_gamma() {
        let w = [1.0, 2.0, 3.0, -4.0, 5.0, 0.5];
        let gamma = [2.0, 0.5, -1.0];
        assert_eq!(
            fold_weight(&w, &gamma, 2, 3),
            vec![2.0, 1.0, -3.0, -8.0, 2.5, -0.5]
        );
    }

    #[test]
    fn fold_bias_adds_the_weights_times_beta_in_f64() {
        let w = [1.0, 2.0, 3.0, -4.0, 5.0, 0.5];
        let beta = [0.5, -1.0, 2.0];
        // Row 0: 0.5 - 2 + 6 = 4.5; row 1: -2 - 5 + 1 = -6.
        assert_eq!(fold_bias(&w, &beta, None, 2, 3), vec![4.5, -6.0]);
        assert_eq!(
            fold_bias(&w, &beta, Some(&[1.0, 0.25]), 2, 3),
            vec![5.5, -5.75]
        );
        // 1 + 2^-30 - 1 is 2^-30 in f64, 0 in f32 sums taken in order.
        let w = [1.0, 2f32.powi(-30), -1.0];
        assert_eq!(
            fold_bias(&w, &[1.0, 1.0, 1.0], None, 1, 3),
            vec![2f32.powi(-30)]
        );
    }

    #[test]
    fn column_sums_sum_each_row_in_f64() {
        let w = [1.0, 2f32.powi(-30), -1.0, 3.0, 4.0, 5.0];
        assert_eq!(column_sums(&w, 2, 3), vec![2f32.powi(-30), 12.0]);
    }

    #[test]
    #[should_panic(expected = "fold_weight")]
    fn short_operands_are_refused() {
        fold_weight(&[1.0; 5], &[1.0; 3], 2, 3);
    }
}
