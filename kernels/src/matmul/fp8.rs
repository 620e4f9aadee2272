//! What an FP8 matmul computes ([`Fp8Problem`]), shared by its CPU twin
//! (`cpu::matmul_fp8`) and the Hopper program (`gpu::matmul_fp8`, tma_pingpong.cu's FP8
//! entry points): a linear layer whose activations A `[M, K]` and weights B `[N, K]` (as a
//! Hugging Face Linear stores them) are E4M3 codes ([`crate::e4m3`]), every matrix row-major
//! and contiguous,
//!
//! ```text
//! acc[m, n] = Σ_k A[m, k] · B[n, k]                          (fp32 accumulation)
//! v         = act(acc · (a_scale[m] · b_scale[n]) + bias[n]) + residual[m, n]
//! C[m, n]   = v in f16 / bf16, or e4m3(v · (1 / out_scale)) saturated to ±448
//! ```
//!
//! `b_scale` is the weights' per-output-channel scale (f32, N values); `a_scale` the
//! activations' scale, one f32 per row (per-token dynamic scales) or one for the whole tensor
//! (a calibrated static scale): [`ActivationScale`]. The bias and the residual hold the
//! model's 16-bit type ([`Fp8Problem::half`]), as a 16-bit C does. An e4m3 C (fc1 with its
//! GELU feeding fc2 in e4m3) is divided by `out_scale` (one f32 on the device) first, with
//! the reciprocal taken once, as the device multiplies; it takes no residual.

use crate::e4m3;
use crate::types::{Activation, DType};

/// How many values the activations' scale has.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ActivationScale {
    /// One f32 a row of A (M values): per-token dynamic quantisation.
    PerRow,
    /// One f32 for all of A: a calibrated static scale.
    PerTensor,
}

impl ActivationScale {
    /// The number of f32 values the scale holds for `m` rows.
    pub fn len(self, m: usize) -> usize {
        match self {
            ActivationScale::PerRow => m,
            ActivationScale::PerTensor => 1,
        }
    }
}

/// C's storage.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Fp8Output {
    /// The problem's 16-bit type ([`Fp8Problem::half`]).
    Half,
    /// E4M3 codes, scaled by the reciprocal of the output scale and saturated.
    E4m3,
}

/// An FP8 linear layer; see the module's documentation.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Fp8Problem {
    pub m: usize,
    pub n: usize,
    pub k: usize,
    /// F16 or BF16: the bias, the residual and a 16-bit C.
    pub half: DType,
    pub output: Fp8Output,
    pub activation_scale: ActivationScale,
    pub bias: bool,
    pub activation: Activation,
    pub residual: bool,
}

/// K must be a multiple of this many e4m3 values: a tensor map's row stride is a multiple of
/// 16 bytes.
pub const FP8_K_MULTIPLE: usize = 16;

impl Fp8Problem {
    /// `C = A · Bᵀ` into f16 or bf16, per-row activation scales, no bias, activation or
    /// residual.
    pub fn linear(m: usize, n: usize, k: usize, half: DType) -> Fp8Problem {
        Fp8Problem {
            m,
            n,
            k,
            half,
            output: Fp8Output::Half,
            activation_scale: ActivationScale::PerRow,
            bias: false,
            activation: Activation::None,
            residual: false,
        }
    }

    /// C's storage type in words, for messages and names: `f16`, `bf16` or `e4m3`.
    pub fn output_name(&self) -> &'static str {
        match self.output {
            Fp8Output::Half => self.half.name(),
            Fp8Output::E4m3 => "e4m3",
        }
    }

    /// Whether the kernels are built for this problem: a 16-bit `half`, an activation the
    /// epilogue applies, no residual with an e4m3 C, and K a positive multiple of 16 (tensor maps
    /// stride over rows of 16-byte multiples; the CPU twin asks the same, so that what runs
    /// on one backend runs on the other).
    pub fn check(&self) -> Result<(), String> {
        if self.half == DType::F32 {
            return Err(
                "the FP8 matmul's bias, residual and 16-bit output are f16 or bf16, not f32".into(),
            );
        }
        if !self.activation.in_matmul_epilogue() {
            return Err(format!(
                "the FP8 matmul's epilogue does not apply {:?}: run it as an activation pass",
                self.activation
            ));
        }
        if self.residual && self.output == Fp8Output::E4m3 {
            return Err("the FP8 matmul adds a residual only to an f16 or bf16 output".into());
        }
        if self.k == 0 {
            return Err("the FP8 matmul needs K > 0 (its program has no k-tile to run)".into());
        }
        if !self.k.is_multiple_of(FP8_K_MULTIPLE) {
            return Err(format!(
                "the FP8 matmul needs K to be a multiple of {FP8_K_MULTIPLE} (rows of A and B \
                 start on 16-byte boundaries, as TMA reads them); K is {}",
                self.k
            ));
        }
        Ok(())
    }

    /// Checks every operand's length (in elements) against the problem.
    #[allow(clippy::too_many_arguments)]
    pub fn check_bounds(
        &self,
        a: usize,
        b: usize,
        a_scale: usize,
        b_scale: usize,
        bias: Option<usize>,
        residual: Option<usize>,
        c: usize,
    ) -> Result<(), String> {
        let (m, n, k) = (self.m, self.n, self.k);
        let mut needs = vec![
            ("A", m * k, Some(a)),
            ("B", n * k, Some(b)),
            (
                "the activation scale",
                self.activation_scale.len(m),
                Some(a_scale),
            ),
            ("the weight scale", n, Some(b_scale)),
            ("C", m * n, Some(c)),
        ];
        if self.bias {
            needs.push(("the bias", n, bias));
        }
        if self.residual {
            needs.push(("the residual", m * n, residual));
        }
        for (what, need, have) in needs {
            match have {
                Some(have) if have >= need => {}
                Some(have) => {
                    return Err(format!(
                        "FP8 matmul: {what} needs {need} elements, the buffer has {have}"
                    ))
                }
                None => return Err(format!("FP8 matmul: the epilogue wants {what}, none given")),
            }
        }
        Ok(())
    }

    /// The value C stores for accumulator `acc` of row m, column n, as an f32: the epilogue
    /// in the device's operation order (one fused multiply-add of the scales' product and
    /// the bias), then the store's rounding. `bias` and `residual` are 16-bit values (0 when
    /// absent); `inverse_out_scale` is `1 / out_scale` (an e4m3 C only).
    pub fn store(
        &self,
        acc: f32,
        a_scale: f32,
        b_scale: f32,
        bias: f32,
        residual: f32,
        inverse_out_scale: f32,
    ) -> f32 {
        let v = self.activation.apply(acc.mul_add(a_scale * b_scale, bias)) + residual;
        match self.output {
            Fp8Output::Half => self.half.round(v),
            Fp8Output::E4m3 => e4m3::round(v * inverse_out_scale),
        }
    }

    /// The activation scale's stride between rows, as the device program reads it (0: one
    /// value for every row).
    pub(crate) fn activation_scale_stride(&self) -> i32 {
        match self.activation_scale {
            ActivationScale::PerRow => 1,
            ActivationScale::PerTensor => 0,
        }
    }

    pub fn flops(&self) -> f64 {
        2.0 * (self.m * self.n * self.k) as f64
    }
}

/// The reciprocal of the output scale, as the device takes it (one IEEE division).
pub fn inverse_out_scale(out_scale: f32) -> f32 {
    1.0 / out_scale
}
