//! PIL's `Image.resize` for 8-bit images: a separable convolution in fixed point, rounded and
//! clipped to u8 after each pass, with Pillow 13's choice of which pass goes first.

use super::resampling::Resample;
use vitrt_runtime::image_kernels::resample::TapTable;

/// Fractional bits of PIL's 8-bit fixed-point filter weights: 32 bits less 8 for the pixel
/// value and 2 of headroom for weights above 1 and their sums.
pub(super) const PRECISION_BITS: u32 = 32 - 8 - 2;

const ROUNDING_HALF: i32 = 1 << (PRECISION_BITS - 1);

/// Tap tables a [`Resizer`] keeps before it starts over (a loader sees one output size, so
/// two tables per input size: one per axis).
const MAX_CACHED_TAPS: usize = 16;

/// For each output index along one axis, the input indices `first..first + count` it reads and
/// their fixed-point weights (`taps_per_output` slots each, the unused ones 0).
pub(super) struct ResampleTaps {
    first: Vec<usize>,
    count: Vec<usize>,
    weights: Vec<i32>,
    /// For the AVX2 RGB row pass: each output's weights, each repeated four times, in
    /// `expanded_stride` (an even count) slots per output, the unused ones 0.
    expanded: Vec<i32>,
    expanded_stride: usize,
    taps_per_output: usize,
    /// Whether every sum `ROUNDING_HALF + sum(sample * weight)` over this table, for any
    /// samples in 0..=255, fits in an i32, as PIL (which accumulates in a C int) assumes.
    fits_i32: bool,
}

impl ResampleTaps {
    pub(super) fn new(in_size: usize, out_size: usize, filter: Resample) -> Self {
        let scale = in_size as f64 / out_size as f64;
        // When shrinking, the filter widens with the scale so every input pixel contributes.
        let filter_scale = scale.max(1.0);
        let support = filter.support() * filter_scale;
        let taps_per_output = support.ceil() as usize * 2 + 1;
        let mut taps = Self {
            first: Vec::with_capacity(out_size),
            count: Vec::with_capacity(out_size),
            weights: vec![0; out_size * taps_per_output],
            expanded: Vec::new(),
            expanded_stride: taps_per_output.next_multiple_of(2),
            taps_per_output,
            fits_i32: true,
        };
        let mut float_weights = Vec::with_capacity(taps_per_output);
        for out_index in 0..out_size {
            let center = (out_index as f64 + 0.5) * scale;
            // Truncation toward zero, as C's (int) cast, then clamped to the image.
            let first = ((center - support + 0.5) as i64).max(0) as usize;
            let end = ((center + support + 0.5) as i64).min(in_size as i64) as usize;
            float_weights.clear();
            float_weights.extend(
                (first..end).map(|x| filter.weight((x as f64 - center + 0.5) / filter_scale)),
            );
            let total: f64 = float_weights.iter().sum();
            let slot = &mut taps.weights[out_index * taps_per_output..][..taps_per_output];
            for (fixed, &w) in slot.iter_mut().zip(&float_weights) {
                let w = if total != 0.0 { w / total } else { w };
                let scaled = w * f64::from(1u32 << PRECISION_BITS);
                *fixed = if w < 0.0 {
                    (scaled - 0.5) as i32
                } else {
                    (scaled + 0.5) as i32
                };
            }
            taps.first.push(first);
            taps.count.push(end - first);
        }
        taps.fits_i32 = (0..out_size).all(|o| sums_fit_i32(taps.weights_of(o)));
        taps.expanded = vec![0; out_size * taps.expanded_stride * 4];
        for o in 0..out_size {
            let weights = &taps.weights[o * taps_per_output..][..taps.count[o]];
            let slots = &mut taps.expanded[o * taps.expanded_stride * 4..];
            for (k, &w) in weights.iter().enumerate() {
                slots[k * 4..k * 4 + 4].fill(w);
            }
        }
        taps
    }

