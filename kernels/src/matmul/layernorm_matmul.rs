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
//! per row r, per 64-column block b of its K values (B = K / 64 blocks), in f32:
//!     mean_b = (Σ_{k in b} x[r, k]) / 64,  m2_b = Σ_{k in b} (x[r, k] - mean_b)²
//! combined (Chan's formula for equal counts), in f32:
//!     mean = (Σ_b mean_b) / B,  m2 = Σ_b m2_b + 64 · Σ_b (mean_b - mean)²
//!     rstd = 1 / √(m2 / K + eps)
//! acc[r, n] = Σ_k x[r, k] · W'[n, k]                                            (f32)
//! out[r, n] = act(fma(rstd, fma(-mean, cs[n], acc[r, n]), b'[n]))               (stored in T)
//! ```
//!
//! which is `act(((x - mean) · rstd · gamma + beta) · Wᵀ + b)`. x, W' and b' hold T (f16 or
//! bf16), every matrix row-major and contiguous.
//!
//! The per-block partials (mean_b, m2_b) are not computed by the layernorm matmul itself: x is
//! the residual stream, and the linear layer that writes it (attention's output projection,
//! fc2: the 16-bit-stream ping-pong matmul with a residual) writes them beside it
//! (`gpu::matmul_with_row_statistics`, row statistics `[K / 64][M]` float2 = f32 pairs,
//! block-major); the layernorm matmul's epilogue only combines a row's B partials. Gathering
//! the statistics from the A tiles inside its main loop instead cost 1.4-1.5x the plain
//! matmul's time (benchmarks/NOTES.md, 2026-11-28 "Layernorms folded into the matmul").
//! Blocks of 64 values centred on their own mean keep the variance from cancelling where a
//! row's mean is large beside its spread. The twin ([`LayernormMatmulProblem::row_statistics`],
//! `cpu::row_statistics`) follows the device's formulas and summation orders
//! ([`block_statistics`], [`combine_statistics`]).

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

/// K must be a multiple of this: each row's statistics arrive as partials of whole blocks of
/// 64 values ([`ROW_STATISTICS_BLOCK`]).
pub const LAYERNORM_MATMUL_K_MULTIPLE: usize = 64;

/// The values a row statistics partial covers: one 64-column block of a row.
pub const ROW_STATISTICS_BLOCK: usize = 64;

/// The f32 values the row statistics of `rows` x `cols` values hold: (cols / 64) · rows pairs.
pub fn row_statistics_len(rows: usize, cols: usize) -> usize {
    2 * (cols / ROW_STATISTICS_BLOCK) * rows
}

/// One block's partial statistics (mean_b, m2_b) as the producer computes them
/// (tma_pingpong.cu's output_block_statistics), from its values as stored (rounded to T): in
/// f32, each sum over four partial sums (value i into sum i % 4, in order) added as
/// (s0 + s1) + (s2 + s3); mean_b = Σ x · (1/64) (for a block of 64), m2_b = Σ (x - mean_b)²
/// with fused multiply-adds. Any block length is computed (divided by it).
pub fn block_statistics(block: &[f32]) -> (f32, f32) {
    let mut s = [0.0f32; 4];
    for (i, &x) in block.iter().enumerate() {
        s[i % 4] += x;
    }
    let mean = ((s[0] + s[1]) + (s[2] + s[3])) * (1.0 / block.len().max(1) as f32);
    let mut q = [0.0f32; 4];
    for (i, &x) in block.iter().enumerate() {
        let d = x - mean;
        q[i % 4] = d.mul_add(d, q[i % 4]);
    }
    (mean, (q[0] + q[1]) + (q[2] + q[3]))
}

/// A row's (mean, m2) from its blocks' partials (mean_b, m2_b) of [`ROW_STATISTICS_BLOCK`]
/// values each, as the layernorm program's epilogue combines them (combine_row_statistics):
/// mean = (Σ_b mean_b) / B, m2 = fma(64, Σ_b (mean_b - mean)², Σ_b m2_b), each sum in block
/// order in f32.
pub fn combine_statistics(partials: impl Iterator<Item = (f32, f32)> + Clone) -> (f32, f32) {
    let (mut sum_mean, mut sum_m2, mut blocks) = (0.0f32, 0.0f32, 0usize);
    for (mean_b, m2_b) in partials.clone() {
        sum_mean += mean_b;
        sum_m2 += m2_b;
        blocks += 1;
    }
    let mean = sum_mean / blocks.max(1) as f32;
    let mut spread = 0.0f32;
    for (mean_b, _) in partials {
        let d = mean_b - mean;
        spread = d.mul_add(d, spread);
    }
    (mean, (ROW_STATISTICS_BLOCK as f32).mul_add(spread, sum_m2))
}

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
                 {LAYERNORM_MATMUL_K_MULTIPLE} (its row statistics come in blocks of 64); \
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

    /// The f32 values the row statistics of x hold ([`row_statistics_len`]).
    pub fn row_stats_len(&self) -> usize {
        row_statistics_len(self.m, self.k)
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

    /// One row's (mean, rstd) from its values (already in T), as producer and program compute
    /// them: [`block_statistics`] of each 64-value block, [`combine_statistics`], then
    /// rstd = 1 / √(m2 / K + eps). K a multiple of 64 (a shorter last block is computed as
    /// one of its length but combined as if of 64).
    pub fn row_statistics(&self, row: &[f32]) -> (f32, f32) {
        let (mean, m2) = combine_statistics(row.chunks(ROW_STATISTICS_BLOCK).map(block_statistics));
        self.statistics_of(mean, m2, row.len())
    }

    /// One row's (mean, rstd) from the producer's partials of its blocks (`(mean_b, m2_b)`, in
    /// block order), as the program's epilogue combines them.
    pub fn row_statistics_from_partials(
        &self,
        partials: impl Iterator<Item = (f32, f32)> + Clone,
    ) -> (f32, f32) {
        let (mean, m2) = combine_statistics(partials);
        self.statistics_of(mean, m2, self.k)
    }

    fn statistics_of(&self, mean: f32, m2: f32, k: usize) -> (f32, f32) {
        (mean, 1.0 / (m2 / k as f32 + self.eps).sqrt())
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
