//! The image kernels' batch descriptions, made from JPEG coefficients and a processor config:
//! what the device path (or the kernels' CPU twins) needs to turn a batch of files'
//! coefficients into the same 8-bit HWC pixels [`super::ImageLoader`] makes on the host.

use vitrt_runtime::image_kernels::jpeg::{JpegBatch, JpegComponent, JpegData, JpegImage};
use vitrt_runtime::image_kernels::resample::{ResampleBatch, ResampleImage, TapTable};

use super::jpeg_coefficients::JpegCoefficients;
use super::resize::ResampleTaps;
use super::{PreprocessConfig, Resample, ResizeTarget};

/// The JPEG kernels' batch for `images`, in order, with their coefficients and multipliers
/// back to back in host memory; each image's component planes and upright RGB image one after
/// another.
pub fn jpeg_batch(images: &[&JpegCoefficients]) -> (JpegBatch, JpegData) {
    let mut batch = JpegBatch::default();
    let mut data = JpegData::default();
    let (mut plane_at, mut rgb_at) = (0usize, 0usize);
    for image in images {
        let mut indices = Vec::with_capacity(image.components.len());
        for c in &image.components {
            indices.push(batch.components.len());
            let component = JpegComponent {
                coef_offset: data.coefs.len(),
                plane_offset: plane_at,
                blocks_wide: c.blocks_wide,
                blocks_high: c.blocks_high,
                quant_offset: data.quant.len(),
                downsampled_width: c.downsampled_width,
                downsampled_height: c.downsampled_height,
                upsample: c.upsample,
            };
            plane_at += component.plane_len();
            data.coefs.extend_from_slice(&c.coefs);
            data.quant.extend_from_slice(&c.quant);
            batch.components.push(component);
        }
        let described = JpegImage {
            components: indices,
            colour: image.colour,
            width: image.width,
            height: image.height,
            orientation: image.orientation,
            rgb_offset: rgb_at,
        };
        rgb_at += described.rgb_len();
        batch.images.push(described);
    }
    (batch, data)
}

/// Why an image's resize cannot run on the image kernels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ResizeRefusal {
    /// Nearest-neighbour resizing (PIL samples, no taps), or a one-channel (L) config.
    NotSupported,
    /// The config would refuse this image (a resized image past the limits, or an image of
    /// the wrong size where the config neither resizes nor crops): the host says how.
    HostRefuses,
}

/// The resize and crop `cfg` does to an upright image of `(height, width)`, as the kernels'
/// record (offsets zero; [`resample_batch`] places it) and its two tap tables, or why not.
pub fn resample_plan(
    cfg: &PreprocessConfig,
    max_pixels: u64,
    (height, width): (usize, usize),
) -> Result<(ResampleImage, TapTable, TapTable), ResizeRefusal> {
    if cfg.num_channels != 3 || (cfg.do_resize && cfg.resample == Resample::Nearest) {
        return Err(ResizeRefusal::NotSupported);
    }
    let resized = if cfg.do_resize {
        let resized = cfg.size.resized_size(height, width);
        let too_large = (resized.0 * resized.1) as u64 > max_pixels;
        if matches!(cfg.size, ResizeTarget::ShortestEdge(_)) && too_large {
            return Err(ResizeRefusal::HostRefuses);
        }
        resized
    } else {
        (height, width)
    };
    let (crop, crop_start) = match cfg.crop_size {
        Some(crop) => (
            crop,
            (
                cfg.crop_rounding.window_start(resized.0, crop.0),
                cfg.crop_rounding.window_start(resized.1, crop.1),
            ),
        ),
        None if !cfg.do_resize && (height, width) != cfg.output_size() => {
            return Err(ResizeRefusal::HostRefuses)
        }
        None => (resized, (0, 0)),
    };
    let table = |input: usize, output: usize| {
        if input == output {
            TapTable::identity(output)
        } else {
            ResampleTaps::new(input, output, cfg.resample).tap_table()
        }
    };
    let vertical = table(height, resized.0);
    let horizontal = table(width, resized.1);
    // Pillow 13's order, as the host's resize (resize.rs).
    let shrink_height = height as i64 - resized.0 as i64;
    let shrink_width = width as i64 - resized.1 as i64;
    let vertical_first = shrink_height > 0 && shrink_height > 2 * shrink_width;
    let record = ResampleImage {
        src_offset: 0,
        mid_offset: 0,
        dst_offset: 0,
        channels: 3,
        input: (height, width),
        resized,
        crop,
        crop_start,
        vertical_first,
        first_table: 0,
        second_table: 1,
    };
    Ok(if vertical_first {
        (record, vertical, horizontal)
    } else {
        (record, horizontal, vertical)
    })
}

/// The resample batch for images whose upright RGB pixels lie at `rgb_offsets` and whose
/// outputs go to consecutive `output_bytes` slots (image i at i * output_bytes), with the
/// intermediates one after another. Plans come from [`resample_plan`].
pub fn resample_batch(
    plans: Vec<(ResampleImage, TapTable, TapTable)>,
    rgb_offsets: &[usize],
    output_bytes: usize,
) -> ResampleBatch {
    let mut batch = ResampleBatch::default();
    let mut mid_at = 0usize;
    for (i, (mut record, first, second)) in plans.into_iter().enumerate() {
        record.src_offset = rgb_offsets[i];
        record.mid_offset = mid_at;
        record.dst_offset = i * output_bytes;
        mid_at += record.intermediate_len();
        record.first_table = table_index(&mut batch.tables, first);
        record.second_table = table_index(&mut batch.tables, second);
        batch.images.push(record);
    }
    batch
}

/// The index of `table` in `tables`, added if new: a batch of photos of one size shares two.
fn table_index(tables: &mut Vec<TapTable>, table: TapTable) -> usize {
    match tables.iter().position(|t| *t == table) {
        Some(index) => index,
        None => {
            tables.push(table);
            tables.len() - 1
        }
    }
}
