//! What a layernorm-folded matmul computes ([`LayernormMatmulProblem`]), shared by its CPU
//! twin (`cpu::matmul_layernorm`) and the Hopper program (`gpu::matmul_layernorm`, the
//! layernorm entry of tma_pingpong.cu): a linear layer on the layernorm of its input rows,
//! `act(LayerNorm(x; gamma, beta, eps) · Wᵀ + b)`, with gamma and beta folded into the
//! operands at load time ([`crate::matmul::layernorm_fold`]) so that no layernorm pass runs:
//!
//! ```text
//! W'[n, k] = W[n, k] · gamma[k]                (stored in T)
//! b'[n]    = b[n] + Σ_k W[n, k] · beta[k]      (stored in T)
//! cs[n]    = Σ_k W'[n, k]                      (f32, of W' as stored)
//!
//! per row r:  x0 = x[r, 0]
//!             s1 = Σ_k (x[r, k] - x0),  s2 = Σ_k (x[r, k] - x0)²            (f32)
//!             d = s1 / K,  var = max(s2 / K - d², 0),  mean = x0 + d,  rstd = 1 / √(var + eps)
//! acc[r, n] = Σ_k x[r, k] · W'[n, k]                                            (f32)
//! out[r, n] = act(fma(rstd, fma(-mean, cs[n], acc[r, n]), b'[n]))               (stored in T)
//! ```
//!
//! which is `act(((x - mean) · rstd · gamma + beta) · Wᵀ + b)`. x, W' and b' hold T (f16 or
//! bf16), every matrix row-major and contiguous. The shift by x0 keeps the variance from
//! cancelling where a row's mean is large beside its spread.

use crate::types::Activation;

/// A layernorm-folded linear layer; see the module's documentation.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LayernormMatmulProblem {
    /// Rows of x and of the output.
    pub m: usize,
    /// Output features (rows of W').
    pub n: usize,
    /// Input features (the layernorm's width).
    pub k: usize,
    pub activation: Activation,
    /// The layernorm's epsilon.
    pub eps: f32,
}

/// K must be a multiple of this: the program's k-tiles of 64 must all be whole, since a
/// zero-filled column past K would count in a row's shifted sums.
pub const LAYERNORM_MATMUL_K_MULTIPLE: usize = 64;

/// N must be a multiple of this: the output's rows are stored by TMA, whose row stride is a
/// multiple of 16 bytes.
pub const LAYERNORM_MATMUL_N_MULTIPLE: usize = 8;

impl LayernormMatmulProblem {
    /// Whether the program is built for this problem: an activation its epilogue applies, K a
    /// positive multiple of 64, N a multiple of 8, eps finite and not negative.
    pub fn check(&self) -> Result<(), String> {
        if !self.activation.in_matmul_epilogue() {
            return Err(format!(
                "the layernorm matmul's epilogue does not apply {:?}",
                self.activation
            ));
        }
        if self.k == 0 || !self.k.is_multiple_of(LAYERNORM_MATMUL_K_MULTIPLE) {
            return Err(format!(
                "the layernorm matmul needs K to be a positive multiple of \
                 {LAYERNORM_MATMUL_K_MULTIPLE} (its row statistics read whole k-tiles of A); \
                 K is {}",
                self.k
            ));
        }
        if !self.n.is_multiple_of(LAYERNORM_MATMUL_N_MULTIPLE) {
            return Err(format!(
                "the layernorm matmul needs N to be a multiple of {LAYERNORM_MATMUL_N_MULTIPLE} \
                 (TMA stores rows of 16-byte multiples); N is {}",
                self.n
            ));
        }
        if !(self.eps >= 0.0 && self.eps.is_finite()) {
            return Err(format!(
                "the layernorm matmul's eps must be finite and not negative, got {}",
                self.eps
            ));
        }
        Ok(())
    }

    /// Checks every operand's length (in elements) against the problem.
    pub fn check_bounds(
        &self,
        x: usize,
        w: usize,
        bias: usize,
        column_sums: usize,
        out: usize,
    ) -> Result<(), String> {
        let (m, n, k) = (self.m, self.n, self.k);
        let needs = [
            ("x", m * k, x),
            ("the weights", n * k, w),
            ("the bias", n, bias),
            ("the column sums", n, column_sums),
            ("the output", m * n, out),
        ];
        for (what, need, have) in needs {
            if have < need {
                return Err(format!(
                    "layernorm matmul: {what} needs {need} elements, the buffer has {have}"
                ));
            }
        }
        Ok(())
    }

    /// One row's (mean, rstd) from its values (already in T), as the program computes them:
    /// the shifted sums in f32 (here in order), then the formulas of the module's
    /// documentation with the device's fused multiply-add for s2 / K - d².
    pub fn row_statistics(&self, row: &[f32]) -> (f32, f32) {
        let x0 = row.first().copied().unwrap_or(0.0);
        let (mut s1, mut s2) = (0.0f32, 0.0f32);
        for &x in row {
            let d = x - x0;
            s1 += d;
            s2 = d.mul_add(d, s2);
        }
        let k = row.len() as f32;
        let shift = s1 / k;
        let variance = (-shift).mul_add(shift, s2 / k).max(0.0);
        (x0 + shift, 1.0 / (variance + self.eps).sqrt())
    }

    /// The value the output holds (before its rounding to T) for accumulator `acc` of a row
    /// with (`mean`, `rstd`) and a column with `column_sum` and `bias`: the device's epilogue
    /// in its order.
    pub fn store(&self, acc: f32, mean: f32, rstd: f32, column_sum: f32, bias: f32) -> f32 {
        self.activation
            .apply(rstd.mul_add((-mean).mul_add(column_sum, acc), bias))
    }

    pub fn flops(&self) -> f64 {
        2.0 * (self.m * self.n * self.k) as f64
    }
}
