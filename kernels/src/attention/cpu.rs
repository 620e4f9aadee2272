//! Fused attention, as attention.cu computes it: one program per (batch, head,
//! block of query rows), key blocks streamed with an online softmax (a running maximum and a
//! running sum per row, the accumulator rescaled whenever the maximum grows), one division at
//! the end. Everything stays f32 between reading Q, K, V and writing O: no scores or
//! probabilities are stored, so none are rounded. Causal: a program stops at the key block
//! holding its last row, and row i takes keys 0..=i only (the masked scores, -inf on the
//! GPU, weigh exactly 0 there, so leaving them out is the same sum). With per-batch key
//! lengths (the key padding mask), a program stops at the key block holding its item's last
//! valid key, and every row takes the keys below the length only (the same argument: masked
//! scores weigh 0).

use super::problem::AttentionProblem;
use rayon::prelude::*;

/// The CPU twin's meta-parameters: query rows per program, keys per streamed block (the
/// GPU kernel's BLOCK_M and BLOCK_N).
#[derive(Clone, Copy, Debug)]
pub struct AttentionTiles {
    pub block_m: usize,
    pub block_n: usize,
}

impl Default for AttentionTiles {
    fn default() -> Self {
        AttentionTiles {
            block_m: 64,
            block_n: 64,
        }
    }
}

/// Runs `problem` on f32 buffers (with its causal mask when `problem.causal`). Panics if a
/// view does not fit its buffer: callers check with [`AttentionProblem::check_bounds`] and
/// turn that into an error first; and if `problem.key_padding` (that takes
/// [`attention_with_key_lengths`]).
pub fn attention(
    problem: &AttentionProblem,
    tiles: AttentionTiles,
    q: &[f32],
    k: &[f32],
    v: &[f32],
    o: &mut [f32],
) {
    assert!(
        !problem.key_padding,
        "cpu::attention: a key padding mask needs the key lengths"
    );
    run(problem, tiles, q, k, v, o, None);
}

/// [`attention`] with the key padding mask: batch item b attends to its first
/// `key_lengths[b]` keys (clamped to `1..=tokens`, as the GPU kernels clamp it). Panics as
/// [`attention`] does, if `problem.key_padding` is not set, if both masks are asked for, or if
/// there is not one length per batch item.
pub fn attention_with_key_lengths(
    problem: &AttentionProblem,
    tiles: AttentionTiles,
    q: &[f32],
    k: &[f32],
    v: &[f32],
    o: &mut [f32],
    key_lengths: &[i32],
) {
    assert!(
        problem.key_padding,
        "cpu::attention_with_key_lengths: the problem has no key padding mask"
    );
    if let Err(e) = problem.check_masks() {
        panic!("cpu::attention_with_key_lengths: {e}");
    }
    assert_eq!(
        key_lengths.len(),
        problem.batch,
        "cpu::attention_with_key_lengths: one key length per batch item"
    );
    run(problem, tiles, q, k, v, o, Some(key_lengths));
}

/// The number of keys batch item `b` attends to: its length clamped to `1..=tokens`, or every
/// key without a padding mask.
pub fn valid_keys(key_lengths: Option<&[i32]>, b: usize, tokens: usize) -> usize {
    match key_lengths {
        Some(lengths) => (lengths[b].max(1) as usize).min(tokens),
        None => tokens,
    }
}

