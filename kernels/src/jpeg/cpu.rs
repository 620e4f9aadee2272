//! CPU twins of jpeg.cu: libjpeg-turbo's islow IDCT, upsampling and colour conversion with
//! its own arithmetic (64-bit sums where libjpeg uses `JLONG`), over the same batch
//! descriptors. The kernels compute in 32 bits, which gives the same numbers on every block
//! the exactness guard lets through ([`block_is_exact`]).

use super::batch::{
    JpegBatch, JpegColour, JpegComponent, JpegData, JpegImage, Upsample, STATUS_GUARD,
};

const CONST_BITS: u32 = 13;
const PASS1_BITS: u32 = 2;

/// jidctint.c's fixed-point constants, round(x * 2^13).
const FIX_0_298631336: i64 = 2446;
const FIX_0_390180644: i64 = 3196;
const FIX_0_541196100: i64 = 4433;
const FIX_0_765366865: i64 = 6270;
const FIX_0_899976223: i64 = 7373;
const FIX_1_175875602: i64 = 9633;
const FIX_1_501321110: i64 = 12299;
const FIX_1_847759065: i64 = 15137;
const FIX_1_961570560: i64 = 16069;
const FIX_2_053119869: i64 = 16819;
const FIX_2_562915447: i64 = 20995;
const FIX_3_072711026: i64 = 25172;

/// One 8-point islow pass: the eight sums before descaling, in output order.
fn islow_8(input: [i64; 8]) -> [i64; 8] {
    let (z2, z3) = (input[2], input[6]);
    let z1 = (z2 + z3) * FIX_0_541196100;
    let tmp2 = z1 - z3 * FIX_1_847759065;
    let tmp3 = z1 + z2 * FIX_0_765366865;
    let tmp0 = (input[0] + input[4]) << CONST_BITS;
    let tmp1 = (input[0] - input[4]) << CONST_BITS;
    let (tmp10, tmp13) = (tmp0 + tmp3, tmp0 - tmp3);
    let (tmp11, tmp12) = (tmp1 + tmp2, tmp1 - tmp2);

    let (t0, t1, t2, t3) = (input[7], input[5], input[3], input[1]);
    let z1 = -(t0 + t3) * FIX_0_899976223;
    let z2 = -(t1 + t2) * FIX_2_562915447;
    let z5 = (t0 + t2 + t1 + t3) * FIX_1_175875602;
    let z3 = -(t0 + t2) * FIX_1_961570560 + z5;
    let z4 = -(t1 + t3) * FIX_0_390180644 + z5;
    let odd0 = t0 * FIX_0_298631336 + z1 + z3;
    let odd1 = t1 * FIX_2_053119869 + z2 + z4;
    let odd2 = t2 * FIX_3_072711026 + z2 + z3;
    let odd3 = t3 * FIX_1_501321110 + z1 + z4;
    [
        tmp10 + odd3,
        tmp11 + odd2,
        tmp12 + odd1,
        tmp13 + odd0,
        tmp13 - odd0,
        tmp12 - odd1,
        tmp11 - odd2,
        tmp10 - odd3,
    ]
}

fn descale(x: i64, n: u32) -> i64 {
    (x + (1 << (n - 1))) >> n
}

/// The 64 samples of one block, row by row, from its coefficients and multipliers (both in
/// natural order), as `jpeg_idct_islow`, values before the range limit.
fn idct_block_unclamped(coefs: &[i16], quant: &[i32]) -> [i64; 64] {
    let mut workspace = [0i64; 64];
    for column in 0..8 {
        let input = std::array::from_fn(|k| {
            i64::from(coefs[k * 8 + column]) * i64::from(quant[k * 8 + column])
        });
        let sums = islow_8(input);
        for (k, sum) in sums.into_iter().enumerate() {
            workspace[k * 8 + column] = descale(sum, CONST_BITS - PASS1_BITS);
        }
    }
    let mut out = [0i64; 64];
    for row in 0..8 {
        let input = std::array::from_fn(|k| workspace[row * 8 + k]);
        let sums = islow_8(input);
        for (k, sum) in sums.into_iter().enumerate() {
            out[row * 8 + k] = descale(sum, CONST_BITS + PASS1_BITS + 3);
        }
    }
    out
}

