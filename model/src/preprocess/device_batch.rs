//! The image kernels' batch descriptions, made from JPEG coefficients and a processor config:
//! what the device path (or the kernels' CPU twins) needs to turn a batch of files'
//! coefficients into the same 8-bit HWC pixels [`super::ImageLoader`] makes on the host.

use std::sync::Arc;

use vitrt_runtime::DeviceDecode;

use vitrt_runtime::image_kernels::jpeg::gpu::JpegInputs;
use vitrt_runtime::image_kernels::jpeg::{JpegBatch, JpegComponent, JpegData, JpegImage};
use vitrt_runtime::image_kernels::resample::gpu::DeviceResampleBatch;
use vitrt_runtime::image_kernels::resample::{ResampleBatch, ResampleImage, TapTable};

use super::jpeg_coefficients::{ReadJpeg, WrittenJpeg};
use super::resize::ResampleTaps;
use super::{PreprocessConfig, Resample, ResizeTarget};

/// Adds `image` to `batch`: its components, whose data starts `base` bytes into the data
/// buffer (coefficient and multiplier offsets count from there, as i16s and i32s), with their
/// planes from `*plane_at` and its upright RGB at `*rgb_at`, both advanced past it.
fn describe(
    batch: &mut JpegBatch,
    image: &WrittenJpeg,
    base: usize,
    (plane_at, rgb_at): (&mut usize, &mut usize),
) {
    let mut indices = Vec::with_capacity(image.components.len());
    for c in &image.components {
        indices.push(batch.components.len());
        let component = JpegComponent {
            coef_offset: (base + c.coefs_at) / 2,
            plane_offset: *plane_at,
            blocks_wide: c.blocks_wide,
            blocks_high: c.blocks_high,
            quant_offset: (base + c.quant_at) / 4,
            downsampled_width: c.downsampled_width,
            downsampled_height: c.downsampled_height,
            upsample: c.upsample,
        };
        *plane_at += component.plane_len();
        batch.components.push(component);
    }
    let described = JpegImage {
        components: indices,
        colour: image.colour,
        width: image.width,
        height: image.height,
        orientation: image.orientation,
        rgb_offset: *rgb_at,
    };
    *rgb_at += described.rgb_len();
    batch.images.push(described);
}

/// The JPEG kernels' batch for `images` read on their own, in order, with their data back to
/// back in host memory; each image's component planes and upright RGB image one after another.
pub fn jpeg_batch(images: &[&ReadJpeg]) -> (JpegBatch, JpegData) {
    let mut batch = JpegBatch::default();
    let mut bytes = Vec::new();
    let (mut plane_at, mut rgb_at) = (0usize, 0usize);
    for read in images {
        // Each image's region starts 16-byte aligned, as in an arena.
        bytes.resize(bytes.len().next_multiple_of(16), 0);
        let base = bytes.len();
        bytes.extend_from_slice(&read.data);
        describe(&mut batch, &read.image, base, (&mut plane_at, &mut rgb_at));
    }
    (batch, JpegData::from_le_bytes(&bytes))
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
    size: (usize, usize),
) -> Result<ResizePlan, ResizeRefusal> {
    resample_plan_with(cfg, max_pixels, size, &mut |input, output| {
        Arc::new(tap_table(cfg, input, output))
    })
}

/// An image's resize record (offsets zero) and its first and second pass's tap tables.
pub type ResizePlan = (ResampleImage, Arc<TapTable>, Arc<TapTable>);

/// The taps of one axis resized from `input` to `output` pixels with `cfg`'s filter (identity
/// taps where the size does not change).
pub fn tap_table(cfg: &PreprocessConfig, input: usize, output: usize) -> TapTable {
    if input == output {
        TapTable::identity(output)
    } else {
        ResampleTaps::new(input, output, cfg.resample).tap_table()
    }
}

