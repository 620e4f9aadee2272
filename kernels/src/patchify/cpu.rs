//! The CPU twins of patchify.cu: the patch rows (one program per patch row) and the prefix
//! rows.

use rayon::prelude::*;

/// Cuts NCHW pixels into patch rows: row `b * patches + py * (W/P) + px` holds the patch's
/// pixels in (channel, y, x) order, which is the order of a Conv2d weight `[hidden, C, P, P]`
/// flattened to `[hidden, C·P·P]`. The projection is then a plain matmul.
pub fn patchify(
    pixels: &[f32],
    batch: usize,
    channels: usize,
    height: usize,
    width: usize,
    patch: usize,
    out: &mut [f32],
) {
    let (grid_h, grid_w) = (height / patch, width / patch);
    let row_len = channels * patch * patch;
    assert_eq!(pixels.len(), batch * channels * height * width);
    assert_eq!(out.len(), batch * grid_h * grid_w * row_len);
    out.par_chunks_mut(row_len)
        .enumerate()
        .for_each(|(row, o)| {
            let b = row / (grid_h * grid_w);
            let (py, px) = ((row / grid_w) % grid_h, row % grid_w);
            for c in 0..channels {
                for y in 0..patch {
                    let src = ((b * channels + c) * height + py * patch + y) * width + px * patch;
                    let dst = (c * patch + y) * patch;
                    o[dst..dst + patch].copy_from_slice(&pixels[src..src + patch]);
                }
            }
        });
}

/// Writes the prefix rows of every image (`prefix`: S rows of `hidden`, S may be 0):
/// `out[b, j, :] = prefix[j, :] + pos[j, :]` for `j < S`. The patch rows (`out[b, S.., :]`)
/// come from the projection matmul, whose epilogue adds `pos[S.., :]`.
pub fn write_prefix_rows(
    prefix: &[f32],
    pos: &[f32],
    batch: usize,
    tokens: usize,
    hidden: usize,
    out: &mut [f32],
) {
    let n = prefix.len();
    assert!(n.is_multiple_of(hidden) && pos.len() >= n && out.len() == batch * tokens * hidden);
    for b in 0..batch {
        let rows = &mut out[b * tokens * hidden..b * tokens * hidden + n];
        for ((o, c), p) in rows.iter_mut().zip(prefix).zip(pos) {
            *o = c + p;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patchify_orders_pixels_as_a_conv_weight() {
        // One image, 2 channels, 4x4 pixels, 2x2 patches: pixel value encodes (c, y, x).
        let pixels: Vec<f32> = (0..2 * 4 * 4).map(|i| i as f32).collect();
        let mut out = vec![0.0; 4 * 8];
        patchify(&pixels, 1, 2, 4, 4, 2, &mut out);
        // Patch (py=0, px=1): channel 0 rows y=0,1 at x=2,3, then channel 1.
        assert_eq!(&out[8..16], &[2.0, 3.0, 6.0, 7.0, 18.0, 19.0, 22.0, 23.0]);
        // Patch (py=1, px=0).
        assert_eq!(&out[16..20], &[8.0, 9.0, 12.0, 13.0]);
    }

    #[test]
    fn prefix_rows_add_their_positions() {
        let mut out = vec![9.0; 2 * 3 * 2];
        write_prefix_rows(&[1.0, 2.0], &[0.5, 0.25, 7.0, 7.0], 2, 3, 2, &mut out);
        assert_eq!(&out[0..2], &[1.5, 2.25]);
        assert_eq!(&out[6..8], &[1.5, 2.25]);
        assert_eq!(out[2], 9.0, "patch rows are left to the matmul");
        // Two prefix rows (a CLS and a distillation token), then none at all.
        let mut out = vec![9.0; 4 * 2];
        write_prefix_rows(&[1.0, 2.0, 3.0, 4.0], &[1.0; 8], 1, 4, 2, &mut out);
        assert_eq!(&out[..6], &[2.0, 3.0, 4.0, 5.0, 9.0, 9.0]);
        write_prefix_rows(&[], &[1.0; 8], 1, 4, 2, &mut out);
        assert_eq!(out[4], 9.0);
    }
}
