//! Block-program matmul: one program owns a BLOCK_M × BLOCK_N tile of C for one (batch, head),
//! walks K in BLOCK_K steps with an fp32 accumulator, and applies the fused epilogue once.
//! Program ids are remapped in groups of GROUP_M rows of tiles, as in Triton's matmul tutorial,
//! so that programs running together share rows of A and columns of B in cache.

use crate::e4m3;
use crate::matmul::fp8::{inverse_out_scale, ActivationScale, Fp8Problem};
use crate::matmul::layernorm_matmul::LayernormMatmulProblem;
use crate::matmul::problem::{Epilogue, MatmulProblem, WeightLayout};
use rayon::prelude::*;

/// The CPU twin's meta-parameters.
#[derive(Clone, Copy, Debug)]
pub struct MatmulTiles {
    pub block_m: usize,
    pub block_n: usize,
    pub block_k: usize,
    pub group_m: usize,
}

impl Default for MatmulTiles {
    fn default() -> Self {
        MatmulTiles {
            block_m: 32,
            block_n: 64,
            block_k: 256,
            group_m: 8,
        }
    }
}

/// Maps a linear program id to its (tile row, tile column) with grouped ordering.
pub(crate) fn grouped_tile(
    pid: usize,
    tiles_m: usize,
    tiles_n: usize,
    group_m: usize,
) -> (usize, usize) {
    let programs_in_group = group_m * tiles_n;
    let group = pid / programs_in_group;
    let first_m = group * group_m;
    let group_size = (tiles_m - first_m).min(group_m);
    let in_group = pid % programs_in_group;
    (first_m + in_group % group_size, in_group / group_size)
}

