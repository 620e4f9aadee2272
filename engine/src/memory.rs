//! Batches of images already in memory (a server's request bodies): each image decoded and
//! resized on the caller's thread into the model's 8-bit pixels ([`ImageDecoder`]), then
//! images from anywhere gathered into one page-locked staging buffer and queued as one forward
//! pass ([`MemoryBatches`]), through the same `Runner::submit_bytes` as the file pipeline: the
//! table expansion on the device, the captured graph of the batch's size.

use anyhow::{Context, Result};
use vitrt_model::preprocess::{
    normalization_table, ImageLimits, ImageLoader, PreprocessConfig, PreprocessError,
};
use vitrt_model::Runner;
use vitrt_runtime::{HostStaging, PendingOutputs};

/// Decodes images held in memory into the model's input pixels (HWC, 8-bit, the size the
/// preprocessing makes), as the file pipeline's workers do for files. One per thread: it
/// keeps its buffers from image to image.
pub struct ImageDecoder {
    loader: ImageLoader,
}

impl ImageDecoder {
    pub fn new(pre: &PreprocessConfig, limits: ImageLimits) -> ImageDecoder {
        ImageDecoder {
            loader: ImageLoader::new(pre, limits),
        }
    }

    /// Bytes of one decoded image.
    pub fn image_bytes(&self) -> usize {
        self.loader.output_bytes()
    }

    /// Decodes, orients, converts, resizes and crops `bytes` (a JPEG, PNG or WebP file's
    /// contents) as a file of them would be; `name` names the image in errors. Larger files
    /// than the limits' `max_file_bytes` are refused as files are.
    pub fn decode(&mut self, bytes: &[u8], name: &str) -> Result<Vec<u8>, PreprocessError> {
        let limit = self.loader.limits().max_file_bytes;
        if bytes.len() as u64 > limit {
            return Err(PreprocessError::UnsupportedImage {
                image: name.to_string(),
                reason: format!(
                    "the image is {} bytes, more than the limit of {limit}",
                    bytes.len()
                ),
            });
        }
        let mut out = vec![0u8; self.image_bytes()];
        self.loader.load_bytes_into(bytes, name, &mut out)?;
        Ok(out)
    }

    /// As [`ImageDecoder::decode`], for an image file (read as the file pipeline reads one:
    /// a regular file only, at most `max_file_bytes`).
    pub fn decode_file(&mut self, path: &std::path::Path) -> Result<Vec<u8>, PreprocessError> {
        let mut out = vec![0u8; self.image_bytes()];
        self.loader.load_file_into(path, &mut out)?;
        Ok(out)
    }
}

/// Gathers decoded images into a staging buffer (page-locked on CUDA, grown to the largest
/// batch) and queues them as one forward pass.
pub struct MemoryBatches {
    image_bytes: usize,
    /// Byte value to model input, per channel (see `normalization_table`).
    table: Vec<f32>,
    staging: Option<HostStaging>,
}

impl MemoryBatches {
    pub fn new(pre: &PreprocessConfig, image_bytes: usize) -> MemoryBatches {
        MemoryBatches {
            image_bytes,
            table: normalization_table(pre),
            staging: None,
        }
    }

    /// Bytes of one decoded image.
    pub fn image_bytes(&self) -> usize {
        self.image_bytes
    }

    /// Queues one forward pass over `images` (each `image_bytes` long, from
    /// [`ImageDecoder::decode`]), in order; returns once the staging buffer may be filled
    /// again, the pass possibly still running ([`Runner::finish`] collects it).
    pub fn submit(&mut self, runner: &mut Runner, images: &[&[u8]]) -> Result<PendingOutputs> {
        let image_bytes = self.image_bytes;
        self.submit_filled(runner, images.len(), |pixels| {
            for (image, place) in images.iter().zip(pixels.chunks_mut(image_bytes)) {
                anyhow::ensure!(
                    image.len() == image_bytes,
                    "a decoded image of {} bytes where the model takes {image_bytes}",
                    image.len()
                );
                place.copy_from_slice(image);
            }
            Ok(())
        })
    }

    /// Queues one forward pass over `count` images that `fill` writes straight into the
    /// staging buffer ([B, H, W, C] bytes, `image_bytes` each: Python's `Model` decodes into it
    /// on its threads). Nothing is queued when `fill` fails; its error is returned as it is.
    pub fn submit_filled<E>(
        &mut self,
        runner: &mut Runner,
        count: usize,
        fill: impl FnOnce(&mut [u8]) -> Result<(), E>,
    ) -> Result<PendingOutputs, E>
    where
        E: From<anyhow::Error>,
    {
        let bytes = count * self.image_bytes;
        if self.staging.as_ref().is_none_or(|s| s.len() < bytes) {
            self.staging = None; // freed before its successor is allocated
            self.staging = Some(
                runner
                    .alloc_staging(bytes)
                    .context("allocating the staging buffer")?,
            );
        }
        let Some(staging) = self.staging.as_mut() else {
            unreachable!("allocated above")
        };
        let pixels = &mut staging.as_mut_slice()[..bytes];
        fill(pixels)?;
        Ok(runner
            .submit_bytes(pixels, count, &self.table)
            .map_err(anyhow::Error::from)?)
    }
}
