//! Batches of NaFlex inputs made without image files, for timing: each image of a batch takes
//! the patch grid `Siglip2ImageProcessor` would give a photo of one of a fixed mix of aspect
//! ratios, its patch rows filled by the caller (random values are fine for timing), the rows
//! past its grid zero and masked out, as the processor pads them.
//!
//! `scripts/bench/bench_family_torch.py` lists the same source sizes, in the same order, so
//! that PyTorch times the same batch (its grids come from transformers'
//! `get_image_size_for_max_num_patches`, ours from [`target_size`], which matches it).

use super::{NaflexInputs, NaflexVisionModel};
use crate::error::ModelError;
use crate::preprocess::naflex::target_size;

/// (height, width) in pixels of the photos the mix stands for, in the order images of a batch
/// take them (image `i` the `i % 9`-th): 16:9 landscape and portrait, square, 4:3 both ways,
/// 2:1 both ways, 4:1 both ways. At patch 16 and 256 patches their grids are 12x21, 21x12,
/// 16x16, 14x18, 18x14, 11x22, 22x11, 8x32 and 32x8 (251 patches on average).
pub const MIXED_ASPECT_SIZES: [(usize, usize); 9] = [
    (576, 1024),
    (1024, 576),
    (512, 512),
    (768, 1024),
    (1024, 768),
    (512, 1024),
    (1024, 512),
    (256, 1024),
    (1024, 256),
];

/// The (rows, cols) patch grid of each of `batch` images of the mix, under `max_num_patches`
/// patches of `patch_size` pixels.
pub fn mixed_grids(batch: usize, patch_size: usize, max_num_patches: usize) -> Vec<(usize, usize)> {
    (0..batch)
        .map(|i| {
            let (height, width) = MIXED_ASPECT_SIZES[i % MIXED_ASPECT_SIZES.len()];
            let (h, w) = target_size(height, width, patch_size, max_num_patches);
            (h / patch_size, w / patch_size)
        })
        .collect()
}

/// `pixel_values` [B, max_patches, per_row] and `pixel_attention_mask` [B, max_patches] of a
/// batch with these grids: each image's first `rows·cols` patch rows drawn from `value`, the
/// rest zero and masked out.
pub fn padded_rows(
    grids: &[(usize, usize)],
    max_patches: usize,
    per_row: usize,
    value: &mut dyn FnMut() -> f32,
) -> Result<(Vec<f32>, Vec<f32>), ModelError> {
    let mut pixels = vec![0.0f32; grids.len() * max_patches * per_row];
    let mut mask = vec![0.0f32; grids.len() * max_patches];
    for (item, &(rows, cols)) in grids.iter().enumerate() {
        let len = rows * cols;
        if len == 0 || len > max_patches {
            return Err(ModelError::Usage(format!(
                "image {item}: a {rows} x {cols} patch grid does not fit {max_patches} patch rows"
            )));
        }
        let start = item * max_patches;
        pixels[start * per_row..(start + len) * per_row].fill_with(&mut *value);
        mask[start..start + len].fill(1.0);
    }
    Ok((pixels, mask))
}

/// The model's inputs for `batch` images of the mix padded to `max_patches` rows, their patch
/// rows drawn from `value`.
pub fn mixed_batch(
    model: &NaflexVisionModel,
    batch: usize,
    max_patches: usize,
    value: &mut dyn FnMut() -> f32,
) -> Result<(NaflexInputs, Vec<(usize, usize)>), ModelError> {
    let grids = mixed_grids(batch, model.config.patch_size, max_patches);
    let (pixels, mask) = padded_rows(&grids, max_patches, model.config.patch_values(), value)?;
    Ok((NaflexInputs::new(model, pixels, &mask, &grids)?, grids))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mix_at_256_patches_of_16_is_transformers_grids() {
        // Values transformers 5.17's get_image_size_for_max_num_patches gives for the sizes.
        let grids = mixed_grids(10, 16, 256);
        assert_eq!(
            grids,
            [
                (12, 21),
                (21, 12),
                (16, 16),
                (14, 18),
                (18, 14),
                (11, 22),
                (22, 11),
                (8, 32),
                (32, 8),
                (12, 21),
            ]
        );
        let patches: usize = grids[..9].iter().map(|(r, c)| r * c).sum();
        assert_eq!(patches, 2260);
    }

    #[test]
    fn every_grid_fits_small_budgets_too() {
        for (patch, max) in [(4, 24), (14, 64), (16, 1024)] {
            for (rows, cols) in mixed_grids(9, patch, max) {
                assert!(
                    rows >= 1 && cols >= 1 && rows * cols <= max,
                    "{rows}x{cols} of {max}"
                );
            }
        }
    }

    #[test]
    fn rows_past_each_grid_are_zero_and_masked() {
        let grids = [(1, 2), (2, 2)];
        let mut next = 0.0;
        let (pixels, mask) = padded_rows(&grids, 5, 2, &mut || {
            next += 1.0;
            next
        })
        .unwrap();
        assert_eq!(mask, [1.0, 1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 0.0]);
        assert_eq!(
            pixels,
            [
                1.0, 2.0, 3.0, 4.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, // image 0: 2 rows
                5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 11.0, 12.0, 0.0, 0.0, // image 1: 4 rows
            ]
        );
        assert!(padded_rows(&[(2, 3)], 5, 2, &mut || 1.0).is_err());
    }
}
