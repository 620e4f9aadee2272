//! Batches of images already in memory (a server's request bodies): each image made ready on
//! the caller's thread ([`ImageDecoder`]): decoded and resized into the model's 8-bit pixels,
//! or, for device decoding, a JPEG read into a region of its own that the device decodes
//! ([`PreparedImage`]); then images from anywhere gathered into one page-locked staging buffer
//! (and arena) and queued as one forward pass ([`MemoryBatches`]), through the same
//! `Runner::submit_decoding` as the file pipeline: the device decoding, the table expansion,
//! the captured graph of the batch's size.

use std::sync::atomic::AtomicUsize;

use vitrt_model::preprocess::jpeg_coefficients::EntropyOn;
use vitrt_model::preprocess::Loaded;

use crate::pipeline::BumpArena;

use anyhow::{Context, Result};
use vitrt_model::preprocess::device_batch::device_batch;
use vitrt_model::preprocess::{
    ArenaReserve, DeviceImage, ImageLimits, ImageLoader, PixelExpansion, PreprocessConfig,
    PreprocessError,
};
use vitrt_model::Runner;
use vitrt_runtime::{HostStaging, HostTensor, PendingOutputs};

/// Decodes images held in memory into the model's input pixels (HWC, 8-bit, the size the
/// preprocessing makes), as the file pipeline's workers do for files, or prepares JPEGs for
/// the device to decode ([`ImageDecoder::prepare`]). One per thread: it keeps its buffers from
/// image to image.
pub struct ImageDecoder {
    loader: ImageLoader,
    /// Whether [`ImageDecoder::prepare`] leaves JPEGs to the device, and who entropy-decodes
    /// them; `None`: everything is decoded on the host.
    device: Option<EntropyOn>,
}

/// An image of a request made ready for a batch on the request's own thread.
pub enum PreparedImage {
    /// Decoded on the host: the model's 8-bit pixels.
    Pixels(Vec<u8>),
    /// A JPEG the device decodes.
    Device(Box<DevicePrepared>),
}

/// A JPEG read for the device's decoding into a region of its own, which
/// [`MemoryBatches::submit_prepared`] copies into the batch's arena; the file is kept, to be
/// decoded on the host if the device marks the batch.
pub struct DevicePrepared {
    /// The region: the scan (or coefficients) and tables the device reads, offsets in
    /// `image` counting from its start.
    data: Vec<u8>,
    image: DeviceImage,
    file: Vec<u8>,
    /// What errors call the image.
    name: String,
}

impl PreparedImage {
    /// Whether the device decodes it.
    pub fn on_device(&self) -> bool {
        matches!(self, PreparedImage::Device(_))
    }

    /// The image's pixels decoded on the host by `host` (a decoder of the same
    /// preprocessing): what the device would have made, for a batch it marked.
    pub fn pixels_on_host(&self, host: &mut ImageDecoder) -> Result<Vec<u8>, PreprocessError> {
        match self {
            PreparedImage::Pixels(pixels) => Ok(pixels.clone()),
            PreparedImage::Device(prepared) => host.decode(&prepared.file, &prepared.name),
        }
    }
}

/// Region bytes a JPEG is first read into by [`ImageDecoder::prepare`] (untouched pages are
/// never mapped): a baseline scan needs about its file's size, a progressive file read on the
/// host its coefficients (570 KiB for 500x375 photos). A file that does not fit is decoded on
/// the host.
fn region_capacity(file_bytes: usize) -> usize {
    (2 * file_bytes + (64 << 10)).max(ARENA_BYTES_PER_IMAGE)
}

impl ImageDecoder {
    /// A decoder that decodes everything on the host.
    pub fn new(pre: &PreprocessConfig, limits: ImageLimits) -> ImageDecoder {
        ImageDecoder {
            loader: ImageLoader::new(pre, limits),
            device: None,
        }
    }