    pub(super) fn weights_of(&self, out_index: usize) -> &[i32] {
        &self.weights[out_index * self.taps_per_output..][..self.count[out_index]]
    }

    pub(super) fn fits_i32(&self) -> bool {
        self.fits_i32
    }

    /// The same taps as the image kernels' table (`vitrt_kernels::resample`).
    pub(super) fn tap_table(&self) -> TapTable {
        TapTable {
            first: self.first.iter().map(|&f| f as u32).collect(),
            weights: (0..self.first.len())
                .map(|o| self.weights_of(o).to_vec())
                .collect(),
        }
    }
}

/// The overflow proof for one output's taps: every partial sum of `ROUNDING_HALF + sample *
/// weight` over them lies between `ROUNDING_HALF + 255 * (sum of the negative weights)` and
/// `ROUNDING_HALF + 255 * (sum of the positive weights)`, whatever the samples in 0..=255 and
/// the order of addition; both bounds must fit in an i32.
///
/// In practice: bilinear, box, Hamming and nearest have no negative weights, so the bound is
/// 255 * 2^22 (plus half a unit of rounding per tap) + 2^21, about 2^30; bicubic's and
/// Lanczos' negative lobes add at most a few tenths of that for ordinary sizes. Only
/// degenerate tables (a few taps clipped at the image edge, normalised by a small total) can
/// come near 2^31; those are accumulated in i64 instead, which gives what i32 would when it
/// does not overflow.
fn sums_fit_i32(weights: &[i32]) -> bool {
    let positive: i64 = weights.iter().map(|&w| i64::from(w.max(0))).sum();
    let negative: i64 = weights.iter().map(|&w| i64::from(w.min(0))).sum();
    let half = i64::from(ROUNDING_HALF);
    half + 255 * positive <= i64::from(i32::MAX) && half + 255 * negative >= i64::from(i32::MIN)
}

/// An accumulator for the fixed-point sums: i32 as in PIL, or i64 where i32 could overflow.
trait Accumulator:
    Copy + From<u8> + From<i32> + std::ops::Add<Output = Self> + std::ops::Mul<Output = Self>
{
    /// PIL's clip8: shift out the fraction, clamp to 0..=255.
    fn to_u8(self) -> u8;
}

impl Accumulator for i32 {
    #[inline(always)]
    fn to_u8(self) -> u8 {
        (self >> PRECISION_BITS).clamp(0, 255) as u8
    }
}

impl Accumulator for i64 {
    #[inline(always)]
    fn to_u8(self) -> u8 {
        (self >> PRECISION_BITS).clamp(0, 255) as u8
    }
}

/// A resizer's reusable state: the tap tables per (input size, output size, filter), the
/// intermediate image between the two passes and the column pass's row of sums.
pub(super) struct Resizer {
    /// Whether to run the passes compiled for AVX2 (when the CPU has it).
    avx2: bool,
    taps: Vec<((usize, usize, Resample), ResampleTaps)>,
    intermediate: Vec<u8>,
    sums32: Vec<i32>,
    sums64: Vec<i64>,
    /// Nearest's input column per output column.
    columns: Vec<usize>,
}

impl Default for Resizer {
    fn default() -> Self {
        Self {
            #[cfg(target_arch = "x86_64")]
            avx2: std::arch::is_x86_feature_detected!("avx2"),
            #[cfg(not(target_arch = "x86_64"))]
            avx2: false,
            taps: Vec::new(),
            intermediate: Vec::new(),
            sums32: Vec::new(),
            sums64: Vec::new(),
            columns: Vec::new(),
        }
    }
}

/// An image's shape: (height, width, channels).
pub(super) type Shape = (usize, usize, usize);

impl Resizer {
    fn taps_index(&mut self, in_size: usize, out_size: usize, filter: Resample) -> usize {
        let key = (in_size, out_size, filter);
        if let Some(index) = self.taps.iter().position(|(k, _)| *k == key) {
            return index;
        }
        self.taps
            .push((key, ResampleTaps::new(in_size, out_size, filter)));
        self.taps.len() - 1
    }

