//! Images a batch finishes decoding on the device: JPEG scans or coefficients through the
//! image kernels (entropy decoding, IDCT, upsampling, colour, orientation, then PIL's resize
//! and the center crop) into their places among a batch's 8-bit images, before those are
//! expanded into the model's input. The CUDA backend runs the kernels; any other backend runs
//! their CPU twins, with the same bytes. The kernels mark images they could not decode
//! exactly in status words, which come back with the batch: the host decodes those again.

use vitrt_kernels::jpeg::batch::{COMPONENT_RECORD_BYTES, IMAGE_RECORD_BYTES};
use vitrt_kernels::jpeg::gpu::JpegInputs;
use vitrt_kernels::jpeg::{cpu as jpeg_twin, JpegBatch, JpegData};
use vitrt_kernels::jpeg_scan::batch::{
    CHUNK_RECORD_BYTES, IMAGE_RECORD_BYTES as SCAN_RECORD_BYTES, SEGMENT_RECORD_BYTES,
};
use vitrt_kernels::jpeg_scan::{cpu as scan_twin, ScanBatch, ScanTables};
use vitrt_kernels::resample::gpu::DeviceResampleBatch;
use vitrt_kernels::resample::{cpu as resample_twin, ResampleBatch};

use crate::RuntimeError;

/// One batch's device decoding: two uploads, the data as the workers wrote it (`data`,
/// page-locked on CUDA: entropy-coded scans, Huffman tables, multipliers, and coefficients the
/// host decoded) and the descriptor tables with zeroed status words (`tables`), and the
/// descriptors themselves. The device adds `decoded_coefficient_bytes` after the data, where
/// it entropy-decodes the scans' coefficients. The resample records' outputs are byte
/// offsets into the batch's 8-bit images.
pub struct DeviceDecode<'a> {
    pub data: &'a [u8],
    pub decoded_coefficient_bytes: usize,
    pub tables: &'a [u8],
    pub jpeg: &'a JpegBatch,
    pub jpeg_at: JpegInputs,
    pub scans: &'a ScanBatch,
    pub scan_at: ScanTables,
    pub resample: &'a ResampleBatch,
    pub resample_at: DeviceResampleBatch,
}

impl DeviceDecode<'_> {
    /// Bytes of the data buffer on the device: the upload and the decoded coefficients.
    pub fn device_data_len(&self) -> usize {
        self.data.len() + self.decoded_coefficient_bytes
    }

    /// Checks the descriptors against the upload and against `pixels_len` bytes of 8-bit
    /// images, and that the resample reads the JPEG kernels' RGB output.
    pub fn check(&self, pixels_len: usize) -> Result<(), RuntimeError> {
        let fail = |message: String| Err(RuntimeError::Backend(message));
        let len = self.device_data_len();
        let coefs = len.saturating_sub(self.jpeg_at.coefs_at) / 2;
        let quant = len.saturating_sub(self.jpeg_at.quant_at) / 4;
        if let Err(e) = self.jpeg.validate(coefs, quant) {
            return fail(format!("device decoding: {e}"));
        }
        let (components, images) = (self.jpeg.components.len(), self.jpeg.images.len());
        if let Err(e) = self.scans.validate(self.data.len(), components, images) {
            return fail(format!("device entropy decoding: {e}"));
        }
        if let Err(e) = self.resample.validate() {
            return fail(format!("device resizing: {e}"));
        }
        if self.resample.input_len() > self.jpeg.rgb_len() {
            return fail("device resizing reads past the decoded images".into());
        }
        if self.resample.output_len() > pixels_len {
            return fail("device resizing writes past the batch's images".into());
        }
        let segments: usize = self.scans.images.iter().map(|i| i.segments.len()).sum();
        let tables = [
            (
                self.jpeg_at.components_at,
                components * COMPONENT_RECORD_BYTES,
            ),
            (self.jpeg_at.images_at, images * IMAGE_RECORD_BYTES),
            (self.jpeg_at.status_at, images * 4),
            (
                self.scan_at.images_at,
                self.scans.images.len() * SCAN_RECORD_BYTES,
            ),
            (self.scan_at.segments_at, segments * SEGMENT_RECORD_BYTES),
            (
                self.scan_at.chunks_at,
                self.scan_at.chunks * CHUNK_RECORD_BYTES,
            ),
            (self.resample_at.start, self.resample_at.bytes),
        ];
        if tables
            .iter()
            .any(|&(at, bytes)| at + bytes > self.tables.len())
            || self.scan_at.chunks != self.scans.chunk_count()
        {
            return fail("the device decoding's tables run past their upload".into());
        }
        Ok(())
    }

    /// The twins' work: entropy-decodes, decodes, resizes and crops into `pixels` on the
    /// host; the images' status words (see `jpeg::batch::STATUS_GUARD`), one an image of the
    /// JPEG batch.
    pub fn run_on_host(&self, pixels: &mut [u8]) -> Result<Vec<u32>, RuntimeError> {
        self.check(pixels.len())?;
        let mut bytes = self.data.to_vec();
        bytes.resize(self.device_data_len(), 0);
        let mut data = JpegData {
            coefs: JpegData::from_le_bytes(&bytes[self.jpeg_at.coefs_at..]).coefs,
            quant: JpegData::from_le_bytes(&bytes[self.jpeg_at.quant_at..]).quant,
        };
        let mut status = vec![0u32; self.jpeg.images.len()];
        scan_twin::decode(
            self.scans,
            &self.jpeg.components,
            self.data,
            &mut data.coefs,
            &mut status,
        );
        let mut planes = vec![0u8; self.jpeg.planes_len()];
        let mut rgb = vec![0u8; self.jpeg.rgb_len()];
        jpeg_twin::idct(self.jpeg, &data, &mut planes, &mut status);
        jpeg_twin::colour(self.jpeg, &planes, &mut rgb);
        let mut mid = vec![0u8; self.resample.intermediate_len()];
        resample_twin::resample(self.resample, &rgb, &mut mid, pixels);
        Ok(status)
    }
}
