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

/// SwiGLU's gate (the twin of `gpu::swiglu`): `x` is `[rows, 2·cols]` (the two halves side by
/// side), `out[r, c] = silu(x[r, c]) · x[r, cols + c]`.
pub fn swiglu(x: &[f32], cols: usize, out: &mut [f32]) {
    assert!(cols > 0 && x.len().is_multiple_of(2 * cols) && out.len() * 2 == x.len());
    out.par_chunks_mut(cols)
        .zip(x.par_chunks(2 * cols))
        .for_each(|(o, row)| {
            let (gate, up) = row.split_at(cols);
            for ((o, &g), &u) in o.iter_mut().zip(gate).zip(up) {
                *o = Activation::Silu.apply(g) * u;
            }
        });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn swiglu_gates_the_second_half_with_the_silu_of_the_first() {
        let x = [1.0, -2.0, 3.0, 4.0, 0.0, 5.0, 6.0, 7.0];
        let mut out = [0.0; 4];
        swiglu(&x, 2, &mut out);
        let silu = |v: f32| Activation::Silu.apply(v);
        assert_eq!(
            out,
            [silu(1.0) * 3.0, silu(-2.0) * 4.0, 0.0, silu(5.0) * 7.0]
        );
    }

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