    /// Resizes `src` (HWC, `shape`) to `out_height x out_width` into `out` (HWC, same
    /// channels), as PIL's `Image.resize(size, filter)`. `src` has 1 or 3 channels.
    pub(super) fn resize(
        &mut self,
        src: &[u8],
        shape: Shape,
        out: &mut [u8],
        out_height: usize,
        out_width: usize,
        filter: Resample,
    ) {
        let (height, width, channels) = shape;
        debug_assert_eq!(src.len(), height * width * channels);
        debug_assert_eq!(out.len(), out_height * out_width * channels);
        if filter == Resample::Nearest {
            resize_nearest(src, shape, out, out_height, out_width, &mut self.columns);
            return;
        }
        // Each pass stores its result as u8 (rounded and clipped), so the order of the passes
        // changes the result. Pillow 13 runs the vertical pass first when the height shrinks
        // by more than twice as many pixels as the width does, and the horizontal one first
        // otherwise (Pillow 12 and older: always horizontal first; the two agree on ordinary
        // photos). A pass whose size does not change is skipped.
        let shrink_height = height as i64 - out_height as i64;
        let shrink_width = width as i64 - out_width as i64;
        let vertical_first = shrink_height > 0 && shrink_height > 2 * shrink_width;
        if self.taps.len() + 2 > MAX_CACHED_TAPS {
            self.taps.clear();
        }
        let horizontal = (width != out_width).then(|| self.taps_index(width, out_width, filter));
        let vertical = (height != out_height).then(|| self.taps_index(height, out_height, filter));
        let Self {
            avx2,
            taps,
            intermediate,
            sums32,
            sums64,
            columns: _,
        } = self;
        let passes = Passes {
            src,
            shape,
            out,
            horizontal: horizontal.map(|h| &taps[h].1),
            vertical: vertical.map(|v| &taps[v].1),
            vertical_first,
            intermediate,
            sums32,
            sums64,
        };
        #[cfg(target_arch = "x86_64")]
        if *avx2 {
            // SAFETY: `avx2` is only set when the CPU has AVX2.
            unsafe { passes.run_avx2() };
            return;
        }
        passes.run();
    }
}

/// One resize's two passes, with what they need: run as compiled for the baseline CPU, or
/// recompiled for AVX2 (the same integer arithmetic, so the same bytes), where the 32-bit
/// multiplies of the sums vectorise eight at a time.
struct Passes<'a> {
    src: &'a [u8],
    shape: Shape,
    out: &'a mut [u8],
    horizontal: Option<&'a ResampleTaps>,
    vertical: Option<&'a ResampleTaps>,
    vertical_first: bool,
    intermediate: &'a mut Vec<u8>,
    sums32: &'a mut Vec<i32>,
    sums64: &'a mut Vec<i64>,
}

impl Passes<'_> {
    fn run(self) {
        self.run_inlined::<false>();
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    fn run_avx2(self) {
        self.run_inlined::<true>();
    }

    /// The passes; `AVX2` is true only when compiled into `run_avx2`.
    #[inline(always)]
    fn run_inlined<const AVX2: bool>(self) {
        let Self {
            src,
            shape,
            out,
            horizontal,
            vertical,
            vertical_first,
            intermediate,
            sums32,
            sums64,
        } = self;
        let (height, width, channels) = shape;
        let mut columns = |src: &[u8], row_len: usize, dst: &mut [u8], t: &ResampleTaps| {
            if t.fits_i32() {
                convolve_columns(src, row_len, dst, t, sums32);
            } else {
                convolve_columns(src, row_len, dst, t, sums64);
            }
        };
        match (horizontal, vertical) {
            (None, None) => out.copy_from_slice(src),
            (Some(h), None) => convolve_rows::<AVX2>(src, shape, out, h),
            (None, Some(v)) => columns(src, width * channels, out, v),
            (Some(h), Some(v)) if vertical_first => {
                let out_height = v.first.len();
                let mid = scratch(intermediate, out_height * width * channels);
                columns(src, width * channels, mid, v);
                convolve_rows::<AVX2>(mid, (out_height, width, channels), out, h);
            }
            (Some(h), Some(v)) => {
                let out_width = h.first.len();
                let mid = scratch(intermediate, height * out_width * channels);
                convolve_rows::<AVX2>(src, shape, mid, h);
                columns(mid, out_width * channels, out, v);
            }
        }
    }
}

