//! Launchers of jpeg.cu's programs (CPU twins in `cpu`): the IDCT of every block of a batch's
//! components into their planes, then each image's upsampling, colour conversion and EXIF
//! orientation into upright RGB.

use super::batch::{JpegBatch, JpegData, COMPONENT_RECORD_BYTES, IMAGE_RECORD_BYTES};
use crate::cuda::{
    invalid, kernel_params, ArchRequirement, DeviceBuffer, Gpu, Instantiation, KernelError,
    LaunchDims,
};

const SOURCE: &str = include_str!("jpeg.cu");
/// The descriptor records jpeg.cu and jpeg_scan's program share.
pub(crate) const RECORDS_HEADER: (&str, &str) = ("jpeg_records.cuh", include_str!("records.cuh"));
const THREADS: u32 = 256;
/// CTAs a launch strides with over the largest component or image (each CTA loops).
const MAX_CTAS_PER_ITEM: usize = 1024;

kernel_params! {
    /// jpeg_idct's parameters.
    struct IdctParams {
        components: byte_ptr,
        coefs: byte_ptr,
        quant: byte_ptr,
        planes: mut_byte_ptr,
        status: counter_ptr,
    }
}

kernel_params! {
    /// jpeg_colour's parameters.
    struct ColourParams {
        images: byte_ptr,
        components: byte_ptr,
        planes: byte_ptr,
        rgb: mut_byte_ptr,
    }
}

fn idct_instantiation() -> Instantiation {
    Instantiation {
        name: format!("jpeg_idct_t{THREADS}"),
        family: "jpeg",
        source: SOURCE,
        headers: &[RECORDS_HEADER],
        function: "jpeg_idct",
        template_args: vec![THREADS.to_string()],
        params: IdctParams {
            components: 0,
            coefs: 0,
            quant: 0,
            planes: 0,
            status: 0,
        }
        .params(),
        block_threads: THREADS,
        min_blocks_per_sm: 0,
        arch: ArchRequirement::AtLeast(7, 0),
    }
}

fn colour_instantiation() -> Instantiation {
    Instantiation {
        name: format!("jpeg_colour_t{THREADS}"),
        family: "jpeg",
        source: SOURCE,
        headers: &[RECORDS_HEADER],
        function: "jpeg_colour",
        template_args: vec![THREADS.to_string()],
        params: ColourParams {
            images: 0,
            components: 0,
            planes: 0,
            rgb: 0,
        }
        .params(),
        block_threads: THREADS,
        min_blocks_per_sm: 0,
        arch: ArchRequirement::AtLeast(7, 0),
    }
}

pub(crate) fn instantiations() -> Vec<Instantiation> {
    vec![idct_instantiation(), colour_instantiation()]
}

/// Where a batch's inputs lie, as byte offsets: its two descriptor tables and its images'
/// status words (zeroed by the upload, written by the kernels) in a tables buffer, and, in a
/// data buffer, the bases its components' coefficient and multiplier offsets count from (one
/// buffer may be both).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct JpegInputs {
    pub components_at: usize,
    pub images_at: usize,
    /// One `u32` an image, 4-byte aligned.
    pub status_at: usize,
    /// Where coefficient 0 is (i16s) in the data; a multiple of 2.
    pub coefs_at: usize,
    /// Where multiplier 0 is (i32s) in the data; a multiple of 4.
    pub quant_at: usize,
}

impl JpegInputs {
    /// Writes `batch`'s two descriptor tables and zeroed status words at `at` in `out`
    /// (16-byte aligned), returning where they went (the data's bases zero: the caller sets
    /// them) and the end.
    pub fn write_tables(batch: &JpegBatch, out: &mut Vec<u8>, at: usize) -> (Self, usize) {
        let components_at = at.next_multiple_of(16);
        let components_end = components_at + batch.components.len() * COMPONENT_RECORD_BYTES;
        let images_at = components_end.next_multiple_of(16);
        let images_end = images_at + batch.images.len() * IMAGE_RECORD_BYTES;
        let status_at = images_end.next_multiple_of(16);
        let end = status_at + batch.images.len() * 4;
        if out.len() < end {
            out.resize(end, 0);
        }
        out[components_at..components_end].copy_from_slice(&batch.component_table());
        out[images_at..images_end].copy_from_slice(&batch.image_table());
        out[status_at..end].fill(0);
        let inputs = Self {
            components_at,
            images_at,
            status_at,
            coefs_at: 0,
            quant_at: 0,
        };
        (inputs, end)
    }

