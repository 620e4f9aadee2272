//! The CPU twin of layernorm.cu: one program per row, statistics in f32.
//!
//! [`layernorm`] adds a row in order (the GPU's 16-bit output is compared with a tolerance);
//! [`layernorm_e4m3`] must give the GPU's e4m3 codes and scales bit for bit, so it adds in the
//! program's order and rounds where it does.

use crate::quantize::cpu::quantise_row;
use crate::rows::RowConfig;
use crate::types::DType;
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

/// The sum layernorm.cu's group takes over a row of `cols` elements in the layout `config`,
/// each element's contribution folded in by `step(acc, element)`: thread `rank` of the group's
/// 32 · group_warps folds its vectors rank, rank + threads, ... (the elements of each in
/// order) into its own sum from 0; `warp_sum`'s butterfly adds each warp's (every lane ends
/// with the same bits: each step adds two values, in either order); then `group_reduce` adds
/// the warps' in order, from the first.
fn program_sum(cols: usize, config: RowConfig, step: impl Fn(f32, usize) -> f32) -> f32 {
    let (vec, threads) = (config.vec as usize, 32 * config.group_warps as usize);
    let vectors = cols / vec;
    let mut lanes: Vec<f32> = (0..threads)
        .map(|rank| {
            (rank..vectors)
                .step_by(threads)
                .flat_map(|i| i * vec..(i + 1) * vec)
                .fold(0.0, &step)
        })
        .collect();
    for warp in lanes.chunks_mut(32) {
        for offset in [16, 8, 4, 2, 1] {
            let before = warp.to_vec();
            for (lane, v) in warp.iter_mut().enumerate() {
                *v = before[lane] + before[lane ^ offset];
            }
        }
    }
    lanes[32..]
        .iter()
        .step_by(32)
        .fold(lanes[0], |total, &warp| total + warp)
}

/// [`layernorm`]'s rows quantised per row into e4m3 `codes` and `scales` (one a row), as
/// layernorm.cu's e4m3 entry point writes them (`gpu::layernorm_e4m3`), bit for bit: the
/// statistics in the program's order of addition for `input` (x's storage type, which sets the
/// row layout; x holds its values, which are rounded to it first, as stored), with its fused
/// multiply-adds (the squared deviations, and `fmaf((x - mean) · inv_std, gamma, beta)`), then
/// each row of y, in f32, quantised as `crate::quantize` does per row: scale
/// `max(amax / 448, 1e-12)`, codes of `y · (1 / scale)`. `cols` must be a multiple of 16.
#[allow(clippy::too_many_arguments)]
pub fn layernorm_e4m3(
    x: &[f32],
    gamma: &[f32],
    beta: &[f32],
    input: DType,
    cols: usize,
    eps: f32,
    codes: &mut [u8],
    scales: &mut [f32],
) {
    assert!(
        cols > 0 && cols.is_multiple_of(crate::quantize::FP8_K_MULTIPLE),
        "an e4m3 layernorm needs rows of a positive multiple of 16 values, not {cols}"
    );
    assert!(x.len().is_multiple_of(cols) && codes.len() == x.len());
    assert!(gamma.len() == cols && beta.len() == cols && scales.len() == x.len() / cols);
    codes
        .par_chunks_mut(cols)
        .zip(x.par_chunks(cols))
        .zip(scales.par_iter_mut())
        .for_each(|((codes, row), scale)| {
            let y = normalised_row(row, gamma, beta, input, eps);
            *scale = quantise_row(&y, codes);
        });
}

/// [`layernorm`]'s rows as e4m3 codes with one static `scale` for every row (a calibrated
/// one): `codes = e4m3(y · (1 / scale))`, y as [`layernorm_e4m3`] computes it, bit for bit
/// as layernorm.cu's static e4m3 entry point (`gpu::layernorm_e4m3_static`). `cols` must be a
/// multiple of 16.
#[allow(clippy::too_many_arguments)]
pub fn layernorm_e4m3_static(
    x: &[f32],
    gamma: &[f32],
    beta: &[f32],
    input: DType,
    cols: usize,
    eps: f32,
    scale: f32,
    codes: &mut [u8],
) {
    assert!(
        cols > 0 && cols.is_multiple_of(crate::quantize::FP8_K_MULTIPLE),
        "an e4m3 layernorm needs rows of a positive multiple of 16 values, not {cols}"
    );
    assert!(x.len().is_multiple_of(cols) && codes.len() == x.len());
    assert!(gamma.len() == cols && beta.len() == cols);
    let inverse = crate::quantize::inverse_scale(scale);
    codes
        .par_chunks_mut(cols)
        .zip(x.par_chunks(cols))
        .for_each(|(codes, row)| {
            let y = normalised_row(row, gamma, beta, input, eps);
            for (code, v) in codes.iter_mut().zip(y) {
                *code = crate::e4m3::encode(v * inverse);
            }
        });
}

