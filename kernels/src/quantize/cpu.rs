//! The CPU twin of quantize.cu: the same codes and scales, bit for bit (the module's
//! documentation has the formulas). amax is a maximum, exact in any order, so the twin need not
//! follow the program's order of reduction.

use super::{amax, inverse_scale, row_scale, ActivationScale, QuantizeProblem};
use crate::e4m3;
use rayon::prelude::*;

/// Quantises the rows of `x` (`p.rows` x `p.cols` values of `p.input`; values not representable
/// in it are first rounded to it, as its storage would hold them) into `codes` (one a value)
/// and, per row, `scales` (one a row, written); per tensor, `scales[0]` is the given scale,
/// read. Panics where `p` or a slice's length is wrong (the GPU launcher returns the error).
pub fn quantize_rows(p: &QuantizeProblem, x: &[f32], codes: &mut [u8], scales: &mut [f32]) {
    if let Err(message) = p.check() {
        panic!("{message}");
    }
    let elements = p.rows * p.cols;
    assert!(
        x.len() >= elements && codes.len() >= elements && scales.len() >= p.scales(),
        "quantising {} x {} values needs {elements} values and codes and {} scales; given {}, {} \
         and {}",
        p.rows,
        p.cols,
        p.scales(),
        x.len(),
        codes.len(),
        scales.len()
    );
    let (x, codes) = (&x[..elements], &mut codes[..elements]);
    let stored = |v: f32| p.input.round(v);
    match p.scale {
        ActivationScale::PerRow => {
            codes
                .par_chunks_mut(p.cols)
                .zip(x.par_chunks(p.cols))
                .zip(scales[..p.rows].par_iter_mut())
                .for_each(|((codes, row), scale)| {
                    let row: Vec<f32> = row.iter().map(|&v| stored(v)).collect();
                    *scale = quantise_row(&row, codes);
                });
        }
        ActivationScale::PerTensor => {
            let inverse = inverse_scale(scales[0]);
            codes
                .par_chunks_mut(p.cols)
                .zip(x.par_chunks(p.cols))
                .for_each(|(codes, row)| {
                    for (code, &v) in codes.iter_mut().zip(row) {
                        *code = e4m3::encode(stored(v) * inverse);
                    }
                });
        }
    }
}

