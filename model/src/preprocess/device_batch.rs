//! The image kernels' batch descriptions, made from JPEG coefficients and a processor config:
//! what the device path (or the kernels' CPU twins) needs to turn a batch of files'
//! coefficients into the same 8-bit HWC pixels [`super::ImageLoader`] makes on the host.

use std::sync::Arc;

use vitrt_runtime::DeviceDecode;

use vitrt_runtime::image_kernels::jpeg::gpu::JpegInputs;
use vitrt_runtime::image_kernels::jpeg::{JpegBatch, JpegComponent, JpegData, JpegImage};
use vitrt_runtime::image_kernels::jpeg_scan::{cpu as scan_twin, ScanBatch, ScanImage, ScanTables};
use vitrt_runtime::image_kernels::resample::gpu::DeviceResampleBatch;
use vitrt_runtime::image_kernels::resample::{ResampleBatch, ResampleImage, TapTable};

use super::jpeg_coefficients::{ReadJpeg, WrittenJpeg};
use super::resize::ResampleTaps;
use super::{PreprocessConfig, Resample, ResizeTarget};

/// Where [`describe`] puts the next image's device buffers: its planes, its upright RGB, and,
/// for a scan, the coefficients the device decodes (bytes into the data buffer).
struct Cursor {
    plane_at: usize,
    rgb_at: usize,
    coefs_at: usize,
}

/// Adds `image` to `batch` (and its scan to `scans`): its components, whose data starts `base`
/// bytes into the data buffer (coefficient and multiplier offsets count from there, as i16s
/// and i32s; a scan's coefficients go where the cursor says), with its planes and upright RGB
/// where the cursor says, which moves past them.
fn describe(
    (batch, scans): (&mut JpegBatch, &mut ScanBatch),
    image: &WrittenJpeg,
    base: usize,
    at: &mut Cursor,
) {
    let index = batch.images.len();
    let mut indices = Vec::with_capacity(image.components.len());
    for c in &image.components {
        indices.push(batch.components.len());
        let coef_offset = if image.scan.is_some() {
            let offset = at.coefs_at / 2;
            at.coefs_at += c.blocks_wide as usize * c.blocks_high as usize * 128;
            offset
        } else {
            (base + c.coefs_at) / 2
        };
        let component = JpegComponent {
            coef_offset,
            plane_offset: at.plane_at,
            blocks_wide: c.blocks_wide,
            blocks_high: c.blocks_high,
            quant_offset: (base + c.quant_at) / 4,
            downsampled_width: c.downsampled_width,
            downsampled_height: c.downsampled_height,
            upsample: c.upsample,
            image: index,
        };
        at.plane_at += component.plane_len();
        batch.components.push(component);
    }
    if let Some(scan) = &image.scan {
        scans.images.push(ScanImage {
            image: index,
            components: scan.slots.iter().map(|&f| indices[f]).collect(),
            dc_table: scan.dc_table.clone(),
            ac_table: scan.ac_table.clone(),
            sampling: scan.sampling.clone(),
            mcu: scan.mcu.clone(),
            mcus_per_row: scan.mcus_per_row,
            stream_at: base + scan.stream_at,
            stream_bytes: scan.stream_bytes,
            tables_at: base + scan.tables_at,
            tables: scan.tables,
            segments: scan.segments.clone(),
        });
    }
    let described = JpegImage {
        components: indices,
        colour: image.colour,
        width: image.width,
        height: image.height,
        orientation: image.orientation,
        rgb_offset: at.rgb_at,
    };
    at.rgb_at += described.rgb_len();
    batch.images.push(described);
}

/// A JPEG batch in host memory, as the device would be given it: the descriptors, the data
/// (what is uploaded), and the bytes after it where the scans' coefficients are decoded.
pub struct HostJpegBatch {
    pub jpeg: JpegBatch,
    pub scans: ScanBatch,
    pub data: Vec<u8>,
    pub decoded_coefficient_bytes: usize,
}

impl HostJpegBatch {
    /// The coefficients and multipliers once the scans are entropy-decoded (by the twin), and
    /// the images' status words.
    pub fn decoded(&self) -> (JpegData, Vec<u32>) {
        let mut bytes = self.data.clone();
        bytes.resize(self.data.len() + self.decoded_coefficient_bytes, 0);
        let mut data = JpegData::from_le_bytes(&bytes);
        let mut status = vec![0; self.jpeg.images.len()];
        scan_twin::decode(
            &self.scans,
            &self.jpeg.components,
            &self.data,
            &mut data.coefs,
            &mut status,
        );
        (data, status)
    }
}