/// The 64 samples of one block, row by row, with 128 added and the result clamped to 0..=255,
/// which is what libjpeg's range-limit table gives for values within ±512 of the centre (the
/// guard keeps them there; its C table wraps beyond, its SIMD code saturates).
pub fn idct_block(coefs: &[i16], quant: &[i32]) -> [u8; 64] {
    let values = idct_block_unclamped(coefs, quant);
    std::array::from_fn(|i| (values[i] + 128).clamp(0, 255) as u8)
}

/// The quick test's weights, times 256: how much a dequantised coefficient at (row, column)
/// can move any sample at most (in units of 1/8), where the DC term moves it by 1 and every
/// other frequency by at most sqrt(2) cos(pi / 16) < 1.39 along each axis.
const GUARD_WEIGHTS: [u32; 64] = {
    let mut w = [0u32; 64];
    let mut i = 0;
    while i < 64 {
        let row = if i / 8 == 0 { 256u32 } else { 356 };
        let column = if i % 8 == 0 { 256u32 } else { 356 };
        w[i] = row * column / 256;
        i += 1;
    }
    w
};

/// The largest weighted sum the quick test lets through, times 256: every dequantised
/// coefficient then lies within ±2047, every value between the passes within ±8189 and every
/// sample within ±258 of the centre, which is inside [`block_is_exact`]'s bounds.
pub const GUARD_LIMIT: u64 = 2047 * 256;

/// The bounds [`block_is_exact`] checks, from libjpeg-turbo's SIMD islow (jidctint-avx2.asm),
/// which dequantises and adds pairs in 16-bit lanes and saturates between the passes: within
/// them its 16- and 32-bit lanes, libjpeg's 64-bit C code and the kernels' 32-bit sums all
/// hold the same values, and the C code's range-limit table and the SIMD code's saturation
/// both clamp.
const MAX_DEQUANTISED: i64 = 4095;
const MAX_BETWEEN_PASSES: i64 = 8191;
const SAMPLE_RANGE: std::ops::RangeInclusive<i64> = -512..=511;

/// Whether one block decodes to the same bytes in libjpeg's C and SIMD code and in the
/// kernels: every dequantised coefficient within ±4095, every value between the two passes
/// within ±8191, and every sample within [-512, 511] of the centre before the range limit.
/// Most blocks pass a quick test, a weighted sum of the coefficients' magnitudes (at most
/// [`GUARD_LIMIT`]) that bounds all three; the rest are checked by doing the IDCT. Blocks of
/// real photos pass; a block that does not (a corrupt or crafted file) sends its image to the
/// host decoder.
pub fn block_is_exact(coefs: &[i16], quant: &[i32]) -> bool {
    if guard_sum(coefs, quant) <= GUARD_LIMIT {
        return true;
    }
    let dequantised = |i: usize| i64::from(coefs[i]) * i64::from(quant[i]);
    if (0..64).any(|i| dequantised(i).abs() > MAX_DEQUANTISED) {
        return false;
    }
    let mut workspace = [0i64; 64];
    for column in 0..8 {
        let sums = islow_8(std::array::from_fn(|k| dequantised(k * 8 + column)));
        for (k, sum) in sums.into_iter().enumerate() {
            let value = descale(sum, CONST_BITS - PASS1_BITS);
            if value.abs() > MAX_BETWEEN_PASSES {
                return false;
            }
            workspace[k * 8 + column] = value;
        }
    }
    (0..8).all(|row| {
        islow_8(std::array::from_fn(|k| workspace[row * 8 + k]))
            .into_iter()
            .all(|sum| SAMPLE_RANGE.contains(&descale(sum, CONST_BITS + PASS1_BITS + 3)))
    })
}

/// The quick test's weighted sum of one block: |coefficient * multiplier| times
/// [`GUARD_WEIGHTS`], over its 64 coefficients.
pub fn guard_sum(coefs: &[i16], quant: &[i32]) -> u64 {
    let mut sum = 0u64;
    for i in 0..64 {
        if coefs[i] != 0 {
            let value = (i64::from(coefs[i]) * i64::from(quant[i])).unsigned_abs();
            sum += value * u64::from(GUARD_WEIGHTS[i]);
        }
    }
    sum
}

/// The IDCT of every block of `component` into its plane in `planes` (as `jpeg_idct`).
pub fn idct_component(data: &JpegData, component: &JpegComponent, planes: &mut [u8]) {
    let stride = component.plane_stride();
    let quant = &data.quant[component.quant_offset..][..64];
    let plane = &mut planes[component.plane_offset..][..component.plane_len()];
    for block in 0..component.blocks() {
        let coefs = &data.coefs[component.coef_offset + block * 64..][..64];
        let samples = idct_block(coefs, quant);
        let (by, bx) = (
            block / component.blocks_wide as usize,
            block % component.blocks_wide as usize,
        );
        for row in 0..8 {
            let at = (by * 8 + row) * stride + bx * 8;
            plane[at..at + 8].copy_from_slice(&samples[row * 8..row * 8 + 8]);
        }
    }
}

