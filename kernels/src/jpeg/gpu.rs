//! Launchers of jpeg.cu's programs (CPU twins in `cpu`): the IDCT of every block of a batch's
//! components into their planes, then each image's upsampling, colour conversion and EXIF
//! orientation into upright RGB.

use super::batch::{JpegBatch, COMPONENT_RECORD_BYTES, IMAGE_RECORD_BYTES};
use crate::cuda::{
    invalid, ArchRequirement, DeviceBuffer, Gpu, Instantiation, KernelArg, KernelError,
    KernelParam, LaunchDims, ParamKind,
};

const SOURCE: &str = include_str!("jpeg.cu");
const THREADS: u32 = 256;
/// CTAs a launch strides with over the largest component or image (each CTA loops).
const MAX_CTAS_PER_ITEM: usize = 1024;

fn idct_instantiation() -> Instantiation {
    Instantiation {
        name: format!("jpeg_idct_t{THREADS}"),
        family: "jpeg",
        source: SOURCE,
        headers: &[],
        function: "jpeg_idct",
        template_args: vec![THREADS.to_string()],
        params: vec![
            KernelParam::new("components", ParamKind::BytePtr),
            KernelParam::new("coefs", ParamKind::BytePtr),
            KernelParam::new("quant", ParamKind::BytePtr),
            KernelParam::new("planes", ParamKind::MutBytePtr),
        ],
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
        headers: &[],
        function: "jpeg_colour",
        template_args: vec![THREADS.to_string()],
        params: vec![
            KernelParam::new("images", ParamKind::BytePtr),
            KernelParam::new("components", ParamKind::BytePtr),
            KernelParam::new("planes", ParamKind::BytePtr),
            KernelParam::new("rgb", ParamKind::MutBytePtr),
        ],
        block_threads: THREADS,
        min_blocks_per_sm: 0,
        arch: ArchRequirement::AtLeast(7, 0),
    }
}

pub(crate) fn instantiations() -> Vec<Instantiation> {
    vec![idct_instantiation(), colour_instantiation()]
}

/// Where a batch's inputs lie in device memory: byte offsets into one uploaded buffer (the
/// layout [`DeviceJpegBatch::layout`] gives), so a batch goes up in one copy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceJpegBatch {
    pub start: usize,
    pub components_at: usize,
    pub images_at: usize,
    pub coefs_at: usize,
    pub quant_at: usize,
    pub bytes: usize,
}

impl DeviceJpegBatch {
    /// Offsets of the batch's tables, coefficients and multipliers in one buffer, each
    /// 16-byte aligned, from `start` on.
    pub fn layout(batch: &JpegBatch, start: usize) -> Self {
        let align = |n: usize| n.next_multiple_of(16);
        let components_at = align(start);
        let images_at = align(components_at + batch.components.len() * COMPONENT_RECORD_BYTES);
        let coefs_at = align(images_at + batch.images.len() * IMAGE_RECORD_BYTES);
        let quant_at = align(coefs_at + batch.coefs.len() * 2);
        let bytes = align(quant_at + batch.quant.len() * 4) - start;
        Self {
            start,
            components_at,
            images_at,
            coefs_at,
            quant_at,
            bytes,
        }
    }

    /// Writes the batch into `out` (at least `start + bytes` long) at this layout.
    pub fn write(&self, batch: &JpegBatch, out: &mut [u8]) {
        let put = |out: &mut [u8], at: usize, bytes: &[u8]| {
            out[at..at + bytes.len()].copy_from_slice(bytes)
        };
        put(out, self.components_at, &batch.component_table());
        put(out, self.images_at, &batch.image_table());
        for (i, v) in batch.coefs.iter().enumerate() {
            out[self.coefs_at + 2 * i..][..2].copy_from_slice(&v.to_le_bytes());
        }
        for (i, v) in batch.quant.iter().enumerate() {
            out[self.quant_at + 4 * i..][..4].copy_from_slice(&v.to_le_bytes());
        }
    }
}

/// Decodes `batch` (already written into `inputs` at `at`) into upright RGB in `rgb`, through
/// the component planes in `planes`: the IDCT launch, then the colour launch, both queued on
/// the GPU's stream. Results equal `cpu::idct` then `cpu::colour`.
pub fn decode(
    gpu: &Gpu,
    batch: &JpegBatch,
    inputs: &DeviceBuffer,
    at: &DeviceJpegBatch,
    planes: &DeviceBuffer,
    rgb: &DeviceBuffer,
) -> Result<(), KernelError> {
    for buffer in [inputs, planes, rgb] {
        gpu.check_owner(buffer)?;
    }
    batch.validate().map_err(|e| invalid!("JPEG batch: {e}"))?;
    if batch.components.len() > 65_535 || batch.images.len() > 65_535 {
        return Err(invalid!(
            "a JPEG batch holds at most 65535 images and components"
        ));
    }
    if *at != DeviceJpegBatch::layout(batch, at.start) {
        return Err(invalid!("the JPEG batch was written at another layout"));
    }
    inputs.check_range(at.start, at.bytes, "JPEG batch")?;
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
        &[
            KernelArg::Ptr(inputs.ptr + at.components_at as u64),
            KernelArg::Ptr(inputs.ptr + at.coefs_at as u64),
            KernelArg::Ptr(inputs.ptr + at.quant_at as u64),
            KernelArg::Ptr(planes.ptr),
        ],
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
        &[
            KernelArg::Ptr(inputs.ptr + at.images_at as u64),
            KernelArg::Ptr(inputs.ptr + at.components_at as u64),
            KernelArg::Ptr(planes.ptr),
            KernelArg::Ptr(rgb.ptr),
        ],
    )
}
