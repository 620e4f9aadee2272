//! The launcher of scan.cu's program (CPU twin in `cpu`).

use super::batch::{ScanBatch, ScanTables, CHUNK_STATE_BYTES, THREADS};
use crate::cuda::{
    invalid, kernel_params, ArchRequirement, DeviceBuffer, Gpu, Instantiation, KernelError,
    LaunchDims,
};
use crate::jpeg::batch::JpegBatch;
use crate::jpeg::gpu::{JpegInputs, RECORDS_HEADER};

const SOURCE: &str = include_str!("scan.cu");

kernel_params! {
    /// jpeg_scan's parameters.
    struct ScanParams {
        images: byte_ptr,
        segments: byte_ptr,
        chunks: byte_ptr,
        components: byte_ptr,
        data: byte_ptr,
        states: mut_byte_ptr,
        coefs: mut_byte_ptr,
        status: counter_ptr,
    }
}

fn instantiation() -> Instantiation {
    Instantiation {
        name: format!("jpeg_scan_t{THREADS}"),
        family: "jpeg_scan",
        source: SOURCE,
        headers: &[RECORDS_HEADER],
        function: "jpeg_scan",
        template_args: vec![THREADS.to_string()],
        params: ScanParams {
            images: 0,
            segments: 0,
            chunks: 0,
            components: 0,
            data: 0,
            states: 0,
            coefs: 0,
            status: 0,
        }
        .params(),
        block_threads: THREADS as u32,
        min_blocks_per_sm: 0,
        arch: ArchRequirement::AtLeast(7, 0),
    }
}

pub(crate) fn instantiations() -> Vec<Instantiation> {
    vec![instantiation()]
}

/// Entropy-decodes `scans` into the coefficients of `jpeg`'s components, queued on the GPU's
/// stream: `tables` holds the scan tables where `scan_at` says and the JPEG component table
/// and status words where `jpeg_at` says; `data` holds the streams and Huffman tables, and,
/// from `jpeg_at.coefs_at` on, the coefficients (i16s); `states` is scratch of
/// [`CHUNK_STATE_BYTES`] a chunk. Results equal `cpu::decode`'s.
pub fn decode_scans(
    gpu: &Gpu,
    scans: &ScanBatch,
    jpeg: &JpegBatch,
    (tables, data, states): (&DeviceBuffer, &DeviceBuffer, &DeviceBuffer),
    scan_at: &ScanTables,
    jpeg_at: &JpegInputs,
) -> Result<(), KernelError> {
    for buffer in [tables, data, states] {
        gpu.check_owner(buffer)?;
    }
    scans
        .validate(data.len_bytes(), jpeg.components.len(), jpeg.images.len())
        .map_err(|e| invalid!("JPEG scans: {e}"))?;
    let coefs = data.len_bytes().saturating_sub(jpeg_at.coefs_at) / 2;
    for image in &scans.images {
        for &c in &image.components {
            let c = &jpeg.components[c];
            if !(jpeg_at.coefs_at + c.coef_offset * 2).is_multiple_of(16)
                || c.coef_offset + c.blocks() * 64 > coefs
            {
                return Err(invalid!(
                    "a scanned component's coefficients are misaligned or past the data"
                ));
            }
        }
    }
    if scans.images.len() > 65_535 || scans.chunk_count() > i32::MAX as usize {
        return Err(invalid!("a scan batch holds at most 65535 images"));
    }
    states.check_range(0, scan_at.chunks * CHUNK_STATE_BYTES, "JPEG scan states")?;
    tables.check_range(
        jpeg_at.status_at,
        jpeg.images.len() * 4,
        "JPEG status words",
    )?;
    if scans.images.is_empty() {
        return Ok(());
    }
    gpu.launch(
        &instantiation(),
        LaunchDims {
            grid: (scans.images.len() as u32, 1, 1),
            block: THREADS as u32,
            shared_bytes: 0,
            cluster: 1,
        },
        &ScanParams {
            images: tables.ptr + scan_at.images_at as u64,
            segments: tables.ptr + scan_at.segments_at as u64,
            chunks: tables.ptr + scan_at.chunks_at as u64,
            components: tables.ptr + jpeg_at.components_at as u64,
            data: data.ptr,
            states: states.ptr,
            coefs: data.ptr + jpeg_at.coefs_at as u64,
            status: tables.ptr + jpeg_at.status_at as u64,
        }
        .args(),
    )
}