/// [`resample_plan`] with the tables from `table(input, output)` (a loader's cache).
pub fn resample_plan_with(
    cfg: &PreprocessConfig,
    max_pixels: u64,
    (height, width): (usize, usize),
    table: &mut dyn FnMut(usize, usize) -> Arc<TapTable>,
) -> Result<ResizePlan, ResizeRefusal> {
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
    plans: Vec<ResizePlan>,
    rgb_offsets: &[usize],
    output_bytes: usize,
) -> ResampleBatch {
    let mut batch = ResampleBatch::default();
    let mut seen = Vec::new();
    let mut mid_at = 0usize;
    for (i, (mut record, first, second)) in plans.into_iter().enumerate() {
        record.src_offset = rgb_offsets[i];
        record.mid_offset = mid_at;
        record.dst_offset = i * output_bytes;
        mid_at += record.intermediate_len();
        record.first_table = table_index(&mut batch.tables, &mut seen, first);
        record.second_table = table_index(&mut batch.tables, &mut seen, second);
        batch.images.push(record);
    }
    batch
}

/// The index of `table` in `tables`, added if new (by identity: a loader hands out one `Arc`
/// per size, so a batch of photos of one size shares two).
fn table_index(
    tables: &mut Vec<TapTable>,
    seen: &mut Vec<Arc<TapTable>>,
    table: Arc<TapTable>,
) -> usize {
    match seen.iter().position(|t| Arc::ptr_eq(t, &table)) {
        Some(index) => index,
        None => {
            tables.push(TapTable::clone(&table));
            seen.push(table);
            tables.len() - 1
        }
    }
}

/// An image a worker prepared for device decoding: its data in the batch's arena (offsets
/// from the arena's start), what the kernels need to finish it, and its resize.
#[derive(Clone, Debug)]
pub struct DeviceImage {
    pub jpeg: WrittenJpeg,
    pub resize: ResizePlan,
}

/// A batch's device decoding, ready for `Runner::submit_decoding`: the descriptors, where
/// they lie in `tables`, and `tables` itself (the arena holds the data, from offset 0).
pub struct DeviceBatch {
    pub jpeg: JpegBatch,
    pub jpeg_at: JpegInputs,
    pub resample: ResampleBatch,
    pub resample_at: DeviceResampleBatch,
    pub tables: Vec<u8>,
}

impl DeviceBatch {
    /// What `Runner::submit_decoding` takes, with `data` the arena the images' data is in.
    pub fn decode<'a>(&'a self, data: &'a [u8]) -> DeviceDecode<'a> {
        DeviceDecode {
            data,
            tables: &self.tables,
            jpeg: &self.jpeg,
            jpeg_at: self.jpeg_at,
            resample: &self.resample,
            resample_at: self.resample_at,
        }
    }
}

/// The device decoding of `images`, each at its position in a batch of 8-bit images of
/// `image_bytes` each.
pub fn device_batch(images: &[(usize, &DeviceImage)], image_bytes: usize) -> DeviceBatch {
    let mut jpeg = JpegBatch::default();
    let (mut plane_at, mut rgb_at) = (0usize, 0usize);
    let mut plans = Vec::with_capacity(images.len());
    let mut rgb_offsets = Vec::with_capacity(images.len());
    for (_, image) in images {
        rgb_offsets.push(rgb_at);
        describe(&mut jpeg, &image.jpeg, 0, (&mut plane_at, &mut rgb_at));
        plans.push(image.resize.clone());
    }
    let mut resample = resample_batch(plans, &rgb_offsets, image_bytes);
    for (record, (position, _)) in resample.images.iter_mut().zip(images) {
        record.dst_offset = position * image_bytes;
    }
    let mut tables = Vec::new();
    let (components_at, images_at, end) = JpegInputs::write_tables(&jpeg, &mut tables, 0);
    let resample_at = DeviceResampleBatch::layout(&resample, end);
    tables.resize(resample_at.start + resample_at.bytes + 16, 0);
    resample_at.write(&resample, &mut tables);
    DeviceBatch {
        jpeg,
        jpeg_at: JpegInputs {
            components_at,
            images_at,
            coefs_at: 0,
            quant_at: 0,
        },
        resample,
        resample_at,
        tables,
    }
}
