//! Images a batch finishes decoding on the device: JPEG coefficients through the image kernels
//! (IDCT, upsampling, colour, orientation, then PIL's resize and the center crop) into their
//! places among a batch's 8-bit images, before those are expanded into the model's input.
//! The CUDA backend runs the kernels; any other backend runs their CPU twins, with the same
//! bytes.

use vitrt_kernels::jpeg::batch::{COMPONENT_RECORD_BYTES, IMAGE_RECORD_BYTES};
use vitrt_kernels::jpeg::gpu::JpegInputs;
use vitrt_kernels::jpeg::{cpu as jpeg_twin, JpegBatch, JpegData};
use vitrt_kernels::resample::gpu::DeviceResampleBatch;
use vitrt_kernels::resample::{cpu as resample_twin, ResampleBatch};

use crate::RuntimeError;

/// One batch's device decoding: two uploads, the coefficients and multipliers as the workers
/// wrote them (`data`, page-locked on CUDA) and the descriptor tables (`tables`), and the
/// descriptors themselves. The resample records' outputs are byte offsets into the batch's
/// 8-bit images.
pub struct DeviceDecode<'a> {
    pub data: &'a [u8],
    pub tables: &'a [u8],
    pub jpeg: &'a JpegBatch,
    pub jpeg_at: JpegInputs,
    pub resample: &'a ResampleBatch,
    pub resample_at: DeviceResampleBatch,
}

impl DeviceDecode<'_> {
    /// Checks the descriptors against the upload and against `pixels_len` bytes of 8-bit
    /// images, and that the resample reads the JPEG kernels' RGB output.
    pub fn check(&self, pixels_len: usize) -> Result<(), RuntimeError> {
        let fail = |message: String| Err(RuntimeError::Backend(message));
        let len = self.data.len();
        let coefs = len.saturating_sub(self.jpeg_at.coefs_at) / 2;
        let quant = len.saturating_sub(self.jpeg_at.quant_at) / 4;
        if let Err(e) = self.jpeg.validate(coefs, quant) {
            return fail(format!("device decoding: {e}"));
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
        let jpeg_tables = [
            (
                self.jpeg_at.components_at,
                self.jpeg.components.len() * COMPONENT_RECORD_BYTES,
            ),
            (
                self.jpeg_at.images_at,
                self.jpeg.images.len() * IMAGE_RECORD_BYTES,
            ),
            (self.resample_at.start, self.resample_at.bytes),
        ];
        if jpeg_tables
            .iter()
            .any(|&(at, bytes)| at + bytes > self.tables.len())
        {
            return fail("the device decoding's tables run past their upload".into());
        }
        Ok(())
    }

    /// The twins' work: decodes, resizes and crops into `pixels` on the host.
    pub fn run_on_host(&self, pixels: &mut [u8]) -> Result<(), RuntimeError> {
        self.check(pixels.len())?;
        let data = JpegData {
            coefs: JpegData::from_le_bytes(&self.data[self.jpeg_at.coefs_at..]).coefs,
            quant: JpegData::from_le_bytes(&self.data[self.jpeg_at.quant_at..]).quant,
        };
        let mut planes = vec![0u8; self.jpeg.planes_len()];
        let mut rgb = vec![0u8; self.jpeg.rgb_len()];
        jpeg_twin::idct(self.jpeg, &data, &mut planes);
        jpeg_twin::colour(self.jpeg, &planes, &mut rgb);
        let mut mid = vec![0u8; self.resample.intermediate_len()];
        resample_twin::resample(self.resample, &rgb, &mut mid, pixels);
        Ok(())
    }
}