/// The JPEG kernels' batch for `images` read on their own, in order, with their data back to
/// back in host memory; each image's component planes and upright RGB image one after another.
pub fn jpeg_batch(images: &[&ReadJpeg]) -> HostJpegBatch {
    let mut jpeg = JpegBatch::default();
    let mut scans = ScanBatch::default();
    let mut bytes = Vec::new();
    let mut placed = Vec::with_capacity(images.len());
    for read in images {
        // Each image's region starts 16-byte aligned, as in an arena.
        bytes.resize(bytes.len().next_multiple_of(16), 0);
        placed.push(bytes.len());
        bytes.extend_from_slice(&read.data);
    }
    bytes.resize(bytes.len().next_multiple_of(16), 0);
    let mut at = Cursor {
        plane_at: 0,
        rgb_at: 0,
        coefs_at: bytes.len(),
    };
    for (read, base) in images.iter().zip(placed) {
        describe((&mut jpeg, &mut scans), &read.image, base, &mut at);
    }
    HostJpegBatch {
        jpeg,
        scans,
        decoded_coefficient_bytes: at.coefs_at - bytes.len(),
        data: bytes,
    }
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
/// they lie in `tables`, and `tables` itself (the arena holds the data, from offset 0, and
/// the device decodes the scans' coefficients into `decoded_coefficient_bytes` after it).
pub struct DeviceBatch {
    pub jpeg: JpegBatch,
    pub jpeg_at: JpegInputs,
    pub scans: ScanBatch,
    pub scan_at: ScanTables,
    pub resample: ResampleBatch,
    pub resample_at: DeviceResampleBatch,
    pub tables: Vec<u8>,
    pub decoded_coefficient_bytes: usize,
}

impl DeviceBatch {
    /// What `Runner::submit_decoding` takes, with `data` the arena the images' data is in (up
    /// to the last byte used, as [`device_batch`] was told).
    pub fn decode<'a>(&'a self, data: &'a [u8]) -> DeviceDecode<'a> {
        DeviceDecode {
            data,
            decoded_coefficient_bytes: self.decoded_coefficient_bytes,
            tables: &self.tables,
            jpeg: &self.jpeg,
            jpeg_at: self.jpeg_at,
            scans: &self.scans,
            scan_at: self.scan_at,
            resample: &self.resample,
            resample_at: self.resample_at,
        }
    }
}

/// The device decoding of `images`, each at its position in a batch of 8-bit images of
/// `image_bytes` each, whose data is in an arena of which `arena_len` bytes are used.
pub fn device_batch(
    images: &[(usize, &DeviceImage)],
    image_bytes: usize,
    arena_len: usize,
) -> DeviceBatch {
    let mut jpeg = JpegBatch::default();
    let mut scans = ScanBatch::default();
    let coefs_start = arena_len.next_multiple_of(16);
    let mut at = Cursor {
        plane_at: 0,
        rgb_at: 0,
        coefs_at: coefs_start,
    };
    let mut plans = Vec::with_capacity(images.len());
    let mut rgb_offsets = Vec::with_capacity(images.len());
    for (_, image) in images {
        rgb_offsets.push(at.rgb_at);
        describe((&mut jpeg, &mut scans), &image.jpeg, 0, &mut at);
        plans.push(image.resize.clone());
    }
    let mut resample = resample_batch(plans, &rgb_offsets, image_bytes);
    for (record, (position, _)) in resample.images.iter_mut().zip(images) {
        record.dst_offset = position * image_bytes;
    }
    let mut tables = Vec::new();
    let (jpeg_at, end) = JpegInputs::write_tables(&jpeg, &mut tables, 0);
    let (scan_at, end) = scans.write_tables(&mut tables, end);
    let resample_at = DeviceResampleBatch::layout(&resample, end);
    tables.resize(resample_at.start + resample_at.bytes + 16, 0);
    resample_at.write(&resample, &mut tables);
    DeviceBatch {
        jpeg,
        jpeg_at,
        scans,
        scan_at,
        resample,
        resample_at,
        tables,
        // The coefficients start 16-byte aligned past the arena's used bytes.
        decoded_coefficient_bytes: at.coefs_at - arena_len,
    }
}