/// Per-row dynamic quantisation of one row of f32 `values` into `codes`: returns the row's
/// scale. What e4m3.cuh's `quantise_held_row` and `quantise_streamed_row` compute, for this
/// twin and the layernorm's (`crate::layernorm::cpu::layernorm_e4m3`).
pub(crate) fn quantise_row(values: &[f32], codes: &mut [u8]) -> f32 {
    let scale = row_scale(amax(values.iter().copied()));
    let inverse = inverse_scale(scale);
    for (code, &v) in codes.iter_mut().zip(values) {
        *code = e4m3::encode(v * inverse);
    }
    scale
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::DType;

    fn per_row(rows: usize, cols: usize, input: DType) -> QuantizeProblem {
        QuantizeProblem {
            rows,
            cols,
            input,
            scale: ActivationScale::PerRow,
        }
    }

    /// One row of 16 values: the given ones, then `fill`.
    fn row(values: &[f32], fill: f32) -> Vec<f32> {
        let mut row = values.to_vec();
        row.resize(16, fill);
        row
    }

    fn quantise(p: &QuantizeProblem, x: &[f32], scales: &mut [f32]) -> Vec<u8> {
        let mut codes = vec![0xAA; x.len()];
        quantize_rows(p, x, &mut codes, scales);
        codes
    }

    #[test]
    fn a_row_of_zeros_gets_the_smallest_scale_and_zero_codes() {
        let x = [row(&[], 0.0), row(&[-0.0], 0.0)].concat();
        let mut scales = [0.0; 2];
        let codes = quantise(&per_row(2, 16, DType::F32), &x, &mut scales);
        assert_eq!(scales, [1e-12, 1e-12]);
        assert_eq!(&codes[..16], &[0; 16]);
        // -0 keeps its sign, as the device's conversion does.
        assert_eq!(codes[16], 0x80);
        assert_eq!(&codes[17..], &[0; 15]);
    }

    #[test]
    fn one_huge_value_takes_448_and_the_rest_round_to_its_scale() {
        // scale = 1000 / 448; 1 becomes 0.448, between 0.4375 (0x2E) and 0.46875 (0x2F): 0x2E.
        let x = row(&[1000.0, -1000.0, 1.0, 0.001], 0.0);
        let mut scales = [0.0];
        let codes = quantise(&per_row(1, 16, DType::F32), &x, &mut scales);
        assert_eq!(scales[0], 1000.0 / 448.0);
        assert_eq!(&codes[..4], &[0x7E, 0xFE, 0x2E, 0x00]);
        assert_eq!(e4m3::decode(0x2E), 0.4375);
    }

    #[test]
    fn negative_values_keep_their_sign_and_exact_codes() {
        // amax 896 (a negative value): scale 2, every value halved exactly.
        let x = row(&[-896.0, 3.0, -0.75, 2.0, -1.0 / 256.0], 0.0);
        let mut scales = [0.0];
        let codes = quantise(&per_row(1, 16, DType::F32), &x, &mut scales);
        assert_eq!(scales[0], 2.0);
        // -448, 1.5, -0.375, 1.0, -2^-9 (the smallest subnormal).
        assert_eq!(&codes[..5], &[0xFE, 0x3C, 0xAC, 0x38, 0x81]);
        let back: Vec<f32> = codes[..5].iter().map(|&c| e4m3::decode(c) * 2.0).collect();
        assert_eq!(back, [-896.0, 3.0, -0.75, 2.0, -1.0 / 256.0]);
    }

    #[test]
    fn a_static_scale_saturates_at_448() {
        let p = QuantizeProblem {
            scale: ActivationScale::PerTensor,
            ..per_row(2, 16, DType::F32)
        };
        let x = [
            row(
                &[1000.0, -300.0, f32::INFINITY, f32::NEG_INFINITY, 100.0],
                0.25,
            ),
            row(&[224.0, -224.0], -0.5),
        ]
        .concat();
        let mut scales = [0.5];
        let codes = quantise(&p, &x, &mut scales);
        assert_eq!(scales, [0.5], "the given scale is read, not written");
        // 2000, -600 and the infinities saturate; 100 is 200, the midpoint between 192 (0x74:
        // 12 · 2^4) and 208 (0x75), and goes to the even 0x74.
        assert_eq!(&codes[..5], &[0x7E, 0xFE, 0x7E, 0xFE, 0x74]);
        assert_eq!(e4m3::decode(0x74), 192.0);
        assert_eq!(codes[5], e4m3::encode(0.5));
        // 448 exactly, unsaturated, and -1 for the fill.
        assert_eq!(&codes[16..18], &[0x7E, 0xFE]);
        assert_eq!(codes[18], 0xB8);
    }

    #[test]
    fn nan_is_stored_as_the_nan_code_and_leaves_the_scale_to_the_others() {
        let x = [row(&[f32::NAN, 896.0, 2.0], 0.0), row(&[], f32::NAN)].concat();
        let mut scales = [0.0; 2];
        let codes = quantise(&per_row(2, 16, DType::F32), &x, &mut scales);
        assert_eq!(scales, [2.0, 1e-12]);
        assert_eq!(&codes[..3], &[e4m3::NAN_CODE, 0x7E, 0x38]);
        assert!(codes[16..].iter().all(|&c| c == e4m3::NAN_CODE));
        // Per tensor too.
        let p = QuantizeProblem {
            scale: ActivationScale::PerTensor,
            ..per_row(1, 16, DType::BF16)
        };
        let codes = quantise(&p, &row(&[f32::NAN, 1.0], 0.0), &mut [1.0]);
        assert_eq!(&codes[..2], &[e4m3::NAN_CODE, 0x38]);
    }

    #[test]
    fn an_infinity_makes_its_row_nan_in_the_matmul_not_finite() {
        let x = row(&[f32::INFINITY, 1.0], 0.0);
        let mut scales = [0.0];
        let codes = quantise(&per_row(1, 16, DType::F32), &x, &mut scales);
        assert_eq!(scales[0], f32::INFINITY);
        assert_eq!(codes[0], e4m3::NAN_CODE, "∞ · 0");
        assert_eq!(codes[1], 0x00);
        assert!((e4m3::decode(codes[1]) * scales[0]).is_nan());
    }

    #[test]
    fn codes_multiply_by_the_reciprocal_of_the_scale() {
        // scale 1344 / 448 = 3, and x the f32 just below 3.5625. x / 3 is just below 1.1875, the
        // midpoint between 1.125 (0x39) and 1.25 (0x3A), so a division gives 0x39; 1 / 3 rounds
        // up in f32 and x · (1 / 3) lands on the midpoint, which goes to the even 0x3A. The
        // twin and the device multiply.
        let x_value = f32::from_bits(3.5625f32.to_bits() - 1);
        let x = row(&[1344.0, x_value], 0.0);
        let mut scales = [0.0];
        let codes = quantise(&per_row(1, 16, DType::F32), &x, &mut scales);
        assert_eq!(scales[0], 3.0);
        assert_eq!(e4m3::encode(x_value / 3.0), 0x39);
        assert_eq!(x_value * inverse_scale(3.0), 1.1875);
        assert_eq!(codes[1], 0x3A);
        assert_eq!(codes[0], 0x7E);
    }

    #[test]
    fn values_are_rounded_to_the_input_type_first() {
        // 0.1 in bf16 is 0.10009765625; with a scale of 1 (amax 448) it encodes as 0.1015625
        // either way, but amax comes from the stored value: 447.5 in f16 rounds to 447.5, in
        // bf16 to 448.
        let x = row(&[447.5, 0.1], 0.0);
        let mut scales = [0.0];
        quantise(&per_row(1, 16, DType::BF16), &x, &mut scales);
        assert_eq!(scales[0], 1.0);
        quantise(&per_row(1, 16, DType::F16), &x, &mut scales);
        assert_eq!(scales[0], 447.5 / 448.0);
    }

    #[test]
    fn every_code_decodes_to_within_half_a_step_of_its_value() {
        let (rows, cols) = (5, 64);
        let x: Vec<f32> = (0..rows * cols)
            .map(|i| ((i * 7919) % 1000) as f32 / 100.0 - 5.0)
            .collect();
        let mut scales = vec![0.0; rows];
        let codes = quantise(&per_row(rows, cols, DType::F32), &x, &mut scales);
        for (r, scale) in scales.iter().enumerate() {
            let row = &x[r * cols..][..cols];
            assert_eq!(*scale, amax(row.iter().copied()) / 448.0);
            for (&v, &c) in row.iter().zip(&codes[r * cols..][..cols]) {
                let back = e4m3::decode(c) * scale;
                // Half a step: 2^-4 of the value for normals, 2^-10 · scale for subnormals.
                let allowed = (v.abs() / 16.0).max(scale / 1024.0) * 1.0001;
                assert!((back - v).abs() <= allowed, "{v} came back as {back}");
            }
        }
    }

    #[test]
    #[should_panic(expected = "multiple of 16")]
    fn rows_of_other_lengths_are_refused() {
        quantize_rows(
            &per_row(1, 8, DType::F32),
            &[0.0; 8],
            &mut [0; 8],
            &mut [0.0],
        );
    }
}