/// Runs `problem` on f32 buffers. Panics if an operand does not fit its buffer: callers check
/// with [`MatmulProblem::check_bounds`] and turn that into an error first.
pub fn matmul(
    problem: &MatmulProblem,
    tiles: MatmulTiles,
    a: &[f32],
    b: &[f32],
    bias: Option<&[f32]>,
    residual: Option<&[f32]>,
    c: &mut [f32],
) {
    let p = problem;
    if let Err(e) = p.check_bounds(
        a.len(),
        b.len(),
        c.len(),
        bias.map(<[f32]>::len),
        residual.map(<[f32]>::len),
    ) {
        panic!("{e}");
    }
    let tiles_m = p.m.div_ceil(tiles.block_m);
    let tiles_n = p.n.div_ceil(tiles.block_n);
    let per_matrix = tiles_m * tiles_n;
    let programs = p.batch * p.heads * per_matrix;
    if programs == 0 {
        return;
    }

    // Tiles are computed in parallel, then stored one after another: a store never races and
    // an in-place residual (C aliasing R) is read before anything is written.
    let computed: Vec<(usize, usize, usize, usize, Vec<f32>)> = (0..programs)
        .into_par_iter()
        .map(|pid| {
            let matrix = pid / per_matrix;
            let (batch, head) = (matrix / p.heads, matrix % p.heads);
            let (tile_m, tile_n) = grouped_tile(pid % per_matrix, tiles_m, tiles_n, tiles.group_m);
            let tile = compute_tile(p, tiles, a, b, bias, residual, batch, head, tile_m, tile_n);
            (batch, head, tile_m, tile_n, tile)
        })
        .collect();

    for (batch, head, tile_m, tile_n, tile) in computed {
        let rows = (p.m - tile_m * tiles.block_m).min(tiles.block_m);
        let cols = (p.n - tile_n * tiles.block_n).min(tiles.block_n);
        for i in 0..rows {
            let start = p.c.index(
                batch,
                head,
                tile_m * tiles.block_m + i,
                tile_n * tiles.block_n,
            );
            c[start..start + cols].copy_from_slice(&tile[i * cols..(i + 1) * cols]);
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn compute_tile(
    p: &MatmulProblem,
    tiles: MatmulTiles,
    a: &[f32],
    b: &[f32],
    bias: Option<&[f32]>,
    residual: Option<&[f32]>,
    batch: usize,
    head: usize,
    tile_m: usize,
    tile_n: usize,
) -> Vec<f32> {
    let row0 = tile_m * tiles.block_m;
    let col0 = tile_n * tiles.block_n;
    let rows = (p.m - row0).min(tiles.block_m);
    let cols = (p.n - col0).min(tiles.block_n);
    let mut acc = vec![0.0f32; rows * cols];

    for k0 in (0..p.k).step_by(tiles.block_k.max(1)) {
        let kb = (p.k - k0).min(tiles.block_k);
        for i in 0..rows {
            let a_start = p.a.index(batch, head, row0 + i, k0);
            let a_row = &a[a_start..a_start + kb];
            let acc_row = &mut acc[i * cols..(i + 1) * cols];
            match p.b_layout {
                WeightLayout::NK => {
                    for (j, out) in acc_row.iter_mut().enumerate() {
                        let b_start = p.b.index(batch, head, col0 + j, k0);
                        *out += dot(a_row, &b[b_start..b_start + kb]);
                    }
                }
                WeightLayout::KN => {
                    for (kk, &a_val) in a_row.iter().enumerate() {
                        let b_start = p.b.index(batch, head, k0 + kk, col0);
                        for (out, &b_val) in acc_row.iter_mut().zip(&b[b_start..b_start + cols]) {
                            *out += a_val * b_val;
                        }
                    }
                }
            }
        }
    }

    let epi = &p.epilogue;
    for i in 0..rows {
        for j in 0..cols {
            let bias_val = if epi.bias {
                bias.map(|bias| bias[col0 + j])
            } else {
                None
            };
            let res_val = if epi.residual {
                residual.map(|r| r[p.r.index(batch, head, row0 + i, col0 + j)])
            } else {
                None
            };
            let v = &mut acc[i * cols + j];
            *v = epi.apply(*v, bias_val, res_val);
        }
    }
    acc
}

/// A dot product with eight independent partial sums, which the compiler vectorises.
fn dot(x: &[f32], y: &[f32]) -> f32 {
    let mut lanes = [0.0f32; 8];
    let xc = x.chunks_exact(8);
    let yc = y.chunks_exact(8);
    let tail: f32 = xc
        .remainder()
        .iter()
        .zip(yc.remainder())
        .map(|(a, b)| a * b)
        .sum();
    for (xs, ys) in xc.zip(yc) {
        for l in 0..8 {
            lanes[l] += xs[l] * ys[l];
        }
    }
    lanes.iter().sum::<f32>() + tail
}

/// The layernorm-folded matmul's twin ([`LayernormMatmulProblem`]): x `[M, K]`, the folded
/// weights `w` `[N, K]` and `bias` (N) hold values already rounded to the device's 16-bit type,
/// `column_sums` (N) the f32 sums of those weights. The product accumulates in f32 ([`matmul`]),
/// each row's statistics are [`LayernormMatmulProblem::row_statistics`] (the partials of its
/// 64-value blocks, computed here from x as the producer computes them, then combined as the
/// program's epilogue combines them; see [`row_statistics`]), and each output is [`LayernormMatmulProblem::store`], the device's epilogue
/// in its order; `out` gets the values before their rounding to the 16-bit type (the caller
/// rounds). Rows are finished in parallel. Panics if an operand does not fit its buffer or K is
/// 0 (callers check with [`LayernormMatmulProblem::check_bounds`] first); any other K is
/// computed, though the device takes multiples of 64 only ([`LayernormMatmulProblem::check`]).
pub fn matmul_layernorm(
    p: &LayernormMatmulProblem,
    x: &[f32],
    w: &[f32],
    bias: &[f32],
    column_sums: &[f32],
    out: &mut [f32],
) {
    if let Err(e) = p.check_bounds(x.len(), w.len(), bias.len(), column_sums.len(), out.len()) {
        panic!("{e}");
    }
    assert!(p.k > 0, "the layernorm matmul needs K > 0");
    if p.m == 0 || p.n == 0 {
        return;
    }
    let product = MatmulProblem::linear(p.m, p.n, p.k, Epilogue::NONE);
    let out = &mut out[..p.m * p.n];
    matmul(
        &product,
        MatmulTiles::default(),
        &x[..p.m * p.k],
        &w[..p.n * p.k],
        None,
        None,
        out,
    );
    out.par_chunks_mut(p.n)
        .zip(x.par_chunks(p.k))
        .for_each(|(row_out, row_x)| {
            let (mean, rstd) = p.row_statistics(row_x);
            for ((v, &cs), &b) in row_out.iter_mut().zip(column_sums).zip(bias) {
                *v = p.store(*v, mean, rstd, cs, b);
            }
        });
}

/// The twin of the row statistics `gpu::matmul_with_row_statistics` writes beside C: for C
/// `[M, N]` as stored (values already rounded to the 16-bit type), N a multiple of 64,
/// `out[2 · (b · m + r)]` and `out[2 · (b · m + r) + 1]` = (mean_b, m2_b) of row r's 64-column
/// block b ([`crate::matmul::layernorm_matmul::block_statistics`], the device's formulas and
/// order), block-major: `[N / 64][M]` pairs. Panics if N is not a multiple of 64 or a buffer
/// is too short.
pub fn row_statistics(c: &[f32], m: usize, n: usize, out: &mut [f32]) {
    use crate::matmul::layernorm_matmul::{block_statistics, ROW_STATISTICS_BLOCK};
    assert!(
        n.is_multiple_of(ROW_STATISTICS_BLOCK),
        "row statistics need N to be a multiple of {ROW_STATISTICS_BLOCK}, N is {n}"
    );
    let blocks = n / ROW_STATISTICS_BLOCK;
    assert!(
        c.len() >= m * n,
        "C holds {} values, needs {}",
        c.len(),
        m * n
    );
    assert!(
        out.len() >= 2 * blocks * m,
        "the row statistics hold {} values, need {}",
        out.len(),
        2 * blocks * m
    );
    if m == 0 {
        return;
    }
    for (b, block_out) in out[..2 * blocks * m].chunks_mut(2 * m).enumerate() {
        for (r, pair) in block_out.chunks_mut(2).enumerate() {
            let start = r * n + b * ROW_STATISTICS_BLOCK;
            let (mean, m2) = block_statistics(&c[start..start + ROW_STATISTICS_BLOCK]);
            pair[0] = mean;
            pair[1] = m2;
        }
    }
}

/// The FP8 matmul's twin ([`Fp8Problem`]): A and B as E4M3 codes, decoded exactly; each
/// output's sum over K in f64, which is exact (every product of two e4m3 values is an f32 of
/// at most 8 significant bits between 2^-18 and 2^18, so a sum of up to 2^17 of them fits 53
/// bits), rounded once to the
/// f32 accumulator; then the device's epilogue in its order (`Fp8Problem::store`). `c` gets
/// the stored values as f32 (16-bit values, or the decoded e4m3 codes); `bias` and `residual`
/// hold 16-bit values as f32; `out_scale` is read for an e4m3 C only. Rows of C are computed
/// in parallel. Panics if an operand does not fit or the problem is not one the kernels take
/// (callers check with [`Fp8Problem::check`] and [`Fp8Problem::check_bounds`] first).
#[allow(clippy::too_many_arguments)]
pub fn matmul_fp8(
    p: &Fp8Problem,
    a: &[u8],
    b: &[u8],
    a_scale: &[f32],
    b_scale: &[f32],
    bias: Option<&[f32]>,
    residual: Option<&[f32]>,
    out_scale: f32,
    c: &mut [f32],
) {
    if let Err(e) = p.check().and_then(|()| {
        p.check_bounds(
            a.len(),
            b.len(),
            a_scale.len(),
            b_scale.len(),
            bias.map(<[f32]>::len),
            residual.map(<[f32]>::len),
            c.len(),
        )
    }) {
        panic!("{e}");
    }
    let (m, n, k) = (p.m, p.n, p.k);
    if m == 0 || n == 0 {
        return;
    }
    let inverse = inverse_out_scale(out_scale);
    let decode =
        |codes: &[u8]| -> Vec<f64> { codes.iter().map(|&x| e4m3::decode(x) as f64).collect() };
    let b_values = decode(&b[..n * k]);
    c[..m * n]
        .par_chunks_mut(n)
        .enumerate()
        .for_each(|(row, c_row)| {
            let a_row = decode(&a[row * k..(row + 1) * k]);
            let a_s = a_scale[if p.activation_scale == ActivationScale::PerRow {
                row
            } else {
                0
            }];
            for (col, out) in c_row.iter_mut().enumerate() {
                let acc = exact_dot(&a_row, &b_values[col * k..(col + 1) * k]) as f32;
                let bias = if p.bias {
                    bias.map_or(0.0, |v| v[col])
                } else {
                    0.0
                };
                let residual = if p.residual {
                    residual.map_or(0.0, |r| r[row * n + col])
                } else {
                    0.0
                };
                *out = p.store(acc, a_s, b_scale[col], bias, residual, inverse);
            }
        });
}

/// A dot product of decoded e4m3 values in f64, four partial sums (exact whatever the order).
fn exact_dot(x: &[f64], y: &[f64]) -> f64 {
    let mut lanes = [0.0f64; 4];
    let (xc, yc) = (x.chunks_exact(4), y.chunks_exact(4));
    let tail: f64 = xc
        .remainder()
        .iter()
        .zip(yc.remainder())
        .map(|(a, b)| a * b)
        .sum();
    for (xs, ys) in xc.zip(yc) {
        for l in 0..4 {
            lanes[l] += xs[l] * ys[l];
        }
    }
    lanes.iter().sum::<f64>() + tail
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::matmul::fp8::Fp8Output;
    use crate::matmul::problem::Epilogue;
    use crate::types::{Activation, DType, Operand};
    use rand::{rngs::StdRng, Rng, SeedableRng};

    fn random(n: usize, rng: &mut StdRng) -> Vec<f32> {
        (0..n).map(|_| rng.random_range(-1.0f32..1.0)).collect()
    }

    /// The plainest possible triple loop, in f64.
    fn naive(
        p: &MatmulProblem,
        a: &[f32],
        b: &[f32],
        bias: Option<&[f32]>,
        r: Option<&[f32]>,
        c: &mut [f32],
    ) {
        for bt in 0..p.batch {
            for h in 0..p.heads {
                for i in 0..p.m {
                    for j in 0..p.n {
                        let mut acc = 0.0f64;
                        for kk in 0..p.k {
                            let bv = match p.b_layout {
                                WeightLayout::NK => b[p.b.index(bt, h, j, kk)],
                                WeightLayout::KN => b[p.b.index(bt, h, kk, j)],
                            };
                            acc += a[p.a.index(bt, h, i, kk)] as f64 * bv as f64;
                        }
                        let bias_v = bias.map(|x| x[j]);
                        let res_v = r.map(|x| x[p.r.index(bt, h, i, j)]);
                        c[p.c.index(bt, h, i, j)] = p.epilogue.apply(acc as f32, bias_v, res_v);
                    }
                }
            }
        }
    }

    fn assert_close(got: &[f32], want: &[f32]) {
        for (i, (g, w)) in got.iter().zip(want).enumerate() {
            assert!(
                (g - w).abs() <= 1e-4 * (1.0 + w.abs()),
                "index {i}: got {g}, want {w}"
            );
        }
    }

    #[test]
    fn grouped_order_visits_every_tile_once() {
        for (tm, tn, g) in [(1, 1, 8), (7, 3, 2), (9, 5, 4), (16, 16, 8), (3, 10, 8)] {
            let mut seen = vec![false; tm * tn];
            for pid in 0..tm * tn {
                let (m, n) = grouped_tile(pid, tm, tn, g);
                assert!(m < tm && n < tn);
                assert!(!seen[m * tn + n], "tile ({m},{n}) visited twice");
                seen[m * tn + n] = true;
            }
        }
    }

    #[test]
    fn linear_with_full_epilogue_matches_naive_on_ragged_shapes() {
        let mut rng = StdRng::seed_from_u64(1);
        for (m, n, k) in [(1, 1, 1), (7, 13, 5), (197, 70, 33), (65, 257, 300)] {
            let epi = Epilogue {
                alpha: 0.5,
                bias: true,
                activation: Activation::Gelu,
                residual: true,
            };
            let p = MatmulProblem::linear(m, n, k, epi);
            let (a, b, bias, r) = (
                random(m * k, &mut rng),
                random(n * k, &mut rng),
                random(n, &mut rng),
                random(m * n, &mut rng),
            );
            let mut got = vec![f32::NAN; m * n];
            let mut want = vec![f32::NAN; m * n];
            matmul(
                &p,
                MatmulTiles::default(),
                &a,
                &b,
                Some(&bias),
                Some(&r),
                &mut got,
            );
            naive(&p, &a, &b, Some(&bias), Some(&r), &mut want);
            assert_close(&got, &want);
        }
    }

    #[test]
    fn attention_forms_read_heads_in_place_and_write_nothing_else() {
        // Q·Kᵀ out of a fused [B, T, 3·hidden] activation, then P·V back into [B, T, hidden].
        let mut rng = StdRng::seed_from_u64(2);
        let (batch, heads, tokens, dim) = (2, 3, 11, 18);
        let hidden = heads * dim;
        let qkv = random(batch * tokens * 3 * hidden, &mut rng);
        let head_view = |offset: usize| Operand {
            offset,
            row_stride: 3 * hidden,
            batch_stride: tokens * 3 * hidden,
            head_stride: dim,
        };
        let scores = MatmulProblem {
            batch,
            heads,
            m: tokens,
            n: tokens,
            k: dim,
            a: head_view(0),
            b: head_view(hidden),
            b_layout: WeightLayout::NK,
            c: Operand {
                offset: 0,
                row_stride: tokens,
                batch_stride: heads * tokens * tokens,
                head_stride: tokens * tokens,
            },
            r: Operand::contiguous(0),
            epilogue: Epilogue {
                alpha: 0.25,
                ..Epilogue::NONE
            },
        };
        let mut got = vec![f32::NAN; batch * heads * tokens * tokens];
        let mut want = got.clone();
        matmul(
            &scores,
            MatmulTiles {
                block_m: 4,
                block_n: 8,
                block_k: 8,
                group_m: 2,
            },
            &qkv,
            &qkv,
            None,
            None,
            &mut got,
        );
        naive(&scores, &qkv, &qkv, None, None, &mut want);
        assert_close(&got, &want);

        let context = MatmulProblem {
            k: tokens,
            n: dim,
            a: scores.c,
            b: head_view(2 * hidden),
            b_layout: WeightLayout::KN,
            c: Operand {
                offset: 0,
                row_stride: hidden,
                batch_stride: tokens * hidden,
                head_stride: dim,
            },
            epilogue: Epilogue::NONE,
            ..scores
        };
        let mut got_o = vec![f32::NAN; batch * tokens * hidden];
        let mut want_o = got_o.clone();
        matmul(
            &context,
            MatmulTiles::default(),
            &got,
            &qkv,
            None,
            None,
            &mut got_o,
        );
        naive(&context, &want, &qkv, None, None, &mut want_o);
        assert_close(&got_o, &want_o);
        assert!(
            got_o.iter().all(|v| v.is_finite()),
            "every element of O is written"
        );
    }

    /// The FP8 problem in f64 from the decoded codes, before the store's rounding.
    #[allow(clippy::too_many_arguments)]
    fn naive_fp8(
        p: &Fp8Problem,
        a: &[u8],
        b: &[u8],
        a_scale: &[f32],
        b_scale: &[f32],
        bias: &[f32],
        residual: &[f32],
        out_scale: f32,
    ) -> Vec<f64> {
        let mut out = vec![0.0f64; p.m * p.n];
        for i in 0..p.m {
            for j in 0..p.n {
                let mut acc = 0.0f64;
                for kk in 0..p.k {
                    acc +=
                        e4m3::decode(a[i * p.k + kk]) as f64 * e4m3::decode(b[j * p.k + kk]) as f64;
                }
                let a_s = a_scale[if p.activation_scale == ActivationScale::PerRow {
                    i
                } else {
                    0
                }];
                let mut v = acc * a_s as f64 * b_scale[j] as f64;
                if p.bias {
                    v += bias[j] as f64;
                }
                v = p.activation.apply(v as f32) as f64;
                if p.residual {
                    v += residual[i * p.n + j] as f64;
                }
                if p.output == Fp8Output::E4m3 {
                    v /= out_scale as f64;
                }
                out[i * p.n + j] = v;
            }
        }
        out
    }

    fn random_e4m3(n: usize, rng: &mut StdRng) -> Vec<u8> {
        // Codes of values in [-8, 8] (most of the format's range of mantissas and exponents),
        // NaN excluded.
        (0..n)
            .map(|_| e4m3::encode(rng.random_range(-8.0f32..8.0)))
            .collect()
    }

    #[test]
    fn fp8_twin_matches_naive_over_shapes_scales_and_epilogues() {
        let mut rng = StdRng::seed_from_u64(38);
        for (m, n, k) in [(1, 1, 16), (7, 13, 32), (130, 70, 48), (3, 200, 768)] {
            for half in [DType::F16, DType::BF16] {
                for (output, residual) in [
                    (Fp8Output::Half, false),
                    (Fp8Output::Half, true),
                    (Fp8Output::E4m3, false),
                ] {
                    for activation_scale in [ActivationScale::PerRow, ActivationScale::PerTensor] {
                        let p = Fp8Problem {
                            output,
                            activation_scale,
                            bias: true,
                            activation: Activation::Gelu,
                            residual,
                            ..Fp8Problem::linear(m, n, k, half)
                        };
                        let a = random_e4m3(m * k, &mut rng);
                        let b = random_e4m3(n * k, &mut rng);
                        let a_scale: Vec<f32> = (0..activation_scale.len(m))
                            .map(|_| rng.random_range(0.001f32..0.05))
                            .collect();
                        let b_scale: Vec<f32> =
                            (0..n).map(|_| rng.random_range(0.001f32..0.05)).collect();
                        let bias: Vec<f32> = (0..n)
                            .map(|_| half.round(rng.random_range(-1.0f32..1.0)))
                            .collect();
                        let res: Vec<f32> = (0..m * n)
                            .map(|_| half.round(rng.random_range(-1.0f32..1.0)))
                            .collect();
                        let out_scale = 0.01f32;
                        let mut got = vec![f32::NAN; m * n];
                        matmul_fp8(
                            &p,
                            &a,
                            &b,
                            &a_scale,
                            &b_scale,
                            Some(&bias),
                            Some(&res),
                            out_scale,
                            &mut got,
                        );
                        let want =
                            naive_fp8(&p, &a, &b, &a_scale, &b_scale, &bias, &res, out_scale);
                        for (i, (&g, &w)) in got.iter().zip(&want).enumerate() {
                            // The store's rounding (half an ulp of the output type: 2^-11 of the
                            // value for f16, 2^-8 for bf16, 2^-4 for e4m3, whose subnormals are
                            // 2^-9 apart and whose largest value is 448) and a few f32 roundings.
                            let (relative, absolute) = match (output, half) {
                                (Fp8Output::E4m3, _) => (1.0 / 16.0, 1.0 / 1024.0),
                                (_, DType::BF16) => (1.0 / 256.0, 1e-6),
                                _ => (1.0 / 2048.0, 1e-6),
                            };
                            let w_stored = if output == Fp8Output::E4m3 {
                                w.clamp(-448.0, 448.0)
                            } else {
                                w
                            };
                            let tolerance =
                                relative * w_stored.abs() * 1.001 + absolute + 1e-5 * w.abs();
                            assert!(
                                (g as f64 - w_stored).abs() <= tolerance,
                                "{m}x{n}x{k} {half} {output:?} {activation_scale:?} residual {residual}, \
                                 index {i}: got {g}, want {w}"
                            );
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn fp8_twin_sums_exactly() {
        // 256 · 256, thirty products of the smallest subnormals (2^-18 each), then -256 · 256:
        // an f32 accumulator in this order loses the small ones (2^16 + 2^-18 is 2^16) and
        // ends at 0; the twin's exact sum is 30 · 2^-18.
        let k = 32;
        let mut a = vec![0x01u8; k];
        let mut b = vec![0x01u8; k];
        a[0] = e4m3::encode(256.0);
        b[0] = e4m3::encode(256.0);
        a[k - 1] = e4m3::encode(-256.0);
        b[k - 1] = e4m3::encode(256.0);
        let p = Fp8Problem::linear(1, 1, k, DType::F16);
        let mut c = [0.0f32];
        matmul_fp8(&p, &a, &b, &[1.0], &[1024.0], None, None, 1.0, &mut c);
        assert_eq!(c[0], DType::F16.round(30.0 * 2f32.powi(-8)));
    }

    #[test]
    fn fp8_problems_the_kernels_do_not_take_are_refused_with_the_reason() {
        let p = Fp8Problem::linear(4, 4, 24, DType::F16);
        assert!(p.check().unwrap_err().contains("multiple of 16"));
        let p = Fp8Problem::linear(4, 4, 32, DType::F32);
        assert!(p.check().unwrap_err().contains("f16 or bf16"));
        let p = Fp8Problem {
            output: Fp8Output::E4m3,
            residual: true,
            ..Fp8Problem::linear(4, 4, 32, DType::BF16)
        };
        assert!(p.check().unwrap_err().contains("residual"));
        let p = Fp8Problem {
            activation: Activation::Tanh,
            ..Fp8Problem::linear(4, 4, 32, DType::BF16)
        };
        assert!(p.check().is_err());
        let p = Fp8Problem {
            bias: true,
            activation_scale: ActivationScale::PerTensor,
            ..Fp8Problem::linear(4, 8, 32, DType::BF16)
        };
        assert!(p.check().is_ok());
        assert!(p.check_bounds(128, 256, 1, 8, Some(8), None, 32).is_ok());
        let e = p.check_bounds(128, 256, 1, 8, None, None, 32).unwrap_err();
        assert!(e.contains("bias"), "{e}");
        let e = p
            .check_bounds(128, 256, 1, 7, Some(8), None, 32)
            .unwrap_err();
        assert!(e.contains("weight scale"), "{e}");
    }

    /// The operands of a layernorm-folded case: x `[M, K]` rounded to `dtype` (normal values
    /// around 0, every third row shifted by `offset`), the model's unfolded W `[N, K]`, gamma,
    /// beta and b (f32), and the folded W' and b' rounded to `dtype` with the column sums of W'.
    struct LayernormCase {
        p: LayernormMatmulProblem,
        x: Vec<f32>,
        weight: Vec<f32>,
        gamma: Vec<f32>,
        beta: Vec<f32>,
        bias: Vec<f32>,
        folded_weight: Vec<f32>,
        folded_bias: Vec<f32>,
        column_sums: Vec<f32>,
    }

    impl LayernormCase {
        fn new(p: LayernormMatmulProblem, dtype: DType, offset: f32, seed: u64) -> LayernormCase {
            use crate::matmul::layernorm_fold::{column_sums, fold_bias, fold_weight};
            let mut rng = StdRng::seed_from_u64(seed);
            let (m, n, k) = (p.m, p.n, p.k);
            let x: Vec<f32> = (0..m * k)
                .map(|i| {
                    let shift = if (i / k) % 3 == 1 { offset } else { 0.0 };
                    dtype.round(2.0 * rng.random_range(-1.0f32..1.0) + shift)
                })
                .collect();
            let weight: Vec<f32> = (0..n * k)
                .map(|_| rng.random_range(-0.05f32..0.05))
                .collect();
            let gamma: Vec<f32> = (0..k).map(|_| rng.random_range(0.5f32..1.5)).collect();
            let beta: Vec<f32> = (0..k).map(|_| rng.random_range(-0.5f32..0.5)).collect();
            let bias: Vec<f32> = (0..n).map(|_| rng.random_range(-0.5f32..0.5)).collect();
            let round =
                |v: Vec<f32>| -> Vec<f32> { v.into_iter().map(|x| dtype.round(x)).collect() };
            let folded_weight = round(fold_weight(&weight, &gamma, n, k));
            let folded_bias = round(fold_bias(&weight, &beta, Some(&bias), n, k));
            let column_sums = column_sums(&folded_weight, n, k);
            LayernormCase {
                p,
                x,
                weight,
                gamma,
                beta,
                bias,
                folded_weight,
                folded_bias,
                column_sums,
            }
        }

        fn twin(&self, column_sums: &[f32]) -> Vec<f32> {
            let p = &self.p;
            let mut out = vec![f32::NAN; p.m * p.n];
            matmul_layernorm(
                p,
                &self.x,
                &self.folded_weight,
                &self.folded_bias,
                column_sums,
                &mut out,
            );
            out
        }

        /// act(LayerNorm(x) · Wᵀ + b) computed directly in f64 from the unfolded operands,
        /// and each output's tolerance: the folded operands' rounding to `dtype` (unit
        /// roundoff `u`), u · (Σ_k |y_k · W'[n, k]| + |b'[n]|) for the normalised row y, plus
        /// the f32 accumulation of the raw rows, 2^-24 · 4√K · rstd · Σ_k |x_k · W'[n, k]|,
        /// times 1.2 for the activation's slope.
        fn reference(&self, u: f64) -> (Vec<f32>, Vec<f64>) {
            let p = &self.p;
            let (n, k) = (p.n, p.k);
            let mut want = vec![0.0f32; p.m * n];
            let mut allowed = vec![0.0f64; p.m * n];
            for r in 0..p.m {
                let row: Vec<f64> = self.x[r * k..(r + 1) * k]
                    .iter()
                    .map(|&v| v as f64)
                    .collect();
                let mean = row.iter().sum::<f64>() / k as f64;
                let var = row.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / k as f64;
                let rstd = 1.0 / (var + p.eps as f64).sqrt();
                let centred: Vec<f64> = row.iter().map(|v| (v - mean) * rstd).collect();
                for j in 0..n {
                    let w = &self.weight[j * k..(j + 1) * k];
                    let folded = &self.folded_weight[j * k..(j + 1) * k];
                    let mut pre = self.bias[j] as f64;
                    let (mut spread, mut raw) = (0.0f64, 0.0f64);
                    for kk in 0..k {
                        let y = centred[kk] * self.gamma[kk] as f64 + self.beta[kk] as f64;
                        pre += y * w[kk] as f64;
                        spread += (centred[kk] * folded[kk] as f64).abs();
                        raw += (row[kk] * folded[kk] as f64).abs();
                    }
                    want[r * n + j] = p.activation.apply(pre as f32);
                    let folding = u * (spread + (self.folded_bias[j] as f64).abs());
                    let accumulation = 2f64.powi(-24) * 4.0 * (k as f64).sqrt() * rstd * raw;
                    allowed[r * n + j] = 1.2 * (folding + accumulation) + 1e-6;
                }
            }
            (want, allowed)
        }
    }

    /// The worst |got - want| as a share of its tolerance (infinite for a NaN).
    fn worst_share(got: &[f32], want: &[f32], allowed: &[f64]) -> f64 {
        got.iter()
            .zip(want)
            .zip(allowed)
            .map(|((&g, &w), &a)| {
                let d = (g as f64 - w as f64).abs();
                if d.is_nan() {
                    f64::INFINITY
                } else {
                    d / a
                }
            })
            .fold(0.0, f64::max)
    }

    #[test]
    fn layernorm_twin_matches_the_unfolded_layer_in_f64() {
        // Rows of M not a multiple of 128, every third shifted by 50 (large mean beside a
        // spread of about 1); no activation and the erf GELU; f16 and bf16 folded operands.
        let shapes = [(130, 72, 768), (1, 64, 128), (3, 16, 64)];
        let mut seed = 7;
        for &(m, n, k) in &shapes {
            for activation in [Activation::None, Activation::Gelu] {
                for (dtype, u) in [(DType::F16, 2f64.powi(-11)), (DType::BF16, 2f64.powi(-8))] {
                    seed += 1;
                    let p = LayernormMatmulProblem {
                        m,
                        n,
                        k,
                        activation,
                        eps: 1e-6,
                    };
                    let case = LayernormCase::new(p, dtype, 50.0, seed);
                    let (want, allowed) = case.reference(u);
                    let got = case.twin(&case.column_sums);
                    let worst = worst_share(&got, &want, &allowed);
                    assert!(
                        worst <= 1.0,
                        "{m}x{n}x{k} {activation:?} {dtype}: worst {worst:.3} of tolerance"
                    );
                    // The comparison sees a lost mean term: column sums of zero leave
                    // mean · Σ_k W'[n, k] in every output.
                    let zero = vec![0.0f32; n];
                    let broken = worst_share(&case.twin(&zero), &want, &allowed);
                    assert!(
                        broken > 1.0,
                        "{m}x{n}x{k} {activation:?} {dtype}: zero column sums pass ({broken:.3})"
                    );
                }
            }
        }
    }

    #[test]
    fn layernorm_row_statistics_keep_their_precision_under_a_large_mean() {
        // A row of mean 1000 and spread 2^-4 (values exact in f32): without centring each
        // block on its mean, Σx² / K - mean² would cancel all of the variance's bits in f32.
        let p = LayernormMatmulProblem {
            m: 1,
            n: 8,
            k: 256,
            activation: Activation::None,
            eps: 0.0,
        };
        let row: Vec<f32> = (0..256)
            .map(|i| {
                1000.0
                    + if i % 2 == 0 { 0.0625 } else { -0.0625 }
                    + if i == 0 { 0.0625 } else { 0.0 }
            })
            .collect();
        let exact: Vec<f64> = row.iter().map(|&v| v as f64).collect();
        let mean = exact.iter().sum::<f64>() / 256.0;
        let var = exact.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / 256.0;
        let (got_mean, got_rstd) = p.row_statistics(&row);
        assert!(
            (got_mean as f64 - mean).abs() <= 1e-6 * mean,
            "{got_mean} vs {mean}"
        );
        let rstd = 1.0 / var.sqrt();
        assert!(
            (got_rstd as f64 - rstd).abs() <= 1e-5 * rstd,
            "{got_rstd} vs {rstd}"
        );
    }

    /// The f64 reference of one block's (mean, m2).
    fn block_reference(block: &[f32]) -> (f64, f64) {
        let mean = block.iter().map(|&v| v as f64).sum::<f64>() / block.len() as f64;
        let m2 = block
            .iter()
            .map(|&v| (v as f64 - mean).powi(2))
            .sum::<f64>();
        (mean, m2)
    }

    #[test]
    fn row_statistics_are_each_blocks_mean_and_m2_block_major() {
        let mut rng = StdRng::seed_from_u64(41);
        for dtype in [DType::F16, DType::BF16] {
            let (m, n) = (7, 192);
            // Rows of different means and spreads, as a residual stream has them.
            let c: Vec<f32> = (0..m * n)
                .map(|i| {
                    let row = i / n;
                    let scale = 0.1 * (row + 1) as f32;
                    dtype.round(10.0 * row as f32 - 20.0 + scale * rng.random_range(-3.0f32..3.0))
                })
                .collect();
            let mut out = vec![f32::NAN; 2 * (n / 64) * m + 3];
            row_statistics(&c, m, n, &mut out);
            for b in 0..n / 64 {
                for r in 0..m {
                    let block = &c[r * n + b * 64..r * n + b * 64 + 64];
                    let (mean, m2) = block_reference(block);
                    let scale = block.iter().map(|&v| v.abs() as f64).fold(0.0, f64::max);
                    let (got_mean, got_m2) =
                        (out[2 * (b * m + r)] as f64, out[2 * (b * m + r) + 1] as f64);
                    assert!(
                        (got_mean - mean).abs() <= 1e-6 * scale,
                        "{dtype} block {b} row {r}: mean {got_mean} vs {mean}"
                    );
                    assert!(
                        (got_m2 - m2).abs() <= 1e-5 * m2 + 1e-6 * scale * scale,
                        "{dtype} block {b} row {r}: m2 {got_m2} vs {m2}"
                    );
                }
            }
            assert!(
                out[2 * (n / 64) * m..].iter().all(|v| v.is_nan()),
                "wrote past the statistics"
            );
        }
    }

    #[test]
    fn layernorm_statistics_combined_from_partials_match_f64_and_the_rows_own() {
        let mut rng = StdRng::seed_from_u64(43);
        let (m, k) = (9, 768);
        let p = LayernormMatmulProblem {
            m,
            n: 8,
            k,
            activation: Activation::None,
            eps: 1e-6,
        };
        for dtype in [DType::F16, DType::BF16] {
            // Per row an offset (up to 300) beside a spread of 0.05-2, and a slope across the
            // row, so the blocks' means differ and the combination's spread term counts.
            let x: Vec<f32> = (0..m * k)
                .map(|i| {
                    let (row, col) = (i / k, i % k);
                    let offset = [0.0f32, 300.0, -40.0][row % 3];
                    let spread = 0.05 + 0.25 * row as f32;
                    dtype.round(
                        offset + spread * rng.random_range(-1.0f32..1.0) + 0.004 * col as f32,
                    )
                })
                .collect();
            let mut partials = vec![0.0f32; 2 * (k / 64) * m];
            row_statistics(&x, m, k, &mut partials);
            for r in 0..m {
                let row = &x[r * k..(r + 1) * k];
                let exact: Vec<f64> = row.iter().map(|&v| v as f64).collect();
                let mean = exact.iter().sum::<f64>() / k as f64;
                let var = exact.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / k as f64;
                let rstd = 1.0 / (var + p.eps as f64).sqrt();
                let own = p.row_statistics(row);
                let from_partials = p.row_statistics_from_partials(
                    (0..k / 64).map(|b| (partials[2 * (b * m + r)], partials[2 * (b * m + r) + 1])),
                );
                assert_eq!(
                    own, from_partials,
                    "{dtype} row {r}: the twin's two paths differ"
                );
                let scale = exact.iter().map(|v| v.abs()).fold(0.0, f64::max);
                assert!(
                    (own.0 as f64 - mean).abs() <= 2e-6 * scale,
                    "{dtype} row {r}: mean {} vs {mean}",
                    own.0
                );
                assert!(
                    (own.1 as f64 - rstd).abs() <= 1e-4 * rstd,
                    "{dtype} row {r}: rstd {} vs {rstd}",
                    own.1
                );
            }
        }
    }

    #[test]
    fn layernorm_problems_the_program_does_not_take_are_refused_with_the_reason() {
        let p = LayernormMatmulProblem {
            m: 197,
            n: 2304,
            k: 768,
            activation: Activation::Gelu,
            eps: 1e-6,
        };
        assert!(p.check().is_ok());
        let k = LayernormMatmulProblem { k: 96, ..p }.check().unwrap_err();
        assert!(k.contains("multiple of 64"), "{k}");
        let n = LayernormMatmulProblem { n: 100, ..p }.check().unwrap_err();
        assert!(n.contains("multiple of 8"), "{n}");
        let act = LayernormMatmulProblem {
            activation: Activation::Tanh,
            ..p
        }
        .check()
        .unwrap_err();
        assert!(act.contains("Tanh"), "{act}");
        let eps = LayernormMatmulProblem { eps: -1.0, ..p }
            .check()
            .unwrap_err();
        assert!(eps.contains("eps"), "{eps}");
        let bounds = p
            .check_bounds(197 * 768, 2304 * 768, 2304, 2303, 197 * 2304)
            .unwrap_err();
        assert!(bounds.contains("column sums"), "{bounds}");
    }
}