/// The IDCT of every component of the batch (as the `jpeg_idct` launch), marking in `status`
/// (one word an image) each image with a block outside the exactness guard.
pub fn idct(batch: &JpegBatch, data: &JpegData, planes: &mut [u8], status: &mut [u32]) {
    for component in &batch.components {
        if !component_is_exact(data, component) {
            status[component.image] |= STATUS_GUARD;
        }
        idct_component(data, component, planes);
    }
}

/// Whether every block of `component` passes [`block_is_exact`].
fn component_is_exact(data: &JpegData, component: &JpegComponent) -> bool {
    let quant = &data.quant[component.quant_offset..][..64];
    data.coefs[component.coef_offset..][..component.blocks() * 64]
        .chunks_exact(64)
        .all(|block| block_is_exact(block, quant))
}

/// The sample of `c` at stored pixel (x, y), upsampled as jdsample.c does it.
fn upsampled(c: &JpegComponent, planes: &[u8], x: usize, y: usize) -> i32 {
    let p = &planes[c.plane_offset..];
    let stride = c.plane_stride();
    let at = |col: usize, row: usize| i32::from(p[row * stride + col]);
    let last_x = c.downsampled_width as usize - 1;
    let last_y = c.downsampled_height as usize - 1;
    let neighbour = |i: usize, odd: bool, last: usize| {
        if odd {
            (i + 1).min(last)
        } else {
            i.saturating_sub(1)
        }
    };
    match c.upsample {
        Upsample::Full => at(x, y),
        Upsample::Replicate { h, v } => at(x / h as usize, y / v as usize),
        Upsample::FancyH2V1 => {
            let (i, odd) = (x / 2, x % 2 == 1);
            (3 * at(i, y) + at(neighbour(i, odd, last_x), y) + 1 + i32::from(odd)) >> 2
        }
        Upsample::FancyH1V2 => {
            let (r, odd) = (y / 2, y % 2 == 1);
            (3 * at(x, r) + at(x, neighbour(r, odd, last_y)) + 1 + i32::from(odd)) >> 2
        }
        Upsample::FancyH2V2 => {
            let r = y / 2;
            let far_row = neighbour(r, y % 2 == 1, last_y);
            let (i, odd) = (x / 2, x % 2 == 1);
            let far_column = neighbour(i, odd, last_x);
            let near_sum = 3 * at(i, r) + at(i, far_row);
            let far_sum = 3 * at(far_column, r) + at(far_column, far_row);
            (3 * near_sum + far_sum + 8 - i32::from(odd)) >> 4
        }
    }
}

/// jdcolor.c's YCbCr to RGB: its tables' values, computed.
pub fn ycc_to_rgb(y: i32, cb: i32, cr: i32) -> [u8; 3] {
    let (cb, cr) = (cb - 128, cr - 128);
    let clamp = |v: i32| v.clamp(0, 255) as u8;
    [
        clamp(y + ((91881 * cr + 32768) >> 16)),
        clamp(y + ((-22554 * cb + 32768 - 46802 * cr) >> 16)),
        clamp(y + ((116130 * cb + 32768) >> 16)),
    ]
}

/// The stored pixel (x, y) that upright pixel (ox, oy) shows under EXIF `orientation`, as
/// PIL's `exif_transpose`.
pub fn stored_pixel(
    orientation: u8,
    (w, h): (usize, usize),
    ox: usize,
    oy: usize,
) -> (usize, usize) {
    match orientation {
        2 => (w - 1 - ox, oy),
        3 => (w - 1 - ox, h - 1 - oy),
        4 => (ox, h - 1 - oy),
        5 => (oy, ox),
        6 => (oy, h - 1 - ox),
        7 => (w - 1 - oy, h - 1 - ox),
        8 => (w - 1 - oy, ox),
        _ => (ox, oy),
    }
}

