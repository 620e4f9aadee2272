//! The steps of transformers' `DINOv3ViTImageProcessor`, which has no PIL variant: it runs on
//! torch tensors, and rescales before it resizes, so its resize works on floats.
//!
//! For an image that `load_image` left upright in RGB (8-bit HWC), the processor:
//! 1. turns it into a uint8 CHW tensor (`pil_to_tensor`);
//! 2. rescales it: `uint8 * rescale_factor`, which torch computes in f32 as
//!    `f32(v) * f32(rescale_factor)`;
//! 3. resizes the floats with torchvision's `resize(..., antialias=True)`, which calls ATen's
//!    `_upsample_bilinear2d_aa` (or `_upsample_bicubic2d_aa`): separable, the width first and
//!    then the height (a side whose size does not change is skipped, and an image already at
//!    the size is returned as it is), each output sample a weighted sum of the input samples
//!    under a filter whose support widens with the downscale factor ([`FloatTaps`]);
//! 4. center-crops when `do_center_crop` is on (the tensor backend's crop: the window starts
//!    `int((side - crop) / 2)` in; a crop larger than the image pads zeros, `missing // 2`
//!    of them before);
//! 5. normalises: `(x - f32(mean)) / f32(std)` in f32.
//!
//! Nothing is rounded to 8 bits after step 1, unlike PIL's resize. The tap weights are ATen's
//! bit for bit (its mixture of f32 and f64 arithmetic is copied). The sums are taken in tap
//! order with a fused multiply-add per tap, as ATen's kernel compiled for AVX2 does for up to
//! four taps; for wider filters (downscales by more than two) its rounding differs from ours in
//! the last bit or two of some samples (measured in `model/tests/preprocess_dinov3.rs`: at most
//! 1.7e-6 after normalisation).

use super::error::PreprocessError;
use super::resampling::Resample;
use super::PreprocessConfig;

/// Whether torchvision's antialiased float resize has this filter (the others are refused
/// by the config's validation).
pub(super) fn has_filter(resample: Resample) -> bool {
    matches!(resample, Resample::Bilinear | Resample::Bicubic)
}

/// ATen's antialiasing filters, evaluated as its `aa_filter` functions are: the argument in
/// f32, the arithmetic in f64 (its constants are double literals), the result rounded to f32.
fn filter_weight(resample: Resample, x: f32) -> f32 {
    let x = f64::from(x.abs());
    let w = match resample {
        Resample::Bicubic => {
            // Keys' cubic with a = -0.5.
            let a = -0.5;
            if x < 1.0 {
                ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0
            } else if x < 2.0 {
                (((x - 5.0) * x + 8.0) * x - 4.0) * a
            } else {
                0.0
            }
        }
        // Bilinear: the triangle.
        _ => {
            if x < 1.0 {
                1.0 - x
            } else {
                0.0
            }
        }
    };
    w as f32
}

/// The taps of one resized side: for each output sample, the first input sample it reads
/// and its weights (normalised to sum to one, as ATen does, in f32).
#[derive(Debug, Clone, PartialEq)]
pub(super) struct FloatTaps {
    /// (first input index, number of taps) per output sample.
    ranges: Vec<(usize, usize)>,
    /// `stride` weights per output sample, the first `taps` of them used.
    weights: Vec<f32>,
    stride: usize,
}

