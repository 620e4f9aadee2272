//! The shape of a batch of 8-bit images.

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
