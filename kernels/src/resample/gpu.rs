//! Launchers of resample.cu's two programs (CPU twin in `cpu`).

use super::batch::{ResampleBatch, RESAMPLE_RECORD_BYTES};
use crate::cuda::{
    invalid, kernel_params, ArchRequirement, DeviceBuffer, Gpu, Instantiation, KernelError,
    KernelParam, LaunchDims,
};

const SOURCE: &str = include_str!("resample.cu");
const THREADS: u32 = 256;
/// CTAs a launch strides with over the largest image (each CTA loops).
const MAX_CTAS_PER_IMAGE: usize = 1024;

kernel_params! {
    /// resample_first's parameters: the records, the taps, the images in and the intermediate
    /// (resized along x) out.
    struct FirstPassParams {
        images: byte_ptr,
        taps: byte_ptr,
        src: byte_ptr,
        mid: mut_byte_ptr,
    }
}

kernel_params! {
    /// resample_second's parameters: the records, the taps, the intermediate in and the
    /// images out.
    struct SecondPassParams {
        images: byte_ptr,
        taps: byte_ptr,
        mid: byte_ptr,
        dst: mut_byte_ptr,
    }
}

fn instantiation(function: &'static str, params: Vec<KernelParam>) -> Instantiation {
    Instantiation {
        name: format!("{function}_t{THREADS}"),
        family: "resample",
        source: SOURCE,
        headers: &[],
        function,
        template_args: vec![THREADS.to_string()],
        params,
        block_threads: THREADS,
        min_blocks_per_sm: 0,
        arch: ArchRequirement::AtLeast(7, 0),
    }
}

fn first_instantiation() -> Instantiation {
    let params = FirstPassParams {
        images: 0,
        taps: 0,
        src: 0,
        mid: 0,
    };
    instantiation("resample_first", params.params())
}

fn second_instantiation() -> Instantiation {
    let params = SecondPassParams {
        images: 0,
        taps: 0,
        mid: 0,
        dst: 0,
    };
    instantiation("resample_second", params.params())
}

pub(crate) fn instantiations() -> Vec<Instantiation> {
    vec![first_instantiation(), second_instantiation()]
}

/// Where a batch's records and tables lie in one uploaded buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceResampleBatch {
    pub start: usize,
    pub images_at: usize,
    pub taps_at: usize,
    pub bytes: usize,
}

impl DeviceResampleBatch {
    /// The layout from `start` on, each part 16-byte aligned.
    pub fn layout(batch: &ResampleBatch, start: usize) -> Self {
        let align = |n: usize| n.next_multiple_of(16);
        let images_at = align(start);
        let taps_at = align(images_at + batch.images.len() * RESAMPLE_RECORD_BYTES);
        let tap_values: usize = batch.packed_tables().0.len();
        let bytes = align(taps_at + tap_values * 4) - start;
        Self {
            start,
            images_at,
            taps_at,
            bytes,
        }
    }

    /// Writes the batch's records and tables into `out` at this layout.
    pub fn write(&self, batch: &ResampleBatch, out: &mut [u8]) {
        let (taps, offsets) = batch.packed_tables();
        let records = batch.image_table(&offsets);
        out[self.images_at..][..records.len()].copy_from_slice(&records);
        for (i, v) in taps.iter().enumerate() {
            out[self.taps_at + 4 * i..][..4].copy_from_slice(&v.to_le_bytes());
        }
    }
}

/// Resizes and crops every image of `batch` from `src` into `dst` through `mid`, the records
/// and tables already written into `inputs` at `at`: two launches queued on the GPU's stream.
/// Results equal `cpu::resample`.
pub fn resample(
    gpu: &Gpu,
    batch: &ResampleBatch,
    inputs: &DeviceBuffer,
    at: &DeviceResampleBatch,
    buffers: (&DeviceBuffer, &DeviceBuffer, &DeviceBuffer),
) -> Result<(), KernelError> {
    let (src, mid, dst) = buffers;
    for buffer in [inputs, src, mid, dst] {
        gpu.check_owner(buffer)?;
    }
    batch
        .validate()
        .map_err(|e| invalid!("resize batch: {e}"))?;
    if *at != DeviceResampleBatch::layout(batch, at.start) {
        return Err(invalid!("the resize batch was written at another layout"));
    }
    if batch.images.len() > 65_535 {
        return Err(invalid!("a resize batch holds at most 65535 images"));
    }
    inputs.check_range(at.start, at.bytes, "resize batch")?;
    src.check_range(0, batch.input_len(), "resize input")?;
    mid.check_range(0, batch.intermediate_len(), "resize intermediate")?;
    dst.check_range(0, batch.output_len(), "resize output")?;
    if batch.images.is_empty() {
        return Ok(());
    }
    let grid = |values: usize| LaunchDims {
        grid: (
            values
                .div_ceil(THREADS as usize)
                .clamp(1, MAX_CTAS_PER_IMAGE) as u32,
            batch.images.len() as u32,
            1,
        ),
        block: THREADS,
        shared_bytes: 0,
        cluster: 1,
    };
    let most =
        |len: fn(&super::ResampleImage) -> usize| batch.images.iter().map(len).max().unwrap_or(0);
    let (images, taps) = (
        inputs.ptr + at.images_at as u64,
        inputs.ptr + at.taps_at as u64,
    );
    gpu.launch(
        &first_instantiation(),
        grid(most(|i| i.intermediate_len())),
        &FirstPassParams {
            images,
            taps,
            src: src.ptr,
            mid: mid.ptr,
        }
        .args(),
    )?;
    gpu.launch(
        &second_instantiation(),
        grid(most(|i| i.output_len())),
        &SecondPassParams {
            images,
            taps,
            mid: mid.ptr,
            dst: dst.ptr,
        }
        .args(),
    )
}
