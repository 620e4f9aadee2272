//! The text tower's gathers: token embedding and end-token rows against their twins.

use super::*;
use vitrt_kernels::gather::{self, gpu::TOKEN_EMBEDDING_TYPES, EndToken};

/// Token ids as f32, integers in 0..vocab, with (when `bad`) a few that are not: -1, vocab,
/// 2.5, NaN, inf. Returns the ids and the rows that must come out NaN.
fn token_ids(rng: &mut SmallRng, rows: usize, vocab: usize, bad: bool) -> (Vec<f32>, Vec<usize>) {
    let mut ids: Vec<f32> = (0..rows)
        .map(|_| rng.random_range(0..vocab) as f32)
        .collect();
    // The first and last entries of the table, where they fit.
    ids[0] = (vocab - 1) as f32;
    if rows > 1 {
        ids[rows - 1] = 0.0;
    }
    let mut bad_rows = Vec::new();
    if bad {
        for (i, id) in [-1.0, vocab as f32, 2.5, f32::NAN, f32::INFINITY]
            .into_iter()
            .enumerate()
        {
            let r = (7 * i + 3) % rows;
            ids[r] = id;
            bad_rows.push(r);
        }
    }
    (ids, bad_rows)
}

/// f32 sums of the same rounded values and one rounding on both sides: exact. An id that is
/// not an integer in 0..vocab gives a NaN row (`compare` wants NaN where the twin has NaN).
#[test]
#[ignore = "needs a CUDA GPU"]
fn token_embedding_matches_its_twin() {
    let mut rng = SmallRng::seed_from_u64(31);
    for (table_dtype, out_dtype) in TOKEN_EMBEDDING_TYPES {
        let mut cases = 0;
        // (batch, tokens, dim, vocab): CLIP-B's text tower (77 x 512 of 49408), SigLIP's
        // (64 x 768), odd small ones.
        for &(batch, tokens, dim, vocab) in &[
            (2usize, 77usize, 512usize, 49_408usize),
            (3, 64, 768, 1000),
            (1, 1, 1, 1),
            (5, 7, 33, 10),
            (1, 13, 1153, 300),
        ] {
            for misalign in [0, 1] {
                for bad in [false, true] {
                    let case = format!(
                        "token_embedding {table_dtype} to {out_dtype} {batch}x{tokens}x{dim} \
                         vocab {vocab} misalign {misalign} bad ids {bad}"
                    );
                    let rows = batch * tokens;
                    let (ids, bad_rows) = token_ids(&mut rng, rows, vocab, bad && rows > 1);
                    let table = random(&mut rng, vocab * dim, -1.0, 1.0, table_dtype);
                    let positions = random(&mut rng, tokens * dim, -0.5, 0.5, table_dtype);
                    let (_ib, iv) = upload(gpu(), DType::F32, &ids, 0);
                    let (_tb, tv) = upload(gpu(), table_dtype, &table, misalign);
                    let (_pb, pv) = upload(gpu(), table_dtype, &positions, 0);
                    let out = Poisoned::new(gpu(), out_dtype, rows * dim, misalign);
                    gather::gpu::token_embedding(
                        gpu(),
                        table_dtype,
                        out_dtype,
                        iv,
                        tv,
                        pv,
                        rows,
                        tokens,
                        dim,
                        vocab,
                        out.view(),
                    )
                    .unwrap_or_else(|e| panic!("{case}: {e}"));
                    let got = out.read(gpu(), &case);
                    let mut want = vec![0.0; rows * dim];
                    gather::cpu::token_embedding(
                        &ids, &table, &positions, tokens, dim, vocab, &mut want,
                    );
                    want.iter_mut().for_each(|v| *v = out_dtype.round(*v));
                    for &r in &bad_rows {
                        assert!(
                            want[r * dim..(r + 1) * dim].iter().all(|x| x.is_nan()),
                            "{case}: the twin kept bad id {} of row {r}",
                            ids[r]
                        );
                    }
                    compare(&case, &got, &want, 0.0, 0.0);
                    cases += 1;
                }
            }
        }
        report(
            &format!("token_embedding to {out_dtype}"),
            table_dtype,
            cases,
            Worst::default(),
        );
    }
}

/// A copy of the row the rule picks: exact. Ids of a few values only, so that the largest
/// appears several times (ties go to the first); sequences with the end id several times,
/// once, never (position 0), and NaN ids (never the largest).
#[test]
#[ignore = "needs a CUDA GPU"]
fn end_token_rows_match_their_twin() {
    let mut rng = SmallRng::seed_from_u64(37);
    let end = 7u32;
    for dtype in DType::ALL {
        let mut cases = 0;
        // Sequence lengths below, at and past the block's 128 threads.
        for &(batch, tokens, dim) in &[
            (1usize, 1usize, 1usize),
            (5, 77, 512),
            (3, 64, 768),
            (4, 128, 33),
            (6, 300, 20),
        ] {
            let mut ids: Vec<f32> = (0..batch * tokens)
                .map(|_| rng.random_range(0..end) as f32)
                .collect();
            for (b, sequence) in ids.chunks_mut(tokens).enumerate() {
                match b % 6 {
                    // The end id (also the largest) twice: the first wins both rules.
                    0 => {
                        let p = rng.random_range(0..tokens);
                        sequence[p] = end as f32;
                        sequence[tokens - 1] = end as f32;
                    }
                    // CLIP's layout: the end token after the text, then padding with it.
                    1 => {
                        let p = tokens / 2;
                        sequence[p..].fill(end as f32);
                    }
                    // No end id; the largest id (6) several times or not at all.
                    2 => {}
                    // NaN ids around, the largest among them late.
                    3 => {
                        sequence.iter_mut().step_by(3).for_each(|x| *x = f32::NAN);
                        sequence[tokens - 1] = 100.0;
                    }
                    // Every id NaN: position 0 for both rules.
                    4 => sequence.fill(f32::NAN),
                    // A larger id than the end id before it: the rules disagree.
                    _ => {
                        sequence[0] = 50.0;
                        sequence[tokens - 1] = end as f32;
                    }
                }
            }
            let hidden = random(&mut rng, batch * tokens * dim, -3.0, 3.0, dtype);
            let (_hb, hv) = upload(gpu(), dtype, &hidden, 1);
            let (_ib, iv) = upload(gpu(), DType::F32, &ids, 0);
            for rule in [EndToken::HighestId, EndToken::FirstOf(end)] {
                let case = format!("end_token_rows {dtype} {batch}x{tokens}x{dim} {rule:?}");
                let out = Poisoned::new(gpu(), dtype, batch * dim, 1);
                gather::gpu::end_token_rows(
                    gpu(),
                    dtype,
                    hv,
                    iv,
                    batch,
                    tokens,
                    dim,
                    rule,
                    out.view(),
                )
                .unwrap_or_else(|e| panic!("{case}: {e}"));
                let got = out.read(gpu(), &case);
                let mut want = vec![0.0; batch * dim];
                gather::cpu::end_token_rows(&hidden, &ids, batch, tokens, dim, rule, &mut want);
                compare(&case, &got, &want, 0.0, 0.0);
                cases += 1;
            }
        }
        report("end_token_rows", dtype, cases, Worst::default());
    }
}
