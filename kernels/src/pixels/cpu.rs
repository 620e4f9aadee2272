//! CPU twin of the pixel expansion (pixels.cu).

/// `dst[b, c, y, x] = table[c * 256 + src[b, y, x, c]]` for `src` holding whole images of
/// `plane` pixels of `channels` bytes each, and `dst` as many f32 values.
pub fn expand_pixels(src: &[u8], channels: usize, plane: usize, table: &[f32], dst: &mut [f32]) {
    assert_eq!(
        table.len(),
        channels * 256,
        "one table row of 256 values a channel"
    );
    assert_eq!(src.len(), dst.len(), "one value per byte");
    let image_len = plane * channels;
    if image_len == 0 {
        return;
    }
    for (image, out) in src
        .chunks_exact(image_len)
        .zip(dst.chunks_exact_mut(image_len))
    {
        for (c, (plane_out, row)) in out
            .chunks_exact_mut(plane)
            .zip(table.chunks_exact(256))
            .enumerate()
        {
            for (value, pixel) in plane_out.iter_mut().zip(image.chunks_exact(channels)) {
                *value = row[usize::from(pixel[c])];
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn planes_come_out_channel_major() {
        // Two 1x2 RGB images; the table maps byte v of channel c to 1000 c + v.
        let table: Vec<f32> = (0..3)
            .flat_map(|c| (0..256).map(move |v| (1000 * c + v) as f32))
            .collect();
        let src = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12];
        let mut dst = [0.0; 12];
        expand_pixels(&src, 3, 2, &table, &mut dst);
        assert_eq!(
            dst,
            [1.0, 4.0, 1002.0, 1005.0, 2003.0, 2006.0, 7.0, 10.0, 1008.0, 1011.0, 2009.0, 2012.0]
        );
    }
}
