//! Block-program matmul: one program owns a BLOCK_M × BLOCK_N tile of C for one (batch, head),
//! walks K in BLOCK_K steps with an fp32 accumulator, and applies the fused epilogue once.
//! Program ids are remapped in groups of GROUP_M rows of tiles, as in Triton's matmul tutorial,
//! so that programs running together share rows of A and columns of B in cache.

use crate::e4m3;
use crate::matmul::fp8::{inverse_out_scale, ActivationScale, Fp8Problem};
use crate::matmul::problem::{MatmulProblem, WeightLayout};
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
}
