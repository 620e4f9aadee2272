//! Row-wise and element-wise twins: one program per row (layernorm, softmax), one per
//! patch row (patchify), one per chunk (add). Statistics are always taken in f32.

use crate::Activation;
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

/// `out = a + b`, element by element.
pub fn add(a: &[f32], b: &[f32], out: &mut [f32]) {
    assert!(a.len() == b.len() && out.len() == a.len());
    out.par_chunks_mut(1 << 14)
        .zip(a.par_chunks(1 << 14).zip(b.par_chunks(1 << 14)))
        .for_each(|(o, (a, b))| {
            for ((o, x), y) in o.iter_mut().zip(a).zip(b) {
                *o = x + y;
            }
        });
}

/// Cuts NCHW pixels into patch rows: row `b * patches + py * (W/P) + px` holds the patch's
/// pixels in (channel, y, x) order, which is the order of a Conv2d weight `[hidden, C, P, P]`
/// flattened to `[hidden, C·P·P]`. The projection is then a plain matmul.
pub fn patchify(
    pixels: &[f32],
    batch: usize,
    channels: usize,
    height: usize,
    width: usize,
    patch: usize,
    out: &mut [f32],
) {
    let (grid_h, grid_w) = (height / patch, width / patch);
    let row_len = channels * patch * patch;
    assert_eq!(pixels.len(), batch * channels * height * width);
    assert_eq!(out.len(), batch * grid_h * grid_w * row_len);
    out.par_chunks_mut(row_len)
        .enumerate()
        .for_each(|(row, o)| {
            let b = row / (grid_h * grid_w);
            let (py, px) = ((row / grid_w) % grid_h, row % grid_w);
            for c in 0..channels {
                for y in 0..patch {
                    let src = ((b * channels + c) * height + py * patch + y) * width + px * patch;
                    let dst = (c * patch + y) * patch;
                    o[dst..dst + patch].copy_from_slice(&pixels[src..src + patch]);
                }
            }
        });
}

/// Writes the CLS row of every image: `out[b, 0, :] = cls + pos[0, :]`. The patch rows
/// (`out[b, 1.., :]`) come from the projection matmul, whose epilogue adds `pos[1.., :]`.
pub fn write_cls_rows(cls: &[f32], pos: &[f32], batch: usize, tokens: usize, out: &mut [f32]) {
    let hidden = cls.len();
    assert!(pos.len() >= hidden && out.len() == batch * tokens * hidden);
    for b in 0..batch {
        let row = &mut out[b * tokens * hidden..b * tokens * hidden + hidden];
        for ((o, c), p) in row.iter_mut().zip(cls).zip(pos) {
            *o = c + p;
        }
    }
}

/// `out[r, c] = act(x[r, c] + bias[c])`: the bias and activation of a linear layer as a pass
/// of its own (the twin of `Gpu::bias_activation`), one program per row.
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

    #[test]
    fn patchify_orders_pixels_as_a_conv_weight() {
        // One image, 2 channels, 4x4 pixels, 2x2 patches: pixel value encodes (c, y, x).
        let pixels: Vec<f32> = (0..2 * 4 * 4).map(|i| i as f32).collect();
        let mut out = vec![0.0; 4 * 8];
        patchify(&pixels, 1, 2, 4, 4, 2, &mut out);
        // Patch (py=0, px=1): channel 0 rows y=0,1 at x=2,3, then channel 1.
        assert_eq!(&out[8..16], &[2.0, 3.0, 6.0, 7.0, 18.0, 19.0, 22.0, 23.0]);
        // Patch (py=1, px=0).
        assert_eq!(&out[16..20], &[8.0, 9.0, 12.0, 13.0]);
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

    #[test]
    fn cls_rows_add_the_first_position() {
        let mut out = vec![9.0; 2 * 3 * 2];
        write_cls_rows(&[1.0, 2.0], &[0.5, 0.25, 7.0, 7.0], 2, 3, &mut out);
        assert_eq!(&out[0..2], &[1.5, 2.25]);
        assert_eq!(&out[6..8], &[1.5, 2.25]);
        assert_eq!(out[2], 9.0, "patch rows are left to the matmul");
    }
}