/// One image's upright HWC RGB pixels from the planes (as `jpeg_colour` for one image).
pub fn colour_image(batch: &JpegBatch, image: &JpegImage, planes: &[u8], rgb: &mut [u8]) {
    let (w, h) = (image.width as usize, image.height as usize);
    let (_, out_w) = image.upright_size();
    let out = &mut rgb[image.rgb_offset..][..image.rgb_len()];
    let component = |i: usize| &batch.components[image.components[i]];
    for (p, pixel) in out.chunks_exact_mut(3).enumerate() {
        let (ox, oy) = (p % out_w, p / out_w);
        let (x, y) = stored_pixel(image.orientation, (w, h), ox, oy);
        let s0 = upsampled(component(0), planes, x, y);
        let value = match image.colour {
            JpegColour::Grey => [s0 as u8; 3],
            JpegColour::Rgb => [
                s0 as u8,
                upsampled(component(1), planes, x, y) as u8,
                upsampled(component(2), planes, x, y) as u8,
            ],
            JpegColour::YCbCr => ycc_to_rgb(
                s0,
                upsampled(component(1), planes, x, y),
                upsampled(component(2), planes, x, y),
            ),
        };
        pixel.copy_from_slice(&value);
    }
}

/// Every image of the batch (as the `jpeg_colour` launch).
pub fn colour(batch: &JpegBatch, planes: &[u8], rgb: &mut [u8]) {
    for image in &batch.images {
        colour_image(batch, image, planes, rgb);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// islow with every operation done in wrapping 32-bit arithmetic, as the kernel does it.
    fn idct_block_i32(coefs: &[i16], quant: &[i32]) -> [i32; 64] {
        fn pass(input: [i32; 8]) -> [i32; 8] {
            let m = |a: i32, b: i64| a.wrapping_mul(b as i32);
            let (z2, z3) = (input[2], input[6]);
            let z1 = m(z2.wrapping_add(z3), FIX_0_541196100);
            let tmp2 = z1.wrapping_sub(m(z3, FIX_1_847759065));
            let tmp3 = z1.wrapping_add(m(z2, FIX_0_765366865));
            let tmp0 = input[0]
                .wrapping_add(input[4])
                .wrapping_mul(1 << CONST_BITS);
            let tmp1 = input[0]
                .wrapping_sub(input[4])
                .wrapping_mul(1 << CONST_BITS);
            let (tmp10, tmp13) = (tmp0.wrapping_add(tmp3), tmp0.wrapping_sub(tmp3));
            let (tmp11, tmp12) = (tmp1.wrapping_add(tmp2), tmp1.wrapping_sub(tmp2));
            let (t0, t1, t2, t3) = (input[7], input[5], input[3], input[1]);
            let z1 = m(t0.wrapping_add(t3), -FIX_0_899976223);
            let z2 = m(t1.wrapping_add(t2), -FIX_2_562915447);
            let z5 = m(
                t0.wrapping_add(t2).wrapping_add(t1).wrapping_add(t3),
                FIX_1_175875602,
            );
            let z3 = m(t0.wrapping_add(t2), -FIX_1_961570560).wrapping_add(z5);
            let z4 = m(t1.wrapping_add(t3), -FIX_0_390180644).wrapping_add(z5);
            let odd0 = m(t0, FIX_0_298631336).wrapping_add(z1).wrapping_add(z3);
            let odd1 = m(t1, FIX_2_053119869).wrapping_add(z2).wrapping_add(z4);
            let odd2 = m(t2, FIX_3_072711026).wrapping_add(z2).wrapping_add(z3);
            let odd3 = m(t3, FIX_1_501321110).wrapping_add(z1).wrapping_add(z4);
            [
                tmp10.wrapping_add(odd3),
                tmp11.wrapping_add(odd2),
                tmp12.wrapping_add(odd1),
                tmp13.wrapping_add(odd0),
                tmp13.wrapping_sub(odd0),
                tmp12.wrapping_sub(odd1),
                tmp11.wrapping_sub(odd2),
                tmp10.wrapping_sub(odd3),
            ]
        }
        let descale = |x: i32, n: u32| x.wrapping_add(1 << (n - 1)) >> n;
        let mut ws = [0i32; 64];
        for c in 0..8 {
            let sums = pass(std::array::from_fn(|k| {
                i32::from(coefs[k * 8 + c]).wrapping_mul(quant[k * 8 + c])
            }));
            for k in 0..8 {
                ws[k * 8 + c] = descale(sums[k], CONST_BITS - PASS1_BITS);
            }
        }
        let mut out = [0i32; 64];
        for r in 0..8 {
            let sums = pass(std::array::from_fn(|k| ws[r * 8 + k]));
            for k in 0..8 {
                out[r * 8 + k] = descale(sums[k], CONST_BITS + PASS1_BITS + 3);
            }
        }
        out
    }

    /// A small deterministic generator (xorshift), so the tests need no dependency.
    struct Xorshift(u64);
    impl Xorshift {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
    }

    #[test]
    fn a_dc_only_block_is_flat() {
        let mut coefs = [0i16; 64];
        coefs[0] = 10;
        let quant = [16i32; 64];
        // 10 * 16 = 160: 160 / 8 = 20 above the centre.
        assert_eq!(idct_block(&coefs, &quant), [148u8; 64]);
    }

    #[test]
    fn blocks_the_guard_passes_give_libjpegs_values_in_32_bits_and_stay_in_range() {
        // The quick test's worst blocks put its whole budget on one coefficient (its bounds
        // are linear in the coefficients' magnitudes), or spread it with aligned signs; the
        // full check's, anything within its bounds: try single-coefficient extremes in both
        // signs, random spreads at the quick limit, and random blocks past it.
        let quant = [1i32; 64];
        let mut blocks: Vec<[i16; 64]> = Vec::new();
        for i in 0..64 {
            let most = (GUARD_LIMIT / u64::from(GUARD_WEIGHTS[i])) as i16;
            for sign in [1, -1] {
                let mut b = [0i16; 64];
                b[i] = sign * most;
                blocks.push(b);
                b[i] = sign * 4095;
                blocks.push(b);
            }
        }
        let mut rng = Xorshift(0x9e37_79b9_7f4a_7c15);
        for round in 0..40_000 {
            let mut b = [0i16; 64];
            let picks = 1 + rng.next() % 12;
            for _ in 0..picks {
                b[(rng.next() % 64) as usize] = (rng.next() % 8191) as i16 - 4095;
            }
            if round % 2 == 0 {
                // Scaled to the quick test's limit.
                let sum = guard_sum(&b, &quant);
                if sum == 0 {
                    continue;
                }
                let scale = GUARD_LIMIT as f64 / sum as f64;
                for v in &mut b {
                    *v = (f64::from(*v) * scale).trunc() as i16;
                }
                assert!(guard_sum(&b, &quant) <= GUARD_LIMIT);
            }
            blocks.push(b);
        }
        let mut passed = 0;
        for b in &blocks {
            if !block_is_exact(b, &quant) {
                continue;
            }
            passed += 1;
            let wide = idct_block_unclamped(b, &quant);
            let narrow = idct_block_i32(b, &quant);
            for i in 0..64 {
                assert_eq!(wide[i], i64::from(narrow[i]), "{b:?}");
                assert!(SAMPLE_RANGE.contains(&wide[i]), "{b:?}: {}", wide[i]);
            }
        }
        assert!(passed > blocks.len() / 2, "{passed} of {}", blocks.len());
        let mut past = [0i16; 64];
        past[0] = 4096;
        assert!(
            !block_is_exact(&past, &quant),
            "a dequantised value past 4095"
        );
        past[0] = 4095;
        past[1] = 4095;
        past[8] = 4095;
        assert!(
            !block_is_exact(&past, &quant),
            "samples past the range limit"
        );
    }

    #[test]
    fn colour_conversion_matches_jdcolor_on_its_corners() {
        assert_eq!(ycc_to_rgb(128, 128, 128), [128, 128, 128]);
        assert_eq!(ycc_to_rgb(255, 128, 128), [255, 255, 255]);
        // Pure red in JFIF YCbCr is about (76, 85, 255).
        assert_eq!(ycc_to_rgb(76, 85, 255), [254, 0, 0]);
        assert_eq!(ycc_to_rgb(0, 255, 0), [0, 48, 225]);
    }

    #[test]
    fn orientations_map_corners_as_exif_transpose() {
        // A 3-wide, 2-high image; the upright pixel (0, 0) shows these stored pixels.
        let corner = |o| stored_pixel(o, (3, 2), 0, 0);
        assert_eq!(corner(1), (0, 0));
        assert_eq!(corner(2), (2, 0));
        assert_eq!(corner(3), (2, 1));
        assert_eq!(corner(4), (0, 1));
        assert_eq!(corner(5), (0, 0));
        assert_eq!(corner(6), (0, 1));
        assert_eq!(corner(7), (2, 1));
        assert_eq!(corner(8), (2, 0));
    }
}
