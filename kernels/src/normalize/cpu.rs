//! The CPU twin of normalize.cu.

/// `out[r, :] = x[r, :] / ||x[r, :]||` for rows of `cols`, summed as normalize.cu sums them:
/// lane `l` of a warp adds the squares of columns `l, l + 32, ...` (fused multiply-adds), then
/// the 32 lane sums meet in the shuffle tree (offsets 16, 8, 4, 2, 1).
pub fn l2_normalize(x: &[f32], cols: usize, out: &mut [f32]) {
    assert!(cols > 0 && x.len().is_multiple_of(cols) && out.len() == x.len());
    for (row, o) in x.chunks(cols).zip(out.chunks_mut(cols)) {
        let mut lanes = [0.0f32; 32];
        for (c, &v) in row.iter().enumerate() {
            lanes[c % 32] = v.mul_add(v, lanes[c % 32]);
        }
        for offset in [16, 8, 4, 2, 1] {
            let before = lanes;
            for (lane, sum) in lanes.iter_mut().enumerate() {
                *sum = before[lane] + before[lane ^ offset];
            }
        }
        let norm = lanes[0].sqrt();
        for (o, &v) in o.iter_mut().zip(row) {
            *o = v / norm;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_come_out_of_unit_length() {
        let x: Vec<f32> = (0..3 * 70).map(|i| ((i * 37) % 11) as f32 - 5.0).collect();
        let mut out = vec![0.0; x.len()];
        l2_normalize(&x, 70, &mut out);
        for (row, normed) in x.chunks(70).zip(out.chunks(70)) {
            let norm = row.iter().map(|&v| (v as f64).powi(2)).sum::<f64>().sqrt();
            for (&v, &n) in row.iter().zip(normed) {
                assert!((n as f64 - v as f64 / norm).abs() < 1e-6);
            }
        }
        let mut zero = [1.0f32; 4];
        l2_normalize(&[0.0; 4], 4, &mut zero);
        assert!(zero.iter().all(|v| v.is_nan()), "0 / 0, as torch gives");
    }
}