/// The first `len` bytes of a reused buffer, grown (never shrunk below what a recent image
/// needed) as needed. A buffer left much larger than needed by one huge image is given back.
pub(super) fn scratch(buffer: &mut Vec<u8>, len: usize) -> &mut [u8] {
    const KEEP: usize = 64 << 20;
    if buffer.len() > KEEP && buffer.len() / 4 > len {
        *buffer = Vec::new();
    }
    if buffer.len() < len {
        buffer.resize(len, 0);
    }
    &mut buffer[..len]
}

/// The horizontal pass: every row of `src` (`shape`) convolved along x into `dst`, whose rows
/// are `taps`' output width.
#[inline(always)]
fn convolve_rows<const AVX2: bool>(src: &[u8], shape: Shape, dst: &mut [u8], taps: &ResampleTaps) {
    match (shape.2, taps.fits_i32()) {
        (1, true) => convolve_rows_with::<1, i32>(src, shape, dst, taps),
        (1, false) => convolve_rows_with::<1, i64>(src, shape, dst, taps),
        #[cfg(target_arch = "x86_64")]
        // SAFETY: AVX2 is true only in code compiled for, and run on, AVX2.
        (3, true) if AVX2 => unsafe { convolve_rgb_rows_avx2(src, shape, dst, taps) },
        (3, true) => convolve_rows_with::<3, i32>(src, shape, dst, taps),
        (3, false) => convolve_rows_with::<3, i64>(src, shape, dst, taps),
        (channels, _) => unreachable!("images here have 1 or 3 channels, not {channels}"),
    }
}

#[inline(always)]
fn convolve_rows_with<const C: usize, A: Accumulator>(
    src: &[u8],
    shape: Shape,
    dst: &mut [u8],
    taps: &ResampleTaps,
) {
    let (_, width, _) = shape;
    let out_width = taps.first.len();
    let half = A::from(ROUNDING_HALF);
    for (row, out_row) in src
        .chunks_exact(width * C)
        .zip(dst.chunks_exact_mut(out_width * C))
    {
        for (x, out_pixel) in out_row.chunks_exact_mut(C).enumerate() {
            let weights = taps.weights_of(x);
            let window = &row[taps.first[x] * C..][..weights.len() * C];
            // One accumulator per channel, so each weight is read once.
            let mut sums = [half; C];
            for (pixel, &w) in window.chunks_exact(C).zip(weights) {
                let w = A::from(w);
                for c in 0..C {
                    sums[c] = sums[c] + A::from(pixel[c]) * w;
                }
            }
            for c in 0..C {
                out_pixel[c] = sums[c].to_u8();
            }
        }
    }
}

