//! The launcher of scan.cu's program (CPU twin in `cpu`).

use super::batch::{ScanBatch, ScanTables, CHUNK_STATE_BYTES, THREADS};
use crate::cuda::{
    invalid, ArchRequirement, DeviceBuffer, Gpu, Instantiation, KernelArg, KernelError,
    KernelParam, LaunchDims, ParamKind,
};
use crate::jpeg::batch::JpegBatch;
use crate::jpeg::gpu::{JpegInputs, RECORDS_HEADER};

const SOURCE: &str = include_str!("scan.cu");

fn instantiation() -> Instantiation {
    Instantiation {
        name: format!("jpeg_scan_t{THREADS}"),
        family: "jpeg_scan",
        source: SOURCE,
        headers: &[RECORDS_HEADER],
        function: "jpeg_scan",
        template_args: vec![THREADS.to_string()],
        params: vec![
            KernelParam::new("images", ParamKind::BytePtr),
            KernelParam::new("segments", ParamKind::BytePtr),
            KernelParam::new("chunks", ParamKind::BytePtr),
            KernelParam::new("components", ParamKind::BytePtr),
            KernelParam::new("data", ParamKind::BytePtr),
            KernelParam::new("states", ParamKind::MutBytePtr),
            KernelParam::new("coefs", ParamKind::MutBytePtr),
            KernelParam::new("status", ParamKind::CounterPtr),
        ],
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
        &[
            KernelArg::Ptr(tables.ptr + scan_at.images_at as u64),
            KernelArg::Ptr(tables.ptr + scan_at.segments_at as u64),
            KernelArg::Ptr(tables.ptr + scan_at.chunks_at as u64),
            KernelArg::Ptr(tables.ptr + jpeg_at.components_at as u64),
            KernelArg::Ptr(data.ptr),
            KernelArg::Ptr(states.ptr),
            KernelArg::Ptr(data.ptr + jpeg_at.coefs_at as u64),
            KernelArg::Ptr(tables.ptr + jpeg_at.status_at as u64),
        ],
    )
}
