//! SigLIP 2 NaFlex's position embeddings resized per image, as transformers 5.17's
//! `Siglip2VisionEmbeddings.resize_positional_embeddings` makes them: the learned `S x S` grid
//! (`num_patches = S²` rows) resized to each image's patch grid `(rows, cols)` by PyTorch's
//! `F.interpolate(mode="bilinear", align_corners=False, antialias=True)` in float32, laid out
//! row-major, and the padded positions past `rows · cols` given the first position's row.
//!
//! PyTorch's antialiased resize is separable: the width first, then the height, each output
//! sample a normalised sum of the triangle filter over the input samples within its support
//! (the support widened by the scale when shrinking, which is what antialiasing adds). The
//! taps are computed and summed in float32 in the same order here.

use crate::error::ModelError;

/// One output sample's taps: the first input index and the normalised weights.
struct Taps {
    first: usize,
    weights: Vec<f32>,
}

/// The taps of every output sample of a resize from `input` to `output` samples
/// (PyTorch's `_compute_indices_min_size_weights_aa` with the bilinear filter).
fn taps(input: usize, output: usize) -> Vec<Taps> {
    let scale = input as f32 / output as f32;
    let (support, inverse) = if scale >= 1.0 {
        (scale, 1.0 / scale)
    } else {
        (1.0, 1.0)
    };
    let triangle = |x: f32| {
        let x = x.abs();
        if x < 1.0 {
            1.0 - x
        } else {
            0.0
        }
    };
    (0..output)
        .map(|i| {
            let center = scale * (i as f32 + 0.5);
            // Truncation toward zero, as the C++ cast does; clamped to the input.
            let first = ((center - support + 0.5) as i64).max(0) as usize;
            let end = ((center + support + 0.5) as i64).min(input as i64) as usize;
            let mut weights: Vec<f32> = (first..end)
                .map(|j| triangle((j as f32 - center + 0.5) * inverse))
                .collect();
            let total: f32 = weights.iter().sum();
            if total != 0.0 {
                weights.iter_mut().for_each(|w| *w /= total);
            }
            Taps { first, weights }
        })
        .collect()
}

/// `table` ([side², dim], row-major over the side × side grid) resized to `(rows, cols)` and
/// padded to `max_len` positions: `[max_len, dim]`, the positions past `rows · cols` holding
/// the first position's row.
pub fn resize_positions(
    table: &[f32],
    side: usize,
    dim: usize,
    (rows, cols): (usize, usize),
    max_len: usize,
) -> Result<Vec<f32>, ModelError> {
    if table.len() != side * side * dim || side == 0 {
        return Err(ModelError::Usage(format!(
            "a position table of {} values is no {side} x {side} grid of {dim}",
            table.len()
        )));
    }
    if rows == 0 || cols == 0 || rows * cols > max_len {
        return Err(ModelError::Usage(format!(
            "a patch grid of {rows} x {cols} does not fit {max_len} positions (each side \
             needs at least one patch)"
        )));
    }
    // Width first: [side rows, cols, dim].
    let across = taps(side, cols);
    let mut wide = vec![0.0f32; side * cols * dim];
    for r in 0..side {
        for (c, tap) in across.iter().enumerate() {
            let out = &mut wide[(r * cols + c) * dim..][..dim];
            for (j, &w) in tap.weights.iter().enumerate() {
                let src = &table[(r * side + tap.first + j) * dim..][..dim];
                if j == 0 {
                    out.iter_mut().zip(src).for_each(|(o, &s)| *o = s * w);
                } else {
                    out.iter_mut().zip(src).for_each(|(o, &s)| *o += s * w);
                }
            }
        }
    }
    // Then the height: [rows, cols, dim].
    let down = taps(side, rows);
    let mut resized = vec![0.0f32; max_len * dim];
    for (r, tap) in down.iter().enumerate() {
        for c in 0..cols {
            let out = &mut resized[(r * cols + c) * dim..][..dim];
            for (j, &w) in tap.weights.iter().enumerate() {
                let src = &wide[((tap.first + j) * cols + c) * dim..][..dim];
                if j == 0 {
                    out.iter_mut().zip(src).for_each(|(o, &s)| *o = s * w);
                } else {
                    out.iter_mut().zip(src).for_each(|(o, &s)| *o += s * w);
                }
            }
        }
    }
    let (valid, padded) = resized.split_at_mut(rows * cols * dim);
    for row in padded.chunks_mut(dim) {
        row.copy_from_slice(&valid[..dim]);
    }
    Ok(resized)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_size_is_the_identity_and_padding_repeats_the_first_position() {
        let table: Vec<f32> = (0..2 * 2 * 3).map(|i| i as f32).collect();
        let out = resize_positions(&table, 2, 3, (2, 2), 6).unwrap();
        assert_eq!(&out[..12], table.as_slice());
        assert_eq!(&out[12..15], &table[..3]);
        assert_eq!(&out[15..18], &table[..3]);
    }

    #[test]
    fn grids_that_do_not_fit_are_refused() {
        let table = vec![0.0; 4 * 4];
        assert!(resize_positions(&table, 2, 4, (3, 3), 8).is_err());
        assert!(resize_positions(&table, 2, 4, (0, 3), 8).is_err());
        assert!(resize_positions(&table, 3, 4, (1, 1), 8).is_err());
    }
}
