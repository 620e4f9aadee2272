//! The CPU twins of gather.cu's text-tower gathers (`gather_rows` has none: the CPU backend
//! copies rows itself).

use super::EndToken;

/// `out[r, :] = table[ids[r], :] + positions[r % tokens, :]` for every id (as
/// `gpu::token_embedding`; rows = `ids.len()`), in f32. An id that is not an integer in
/// `0..vocab` gives a row of NaN, as on the GPU. Panics on buffers of the wrong length: the
/// launcher's checks are the callers' to make first.
pub fn token_embedding(
    ids: &[f32],
    table: &[f32],
    positions: &[f32],
    tokens: usize,
    dim: usize,
    vocab: usize,
    out: &mut [f32],
) {
    let rows = ids.len();
    assert!(
        tokens > 0 && rows.is_multiple_of(tokens),
        "{rows} ids in sequences of {tokens}"
    );
    assert!(table.len() >= vocab * dim && positions.len() >= tokens * dim);
    assert_eq!(out.len(), rows * dim);
    if dim == 0 {
        return;
    }
    for (r, (out_row, &id)) in out.chunks_mut(dim).zip(ids).enumerate() {
        // NaN fails both comparisons; ±inf fails the range test.
        if !(id >= 0.0 && id < vocab as f32 && id.floor() == id) {
            out_row.fill(f32::NAN);
            continue;
        }
        let word = &table[id as usize * dim..][..dim];
        let position = &positions[(r % tokens) * dim..][..dim];
        for ((o, &w), &p) in out_row.iter_mut().zip(word).zip(position) {
            *o = w + p;
        }
    }
}

/// The position `rule` picks in one sequence's ids: the first of the largest id, or the first
/// equal to the end id; 0 when nothing qualifies (every id NaN, or no match). A NaN id is
/// never the largest, as on the GPU.
pub fn end_token_position(ids: &[f32], rule: EndToken) -> usize {
    let key = |id: f32| match rule {
        EndToken::HighestId => id,
        EndToken::FirstOf(e) => {
            if id == e as f32 {
                1.0
            } else {
                0.0
            }
        }
    };
    let mut best: Option<(f32, usize)> = None;
    for (p, &id) in ids.iter().enumerate() {
        let k = key(id);
        if k.is_nan() {
            continue;
        }
        if best.is_none_or(|(b, _)| k > b) {
            best = Some((k, p));
        }
    }
    best.map_or(0, |(_, p)| p)
}

/// `out[b, :] = hidden[b, p, :]` for every sequence b of `hidden` `[batch, tokens, dim]`, p
/// the position `rule` picks from the sequence's ids `[batch, tokens]` (as
/// `gpu::end_token_rows`; [`end_token_position`]). Panics on buffers of the wrong length.
pub fn end_token_rows(
    hidden: &[f32],
    ids: &[f32],
    batch: usize,
    tokens: usize,
    dim: usize,
    rule: EndToken,
    out: &mut [f32],
) {
    assert!(batch == 0 || tokens > 0, "sequences of 0 tokens");
    assert_eq!(hidden.len(), batch * tokens * dim);
    assert_eq!(ids.len(), batch * tokens);
    assert_eq!(out.len(), batch * dim);
    for b in 0..batch {
        let p = end_token_position(&ids[b * tokens..(b + 1) * tokens], rule);
        out[b * dim..(b + 1) * dim].copy_from_slice(&hidden[(b * tokens + p) * dim..][..dim]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_embedding_adds_the_position_row() {
        // A vocabulary of 3 words of width 2, sequences of 2 tokens, 2 sequences.
        let table = [1.0, 2.0, 10.0, 20.0, 100.0, 200.0];
        let positions = [0.5, -0.5, 0.25, -0.25];
        let ids = [2.0, 0.0, 1.0, 1.0];
        let mut out = [f32::NAN; 8];
        token_embedding(&ids, &table, &positions, 2, 2, 3, &mut out);
        assert_eq!(out, [100.5, 199.5, 1.25, 1.75, 10.5, 19.5, 10.25, 19.75]);
    }

    #[test]
    fn bad_ids_give_nan_rows_and_read_nothing() {
        let table = [1.0, 2.0, 10.0, 20.0];
        let positions = [0.0; 2];
        for bad in [
            -1.0,
            2.0,
            1.5,
            f32::NAN,
            f32::INFINITY,
            f32::NEG_INFINITY,
            1e30,
        ] {
            let ids = [1.0, bad];
            let mut out = [0.0; 4];
            token_embedding(&ids, &table, &positions, 1, 2, 2, &mut out);
            assert_eq!(&out[..2], &[10.0, 20.0], "id {bad}");
            assert!(out[2..].iter().all(|x| x.is_nan()), "id {bad}: {out:?}");
        }
        // -0.0 is the integer 0.
        let mut out = [0.0; 2];
        token_embedding(&[-0.0], &table, &positions, 1, 2, 2, &mut out);
        assert_eq!(out, [1.0, 2.0]);
    }

    #[test]
    fn end_token_positions_follow_torch_argmax() {
        let highest = |ids: &[f32]| end_token_position(ids, EndToken::HighestId);
        let first_of = |ids: &[f32], e| end_token_position(ids, EndToken::FirstOf(e));
        // CLIP: start 49406, words, end 49407, padding with the end id again (ties: first).
        let clip = [49406.0, 320.0, 1125.0, 49407.0, 49407.0, 49407.0];
        assert_eq!(highest(&clip), 3);
        assert_eq!(first_of(&clip, 49407), 3);
        // Padding with 0 after the end token; the end id appears twice.
        assert_eq!(first_of(&[5.0, 2.0, 7.0, 2.0, 0.0], 2), 1);
        // No match: position 0, as argmax of an all-false row.
        assert_eq!(first_of(&[5.0, 6.0, 7.0], 2), 0);
        // Ties of the largest id, NaN never wins, all NaN gives 0.
        assert_eq!(highest(&[1.0, 9.0, 3.0, 9.0]), 1);
        assert_eq!(highest(&[1.0, f32::NAN, 3.0]), 2);
        assert_eq!(highest(&[f32::NAN, f32::NAN]), 0);
        assert_eq!(highest(&[f32::NEG_INFINITY, f32::NEG_INFINITY]), 0);
        assert_eq!(highest(&[7.0]), 0);
    }

    #[test]
    fn end_token_rows_copy_the_picked_row() {
        // 2 sequences of 3 tokens of width 2.
        let hidden: Vec<f32> = (0..12).map(|x| x as f32).collect();
        let ids = [1.0, 8.0, 8.0, 4.0, 3.0, 9.0];
        let mut out = [f32::NAN; 4];
        end_token_rows(&hidden, &ids, 2, 3, 2, EndToken::HighestId, &mut out);
        assert_eq!(out, [2.0, 3.0, 10.0, 11.0]);
        end_token_rows(&hidden, &ids, 2, 3, 2, EndToken::FirstOf(4), &mut out);
        assert_eq!(out, [0.0, 1.0, 6.0, 7.0]);
    }
}