    /// A decoder whose [`ImageDecoder::prepare`] leaves the JPEGs the device path decodes
    /// exactly to the device (`entropy`: who reads their Huffman-coded scans), and decodes the
    /// rest on the host.
    pub fn for_device(
        pre: &PreprocessConfig,
        limits: ImageLimits,
        entropy: EntropyOn,
    ) -> ImageDecoder {
        ImageDecoder {
            loader: ImageLoader::new(pre, limits).with_entropy(entropy),
            device: Some(entropy),
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
        self.check_file_size(bytes, name)?;
        let mut out = vec![0u8; self.image_bytes()];
        self.loader.load_bytes_into(bytes, name, &mut out)?;
        Ok(out)
    }

    /// Makes `file` (a JPEG, PNG or WebP file's contents) ready for a batch: with a decoder
    /// [`for_device`](ImageDecoder::for_device), a JPEG the device decodes exactly is read
    /// for it (markers, tables, the scan without its stuffed bytes, its resize: a few
    /// hundredths of a millisecond for a 500x375 photo); anything else is decoded as
    /// [`ImageDecoder::decode`] does. Errors are those of `decode` for what the host can
    /// tell; what only decoding finds (damaged entropy-coded data) the device marks, and the
    /// batch is decoded again on the host ([`PreparedImage::pixels_on_host`]).
    pub fn prepare(&mut self, file: Vec<u8>, name: &str) -> Result<PreparedImage, PreprocessError> {
        if self.device.is_none() {
            return self.decode(&file, name).map(PreparedImage::Pixels);
        }
        self.check_file_size(&file, name)?;
        let mut region = vec![0u8; region_capacity(file.len())];
        let used = AtomicUsize::new(0);
        let mut out = vec![0u8; self.image_bytes()];
        let (_, loaded) = self.loader.load_bytes_for_device(
            &file,
            name,
            &mut out,
            &BumpArena::new(&mut region, &used),
        )?;
        Ok(match loaded {
            Loaded::Device(image) => {
                region.truncate(used.into_inner());
                region.shrink_to_fit();
                PreparedImage::Device(Box::new(DevicePrepared {
                    data: region,
                    image: *image,
                    file,
                    name: name.to_string(),
                }))
            }
            Loaded::Host(_) => PreparedImage::Pixels(out),
        })
    }

    fn check_file_size(&self, bytes: &[u8], name: &str) -> Result<(), PreprocessError> {
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
        Ok(())
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
/// batch) and queues them as one forward pass; or, with device decoding, JPEGs prepared for
/// it into a page-locked arena beside the staging buffer, which the device decodes into
/// their places ([`MemoryBatches::submit_filled_for_device`]).
pub struct MemoryBatches {
    image_bytes: usize,
    /// How a staged image becomes the model's input (bytes through a table, or f32 values).
    expansion: PixelExpansion,
    staging: Option<HostStaging>,
    /// The device decoding's arena, grown with the batch size.
    arena: Option<HostStaging>,
}

/// Arena bytes per image of a batch decoded on the device from memory: room for a
/// 12-megapixel photo's scan, or a 500x375 progressive JPEG's coefficients twice over. An
/// image that finds the arena full is decoded on the host.
const ARENA_BYTES_PER_IMAGE: usize = 1 << 20;

impl MemoryBatches {
    pub fn new(pre: &PreprocessConfig, image_bytes: usize) -> MemoryBatches {
        MemoryBatches {
            image_bytes,
            expansion: PixelExpansion::of(pre),
            staging: None,
            arena: None,
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

    /// As [`MemoryBatches::submit_filled`], with `fill` also given an arena for JPEGs it
    /// prepares for device decoding (`ImageLoader::load_bytes_for_device`) and returning those
    /// images by their place in the batch; the device decodes them into their places before
    /// the pass. Collect the outputs with [`MemoryBatches::finish`], which says whether the
    /// device marked an image (then the batch must be decoded again on the host).
    pub fn submit_filled_for_device<E>(
        &mut self,
        runner: &mut Runner,
        count: usize,
        fill: impl FnOnce(&mut [u8], &(dyn ArenaReserve + Sync)) -> Result<Vec<(usize, DeviceImage)>, E>,
    ) -> Result<PendingOutputs, E>
    where
        E: From<anyhow::Error>,
    {
        self.grow_staging(runner, count)?;
        self.grow_arena(runner, count * ARENA_BYTES_PER_IMAGE)?;
        let (Some(staging), Some(arena)) = (self.staging.as_mut(), self.arena.as_mut()) else {
            unreachable!("allocated above")
        };
        let pixels = &mut staging.as_mut_slice()[..count * self.image_bytes];
        let arena = arena.as_mut_slice();
        let used = AtomicUsize::new(0);
        let mut on_device = fill(pixels, &BumpArena::new(arena, &used))?;
        on_device.sort_by_key(|(place, _)| *place);
        let used = used.into_inner();
        let images: Vec<(usize, &DeviceImage)> = on_device
            .iter()
            .map(|(place, image)| (*place, image))
            .collect();
        let batch = (!images.is_empty()).then(|| device_batch(&images, self.image_bytes, used));
        let decode = batch.as_ref().map(|b| b.decode(&arena[..used]));
        Ok(runner
            .submit_decoding(pixels, count, &self.expansion, decode.as_ref())
            .map_err(anyhow::Error::from)?)
    }

    /// Waits for a pass [`MemoryBatches::submit_filled_for_device`] (or another submission)
    /// queued: its outputs, and whether the device marked one of its images as decoded
    /// wrongly (data libjpeg would warn about, a block outside the exactness guard), in which
    /// case the outputs are not to be used and the batch is to be decoded again on the host.
    pub fn finish(runner: &mut Runner, pending: PendingOutputs) -> Result<(Vec<HostTensor>, bool)> {
        let (outputs, status) = runner.finish_decoding(pending)?;
        Ok((outputs, status.iter().any(|&word| word != 0)))
    }

    /// Queues one forward pass over `images` made ready by [`ImageDecoder::prepare`], in
    /// order: pixels are copied into the staging buffer, JPEGs' regions into the arena (grown
    /// to hold them all) for the device to decode into their places. Collect the outputs with
    /// [`MemoryBatches::finish`]; where it says the device marked an image, decode the batch
    /// again with [`PreparedImage::pixels_on_host`].
    pub fn submit_prepared(
        &mut self,
        runner: &mut Runner,
        images: &[&PreparedImage],
    ) -> Result<PendingOutputs> {
        let image_bytes = self.image_bytes;
        let regions: usize = images
            .iter()
            .map(|image| match image {
                PreparedImage::Device(prepared) => prepared.data.len().next_multiple_of(16),
                PreparedImage::Pixels(_) => 0,
            })
            .sum();
        self.grow_arena(runner, regions)?;
        self.submit_filled_for_device(runner, images.len(), |pixels, arena| {
            let mut on_device = Vec::new();
            for (place, (image, out)) in images
                .iter()
                .zip(pixels.chunks_mut(image_bytes))
                .enumerate()
            {
                match image {
                    PreparedImage::Pixels(decoded) => {
                        anyhow::ensure!(
                            decoded.len() == image_bytes,
                            "a decoded image of {} bytes where the model takes {image_bytes}",
                            decoded.len()
                        );
                        out.copy_from_slice(decoded);
                    }
                    PreparedImage::Device(prepared) => {
                        let (at, region) = arena
                            .reserve(prepared.data.len())
                            .context("the arena was sized for the batch's regions")?;
                        region[..prepared.data.len()].copy_from_slice(&prepared.data);
                        let image = DeviceImage {
                            jpeg: prepared.image.jpeg.clone().moved_by(at),
                            resize: prepared.image.resize.clone(),
                        };
                        on_device.push((place, image));
                    }
                }
            }
            Ok(on_device)
        })
    }

    /// Makes the device decoding's arena at least `bytes` long.
    fn grow_arena(&mut self, runner: &mut Runner, bytes: usize) -> Result<()> {
        if self.arena.as_ref().is_none_or(|a| a.len() < bytes) {
            self.arena = None; // freed before its successor is allocated
            self.arena = Some(
                runner
                    .alloc_staging(bytes)
                    .context("allocating the staging for device decoding")?,
            );
        }
        Ok(())
    }

    fn grow_staging(&mut self, runner: &mut Runner, count: usize) -> Result<()> {
        let bytes = count * self.image_bytes;
        if self.staging.as_ref().is_none_or(|s| s.len() < bytes) {
            self.staging = None; // freed before its successor is allocated
            self.staging = Some(
                runner
                    .alloc_staging(bytes)
                    .context("allocating the staging buffer")?,
            );
        }
        Ok(())
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
        self.grow_staging(runner, count)?;
        let Some(staging) = self.staging.as_mut() else {
            unreachable!("allocated above")
        };
        let pixels = &mut staging.as_mut_slice()[..bytes];
        fill(pixels)?;
        Ok(runner
            .submit_bytes(pixels, count, &self.expansion)
            .map_err(anyhow::Error::from)?)
    }
}