impl FloatTaps {
    /// ATen's `_compute_index_ranges_weights` with antialiasing, for a side of `in_size`
    /// samples resized to `out_size` (`align_corners` false, no scale factor given).
    pub(super) fn new(in_size: usize, out_size: usize, resample: Resample) -> Self {
        // `interp_size`: the filter's width at scale 1.
        let interp_size: f64 = if resample == Resample::Bicubic {
            4.0
        } else {
            2.0
        };
        // area_pixel_compute_scale<float>: f32(input_size) / output_size, in f32.
        let scale = in_size as f32 / out_size as f32;
        let support = if scale >= 1.0 {
            ((interp_size * 0.5) * f64::from(scale)) as f32
        } else {
            (interp_size * 0.5) as f32
        };
        let stride = (f64::from(support).ceil() as usize) * 2 + 1;
        let invscale = if scale >= 1.0 {
            (1.0 / f64::from(scale)) as f32
        } else {
            1.0
        };
        let mut ranges = Vec::with_capacity(out_size);
        let mut weights = vec![0f32; out_size * stride];
        for (i, row) in weights.chunks_exact_mut(stride).enumerate() {
            let center = (f64::from(scale) * (i as f64 + 0.5)) as f32;
            // C++'s int64 cast truncates toward zero.
            let first = ((f64::from(center - support) + 0.5) as i64).max(0) as usize;
            let end = ((f64::from(center + support) + 0.5) as i64).min(in_size as i64);
            let taps = (end - first as i64).clamp(0, stride as i64) as usize;
            let mut total = 0f32;
            for (j, w) in row[..taps].iter_mut().enumerate() {
                let offset = f64::from((j + first) as f32 - center) + 0.5;
                *w = filter_weight(resample, (offset * f64::from(invscale)) as f32);
                total += *w;
            }
            if total != 0.0 {
                for w in &mut row[..taps] {
                    *w /= total;
                }
            }
            ranges.push((first, taps));
        }
        FloatTaps {
            ranges,
            weights,
            stride,
        }
    }

    /// The weighted sum for output sample `o` of the samples `read(first + j)`.
    #[inline]
    fn sum(&self, o: usize, read: impl Fn(usize) -> f32) -> f32 {
        let (first, taps) = self.ranges[o];
        let weights = &self.weights[o * self.stride..o * self.stride + taps];
        let mut acc = read(first) * weights[0];
        for (j, &w) in weights.iter().enumerate().skip(1) {
            acc = read(first + j).mul_add(w, acc);
        }
        acc
    }
}

/// Resizes `planes` planes of `in_h x in_w` f32 samples (CHW) to `out_h x out_w` as ATen's
/// antialiased separable resize does: the width first, then the height.
pub(super) fn resize_planes(
    src: &[f32],
    (planes, in_h, in_w): (usize, usize, usize),
    (out_h, out_w): (usize, usize),
    resample: Resample,
) -> Vec<f32> {
    let mut current = src.to_vec();
    let mut width = in_w;
    if out_w != in_w {
        let taps = FloatTaps::new(in_w, out_w, resample);
        let mut next = vec![0f32; planes * in_h * out_w];
        for (row_in, row_out) in current.chunks_exact(in_w).zip(next.chunks_exact_mut(out_w)) {
            for (o, out) in row_out.iter_mut().enumerate() {
                *out = taps.sum(o, |x| row_in[x]);
            }
        }
        current = next;
        width = out_w;
    }
    if out_h != in_h {
        let taps = FloatTaps::new(in_h, out_h, resample);
        let mut next = vec![0f32; planes * out_h * width];
        for (plane_in, plane_out) in current
            .chunks_exact(in_h * width)
            .zip(next.chunks_exact_mut(out_h * width))
        {
            for (o, row_out) in plane_out.chunks_exact_mut(width).enumerate() {
                for (x, out) in row_out.iter_mut().enumerate() {
                    *out = taps.sum(o, |y| plane_in[y * width + x]);
                }
            }
        }
        current = next;
    }
    current
}

/// Where a window of `crop` samples starts along a side of `side` samples in the tensor
/// backend's `center_crop` (negative: that many zeros of padding come first).
fn crop_start(side: usize, crop: usize) -> i64 {
    if crop > side {
        -(((crop - side) / 2) as i64)
    } else {
        ((side - crop) / 2) as i64
    }
}