/// The horizontal pass for RGB with i32 sums, the common case, in AVX2: two taps at a time,
/// each pixel's three bytes (and the next pixel's first, whose lane is ignored) widened to
/// four i32 lanes and multiplied by the tap's weight repeated four times (an odd count of taps
/// gets one more, of weight 0). The sums are the plain loop's in another order; i32 addition
/// wraps modulo 2^32, so whatever the order the result is the exact sum, which `fits_i32`
/// proved lies in range. Shifting and packing with saturation is PIL's clip8.
///
/// # Safety
/// The CPU must have AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn convolve_rgb_rows_avx2(src: &[u8], shape: Shape, dst: &mut [u8], taps: &ResampleTaps) {
    use std::arch::x86_64::*;
    let (height, width, _) = shape;
    let out_width = taps.first.len();
    assert!(src.len() >= height * width * 3 && dst.len() >= height * out_width * 3);
    assert!(taps.expanded.len() >= out_width * taps.expanded_stride * 4);
    if out_width == 0 {
        return;
    }
    for x in 0..out_width {
        assert!(taps.first[x] + taps.count[x] <= width);
        assert!(taps.count[x] <= taps.expanded_stride);
    }
    // Bytes 0..=3 and 3..=6 of an 8-byte load: a pixel and the next, each with one byte more.
    let spread = _mm_setr_epi8(0, 1, 2, 3, 3, 4, 5, 6, -1, -1, -1, -1, -1, -1, -1, -1);
    let half = _mm_set1_epi32(ROUNDING_HALF);
    let src_ptr = src.as_ptr();
    let dst_ptr = dst.as_mut_ptr();
    // The products of one pair of taps from the eight bytes at `at`.
    let products = |at: usize, w: __m256i| {
        // SAFETY: callers check that the eight bytes lie in `src`.
        let bytes = src_ptr.add(at).cast::<i64>().read_unaligned();
        let narrow = _mm_shuffle_epi8(_mm_cvtsi64_si128(bytes), spread);
        _mm256_mullo_epi32(_mm256_cvtepu8_epi32(narrow), w)
    };
    // Lanes 0..3 of the sums, rounded, shifted and clipped (PIL's clip8), as bytes 0..3.
    let clip = |acc: __m256i| {
        let sum = _mm_add_epi32(
            _mm256_castsi256_si128(acc),
            _mm256_extracti128_si256::<1>(acc),
        );
        let shifted = _mm_srai_epi32::<{ PRECISION_BITS as i32 }>(_mm_add_epi32(sum, half));
        let bytes = _mm_packus_epi16(_mm_packs_epi32(shifted, shifted), shifted);
        (_mm_cvtsi128_si32(bytes) as u32).to_le_bytes()
    };
    // Stores a pixel at `at`, of column `x`.
    let store = |dst: &mut [u8], at: usize, wide: bool, pixel: [u8; 4]| {
        if wide {
            // The fourth byte lands on the next pixel of the row, which is written after this
            // one (the next row's first pixel may already be written: not there).
            dst_ptr.add(at).cast::<[u8; 4]>().write_unaligned(pixel);
        } else {
            dst[at..at + 3].copy_from_slice(&pixel[..3]);
        }
    };
    let scalar = |dst: &mut [u8], start: usize, at: usize, x: usize| {
        let mut sums = [ROUNDING_HALF; 3];
        let window = &src[start..start + 3 * taps.count[x]];
        for (pixel, &w) in window.chunks_exact(3).zip(taps.weights_of(x)) {
            for c in 0..3 {
                sums[c] += i32::from(pixel[c]) * w;
            }
        }
        for c in 0..3 {
            dst[at + c] = sums[c].to_u8();
        }
    };
    let (row_len, out_row_len) = (width * 3, out_width * 3);
    let mut y = 0;
    // Two rows at a time: their taps are the same, and the two sums overlap in the pipeline.
    while y + 1 < height {
        // Column x of rows y and y + 1; `wide` when x is not the last column.
        let mut column = |x: usize, wide: bool| {
            let pairs = taps.count[x].div_ceil(2);
            let start = y * row_len + taps.first[x] * 3;
            let at = y * out_row_len + x * 3;
            // The last pair's load ends at start + 6 * (pairs - 1) + 8, within `src` or not.
            if start + row_len + 6 * pairs + 2 > src.len() {
                scalar(dst, start, at, x);
                scalar(dst, start + row_len, at + out_row_len, x);
                return;
            }
            let expanded = taps.expanded.as_ptr().add(x * taps.expanded_stride * 4);
            let (mut first, mut second) = (_mm256_setzero_si256(), _mm256_setzero_si256());
            for pair in 0..pairs {
                let w = _mm256_loadu_si256(expanded.add(pair * 8).cast());
                first = _mm256_add_epi32(first, products(start + 6 * pair, w));
                second = _mm256_add_epi32(second, products(start + row_len + 6 * pair, w));
            }
            store(dst, at, wide, clip(first));
            store(dst, at + out_row_len, wide, clip(second));
        };
        for x in 0..out_width - 1 {
            column(x, true);
        }
        column(out_width - 1, false);
        y += 2;
    }
    if y < height {
        for x in 0..out_width {
            let pairs = taps.count[x].div_ceil(2);
            let start = y * row_len + taps.first[x] * 3;
            let at = y * out_row_len + x * 3;
            if start + 6 * pairs + 2 > src.len() {
                scalar(dst, start, at, x);
                continue;
            }
            let expanded = taps.expanded.as_ptr().add(x * taps.expanded_stride * 4);
            let mut acc = _mm256_setzero_si256();
            for pair in 0..pairs {
                let w = _mm256_loadu_si256(expanded.add(pair * 8).cast());
                acc = _mm256_add_epi32(acc, products(start + 6 * pair, w));
            }
            store(dst, at, x + 1 < out_width, clip(acc));
        }
    }
}