fn run(
    problem: &AttentionProblem,
    tiles: AttentionTiles,
    q: &[f32],
    k: &[f32],
    v: &[f32],
    o: &mut [f32],
    key_lengths: Option<&[i32]>,
) {
    let p = problem;
    if let Err(e) = p.check_bounds(q.len(), k.len(), v.len(), o.len()) {
        panic!("cpu::attention: {e}");
    }
    let (block_m, block_n) = (tiles.block_m.max(1), tiles.block_n.max(1));
    let (t, d) = (p.tokens, p.head_dim);
    let query_blocks = t.div_ceil(block_m);
    let programs = p.batch * p.heads * query_blocks;
    // exp(scale · s - m) as exp2(s · scale·log2(e) - m'), as the GPU kernel computes it.
    let scale_log2 = p.scale * std::f32::consts::LOG2_E;

    // Each program's rows of O, computed in parallel, then written through O's view.
    let blocks: Vec<Vec<f32>> = (0..programs)
        .into_par_iter()
        .map(|program| {
            let matrix = program / query_blocks;
            let m0 = (program % query_blocks) * block_m;
            let (b, h) = (matrix / p.heads, matrix % p.heads);
            let rows = block_m.min(t - m0);
            let mut acc = vec![0.0f32; rows * d];
            let mut row_max = vec![f32::NEG_INFINITY; rows];
            let mut row_sum = vec![0.0f32; rows];
            let mut scores = vec![0.0f32; block_n];
            // Causal: no key after the program's last row; key padding: none at or past the
            // item's length.
            let valid = valid_keys(key_lengths, b, t);
            let key_end = if p.causal { m0 + rows } else { valid };
            for n0 in (0..key_end).step_by(block_n) {
                for r in 0..rows {
                    // Causal: keys n0..=m0 + r of this block; none when the row precedes it.
                    let keys = if p.causal {
                        block_n.min((m0 + r + 1).saturating_sub(n0))
                    } else {
                        block_n.min(valid - n0)
                    };
                    if keys == 0 {
                        continue;
                    }
                    let q_row = &q[p.q.index(b, h, m0 + r, 0)..][..d];
                    let mut block_max = f32::NEG_INFINITY;
                    for (c, score) in scores[..keys].iter_mut().enumerate() {
                        let k_row = &k[p.k.index(b, h, n0 + c, 0)..][..d];
                        let dot: f32 = q_row.iter().zip(k_row).map(|(x, y)| x * y).sum();
                        *score = dot * scale_log2;
                        block_max = block_max.max(*score);
                    }
                    let new_max = row_max[r].max(block_max);
                    // On the first block the old maximum is -inf: the correction is 0.
                    let correction = (row_max[r] - new_max).exp2();
                    row_max[r] = new_max;
                    row_sum[r] *= correction;
                    let out = &mut acc[r * d..(r + 1) * d];
                    out.iter_mut().for_each(|x| *x *= correction);
                    for (c, &score) in scores[..keys].iter().enumerate() {
                        let weight = (score - new_max).exp2();
                        row_sum[r] += weight;
                        let v_row = &v[p.v.index(b, h, n0 + c, 0)..][..d];
                        for (x, &y) in out.iter_mut().zip(v_row) {
                            *x += weight * y;
                        }
                    }
                }
            }
            for (r, out) in acc.chunks_mut(d.max(1)).enumerate() {
                let inv_sum = 1.0 / row_sum[r];
                out.iter_mut().for_each(|x| *x *= inv_sum);
            }
            acc
        })
        .collect();
    for (program, block) in blocks.iter().enumerate() {
        let matrix = program / query_blocks;
        let m0 = (program % query_blocks) * block_m;
        let (b, h) = (matrix / p.heads, matrix % p.heads);
        for (r, row) in block.chunks(d.max(1)).enumerate() {
            let start = p.o.index(b, h, m0 + r, 0);
            o[start..start + d].copy_from_slice(row);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::matmul::cpu::{matmul, MatmulTiles};
    use crate::matmul::{Epilogue, MatmulProblem, WeightLayout};
    use crate::softmax::cpu::softmax;
    use crate::types::Operand;

    /// A deterministic, varied sequence (no rand dependency in unit tests).
    fn values(n: usize, seed: u32) -> Vec<f32> {
        let mut state = seed.wrapping_mul(2_654_435_761).wrapping_add(1);
        (0..n)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 17;
                state ^= state << 5;
                (state % 2001) as f32 / 1000.0 - 1.0
            })
            .collect()
    }

    /// The unfused composition: scores matmul, softmax, context matmul (all f32).
    fn unfused(p: &AttentionProblem, q: &[f32], k: &[f32], v: &[f32], o: &mut [f32]) {
        let (t, bh) = (p.tokens, p.batch * p.heads);
        let probabilities = Operand {
            offset: 0,
            row_stride: t,
            batch_stride: p.heads * t * t,
            head_stride: t * t,
        };
        let scores_problem = MatmulProblem {
            batch: p.batch,
            heads: p.heads,
            m: t,
            n: t,
            k: p.head_dim,
            a: p.q,
            b: p.k,
            b_layout: WeightLayout::NK,
            c: probabilities,
            r: Operand::contiguous(0),
            epilogue: Epilogue {
                alpha: p.scale,
                ..Epilogue::NONE
            },
        };
        let mut scores = vec![0.0; bh * t * t];
        let tiles = MatmulTiles::default();
        matmul(&scores_problem, tiles, q, k, None, None, &mut scores);
        let mut probs = vec![0.0; scores.len()];
        softmax(&scores, t, 1.0, &mut probs);
        let context_problem = MatmulProblem {
            m: t,
            n: p.head_dim,
            k: t,
            a: probabilities,
            b: p.v,
            b_layout: WeightLayout::KN,
            c: p.o,
            epilogue: Epilogue::NONE,
            ..scores_problem
        };
        matmul(&context_problem, tiles, &probs, v, None, None, o);
    }

    #[test]
    fn fused_attention_matches_scores_softmax_context() {
        for (batch, heads, tokens, head_dim) in [
            (1, 1, 1, 8),
            (2, 3, 7, 16),
            (1, 2, 65, 80),
            (2, 2, 197, 64),
            (1, 1, 130, 32),
        ] {
            // Q, K and V side by side in one [batch, tokens, 3·hidden] tensor, as after the
            // fused QKV projection; O with its heads side by side.
            let hidden = heads * head_dim;
            let width = 3 * hidden;
            let qkv = values(batch * tokens * width, tokens as u32);
            let p = AttentionProblem::over_fused_qkv(batch, heads, tokens, head_dim, false);
            let mut fused = vec![f32::NAN; batch * tokens * hidden];
            // Small blocks, so that several query and key blocks (and a partial one) are run.
            let tiles = AttentionTiles {
                block_m: 16,
                block_n: 24,
            };
            attention(&p, tiles, &qkv, &qkv, &qkv, &mut fused);
            let mut reference = vec![f32::NAN; fused.len()];
            unfused(&p, &qkv, &qkv, &qkv, &mut reference);
            for (i, (&got, &want)) in fused.iter().zip(&reference).enumerate() {
                assert!(
                    (got - want).abs() <= 1e-5 * (1.0 + want.abs()),
                    "{batch}x{heads}x{tokens}x{head_dim}: element {i}: {got} vs {want}"
                );
            }
        }
    }

    #[test]
    fn large_scores_do_not_overflow() {
        // Scores of ±1e4: a softmax without the running maximum would give inf / inf.
        let (tokens, head_dim) = (70, 16);
        let mut q = vec![0.0; tokens * head_dim];
        let mut k = q.clone();
        let v = values(tokens * head_dim, 3);
        for t in 0..tokens {
            q[t * head_dim] = 100.0;
            k[t * head_dim] = if t == 50 { 100.0 } else { -100.0 + t as f32 };
        }
        let view = Operand::contiguous(head_dim);
        let p = AttentionProblem {
            batch: 1,
            heads: 1,
            tokens,
            head_dim,
            scale: 1.0,
            causal: false,
            key_padding: false,
            q: view,
            k: view,
            v: view,
            o: view,
        };
        let mut o = vec![f32::NAN; tokens * head_dim];
        attention(&p, AttentionTiles::default(), &q, &k, &v, &mut o);
        // Key 50 wins by e^(1e4 - ...) : every output row is V's row 50.
        for row in o.chunks(head_dim) {
            assert_eq!(row, &v[50 * head_dim..51 * head_dim]);
        }
    }

    /// `softmax(scale · Q·Kᵀ + mask) · V` straight from the definition, in f64: the mask -inf
    /// past the diagonal when causal. Indexed as O's view.
    fn definition(p: &AttentionProblem, q: &[f32], k: &[f32], v: &[f32], o_len: usize) -> Vec<f64> {
        masked_definition(p, q, k, v, o_len, None)
    }

    /// [`definition`] with a key padding mask: -inf for the keys at or past each item's
    /// length.
    fn masked_definition(
        p: &AttentionProblem,
        q: &[f32],
        k: &[f32],
        v: &[f32],
        o_len: usize,
        key_lengths: Option<&[i32]>,
    ) -> Vec<f64> {
        let (t, d) = (p.tokens, p.head_dim);
        let mut o = vec![f64::NAN; o_len];
        for b in 0..p.batch {
            let valid = key_lengths.map_or(t, |lengths| lengths[b] as usize);
            for h in 0..p.heads {
                for i in 0..t {
                    let scores: Vec<f64> = (0..t)
                        .map(|j| {
                            if (p.causal && j > i) || j >= valid {
                                return f64::NEG_INFINITY;
                            }
                            let dot: f64 = (0..d)
                                .map(|c| {
                                    q[p.q.index(b, h, i, c)] as f64
                                        * k[p.k.index(b, h, j, c)] as f64
                                })
                                .sum();
                            dot * p.scale as f64
                        })
                        .collect();
                    let max = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                    let weights: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
                    let sum: f64 = weights.iter().sum();
                    for c in 0..d {
                        o[p.o.index(b, h, i, c)] = (0..t)
                            .map(|j| weights[j] * v[p.v.index(b, h, j, c)] as f64)
                            .sum::<f64>()
                            / sum;
                    }
                }
            }
        }
        o
    }

    #[test]
    fn causal_attention_matches_the_masked_definition() {
        // (batch, heads, tokens, head_dim, block_m, block_n): one token; blocks smaller than,
        // equal to and larger than the sequence; query blocks that end inside a key block and
        // key blocks that end inside a query block (block_m and block_n apart); CLIP's 77.
        for (batch, heads, tokens, head_dim, block_m, block_n) in [
            (1, 1, 1, 8, 64, 64),
            (2, 3, 7, 16, 4, 3),
            (1, 2, 65, 80, 16, 24),
            (2, 1, 77, 64, 64, 64),
            (1, 1, 130, 32, 32, 16),
            (1, 2, 33, 16, 5, 7),
        ] {
            let hidden = heads * head_dim;
            let width = 3 * hidden;
            let qkv = values(batch * tokens * width, 7 + tokens as u32);
            let p = AttentionProblem::over_fused_qkv(batch, heads, tokens, head_dim, true);
            let mut got = vec![f32::NAN; batch * tokens * hidden];
            let tiles = AttentionTiles { block_m, block_n };
            attention(&p, tiles, &qkv, &qkv, &qkv, &mut got);
            let want = definition(&p, &qkv, &qkv, &qkv, got.len());
            for (i, (&g, &w)) in got.iter().zip(&want).enumerate() {
                assert!(
                    (g as f64 - w).abs() <= 1e-5 * (1.0 + w.abs()),
                    "{batch}x{heads}x{tokens}x{head_dim} tiles {block_m}/{block_n}: element {i}: \
                     {g} vs {w}"
                );
            }
            // The non-causal twin against the same definition, unmasked: the reference
            // itself tells the two apart.
            let full = AttentionProblem { causal: false, ..p };
            attention(&full, tiles, &qkv, &qkv, &qkv, &mut got);
            let want = definition(&full, &qkv, &qkv, &qkv, got.len());
            for (i, (&g, &w)) in got.iter().zip(&want).enumerate() {
                assert!(
                    (g as f64 - w).abs() <= 1e-5 * (1.0 + w.abs()),
                    "non-causal {batch}x{heads}x{tokens}x{head_dim}: element {i}: {g} vs {w}"
                );
            }
        }
    }

    #[test]
    fn key_padding_matches_the_masked_definition() {
        // (tokens, head_dim, block_m, block_n, lengths): lengths of one key, of a whole
        // sequence, ending inside a key block, on a block boundary, and NaFlex-like ones.
        for (tokens, head_dim, block_m, block_n, lengths) in [
            (7, 16, 4, 3, vec![1, 7, 3]),
            (65, 32, 16, 16, vec![64, 17, 65]),
            (130, 16, 32, 64, vec![128, 100]),
            (256, 32, 64, 64, vec![196, 256, 70, 1]),
        ] {
            let (batch, heads) = (lengths.len(), 2);
            let hidden = heads * head_dim;
            let qkv = values(batch * tokens * 3 * hidden, 11 + tokens as u32);
            let p = AttentionProblem {
                key_padding: true,
                ..AttentionProblem::over_fused_qkv(batch, heads, tokens, head_dim, false)
            };
            let mut got = vec![f32::NAN; batch * tokens * hidden];
            let tiles = AttentionTiles { block_m, block_n };
            attention_with_key_lengths(&p, tiles, &qkv, &qkv, &qkv, &mut got, &lengths);
            let want = masked_definition(&p, &qkv, &qkv, &qkv, got.len(), Some(&lengths));
            for (i, (&g, &w)) in got.iter().zip(&want).enumerate() {
                // Padded query rows too: every row attends to the valid keys.
                assert!(g.is_finite(), "{tokens} {lengths:?}: element {i} is {g}");
                assert!(
                    (g as f64 - w).abs() <= 1e-5 * (1.0 + w.abs()),
                    "{tokens} {lengths:?} tiles {block_m}/{block_n}: element {i}: {g} vs {w}"
                );
            }
        }
    }

    #[test]
    fn padded_keys_change_nothing_and_lengths_are_clamped() {
        // Whatever the keys and values past an item's length hold, its outputs stay the
        // same; a length of 0 (or less) counts as 1, one past `tokens` as `tokens`.
        let (batch, heads, tokens, head_dim) = (3, 1, 40, 16);
        let p = AttentionProblem {
            key_padding: true,
            ..AttentionProblem::over_fused_qkv(batch, heads, tokens, head_dim, false)
        };
        let width = 3 * heads * head_dim;
        let mut qkv = values(batch * tokens * width, 5);
        let lengths = [25, 0, 99];
        let tiles = AttentionTiles {
            block_m: 16,
            block_n: 16,
        };
        let mut before = vec![f32::NAN; batch * tokens * head_dim];
        attention_with_key_lengths(&p, tiles, &qkv, &qkv, &qkv, &mut before, &lengths);
        // Item 0's keys and values past 25 (and item 1's past 1) scrambled; queries kept.
        for (b, from) in [(0, 25), (1, 1)] {
            for t in from..tokens {
                let row = &mut qkv[(b * tokens + t) * width..][..width];
                row[head_dim..].iter_mut().for_each(|x| *x = 123.0);
            }
        }
        let mut after = vec![f32::NAN; before.len()];
        attention_with_key_lengths(&p, tiles, &qkv, &qkv, &qkv, &mut after, &lengths);
        assert_eq!(
            before[..2 * tokens * head_dim],
            after[..2 * tokens * head_dim]
        );
        // Item 1 attends to its first key alone: every row is V's row 0.
        let v0 = &qkv[tokens * width + 2 * head_dim..][..head_dim];
        for row in after[tokens * head_dim..2 * tokens * head_dim].chunks(head_dim) {
            assert_eq!(row, v0);
        }
        // Item 2's length past `tokens` is the unmasked attention.
        let unmasked = AttentionProblem {
            key_padding: false,
            ..p
        };
        let mut full = vec![f32::NAN; before.len()];
        attention(&unmasked, tiles, &qkv, &qkv, &qkv, &mut full);
        let item2 = 2 * tokens * head_dim..;
        assert_eq!(full[item2.clone()], after[item2]);
    }

    #[test]
    fn causal_rows_never_see_later_tokens() {
        // Row 0 is V's row 0 (its only key), and changing the keys and values of the last
        // token leaves every other row exactly as it was.
        let (tokens, head_dim) = (20, 16);
        let view = Operand::contiguous(head_dim);
        let p = AttentionProblem {
            batch: 1,
            heads: 1,
            tokens,
            head_dim,
            scale: 0.25,
            causal: true,
            key_padding: false,
            q: view,
            k: view,
            v: view,
            o: view,
        };
        let (q, mut k, mut v) = (
            values(tokens * head_dim, 1),
            values(tokens * head_dim, 2),
            values(tokens * head_dim, 3),
        );
        let tiles = AttentionTiles {
            block_m: 8,
            block_n: 8,
        };
        let mut before = vec![f32::NAN; tokens * head_dim];
        attention(&p, tiles, &q, &k, &v, &mut before);
        assert_eq!(&before[..head_dim], &v[..head_dim]);
        let last = (tokens - 1) * head_dim;
        k[last..].iter_mut().for_each(|x| *x = 50.0);
        v[last..].iter_mut().for_each(|x| *x = -7.0);
        let mut after = vec![f32::NAN; tokens * head_dim];
        attention(&p, tiles, &q, &k, &v, &mut after);
        assert_eq!(&before[..last], &after[..last]);
        assert_ne!(&before[last..], &after[last..]);
    }
}
