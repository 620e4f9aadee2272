//! The CPU twin of activation.cu's bias plus activation: one program per row.

use crate::types::Activation;
use rayon::prelude::*;

/// `out[r, c] = act(x[r, c] + bias[c])`: the bias and activation of a linear layer as a pass
/// of its own (the twin of `gpu::bias_activation`), one program per row.
pub fn bias_activation(x: &[f32], bias: &[f32], act: Activation, out: &mut [f32]) {
    let cols = bias.len();
    assert!(cols > 0 && x.len().is_multiple_of(cols) && out.len() == x.len());
    out.par_chunks_mut(cols)
        .zip(x.par_chunks(cols))
        .for_each(|(o, row)| {
            for ((o, &v), &b) in o.iter_mut().zip(row).zip(bias) {
                *o = act.apply(v + b);
            }
        });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bias_activation_adds_the_bias_per_column_then_activates() {
        let x = [1.0, -2.0, 3.0, -4.0, 0.5, 0.25];
        let bias = [0.5, 1.0, -4.0];
        let mut out = [0.0; 6];
        bias_activation(&x, &bias, Activation::Relu, &mut out);
        assert_eq!(out, [1.5, 0.0, 0.0, 0.0, 1.5, 0.0]);
        bias_activation(&x, &bias, Activation::Gelu, &mut out);
        for (i, o) in out.iter().enumerate() {
            assert_eq!(*o, Activation::Gelu.apply(x[i] + bias[i % 3]));
        }
    }
}