    /// One buffer holding `batch`'s tables, then `data`'s coefficients and multipliers: what
    /// a test uploads whole.
    pub fn pack(batch: &JpegBatch, data: &JpegData) -> (Self, Vec<u8>) {
        let mut out = Vec::new();
        let (tables, end) = Self::write_tables(batch, &mut out, 0);
        let coefs_at = end.next_multiple_of(16);
        let quant_at = (coefs_at + data.coefs.len() * 2).next_multiple_of(16);
        out.resize(quant_at + data.quant.len() * 4, 0);
        for (i, v) in data.coefs.iter().enumerate() {
            out[coefs_at + 2 * i..][..2].copy_from_slice(&v.to_le_bytes());
        }
        for (i, v) in data.quant.iter().enumerate() {
            out[quant_at + 4 * i..][..4].copy_from_slice(&v.to_le_bytes());
        }
        let inputs = Self {
            coefs_at,
            quant_at,
            ..tables
        };
        (inputs, out)
    }
}

/// Decodes `batch` into upright RGB in `rgb`, through the component planes in `planes`: the
/// IDCT launch, then the colour launch, both queued on the GPU's stream. `tables` and `data`
/// hold the descriptor tables and status words and the coefficients and multipliers where
/// `at` says (the data run to the end of `data`). Results, status words included, equal
/// `cpu::idct` then `cpu::colour`.
pub fn decode(
    gpu: &Gpu,
    batch: &JpegBatch,
    (tables, data): (&DeviceBuffer, &DeviceBuffer),
    at: &JpegInputs,
    planes: &DeviceBuffer,
    rgb: &DeviceBuffer,
) -> Result<(), KernelError> {
    for buffer in [tables, data, planes, rgb] {
        gpu.check_owner(buffer)?;
    }
    let len = data.len_bytes();
    if !at.coefs_at.is_multiple_of(2)
        || !at.quant_at.is_multiple_of(4)
        || !at.components_at.is_multiple_of(16)
        || !at.images_at.is_multiple_of(16)
        || !at.status_at.is_multiple_of(4)
    {
        return Err(invalid!("JPEG inputs misaligned: {at:?}"));
    }
    let coefs = len.saturating_sub(at.coefs_at) / 2;
    let quant = len.saturating_sub(at.quant_at) / 4;
    batch
        .validate(coefs, quant)
        .map_err(|e| invalid!("JPEG batch: {e}"))?;
    if batch.components.len() > 65_535 || batch.images.len() > 65_535 {
        return Err(invalid!(
            "a JPEG batch holds at most 65535 images and components"
        ));
    }
    tables.check_range(
        at.components_at,
        batch.components.len() * COMPONENT_RECORD_BYTES,
        "JPEG components",
    )?;
    tables.check_range(
        at.images_at,
        batch.images.len() * IMAGE_RECORD_BYTES,
        "JPEG images",
    )?;
    tables.check_range(at.status_at, batch.images.len() * 4, "JPEG status words")?;
    planes.check_range(0, batch.planes_len(), "JPEG planes")?;
    rgb.check_range(0, batch.rgb_len(), "decoded RGB")?;
    if batch.images.is_empty() {
        return Ok(());
    }
    let blocks_per_cta = (THREADS / 8) as usize;
    let most_blocks = batch
        .components
        .iter()
        .map(|c| c.blocks())
        .max()
        .unwrap_or(0);
    gpu.launch(
        &idct_instantiation(),
        LaunchDims {
            grid: (
                most_blocks
                    .div_ceil(blocks_per_cta)
                    .clamp(1, MAX_CTAS_PER_ITEM) as u32,
                batch.components.len() as u32,
                1,
            ),
            block: THREADS,
            shared_bytes: 0,
            cluster: 1,
        },
        &IdctParams {
            components: tables.ptr + at.components_at as u64,
            coefs: data.ptr + at.coefs_at as u64,
            quant: data.ptr + at.quant_at as u64,
            planes: planes.ptr,
            status: tables.ptr + at.status_at as u64,
        }
        .args(),
    )?;
    let most_pixels = batch
        .images
        .iter()
        .map(|i| i.width as usize * i.height as usize)
        .max()
        .unwrap_or(0);
    gpu.launch(
        &colour_instantiation(),
        LaunchDims {
            grid: (
                most_pixels
                    .div_ceil(THREADS as usize)
                    .clamp(1, MAX_CTAS_PER_ITEM) as u32,
                batch.images.len() as u32,
                1,
            ),
            block: THREADS,
            shared_bytes: 0,
            cluster: 1,
        },
        &ColourParams {
            images: tables.ptr + at.images_at as u64,
            components: tables.ptr + at.components_at as u64,
            planes: planes.ptr,
            rgb: rgb.ptr,
        }
        .args(),
    )
}
