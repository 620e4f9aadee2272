//! Pixel expansion: 8-bit HWC images into the model's f32 NCHW input through a per-channel
//! table, `dst[b, c, y, x] = table[c * 256 + src[b, y, x, c]]` (the table folds rescaling and
//! normalisation in).
//!
//! - [`gpu::expand_pixels`], from pixels.cu.
//! - [`cpu::expand_pixels`]: the CPU twin.
//!
//! Tests: model/tests/pixel_bytes_gpu.rs. No bench case: the whole-job benchmark
//! (`vitrt classify`) covers it.

pub mod cpu;
pub mod gpu;

/// The shape of a batch of 8-bit images: `batch` images of `height` x `width` pixels of
/// `channels` interleaved bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PixelBatch {
    pub batch: usize,
    pub height: usize,
    pub width: usize,
    pub channels: usize,
}

impl PixelBatch {
    /// Bytes of the 8-bit images, and values of the expanded f32 tensor.
    pub fn len(&self) -> usize {
        self.batch * self.height * self.width * self.channels
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