/// Steps 2 to 5 of the module's description on upright HWC 8-bit `pixels` of
/// `height x width`, written into `out` as the model's input: CHW f32 values in native byte
/// order (`out` holds exactly the config's output size). `name` names the image in errors.
pub(super) fn preprocess_into(
    cfg: &PreprocessConfig,
    max_pixels: u64,
    pixels: &[u8],
    (height, width): (usize, usize),
    name: &str,
    out: &mut [u8],
) -> Result<(), PreprocessError> {
    let channels = cfg.num_channels;
    // 1 and 2: a CHW tensor, rescaled in f32 (validation makes do_rescale true).
    let factor = cfg.rescale_factor as f32;
    let plane = height * width;
    let mut chw = vec![0f32; channels * plane];
    for (i, pixel) in pixels.chunks_exact(channels).enumerate() {
        for (c, &v) in pixel.iter().enumerate() {
            chw[c * plane + i] = f32::from(v) * factor;
        }
    }
    // 3: the resize.
    let (mut h, mut w) = (height, width);
    if cfg.do_resize {
        let (resized_h, resized_w) = cfg.size.resized_size(height, width);
        if (resized_h * resized_w) as u64 > max_pixels {
            return Err(PreprocessError::UnsupportedImage {
                image: name.to_string(),
                reason: format!(
                    "it would be resized to {resized_w}x{resized_h}, more than {max_pixels} pixels"
                ),
            });
        }
        if (resized_h, resized_w) != (h, w) {
            chw = resize_planes(&chw, (channels, h, w), (resized_h, resized_w), cfg.resample);
            (h, w) = (resized_h, resized_w);
        }
    }
    // 4: the crop, or the check that the image has the output's size.
    let (out_h, out_w) = cfg.output_size();
    if let Some((crop_h, crop_w)) = cfg.crop_size {
        let (top, left) = (crop_start(h, crop_h), crop_start(w, crop_w));
        let mut cropped = vec![0f32; channels * crop_h * crop_w];
        for c in 0..channels {
            for y in 0..crop_h {
                let sy = top + y as i64;
                if sy < 0 || sy >= h as i64 {
                    continue;
                }
                for x in 0..crop_w {
                    let sx = left + x as i64;
                    if sx >= 0 && sx < w as i64 {
                        cropped[(c * crop_h + y) * crop_w + x] =
                            chw[(c * h + sy as usize) * w + sx as usize];
                    }
                }
            }
        }
        chw = cropped;
    } else if (h, w) != (out_h, out_w) {
        return Err(PreprocessError::SizeMismatch {
            image: name.to_string(),
            height: h,
            width: w,
            expected_height: out_h,
            expected_width: out_w,
        });
    }
    // 5: normalise, and write the values out.
    let out_plane = out_h * out_w;
    for (c, values) in chw.chunks_exact(out_plane).enumerate() {
        let normalization = cfg.normalization().map(|(mean, std)| (mean[c], std[c]));
        let bytes = &mut out[c * out_plane * 4..(c + 1) * out_plane * 4];
        for (&v, place) in values.iter().zip(bytes.chunks_exact_mut(4)) {
            let v = match normalization {
                Some((mean, std)) => (v - mean) / std,
                None => v,
            };
            place.copy_from_slice(&v.to_ne_bytes());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weights_sum_to_one_and_widen_with_the_downscale() {
        for (in_size, out_size) in [(640, 224), (224, 224), (37, 224), (1000, 7)] {
            let taps = FloatTaps::new(in_size, out_size, Resample::Bilinear);
            for o in 0..out_size {
                let (first, n) = taps.ranges[o];
                assert!(first + n <= in_size);
                let sum: f32 = taps.weights[o * taps.stride..][..n].iter().sum();
                assert!(
                    (sum - 1.0).abs() < 1e-5,
                    "{in_size}->{out_size} [{o}]: {sum}"
                );
            }
        }
        // A downscale by 640/224 has a support of 2.86 input samples on each side.
        let taps = FloatTaps::new(640, 224, Resample::Bilinear);
        assert_eq!(taps.stride, 7);
        assert!(taps.ranges.iter().any(|&(_, n)| n == 6));
    }

    #[test]
    fn an_unchanged_side_is_copied_and_a_constant_stays_constant() {
        let src = vec![0.25f32; 3 * 10 * 20];
        let out = resize_planes(&src, (3, 10, 20), (10, 7), Resample::Bilinear);
        assert_eq!(out.len(), 3 * 10 * 7);
        assert!(out.iter().all(|&v| (v - 0.25).abs() < 1e-7));
        let out = resize_planes(&src, (3, 10, 20), (33, 20), Resample::Bicubic);
        assert!(out.iter().all(|&v| (v - 0.25).abs() < 1e-6));
    }

    #[test]
    fn crop_windows_start_as_the_tensor_backend_puts_them() {
        assert_eq!(crop_start(10, 7), 1);
        assert_eq!(crop_start(10, 4), 3);
        assert_eq!(crop_start(4, 7), -1);
        assert_eq!(crop_start(4, 8), -2);
        assert_eq!(crop_start(5, 5), 0);
    }
}
