//! CPU twin of resample.cu: the same two passes over the same records and tables, 64-bit sums.

use super::batch::{ResampleBatch, ResampleImage, TapTable};

const PRECISION_BITS: u32 = 22;

/// One output value: the taps of `out_index` over the samples `step` bytes apart from
/// `src[base + first * step]`, rounded and clipped as PIL's clip8.
fn resample_one(table: &TapTable, out_index: usize, src: &[u8], base: usize, step: usize) -> u8 {
    let first = table.first[out_index] as usize;
    let mut sum: i64 = 1 << (PRECISION_BITS - 1);
    for (k, &w) in table.weights[out_index].iter().enumerate() {
        sum += i64::from(src[base + (first + k) * step]) * i64::from(w);
    }
    (sum >> PRECISION_BITS).clamp(0, 255) as u8
}

/// The first pass of one image into its intermediate in `mid`.
pub fn first_pass(batch: &ResampleBatch, im: &ResampleImage, src: &[u8], mid: &mut [u8]) {
    let table = &batch.tables[im.first_table];
    let c = im.channels;
    let (rows, cols) = im.intermediate();
    let input = &src[im.src_offset..][..im.input_len()];
    let out = &mut mid[im.mid_offset..][..rows * cols * c];
    let row_len = im.input.1 * c;
    for (v, value) in out.iter_mut().enumerate() {
        let (channel, pixel) = (v % c, v / c);
        let (y, x) = (pixel / cols, pixel % cols);
        *value = if im.vertical_first {
            resample_one(table, y, input, x * c + channel, row_len)
        } else {
            resample_one(table, x, input, y * row_len + channel, c)
        };
    }
}

/// The second pass of one image, inside its crop window, into its output in `dst`.
pub fn second_pass(batch: &ResampleBatch, im: &ResampleImage, mid: &[u8], dst: &mut [u8]) {
    let table = &batch.tables[im.second_table];
    let c = im.channels;
    let intermediate = &mid[im.mid_offset..][..im.intermediate_len()];
    let mid_row_len = im.intermediate().1 * c;
    let out = &mut dst[im.dst_offset..][..im.output_len()];
    for (v, value) in out.iter_mut().enumerate() {
        let (channel, pixel) = (v % c, v / c);
        let y = (pixel / im.crop.1) as i64 + im.crop_start.0;
        let x = (pixel % im.crop.1) as i64 + im.crop_start.1;
        let inside = (0..im.resized.0 as i64).contains(&y) && (0..im.resized.1 as i64).contains(&x);
        *value = if !inside {
            0
        } else if im.vertical_first {
            resample_one(
                table,
                x as usize,
                intermediate,
                y as usize * mid_row_len + channel,
                c,
            )
        } else {
            resample_one(
                table,
                y as usize,
                intermediate,
                x as usize * c + channel,
                mid_row_len,
            )
        };
    }
}

/// Both passes of every image (as the two launches of `gpu::resample`).
pub fn resample(batch: &ResampleBatch, src: &[u8], mid: &mut [u8], dst: &mut [u8]) {
    for im in &batch.images {
        first_pass(batch, im, src, mid);
    }
    for im in &batch.images {
        second_pass(batch, im, mid, dst);
    }
}
