//! The CPU twin of softmax.cu: one program per row, in f32.

use rayon::prelude::*;

/// `out[r, :] = softmax(scale * x[r, :])`, with the row maximum subtracted first.
pub fn softmax(x: &[f32], cols: usize, scale: f32, out: &mut [f32]) {
    assert!(cols > 0 && x.len().is_multiple_of(cols) && out.len() == x.len());
    out.par_chunks_mut(cols)
        .zip(x.par_chunks(cols))
        .for_each(|(o, row)| softmax_row(row, scale, o));
}

/// The causal softmax of a text tower's scores (as `gpu::softmax_causal`): row r belongs to
/// query `q = r % queries` (rows are `[batch, heads, queries]` flattened, `cols` keys); its
/// columns `0..=q` get `softmax(scale * x[r, 0..=q])`, the others exactly 0 (x is not read
/// there). Panics on a shape the launcher refuses (`queries != cols`, or rows no whole number
/// of query matrices).
pub fn softmax_causal(x: &[f32], cols: usize, queries: usize, scale: f32, out: &mut [f32]) {
    assert!(cols > 0 && x.len().is_multiple_of(cols) && out.len() == x.len());
    assert!(queries == cols && (x.len() / cols).is_multiple_of(queries));
    out.par_chunks_mut(cols)
        .zip(x.par_chunks(cols))
        .enumerate()
        .for_each(|(r, (o, row))| {
            let live = (r % queries + 1).min(cols);
            softmax_row(&row[..live], scale, &mut o[..live]);
            o[live..].fill(0.0);
        });
}

/// One row: the maximum of `scale * x` subtracted before exp, an f32 sum, times 1 / sum.
fn softmax_row(row: &[f32], scale: f32, o: &mut [f32]) {
    let max = row.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(scale * v));
    let mut sum = 0.0f32;
    for (o, &v) in o.iter_mut().zip(row) {
        *o = (scale * v - max).exp();
        sum += *o;
    }
    let inv = 1.0 / sum;
    o.iter_mut().for_each(|v| *v *= inv);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn softmax_is_stable_and_sums_to_one() {
        let x = [1000.0, 1001.0, 1002.0, -5.0, 0.0, 5.0];
        let mut out = [0.0; 6];
        softmax(&x, 3, 0.5, &mut out);
        let e = [(-1.0f32).exp(), (-0.5f32).exp(), 1.0];
        let s: f32 = e.iter().sum();
        for (o, w) in out[..3].iter().zip(e) {
            assert!((o - w / s).abs() < 1e-6);
        }
        assert!((out[3..].iter().sum::<f32>() - 1.0).abs() < 1e-6);
    }

    #[test]
    fn causal_rows_sum_to_one_with_zeros_past_the_diagonal() {
        // 2 matrices of 5 queries x 5 keys; scores past the diagonal are NaN, to show that
        // they are never read.
        let (queries, cols) = (5, 5);
        let rows = 2 * queries;
        let mut x: Vec<f32> = (0..rows * cols).map(|i| (i % 7) as f32 - 3.0).collect();
        for r in 0..rows {
            for c in r % queries + 1..cols {
                x[r * cols + c] = f32::NAN;
            }
        }
        let mut out = vec![f32::NAN; x.len()];
        softmax_causal(&x, cols, queries, 0.7, &mut out);
        for r in 0..rows {
            let q = r % queries;
            let row = &out[r * cols..(r + 1) * cols];
            assert!(
                (row.iter().sum::<f32>() - 1.0).abs() < 1e-6,
                "row {r}: {row:?}"
            );
            assert!(row[q + 1..].iter().all(|&p| p == 0.0), "row {r}: {row:?}");
            // The live columns are the plain softmax of the row's first q + 1 scores.
            let mut want = vec![0.0; q + 1];
            softmax(&x[r * cols..r * cols + q + 1], q + 1, 0.7, &mut want);
            assert_eq!(&row[..=q], &want[..], "row {r}");
        }
        // Query 0 attends to key 0 only.
        assert_eq!(out[0], 1.0);
        assert_eq!(out[queries * cols], 1.0);
    }
}
