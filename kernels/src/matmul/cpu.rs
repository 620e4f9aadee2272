//! Block-program matmul: one program owns a BLOCK_M × BLOCK_N tile of C for one (batch, head),
//! walks K in BLOCK_K steps with an fp32 accumulator, and applies the fused epilogue once.
//! Program ids are remapped in groups of GROUP_M rows of tiles, as in Triton's matmul tutorial,
//! so that programs running together share rows of A and columns of B in cache.

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::matmul::problem::Epilogue;
    use crate::types::{Activation, Operand};
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
}