/// One row of y in f32 as layernorm.cu's e4m3 entry points compute it: the statistics in the
/// program's order of addition for `input` (the vector layout, as the launcher asks every
/// operand to be 16-byte aligned), with its fused multiply-adds.
fn normalised_row(row: &[f32], gamma: &[f32], beta: &[f32], input: DType, eps: f32) -> Vec<f32> {
    let cols = row.len();
    let config = RowConfig::for_alignment(input, cols, true);
    let inv_cols = 1.0 / cols as f32;
    let row: Vec<f32> = row.iter().map(|&v| input.round(v)).collect();
    let mean = program_sum(cols, config, |acc, e| acc + row[e]) * inv_cols;
    let squares = program_sum(cols, config, |acc, e| {
        let d = row[e] - mean;
        d.mul_add(d, acc)
    });
    let inv_std = 1.0 / (squares * inv_cols + eps).sqrt();
    row.iter()
        .zip(gamma.iter().zip(beta))
        .map(|(&v, (&g, &b))| ((v - mean) * inv_std).mul_add(g, b))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::e4m3;

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

    fn config(vec: u32, group_warps: u32) -> RowConfig {
        RowConfig {
            vec,
            group_warps,
            rows_per_block: 1,
            cached: 0,
        }
    }

    #[test]
    fn the_program_sum_adds_per_thread_then_by_butterfly_then_by_warp() {
        // Integers: every order gives the exact sum.
        let values: Vec<f32> = (0..4096).map(|i| (i % 97) as f32).collect();
        let exact: f32 = values.iter().sum();
        for layout in [config(8, 1), config(4, 1), config(8, 8), config(4, 16)] {
            assert_eq!(program_sum(4096, layout, |acc, e| acc + values[e]), exact);
        }
        // One big value and ones that f32 loses when added to it one at a time but keeps when
        // they are summed apart first. Lane 0's first element is 2^24 and every lane's second
        // vector starts with a 1: lane 0's own 1 is lost (2^24 + 1 rounds to even), and so is
        // lane 16's, which the butterfly's first step adds to it; the other 30 meet in pairs
        // and more before they reach it, and are kept.
        let (vec, cols) = (4usize, 256usize);
        let mut values = vec![0.0f32; cols];
        values[0] = 16_777_216.0;
        for lane in 0..32 {
            values[(lane + 32) * vec] = 1.0;
        }
        let sum = program_sum(cols, config(4, 1), |acc, e| acc + values[e]);
        let sequential: f32 = values.iter().sum();
        assert_eq!(sequential, 16_777_216.0, "in order, every 1 is lost");
        assert_eq!(sum, 16_777_216.0 + 30.0);
    }

    /// The e4m3 layernorm of `x` (f32 storage, rows of `cols`) with gamma 1 and beta 0 unless given.
    fn e4m3_rows(x: &[f32], cols: usize, gamma: &[f32], beta: &[f32]) -> (Vec<u8>, Vec<f32>) {
        let mut codes = vec![0xAA; x.len()];
        let mut scales = vec![0.0; x.len() / cols];
        layernorm_e4m3(
            x,
            gamma,
            beta,
            DType::F32,
            cols,
            1e-5,
            &mut codes,
            &mut scales,
        );
        (codes, scales)
    }

    #[test]
    fn a_constant_row_is_beta_exactly() {
        // x - mean is 0: y = beta, whose amax (0.875) sets the scale.
        let x = vec![3.0f32; 16];
        let mut beta = vec![0.0f32; 16];
        beta[0] = -0.875;
        beta[1] = 0.4375;
        let (codes, scales) = e4m3_rows(&x, 16, &[1.0; 16], &beta);
        assert_eq!(scales[0], 0.875 / 448.0);
        assert_eq!(codes[0], 0xFE);
        // 0.4375 / (0.875 / 448) = 224 (or a hair off it, the reciprocal's rounding): 0x76.
        assert_eq!(codes[1], e4m3::encode(0.4375 * (1.0 / (0.875f32 / 448.0))));
        assert_eq!(e4m3::decode(codes[1]), 224.0);
        assert!(codes[2..].iter().all(|&c| c == 0));
        // Beta 0 too: a row of zeros, the smallest scale.
        let (codes, scales) = e4m3_rows(&x, 16, &[1.0; 16], &[0.0; 16]);
        assert_eq!((scales[0], codes), (1e-12, vec![0u8; 16]));
    }

    #[test]
    fn nan_in_a_row_makes_every_code_of_that_row_nan() {
        let mut x: Vec<f32> = (0..32).map(|i| i as f32).collect();
        x[3] = f32::NAN;
        let (codes, scales) = e4m3_rows(&x, 16, &[1.0; 16], &[0.0; 16]);
        assert_eq!(scales[0], 1e-12);
        assert!(codes[..16].iter().all(|&c| c == e4m3::NAN_CODE));
        assert!(
            codes[16..].iter().all(|&c| c != e4m3::NAN_CODE),
            "the other row"
        );
    }

    #[test]
    fn codes_times_scales_are_the_layernorm_to_e4m3_precision() {
        let (rows, cols) = (6, 784);
        for input in DType::ALL {
            let x: Vec<f32> = (0..rows * cols)
                .map(|i| input.round(((i * 7919) % 1013) as f32 / 50.0 - 7.0))
                .collect();
            let gamma: Vec<f32> = (0..cols).map(|i| 0.5 + (i % 11) as f32 / 10.0).collect();
            let beta: Vec<f32> = (0..cols).map(|i| (i % 7) as f32 / 10.0 - 0.3).collect();
            let mut want = vec![0.0; rows * cols];
            layernorm(&x, &gamma, &beta, cols, 1e-5, &mut want);
            let mut codes = vec![0; rows * cols];
            let mut scales = vec![0.0; rows];
            layernorm_e4m3(
                &x,
                &gamma,
                &beta,
                input,
                cols,
                1e-5,
                &mut codes,
                &mut scales,
            );
            for r in 0..rows {
                let row = &want[r * cols..][..cols];
                let amax = crate::quantize::amax(row.iter().copied());
                assert!(
                    (scales[r] - amax / 448.0).abs() <= 1e-5 * scales[r],
                    "{input}"
                );
                for (&w, &c) in row.iter().zip(&codes[r * cols..][..cols]) {
                    let got = e4m3::decode(c) * scales[r];
                    let allowed = (w.abs() / 16.0).max(scales[r] / 1024.0) * 1.01 + 1e-5;
                    assert!(
                        (got - w).abs() <= allowed,
                        "{input}: {w} came back as {got}"
                    );
                }
            }
        }
    }

    #[test]
    #[should_panic(expected = "multiple of 16")]
    fn e4m3_rows_of_other_lengths_are_refused() {
        e4m3_rows(&[1.0; 12], 12, &[1.0; 12], &[0.0; 12]);
    }

    #[test]
    fn a_static_scale_gives_the_codes_of_that_scale() {
        let cols = 64;
        let x: Vec<f32> = (0..3 * cols)
            .map(|i| ((i * 37 % 101) as f32 / 25.0 - 2.0) * (1 + i / cols) as f32)
            .collect();
        let gamma: Vec<f32> = (0..cols).map(|i| 0.5 + (i % 7) as f32 / 7.0).collect();
        let beta: Vec<f32> = (0..cols).map(|i| (i % 5) as f32 / 10.0 - 0.2).collect();
        let (codes, scales) = e4m3_rows(&x, cols, &gamma, &beta);
        // With each row's own dynamic scale, the static program writes the dynamic codes.
        for (r, &scale) in scales.iter().enumerate() {
            let row = &x[r * cols..][..cols];
            let mut got = vec![0u8; cols];
            layernorm_e4m3_static(row, &gamma, &beta, DType::F32, cols, 1e-5, scale, &mut got);
            assert_eq!(got, codes[r * cols..][..cols], "row {r}");
        }
        // Half the scale: the values double, the largest saturate at 448.
        let half = scales[0] / 2.0;
        let mut got = vec![0u8; cols];
        layernorm_e4m3_static(
            &x[..cols],
            &gamma,
            &beta,
            DType::F32,
            cols,
            1e-5,
            half,
            &mut got,
        );
        let largest = got
            .iter()
            .map(|&c| e4m3::decode(c).abs())
            .fold(0.0, f32::max);
        assert_eq!(largest, 448.0);
        assert_ne!(got, codes[..cols]);
    }
}
