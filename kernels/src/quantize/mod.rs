//! Quantisation of a matrix's rows into E4M3 codes and f32 scales (value ≈ code · scale): what
//! writes the FP8 matmul's activations A `[M, K]` (`crate::matmul::gpu::matmul_fp8`), from a
//! matrix [rows, cols] of f32, f16 or bf16 ([`QuantizeProblem`]).
//!
//! - [`ActivationScale::PerRow`] (per-token dynamic): each row's scale is
//!   `max(amax / 448, 1e-12)` ([`row_scale`]), amax the row's largest |x| in f32, written to
//!   `scales[row]`.
//! - [`ActivationScale::PerTensor`] (a calibrated static scale): one f32 given on the device,
//!   read and not written. It must be positive and finite (it is on the device, so not checked:
//!   0 makes every code of a non-zero value ±448 and of a zero NaN, as 0 · ∞).
//!
//! Either way `code = e4m3::encode(x · inverse)` with `inverse = 1 / scale` ([`inverse_scale`],
//! one IEEE division): a multiply by the reciprocal rather than a division per value, on the
//! GPU (e4m3.cuh) and in the twin alike, so that both give the same codes bit for bit (the two
//! formulas can differ in the last code). Rounding is to nearest even, saturating at ±448; NaN
//! gives the NaN code 0x7F ([`crate::e4m3`]), and a row's NaN values leave its scale to the
//! others (amax ignores them, as `f32::max` and `fmaxf` do). An infinity makes its row's scale
//! infinite, so the row's codes are 0 and its infinities NaN: the matmul then gives NaN, not a
//! finite value.
//!
//! - [`gpu::quantize_rows`]: quantize.cu, the row layout of `crate::rows` (one warp or a block a
//!   row) for per-row scales, element-wise for a per-tensor one.
//! - [`cpu::quantize_rows`]: the CPU twin, identical codes and scales.
//! - e4m3.cuh: the device side of the formulas, also used by layernorm.cu's e4m3 output
//!   (`crate::layernorm::gpu::layernorm_e4m3`, which quantises its normalised rows per row).
//!
//! Tests: the twin's here (cpu.rs); GPU against twin, bit for bit: kernels/tests/gpu_quantize.rs.

pub mod cpu;
pub mod gpu;

pub use crate::matmul::{ActivationScale, FP8_K_MULTIPLE};
use crate::types::DType;

/// The device header with the quantisation formulas, for every family that writes e4m3 codes.
pub(crate) const E4M3_HEADER: (&str, &str) = ("e4m3.cuh", include_str!("e4m3.cuh"));

/// The smallest scale [`row_scale`] gives: a row of zeros gets it rather than 0.
pub const MIN_SCALE: f32 = 1e-12;

/// The per-row scale of a row whose largest magnitude is `amax`: `max(amax / 448, 1e-12)`.
pub fn row_scale(amax: f32) -> f32 {
    (amax / crate::e4m3::MAX).max(MIN_SCALE)
}

/// What values are multiplied by before they are encoded: `1 / scale`, as the device takes it
/// (the FP8 matmul's `inverse_out_scale`, the same IEEE division).
pub fn inverse_scale(scale: f32) -> f32 {
    crate::matmul::inverse_out_scale(scale)
}

/// The largest |v| of `values`, NaN ignored: 0 for an empty or all-NaN slice.
pub fn amax(values: impl IntoIterator<Item = f32>) -> f32 {
    values.into_iter().fold(0.0f32, |m, v| m.max(v.abs()))
}

/// A quantisation of `rows` rows of `cols` values of `input` into e4m3 codes `[rows, cols]`
/// and the scales of `scale` (per row: `rows` f32 written; per tensor: one f32 read).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QuantizeProblem {
    pub rows: usize,
    pub cols: usize,
    pub input: DType,
    pub scale: ActivationScale,
}

impl QuantizeProblem {
    /// Whether the kernels are built for it: `cols` a positive multiple of 16, as the FP8
    /// matmul's K (rows of codes start on 16-byte boundaries); the twin asks the same.
    pub fn check(&self) -> Result<(), String> {
        if self.cols == 0 || !self.cols.is_multiple_of(FP8_K_MULTIPLE) {
            return Err(format!(
                "e4m3 quantisation needs rows of a positive multiple of {FP8_K_MULTIPLE} values \
                 (the FP8 matmul's K); they have {}",
                self.cols
            ));
        }
        self.elements()?;
        Ok(())
    }

    /// rows · cols: the number of values and of codes.
    pub fn elements(&self) -> Result<usize, String> {
        self.rows.checked_mul(self.cols).ok_or_else(|| {
            format!(
                "e4m3 quantisation of {} x {} values overflows",
                self.rows, self.cols
            )
        })
    }

    /// The number of f32 scales: `rows` per row, 1 per tensor.
    pub fn scales(&self) -> usize {
        self.scale.len(self.rows)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scales_are_amax_over_448_with_a_floor() {
        assert_eq!(row_scale(896.0), 2.0);
        assert_eq!(row_scale(448.0), 1.0);
        assert_eq!(row_scale(0.0), MIN_SCALE);
        // 1e-10 / 448 is under the floor.
        assert_eq!(row_scale(1e-10), MIN_SCALE);
        assert_eq!(row_scale(f32::INFINITY), f32::INFINITY);
        assert_eq!(inverse_scale(2.0), 0.5);
        assert_eq!(amax([1.0, -3.0, f32::NAN, 2.0]), 3.0);
        assert_eq!(amax([f32::NAN]), 0.0);
    }

    #[test]
    fn problems_need_rows_of_a_multiple_of_16() {
        let p = |cols| QuantizeProblem {
            rows: 3,
            cols,
            input: DType::F16,
            scale: ActivationScale::PerRow,
        };
        assert!(p(16).check().is_ok());
        assert!(p(768).check().is_ok());
        for cols in [0, 8, 17, 770] {
            let message = p(cols).check().unwrap_err();
            assert!(message.contains("multiple of 16"), "{message}");
        }
        let huge = QuantizeProblem {
            rows: usize::MAX,
            ..p(16)
        };
        assert!(huge.check().unwrap_err().contains("overflows"));
        assert_eq!(p(16).scales(), 3);
        let per_tensor = QuantizeProblem {
            scale: ActivationScale::PerTensor,
            ..p(16)
        };
        assert_eq!(per_tensor.scales(), 1);
    }
}