/// The vertical pass: rows of `row_len` samples, each output row a weighted sum of input rows.
/// The sums run along the row, so they vectorise whatever the channel count.
#[inline(always)]
fn convolve_columns<A: Accumulator>(
    src: &[u8],
    row_len: usize,
    dst: &mut [u8],
    taps: &ResampleTaps,
    sums: &mut Vec<A>,
) {
    sums.clear();
    sums.resize(row_len, A::from(ROUNDING_HALF));
    for (y, out_row) in dst.chunks_exact_mut(row_len).enumerate() {
        sums.fill(A::from(ROUNDING_HALF));
        let first = taps.first[y];
        for (i, &w) in taps.weights_of(y).iter().enumerate() {
            let row = &src[(first + i) * row_len..][..row_len];
            let w = A::from(w);
            for (sum, &sample) in sums.iter_mut().zip(row) {
                *sum = *sum + A::from(sample) * w;
            }
        }
        for (o, &sum) in out_row.iter_mut().zip(sums.iter()) {
            *o = sum.to_u8();
        }
    }
}

/// PIL's nearest-neighbour resize: an affine scale that samples the input pixel under each
/// output pixel's centre. The sample position advances by repeated addition, as in PIL, which
/// decides the rare pixel whose centre lands on an input pixel boundary.
fn resize_nearest(
    src: &[u8],
    shape: Shape,
    out: &mut [u8],
    out_height: usize,
    out_width: usize,
    columns: &mut Vec<usize>,
) {
    let (height, width, channels) = shape;
    let source_index = |in_size: usize, out_size: usize| {
        let step = in_size as f64 / out_size as f64;
        let mut position = step * 0.5;
        move || {
            let index = (position as usize).min(in_size - 1);
            position += step;
            index
        }
    };
    let mut next_row = source_index(height, out_height);
    columns.clear();
    let mut next_column = source_index(width, out_width);
    columns.extend((0..out_width).map(|_| next_column()));
    for out_row in out.chunks_exact_mut(out_width * channels) {
        let y = next_row();
        let row = &src[y * width * channels..][..width * channels];
        for (out_pixel, &x) in out_row.chunks_exact_mut(channels).zip(columns.iter()) {
            out_pixel.copy_from_slice(&row[x * channels..][..channels]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILTERS: [Resample; 6] = [
        Resample::Nearest,
        Resample::Lanczos,
        Resample::Bilinear,
        Resample::Bicubic,
        Resample::Box,
        Resample::Hamming,
    ];

    fn gradient(width: usize, height: usize, channels: usize) -> Vec<u8> {
        (0..width * height * channels)
            .map(|i| ((i * 37) % 256) as u8)
            .collect()
    }

    fn resize(src: &[u8], shape: Shape, out_h: usize, out_w: usize, f: Resample) -> Vec<u8> {
        let mut out = vec![0; out_h * out_w * shape.2];
        Resizer::default().resize(src, shape, &mut out, out_h, out_w, f);
        out
    }

    /// As `resize`, with the passes compiled for the baseline CPU, not AVX2.
    fn resize_baseline(
        src: &[u8],
        shape: Shape,
        out_h: usize,
        out_w: usize,
        f: Resample,
    ) -> Vec<u8> {
        let mut out = vec![0; out_h * out_w * shape.2];
        let mut resizer = Resizer {
            avx2: false,
            ..Resizer::default()
        };
        resizer.resize(src, shape, &mut out, out_h, out_w, f);
        out
    }

    /// The plain i64 reference: every sum computed without any specialisation.
    fn reference(src: &[u8], shape: Shape, out_h: usize, out_w: usize, f: Resample) -> Vec<u8> {
        let (h, w, c) = shape;
        let clip = |s: i64| (s >> PRECISION_BITS).clamp(0, 255) as u8;
        let half = i64::from(ROUNDING_HALF);
        let rows = |img: &[u8], (h, w): (usize, usize)| -> (Vec<u8>, usize) {
            if w == out_w {
                return (img.to_vec(), w);
            }
            let t = ResampleTaps::new(w, out_w, f);
            let mut out = Vec::new();
            for y in 0..h {
                for x in 0..out_w {
                    for ch in 0..c {
                        let s = t.weights_of(x).iter().enumerate().fold(half, |s, (i, &k)| {
                            s + i64::from(img[(y * w + t.first[x] + i) * c + ch]) * i64::from(k)
                        });
                        out.push(clip(s));
                    }
                }
            }
            (out, out_w)
        };
        let cols = |img: &[u8], (h, w): (usize, usize)| -> Vec<u8> {
            if h == out_h {
                return img.to_vec();
            }
            let t = ResampleTaps::new(h, out_h, f);
            let mut out = Vec::new();
            for y in 0..out_h {
                for i in 0..w * c {
                    let s = t
                        .weights_of(y)
                        .iter()
                        .enumerate()
                        .fold(half, |s, (k, &wt)| {
                            s + i64::from(img[(t.first[y] + k) * w * c + i]) * i64::from(wt)
                        });
                    out.push(clip(s));
                }
            }
            out
        };
        let dh = h as i64 - out_h as i64;
        if dh > 0 && dh > 2 * (w as i64 - out_w as i64) {
            let mid = cols(src, (h, w));
            rows(&mid, (out_h, w)).0
        } else {
            let (mid, mw) = rows(src, (h, w));
            cols(&mid, (h, mw))
        }
    }

    #[test]
    fn resize_to_the_same_size_is_the_identity() {
        let image = gradient(7, 5, 3);
        for filter in FILTERS {
            assert_eq!(resize(&image, (5, 7, 3), 5, 7, filter), image, "{filter:?}");
        }
    }

    #[test]
    fn specialised_passes_match_the_plain_i64_sums() {
        for filter in FILTERS.into_iter().filter(|&f| f != Resample::Nearest) {
            for channels in [1, 3] {
                for (h, w, oh, ow) in [
                    (37, 50, 22, 22),
                    (50, 37, 9, 30),
                    (5, 6, 20, 17),
                    (375, 500, 224, 224),
                    (3, 2, 1, 1),
                ] {
                    let src = gradient(w, h, channels);
                    let shape = (h, w, channels);
                    let expected = reference(&src, shape, oh, ow, filter);
                    let what = format!("{filter:?} {channels} {h}x{w} -> {oh}x{ow}");
                    assert_eq!(resize(&src, shape, oh, ow, filter), expected, "{what}");
                    assert_eq!(
                        resize_baseline(&src, shape, oh, ow, filter),
                        expected,
                        "{what}, baseline"
                    );
                }
            }
        }
    }

    #[test]
    fn both_paths_match_the_plain_i64_sums_on_many_small_shapes() {
        // A small LCG picks shapes, from 1x1 up, shrinking and enlarging.
        let mut state = 12345u64;
        let mut next = |n: usize| {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (state >> 33) as usize % n + 1
        };
        for case in 0..300 {
            // Nearest is no convolution: the reference does not apply to it.
            let filter = FILTERS[1 + case % (FILTERS.len() - 1)];
            let channels = if case % 3 == 0 { 1 } else { 3 };
            let (h, w, oh, ow) = (next(40), next(40), next(30), next(30));
            let src = gradient(w, h, channels);
            let shape = (h, w, channels);
            let expected = reference(&src, shape, oh, ow, filter);
            let what = format!("{filter:?} {channels} {h}x{w} -> {oh}x{ow}");
            assert_eq!(resize(&src, shape, oh, ow, filter), expected, "{what}");
            assert_eq!(
                resize_baseline(&src, shape, oh, ow, filter),
                expected,
                "{what}"
            );
        }
    }

    #[test]
    fn one_resizer_reused_across_sizes_gives_what_fresh_ones_do() {
        let mut resizer = Resizer::default();
        for (i, (h, w)) in [(40, 60), (61, 33), (40, 60), (8, 8), (100, 7)]
            .into_iter()
            .cycle()
            .take(40)
            .enumerate()
        {
            let filter = FILTERS[i % FILTERS.len()];
            let src = gradient(w, h, 3);
            let mut out = vec![0; 24 * 24 * 3];
            resizer.resize(&src, (h, w, 3), &mut out, 24, 24, filter);
            assert_eq!(out, resize(&src, (h, w, 3), 24, 24, filter));
        }
        assert!(resizer.taps.len() <= MAX_CACHED_TAPS);
    }

    #[test]
    fn fixed_point_weights_of_each_output_sum_to_one() {
        for filter in [Resample::Lanczos, Resample::Bicubic, Resample::Bilinear] {
            for (in_size, out_size) in [(100, 37), (37, 100), (224, 224), (3, 1000)] {
                let taps = ResampleTaps::new(in_size, out_size, filter);
                for out_index in 0..out_size {
                    let total: i64 = taps
                        .weights_of(out_index)
                        .iter()
                        .map(|&w| i64::from(w))
                        .sum();
                    let one = 1i64 << PRECISION_BITS;
                    assert!((total - one).abs() <= 4, "{filter:?} {in_size}->{out_size}");
                }
            }
        }
    }

    #[test]
    fn sums_fit_in_i32_for_every_filter_at_ordinary_sizes() {
        // The bound of sums_fit_i32, checked over many shrinking and enlarging ratios: all
        // of PIL's filters keep their sums within i32, with room to spare.
        for filter in FILTERS {
            let mut worst = 0f64;
            for in_size in (1..400).step_by(7).chain([500, 375, 1000, 4000]) {
                for out_size in [1, 2, 3, 7, 16, 224, 225, 384, 512] {
                    let taps = ResampleTaps::new(in_size, out_size, filter);
                    assert!(taps.fits_i32(), "{filter:?} {in_size}->{out_size}");
                    for o in 0..out_size {
                        let abs: i64 = taps.weights_of(o).iter().map(|&w| i64::from(w).abs()).sum();
                        worst = worst.max(abs as f64 / f64::from(1u32 << PRECISION_BITS));
                    }
                }
            }
            // 255 * 2^22 * worst + 2^21 < 2^31 needs worst < 2.0.
            assert!(worst < 1.6, "{filter:?}: sum of |weights| up to {worst}");
        }
    }

    #[test]
    fn a_flat_image_stays_flat_through_every_filter() {
        let flat = vec![200; 13 * 9];
        for filter in FILTERS {
            let resized = resize(&flat, (9, 13, 1), 31, 4, filter);
            assert!(resized.iter().all(|&v| v == 200), "{filter:?}");
        }
    }
}
