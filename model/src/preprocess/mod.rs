//! Image preprocessing, reproducing what Hugging Face does to an image file before a ViT sees
//! it: `transformers.image_utils.load_image` (EXIF orientation, then PIL's `convert("RGB")`)
//! followed by the slow, PIL-based `ViTImageProcessor` (resize, rescale, normalise), or the
//! processors of DeiT, BEiT, CLIP, BiT (DINOv2), SigLIP and ConvNeXT, which resize to a fixed
//! size or the shortest edge and may then center-crop, each with its class's defaults
//! ([`ProcessorClass`]); or timm's eval transform
//! ([`PreprocessConfig::from_timm_pretrained_cfg`]), whose center crop rounds as torchvision's;
//! or DINOv3's `DINOv3ViTImageProcessor`, which works on torch tensors and resizes floats
//! (`torchvision_float`: its own steps after the same decoding, staged as f32 values).
//!
//! The aim is the same numbers as HF, not merely a similar picture, so each step copies PIL's
//! arithmetic:
//! - JPEG is decoded by libjpeg-turbo's decoder (through mozjpeg, a fork of it that decodes the
//!   same way), as PIL does; the `image` crate's pure-Rust JPEG decoder differs from PIL by up to
//!   4 levels on a quarter of the pixels of our photo fixtures. PNG and WebP go through the
//!   `image` crate, which decodes them exactly as PIL does.
//! - Colour conversion is PIL's: RGBA loses its alpha (no compositing), grey is replicated, and
//!   the one-channel "L" mode uses PIL's fixed-point ITU-R 601-2 luma. CMYK and YCCK JPEGs are
//!   read as Pillow reads them (Adobe's inverted CMYK) and converted with its rounding;
//!   16-bit grey PNGs (Pillow's "I;16") are clipped to 255, as its conversion does.
//! - EXIF orientation is found as Pillow's `getexif` finds it, damaged blocks included
//!   (`pil_metadata`), in JPEG, PNG (eXIf and ImageMagick's text profiles) and WebP, and the
//!   PNG chunks Pillow refuses make the file refused. Where the processor's
//!   `do_convert_rgb` is on (CLIP's, BiT's and SigLIP's default), a PNG whose tRNS chunk names
//!   one transparent colour has that colour turned white, as HF's `convert_to_rgb` composites
//!   it onto white.
//! - Resizing is our own implementation of PIL's separable convolution in 8-bit fixed point
//!   (summed in i32 as PIL does), which rounds and clips to u8 after the first pass and again
//!   after the second, with Pillow 13's choice of which pass goes first.
//!   `image`'s `resize` and `fast_image_resize` were measured first: both come within one level
//!   for bilinear and Hamming but are off by up to 3 (bicubic), 5 (Lanczos), 31 (box) and 56
//!   (nearest) levels on the fixtures, against 0 for this implementation.
//! - The shortest edge's other side is HF's `int(edge * long / short)`; the center crop is
//!   HF's `center_crop`: the window starts `(side - crop) // 2` in, and where it is larger than
//!   the image the rest is zeros (before rescale and normalise, as HF pads the 8-bit image). It
//!   copies the window's rows out of the resized image.
//! - Rescale and normalise use numpy's precisions: `(u8 as f64 * factor) as f32`, then
//!   `(x - mean) / std` in f32. [`normalization_table`] holds those values for every byte of
//!   every channel, so the float step is a table look-up ([`normalize_into`]), on the host or
//!   on the GPU, with the same results.
//!
//! [`ImageLoader`] is the fast path: one per worker thread, reusing its buffers and filter
//! taps, writing resized (and cropped) 8-bit HWC pixels into a caller's buffer; `preprocess_file` and
//! `preprocess_bytes` are it followed by the table.

mod classes;
mod config;
mod decode;
pub mod device_batch;
mod error;
pub mod jpeg_coefficients;
pub mod jpeg_scan;
pub mod naflex;
mod open_clip;
mod pil_metadata;
mod resampling;
mod resize;
mod timm;
mod torchvision_float;

use std::io::Read;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use device_batch::resample_plan_with;
pub use device_batch::{DeviceImage, ResizeRefusal};
use jpeg_coefficients::{read_jpeg_into, EntropyOn, HostReason};
use vitrt_runtime::image_kernels::resample::TapTable;

pub use classes::{ClassDefaults, ProcessorClass};
pub use config::{CenterCropRounding, PixelArithmetic, PreprocessConfig};
pub use error::{
    ImageLimits, PreprocessError, MAX_IMAGE_PIXELS, MAX_OUTPUT_SIDE, PIL_MAX_IMAGE_PIXELS,
};
pub use resampling::{Resample, ResizeTarget};

/// Time spent per stage for one image.
#[derive(Clone, Copy, Debug, Default)]
pub struct StageTimes {
    /// Reading the file (zero for `load_bytes_into`).
    pub read: Duration,
    /// Decoding, EXIF orientation and conversion to RGB or L.
    pub decode: Duration,
    /// Resizing and center-cropping into the output (or copying it, when neither is on).
    pub resize: Duration,
}

/// One worker's reusable state: buffers for the file bytes, the decoded image, the resize
/// intermediate, the resized image when a crop follows, and cached filter taps per (input size,
/// output size). Decoding same-size
/// JPEGs allocates nothing here once warm (libjpeg still allocates its own per-image state).
pub struct ImageLoader {
    cfg: PreprocessConfig,
    limits: ImageLimits,
    file: Vec<u8>,
    decode: decode::DecodeBuffers,
    resizer: resize::Resizer,
    /// The resized image, when a center crop is taken from it.
    resized: Vec<u8>,
    /// Tap tables of device resizes by (input, output) size, shared by the images of a size.
    device_taps: Vec<((usize, usize), Arc<TapTable>)>,
    /// Where the JPEGs it prepares for device decoding are entropy-decoded.
    entropy: EntropyOn,
}

/// Where a worker puts an image's data for device decoding: a batch's arena.
pub trait ArenaReserve {
    /// Reserves `bytes` (a multiple of 16) of the arena: the region and its offset (a
    /// multiple of 16), or `None` when the arena has no room left. Workers share the arena,
    /// so it hands out disjoint regions through a shared reference.
    #[allow(clippy::mut_from_ref)]
    fn reserve(&self, bytes: usize) -> Option<(usize, &mut [u8])>;
}

/// Why an image was decoded on the host rather than on the device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HostDecoded {
    /// Not a JPEG (PNG, WebP).
    NotJpeg,
    /// A JPEG the coefficient path leaves to the host decoder.
    Jpeg(HostReason),
    /// A resize the image kernels do not do (or one the config refuses for this image).
    Resize(ResizeRefusal),
    /// The batch's arena had no room left for it.
    ArenaFull,
}

impl HostDecoded {
    pub fn describe(self) -> &'static str {
        match self {
            HostDecoded::NotJpeg => "not a JPEG",
            HostDecoded::Jpeg(reason) => reason.describe(),
            HostDecoded::Resize(ResizeRefusal::NotSupported) => {
                "a resize the image kernels do not do (nearest, or one channel)"
            }
            HostDecoded::Resize(ResizeRefusal::HostRefuses) => "a size the config refuses",
            HostDecoded::ArenaFull => "the batch's coefficient staging was full",
        }
    }
}

/// What [`ImageLoader::load_file_for_device`] made of a file.
#[derive(Debug)]
pub enum Loaded {
    /// Prepared for device decoding: its data is in the arena.
    Device(Box<DeviceImage>),
    /// Decoded on the host into the caller's buffer, and why.
    Host(HostDecoded),
}

impl ImageLoader {
    pub fn new(cfg: &PreprocessConfig, limits: ImageLimits) -> Self {
        Self {
            cfg: cfg.clone(),
            limits,
            file: Vec::new(),
            decode: decode::DecodeBuffers::default(),
            resizer: resize::Resizer::default(),
            resized: Vec::new(),
            device_taps: Vec::new(),
            entropy: EntropyOn::Device,
        }
    }

    /// Where the JPEGs [`load_file_for_device`](Self::load_file_for_device) prepares are
    /// entropy-decoded (default: on the device, for the files that allow it).
    pub fn with_entropy(mut self, entropy: EntropyOn) -> Self {
        self.entropy = entropy;
        self
    }

    pub fn config(&self) -> &PreprocessConfig {
        &self.cfg
    }

    pub fn limits(&self) -> ImageLimits {
        self.limits
    }

    /// The bytes of one preprocessed image: height * width * channels 8-bit samples, or for
    /// DINOv3's float steps as many f32 values (four bytes each).
    pub fn output_bytes(&self) -> usize {
        let (height, width) = self.cfg.output_size();
        let samples = height * width * self.cfg.num_channels;
        match self.cfg.arithmetic {
            PixelArithmetic::Pil8Bit => samples,
            PixelArithmetic::TorchvisionFloat => samples * 4,
        }
    }

    /// Reads the file (never more than `max_file_bytes` + 1 bytes of it), decodes it, applies
    /// its EXIF orientation, converts it to RGB (or L), resizes it and center-crops it, each
    /// when the config asks (with neither, it checks the image's size), writing HWC u8 into `out`, whose length must be
    /// [`output_bytes`](Self::output_bytes).
    pub fn load_file_into(
        &mut self,
        path: &Path,
        out: &mut [u8],
    ) -> Result<StageTimes, PreprocessError> {
        self.check_output(out, &path.display().to_string())?;
        let start = Instant::now();
        read_limited(path, self.limits.max_file_bytes, &mut self.file)?;
        let read = start.elapsed();
        let bytes = std::mem::take(&mut self.file);
        let result = self.load_named(&bytes, &path.display().to_string(), out);
        self.file = bytes;
        let mut times = result?;
        times.read = read;
        Ok(times)
    }

    /// As [`load_file_into`](Self::load_file_into), or, for a JPEG the device path takes and
    /// a resize the image kernels do, its scan (or coefficients) and multipliers written into
    /// `arena` and described for device decoding (`out` then left as it was). Whichever path
    /// takes it, the 8-bit pixels that end up in the model's input are the same.
    pub fn load_file_for_device(
        &mut self,
        path: &Path,
        out: &mut [u8],
        arena: &dyn ArenaReserve,
    ) -> Result<(StageTimes, Loaded), PreprocessError> {
        let name = path.display().to_string();
        self.check_output(out, &name)?;
        let start = Instant::now();
        read_limited(path, self.limits.max_file_bytes, &mut self.file)?;
        let read = start.elapsed();
        let bytes = std::mem::take(&mut self.file);
        let result = self.load_bytes_for_device(&bytes, &name, out, arena);
        self.file = bytes;
        result.map(|(times, loaded)| (StageTimes { read, ..times }, loaded))
    }

    /// As [`load_file_for_device`](Self::load_file_for_device), for a file's contents
    /// already in memory; `name` names the image in errors.
    pub fn load_bytes_for_device(
        &mut self,
        bytes: &[u8],
        name: &str,
        out: &mut [u8],
        arena: &dyn ArenaReserve,
    ) -> Result<(StageTimes, Loaded), PreprocessError> {
        self.check_output(out, name)?;
        let decoding = Instant::now();
        match self.prepare_for_device(bytes, arena) {
            Ok(image) => Ok((
                StageTimes {
                    read: Duration::ZERO,
                    decode: decoding.elapsed(),
                    resize: Duration::ZERO,
                },
                Loaded::Device(Box::new(image)),
            )),
            Err(why) => self.load_named(bytes, name, out).map(|mut times| {
                // The coefficient reading that gave up counts as decoding.
                times.decode += decoding
                    .elapsed()
                    .saturating_sub(times.decode + times.resize);
                (times, Loaded::Host(why))
            }),
        }
    }

    fn prepare_for_device(
        &mut self,
        bytes: &[u8],
        arena: &dyn ArenaReserve,
    ) -> Result<DeviceImage, HostDecoded> {
        if !bytes.starts_with(&[0xFF, 0xD8]) {
            return Err(HostDecoded::NotJpeg);
        }
        if self.cfg.device_decode_refusal().is_some() {
            return Err(HostDecoded::Resize(ResizeRefusal::NotSupported));
        }
        let written = read_jpeg_into(bytes, &self.limits, arena, self.entropy).map_err(
            |reason| match reason {
                HostReason::NoRoom => HostDecoded::ArenaFull,
                other => HostDecoded::Jpeg(other),
            },
        )?;
        // A config that refuses this image's size leaves it to the host (its region in the
        // arena unused), which says how.
        let (cfg, taps) = (&self.cfg, &mut self.device_taps);
        let plan = resample_plan_with(
            cfg,
            self.limits.max_pixels,
            written.upright_size(),
            &mut |i, o| {
                if let Some((_, table)) = taps.iter().find(|(key, _)| *key == (i, o)) {
                    return Arc::clone(table);
                }
                if taps.len() >= 16 {
                    taps.clear();
                }
                let table = Arc::new(device_batch::tap_table(cfg, i, o));
                taps.push(((i, o), Arc::clone(&table)));
                table
            },
        )
        .map_err(HostDecoded::Resize)?;
        Ok(DeviceImage {
            jpeg: written,
            resize: plan,
        })
    }

    /// As [`load_file_into`](Self::load_file_into), for an image already in memory; `name`
    /// names it in errors.
    pub fn load_bytes_into(
        &mut self,
        bytes: &[u8],
        name: &str,
        out: &mut [u8],
    ) -> Result<StageTimes, PreprocessError> {
        self.check_output(out, name)?;
        self.load_named(bytes, name, out)
    }

    /// As [`load_bytes_into`](Self::load_bytes_into), for an image already decoded and
    /// upright: `pixels` is HWC 8-bit, `height` x `width` of `pixel_channels` 1 (grey) or 3
    /// (RGB). It is converted to the config's mode as PIL's `convert` does (grey replicated to
    /// RGB; RGB to L by PIL's luma), then resized and center-cropped as a file's pixels are;
    /// `name` names it in errors.
    pub fn load_pixels_into(
        &mut self,
        pixels: &[u8],
        (height, width): (usize, usize),
        pixel_channels: usize,
        name: &str,
        out: &mut [u8],
    ) -> Result<(), PreprocessError> {
        self.check_output(out, name)?;
        let unsupported = |reason: String| PreprocessError::UnsupportedImage {
            image: name.to_string(),
            reason,
        };
        if pixel_channels != 1 && pixel_channels != 3 {
            return Err(unsupported(format!(
                "it has {pixel_channels} channels; give 1 (grey) or 3 (RGB)"
            )));
        }
        if height == 0 || width == 0 {
            return Err(unsupported(format!("it has no pixels ({height}x{width})")));
        }
        if (height * width) as u64 > self.limits.max_pixels {
            return Err(PreprocessError::ImageTooLarge {
                image: name.to_string(),
                width: width as u64,
                height: height as u64,
                max_pixels: self.limits.max_pixels,
            });
        }
        if pixels.len() != height * width * pixel_channels {
            return Err(unsupported(format!(
                "{} bytes for {height}x{width} pixels of {pixel_channels} channels",
                pixels.len()
            )));
        }
        let channels = self.cfg.num_channels;
        if pixel_channels == channels {
            return self.resize_and_crop(pixels, (height, width), name, out);
        }
        let mut converted = std::mem::take(&mut self.decode.pixels);
        decode::convert_decoded(pixels, pixel_channels, &mut converted, channels);
        let result = self.resize_and_crop(
            &converted[..height * width * channels],
            (height, width),
            name,
            out,
        );
        self.decode.pixels = converted;
        result
    }

    /// The processor's steps after decoding, in the config's arithmetic: into 8-bit pixels
    /// resized and cropped as PIL does, or into the model's input in f32 (DINOv3's).
    fn resize_and_crop(
        &mut self,
        pixels: &[u8],
        (height, width): (usize, usize),
        name: &str,
        out: &mut [u8],
    ) -> Result<(), PreprocessError> {
        match self.cfg.arithmetic {
            PixelArithmetic::Pil8Bit => resize_and_crop(
                &self.cfg,
                &self.limits,
                (&mut self.resizer, &mut self.resized),
                pixels,
                (height, width),
                name,
                out,
            ),
            PixelArithmetic::TorchvisionFloat => torchvision_float::preprocess_into(
                &self.cfg,
                self.limits.max_pixels,
                pixels,
                (height, width),
                name,
                out,
            ),
        }
    }

    fn check_output(&self, out: &[u8], name: &str) -> Result<(), PreprocessError> {
        self.validate_config()?;
        if out.len() != self.output_bytes() {
            return Err(PreprocessError::OutputSize {
                image: name.to_string(),
                len: out.len(),
                expected: self.output_bytes(),
            });
        }
        Ok(())
    }

    fn validate_config(&self) -> Result<(), PreprocessError> {
        self.cfg
            .validate()
            .map_err(|reason| PreprocessError::InvalidConfig {
                origin: "(in memory)".into(),
                reason,
            })
    }

    fn load_named(
        &mut self,
        bytes: &[u8],
        name: &str,
        out: &mut [u8],
    ) -> Result<StageTimes, PreprocessError> {
        let cfg = &self.cfg;
        let channels = cfg.num_channels;
        let start = Instant::now();
        let (height, width) = decode::decode_into(
            bytes,
            name,
            channels,
            cfg.do_convert_rgb,
            &self.limits,
            &mut self.decode,
        )?;
        let decoded = Instant::now();
        let pixels = std::mem::take(&mut self.decode.pixels);
        let result = self.resize_and_crop(
            &pixels[..height * width * channels],
            (height, width),
            name,
            out,
        );
        self.decode.pixels = pixels;
        result?;
        Ok(StageTimes {
            read: Duration::ZERO,
            decode: decoded - start,
            resize: decoded.elapsed(),
        })
    }
}

/// Resizes and center-crops upright HWC pixels in the config's mode, each when `cfg` asks,
/// into `out`; with neither, checks that the image already has the output's size. `buffers`
/// are the resizer's taps and the resized image a crop is taken from.
fn resize_and_crop(
    cfg: &PreprocessConfig,
    limits: &ImageLimits,
    buffers: (&mut resize::Resizer, &mut Vec<u8>),
    pixels: &[u8],
    (height, width): (usize, usize),
    name: &str,
    out: &mut [u8],
) -> Result<(), PreprocessError> {
    let (resizer, resized) = buffers;
    let channels = cfg.num_channels;
    // HF's order: resize, then center crop (rescale and normalise come after, in floats).
    let crop = cfg.crop_size;
    if cfg.do_resize {
        let (resized_height, resized_width) = cfg.size.resized_size(height, width);
        if let ResizeTarget::ShortestEdge(shortest_edge) = cfg.size {
            if (resized_height * resized_width) as u64 > limits.max_pixels {
                return Err(PreprocessError::ResizedTooLarge {
                    image: name.to_string(),
                    width,
                    height,
                    shortest_edge,
                    resized_width,
                    resized_height,
                    max_pixels: limits.max_pixels,
                });
            }
        }
        match crop {
            // A crop the size of the resized image is the whole of it.
            Some(crop) if crop != (resized_height, resized_width) => {
                // Every byte is overwritten by the resize: only the length matters.
                resized.resize(resized_height * resized_width * channels, 0);
                resizer.resize(
                    pixels,
                    (height, width, channels),
                    resized,
                    resized_height,
                    resized_width,
                    cfg.resample,
                );
                center_crop_into(
                    resized,
                    (resized_height, resized_width, channels),
                    out,
                    crop,
                    cfg.crop_rounding,
                );
            }
            _ => resizer.resize(
                pixels,
                (height, width, channels),
                out,
                resized_height,
                resized_width,
                cfg.resample,
            ),
        }
    } else if let Some(crop) = crop {
        center_crop_into(
            pixels,
            (height, width, channels),
            out,
            crop,
            cfg.crop_rounding,
        );
    } else if (height, width) == cfg.output_size() {
        out.copy_from_slice(pixels);
    } else {
        let (expected_height, expected_width) = cfg.output_size();
        return Err(PreprocessError::SizeMismatch {
            image: name.to_string(),
            height,
            width,
            expected_height,
            expected_width,
        });
    }
    Ok(())
}

/// A center crop of an HWC image (`shape`) to `crop` = (height, width) into `out`: the window
/// starts where `rounding` puts it (HF: `(side - crop_side) // 2` pixels in, floor division, so
/// negative when the crop is larger), and the part of the window outside the image is zeros,
/// as HF and torchvision pad. Only the window's rows are copied.
fn center_crop_into(
    src: &[u8],
    shape: (usize, usize, usize),
    out: &mut [u8],
    crop: (usize, usize),
    rounding: CenterCropRounding,
) {
    let (height, width, channels) = shape;
    let (crop_height, crop_width) = crop;
    debug_assert_eq!(src.len(), height * width * channels);
    debug_assert_eq!(out.len(), crop_height * crop_width * channels);
    let (top, left) = (
        rounding.window_start(height, crop_height),
        rounding.window_start(width, crop_width),
    );
    // Output columns [x0, x1) come from the image, starting at its column x0 + left.
    let x0 = (-left).clamp(0, crop_width as i64) as usize;
    let x1 = (width as i64 - left).clamp(x0 as i64, crop_width as i64) as usize;
    let row_bytes = crop_width * channels;
    for (y, out_row) in out.chunks_exact_mut(row_bytes).enumerate() {
        let source_y = y as i64 + top;
        if source_y < 0 || source_y >= height as i64 {
            out_row.fill(0);
            continue;
        }
        let source_row = &src[source_y as usize * width * channels..][..width * channels];
        let first = (x0 as i64 + left) as usize;
        out_row[..x0 * channels].fill(0);
        out_row[x0 * channels..x1 * channels]
            .copy_from_slice(&source_row[first * channels..][..(x1 - x0) * channels]);
        out_row[x1 * channels..].fill(0);
    }
}

/// Reads `path` into `buffer` (cleared first), refusing it once it proves longer than `max`
/// bytes: by its size, or after reading `max` + 1 bytes (a file that grows meanwhile). Only a
/// regular file is read: a FIFO is refused without blocking on it, and a device such as
/// `/dev/zero` without reading it.
fn read_limited(path: &Path, max: u64, buffer: &mut Vec<u8>) -> Result<(), PreprocessError> {
    let read_error = |source: std::io::Error| match source.kind() {
        std::io::ErrorKind::NotFound => PreprocessError::FileNotFound {
            path: path.to_path_buf(),
        },
        _ => PreprocessError::FileRead {
            path: path.to_path_buf(),
            source,
        },
    };
    let too_large = || PreprocessError::FileTooLarge {
        path: path.to_path_buf(),
        max_file_bytes: max,
    };
    let file = vitrt_weights::open_regular_file(path).map_err(read_error)?;
    let metadata = file.metadata().map_err(read_error)?;
    if metadata.len() > max {
        return Err(too_large());
    }
    buffer.clear();
    buffer.reserve(metadata.len() as usize);
    file.take(max.saturating_add(1))
        .read_to_end(buffer)
        .map_err(read_error)?;
    if buffer.len() as u64 > max {
        buffer.clear();
        return Err(too_large());
    }
    Ok(())
}

/// How the bytes an [`ImageLoader`] writes become the model's input.
#[derive(Debug, Clone, PartialEq)]
pub enum PixelExpansion {
    /// 8-bit HWC pixels, byte `v` of channel `c` becoming `table[c * 256 + v]` (a
    /// [`normalization_table`]).
    Table(Vec<f32>),
    /// The model's input itself: CHW f32 values in native byte order (DINOv3's float steps).
    Floats,
}

impl PixelExpansion {
    /// The expansion of the images a loader under `cfg` writes.
    pub fn of(cfg: &PreprocessConfig) -> Self {
        match cfg.arithmetic {
            PixelArithmetic::Pil8Bit => Self::Table(normalization_table(cfg)),
            PixelArithmetic::TorchvisionFloat => Self::Floats,
        }
    }

    /// One image's staged bytes (`channels` channels) as the model's CHW f32 input.
    pub fn expand(&self, staged: &[u8], channels: usize) -> Vec<f32> {
        match self {
            Self::Table(table) => {
                let mut chw = vec![0f32; staged.len()];
                normalize_into(staged, channels, table, &mut chw);
                chw
            }
            Self::Floats => floats_of_bytes(staged),
        }
    }
}

/// f32 values from their native-order bytes (a whole number of them).
pub fn floats_of_bytes(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|b| f32::from_ne_bytes([b[0], b[1], b[2], b[3]]))
        .collect()
}

/// `table[c * 256 + v]`: the value byte `v` of channel `c` becomes after rescale and
/// normalise, with exactly HF's arithmetic: `(v as f64 * factor) as f32`, then
/// `(x - mean) / std` in f32, each step only when the config asks for it.
pub fn normalization_table(cfg: &PreprocessConfig) -> Vec<f32> {
    let mut table = Vec::with_capacity(cfg.num_channels * 256);
    for c in 0..cfg.num_channels {
        for v in 0..=255u8 {
            let mut value = if cfg.do_rescale {
                (f64::from(v) * cfg.rescale_factor) as f32
            } else {
                f32::from(v)
            };
            if cfg.do_normalize {
                value = (value - cfg.image_mean[c]) / cfg.image_std[c];
            }
            table.push(value);
        }
    }
    table
}

/// HWC u8 pixels of one image to CHW f32 through a [`normalization_table`] for `channels`
/// channels. `chw` must have `hwc.len()` values.
pub fn normalize_into(hwc: &[u8], channels: usize, table: &[f32], chw: &mut [f32]) {
    assert_eq!(hwc.len(), chw.len(), "one f32 per input byte");
    assert!(
        channels > 0 && hwc.len().is_multiple_of(channels),
        "whole pixels"
    );
    assert!(table.len() >= channels * 256, "a table row per channel");
    let plane = hwc.len() / channels;
    match channels {
        1 => {
            for (o, &v) in chw.iter_mut().zip(hwc) {
                *o = table[usize::from(v)];
            }
        }
        3 => {
            let (r, rest) = chw.split_at_mut(plane);
            let (g, b) = rest.split_at_mut(plane);
            let (tr, tg, tb) = (&table[..256], &table[256..512], &table[512..768]);
            for (i, p) in hwc.chunks_exact(3).enumerate() {
                r[i] = tr[usize::from(p[0])];
                g[i] = tg[usize::from(p[1])];
                b[i] = tb[usize::from(p[2])];
            }
        }
        _ => {
            for (i, p) in hwc.chunks_exact(channels).enumerate() {
                for (c, &v) in p.iter().enumerate() {
                    chw[c * plane + i] = table[c * 256 + usize::from(v)];
                }
            }
        }
    }
}

/// The limits `preprocess_file` and `preprocess_bytes` apply: PIL's own pixel cap (twice
/// `Image.MAX_IMAGE_PIXELS`), and the defaults for the rest.
fn pil_limits() -> ImageLimits {
    ImageLimits {
        max_pixels: MAX_IMAGE_PIXELS,
        ..ImageLimits::default()
    }
}

/// An image as `load_image` leaves it, before the processor: upright, in PIL's mode.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DecodedImage {
    pub height: usize,
    pub width: usize,
    /// 3 (RGB) or 1 (L).
    pub channels: usize,
    /// HWC, 8 bits a sample: height * width * channels bytes.
    pub pixels: Vec<u8>,
}

/// Decodes an image (PNG, JPEG or WebP, told apart by content), applies its EXIF orientation
/// and converts it to RGB (`channels` 3) or L (1) as PIL does, within `limits`; `convert_rgb`
/// is the processor's `do_convert_rgb` (see [`ImageLoader`]'s decoding). `name` names it in
/// errors. The file's pixels as the model's preprocessing starts from them.
pub fn decode_image(
    bytes: &[u8],
    name: &str,
    channels: usize,
    convert_rgb: bool,
    limits: &ImageLimits,
) -> Result<DecodedImage, PreprocessError> {
    if channels != 1 && channels != 3 {
        return Err(PreprocessError::InvalidConfig {
            origin: "(decode_image)".into(),
            reason: format!("{channels} channels asked; 3 (RGB) or 1 (L) are made"),
        });
    }
    let mut buffers = decode::DecodeBuffers::default();
    let (height, width) =
        decode::decode_into(bytes, name, channels, convert_rgb, limits, &mut buffers)?;
    let mut pixels = buffers.pixels;
    pixels.truncate(height * width * channels);
    Ok(DecodedImage {
        height,
        width,
        channels,
        pixels,
    })
}

/// Decodes an image file (PNG, JPEG or WebP, told apart by content), applies its EXIF
/// orientation, converts it to RGB (or L for one-channel models), resizes, rescales and
/// normalises it. Returns `num_channels x height x width` f32 values, channel-major (CHW).
pub fn preprocess_file(path: &Path, cfg: &PreprocessConfig) -> Result<Vec<f32>, PreprocessError> {
    let mut loader = ImageLoader::new(cfg, pil_limits());
    let mut bytes = Vec::new();
    read_limited(path, loader.limits.max_file_bytes, &mut bytes)?;
    preprocess_with(&mut loader, &bytes, &path.display().to_string())
}

/// As [`preprocess_file`], for an image already in memory.
pub fn preprocess_bytes(bytes: &[u8], cfg: &PreprocessConfig) -> Result<Vec<f32>, PreprocessError> {
    preprocess_with(
        &mut ImageLoader::new(cfg, pil_limits()),
        bytes,
        "(in-memory bytes)",
    )
}

fn preprocess_with(
    loader: &mut ImageLoader,
    bytes: &[u8],
    name: &str,
) -> Result<Vec<f32>, PreprocessError> {
    // The config is checked before the output is allocated: an unchecked one may be huge.
    loader.validate_config()?;
    let mut staged = vec![0u8; loader.output_bytes()];
    loader.load_bytes_into(bytes, name, &mut staged)?;
    Ok(PixelExpansion::of(&loader.cfg).expand(&staged, loader.cfg.num_channels))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// HF's rescale and normalise, sample by sample, as `preprocess_*` computed them before
    /// the table: the reference the table must equal bit for bit.
    fn rescale_and_normalize(hwc: &[u8], channels: usize, cfg: &PreprocessConfig) -> Vec<f32> {
        let plane = hwc.len() / channels;
        let mut out = vec![0f32; hwc.len()];
        for (pixel_index, pixel) in hwc.chunks_exact(channels).enumerate() {
            for (c, &sample) in pixel.iter().enumerate() {
                let mut value = if cfg.do_rescale {
                    (f64::from(sample) * cfg.rescale_factor) as f32
                } else {
                    f32::from(sample)
                };
                if cfg.do_normalize {
                    value = (value - cfg.image_mean[c]) / cfg.image_std[c];
                }
                out[c * plane + pixel_index] = value;
            }
        }
        out
    }

    /// HF's `center_crop` written out as numpy does it: pad to at least the crop size with
    /// `ceil` of half the missing pixels before, then slice from the shifted offset.
    fn hf_center_crop(src: &[u8], (h, w): (usize, usize), (ch, cw): (usize, usize)) -> Vec<u8> {
        let (nh, nw) = (h.max(ch), w.max(cw));
        let (top_pad, left_pad) = ((nh - h).div_ceil(2), (nw - w).div_ceil(2));
        let mut padded = vec![0u8; nh * nw];
        for y in 0..h {
            padded[(y + top_pad) * nw + left_pad..][..w].copy_from_slice(&src[y * w..][..w]);
        }
        let top = (h as i64 - ch as i64).div_euclid(2) + top_pad as i64;
        let left = (w as i64 - cw as i64).div_euclid(2) + left_pad as i64;
        let mut out = Vec::new();
        for y in 0..ch {
            let row = (top as usize + y) * nw + left as usize;
            out.extend_from_slice(&padded[row..][..cw]);
        }
        out
    }

    #[test]
    fn center_crop_matches_hf_including_padding() {
        for (h, w) in [(1, 1), (4, 7), (7, 4), (5, 5), (6, 9)] {
            let src: Vec<u8> = (0..h * w).map(|i| (i + 1) as u8).collect();
            for ch in 1..=9 {
                for cw in 1..=9 {
                    let mut out = vec![0xAA; ch * cw];
                    center_crop_into(&src, (h, w, 1), &mut out, (ch, cw), CenterCropRounding::Hf);
                    assert_eq!(
                        out,
                        hf_center_crop(&src, (h, w), (ch, cw)),
                        "{h}x{w} -> {ch}x{cw}"
                    );
                }
            }
        }
        // Three channels move as whole pixels.
        let src: Vec<u8> = (0..4 * 5 * 3).map(|i| i as u8).collect();
        let mut out = vec![0; 2 * 3 * 3];
        center_crop_into(&src, (4, 5, 3), &mut out, (2, 3), CenterCropRounding::Hf);
        let expected: Vec<u8> = [1usize, 2]
            .iter()
            .flat_map(|&y| {
                (1..4).flat_map(move |x| (0..3).map(move |c| ((y * 5 + x) * 3 + c) as u8))
            })
            .collect();
        assert_eq!(out, expected);
    }

    /// torchvision's `center_crop` of a PIL image written out as it does it: pad
    /// `floor(missing / 2)` before and the rest after on each side the crop is larger than,
    /// then crop from `int(round((side - crop) / 2.0))` with Python's round (half to even).
    fn torchvision_center_crop(
        src: &[u8],
        (h, w): (usize, usize),
        (ch, cw): (usize, usize),
    ) -> Vec<u8> {
        let (top_pad, left_pad) = (ch.saturating_sub(h) / 2, cw.saturating_sub(w) / 2);
        let (nh, nw) = (h.max(ch), w.max(cw));
        let mut padded = vec![0u8; nh * nw];
        for y in 0..h {
            padded[(y + top_pad) * nw + left_pad..][..w].copy_from_slice(&src[y * w..][..w]);
        }
        let python_round_half = |margin: usize| {
            let x = margin as f64 / 2.0;
            let r = x.round();
            // f64::round rounds half away from zero; Python rounds half to even.
            if (r - x).abs() == 0.5 && r % 2.0 != 0.0 {
                r as usize - 1
            } else {
                r as usize
            }
        };
        let (top, left) = (python_round_half(nh - ch), python_round_half(nw - cw));
        let mut out = Vec::new();
        for y in 0..ch {
            out.extend_from_slice(&padded[(top + y) * nw + left..][..cw]);
        }
        out
    }

    #[test]
    fn center_crop_matches_torchvision_including_padding() {
        for (h, w) in [(1, 1), (4, 7), (7, 4), (5, 5), (6, 9), (12, 3)] {
            let src: Vec<u8> = (0..h * w).map(|i| (i + 1) as u8).collect();
            for ch in 1..=13 {
                for cw in 1..=13 {
                    let mut out = vec![0xAA; ch * cw];
                    center_crop_into(
                        &src,
                        (h, w, 1),
                        &mut out,
                        (ch, cw),
                        CenterCropRounding::Torchvision,
                    );
                    assert_eq!(
                        out,
                        torchvision_center_crop(&src, (h, w), (ch, cw)),
                        "{h}x{w} -> {ch}x{cw}"
                    );
                }
            }
        }
    }

    #[test]
    fn crop_windows_start_where_hf_and_torchvision_put_them() {
        // (side - crop) -> start, for margins -4..=8: HF floors half the margin; torchvision
        // rounds it half to even (round(1.5) = 2, round(2.5) = 2) and pads floor(missing / 2).
        let hf = [-2, -2, -1, -1, 0, 0, 1, 1, 2, 2, 3, 3, 4];
        let torchvision = [-2, -1, -1, 0, 0, 0, 1, 2, 2, 2, 3, 4, 4];
        for (i, margin) in (-4i64..=8).enumerate() {
            let (side, crop) = ((20 + margin) as usize, 20);
            assert_eq!(
                CenterCropRounding::Hf.window_start(side, crop),
                hf[i],
                "{margin}"
            );
            assert_eq!(
                CenterCropRounding::Torchvision.window_start(side, crop),
                torchvision[i],
                "{margin}"
            );
        }
    }

    #[test]
    fn torchvision_to_tensor_equals_hf_rescale_for_every_byte() {
        // ToTensor is `x.float().div(255)` in f32; HF's rescale is `(x as f64 * (1/255)) as f32`.
        // Both are the correctly rounded x / 255, so one table serves both.
        for v in 0..=255u8 {
            let torch = f32::from(v) / 255.0f32;
            let hf = (f64::from(v) * (1.0 / 255.0)) as f32;
            assert_eq!(torch.to_bits(), hf.to_bits(), "{v}");
        }
    }

    #[test]
    fn shortest_edge_sizes_truncate_as_hf() {
        let edge = ResizeTarget::ShortestEdge(224);
        assert_eq!(edge.resized_size(480, 640), (224, 298)); // int(224 * 640 / 480) = 298
        assert_eq!(edge.resized_size(640, 480), (298, 224));
        assert_eq!(edge.resized_size(100, 100), (224, 224));
        assert_eq!(edge.resized_size(333, 500), (224, 336)); // 336.336...
        assert_eq!(
            ResizeTarget::ShortestEdge(56).resized_size(160, 240),
            (56, 84)
        );
    }

    #[test]
    fn the_table_equals_the_per_sample_arithmetic_bit_for_bit() {
        let configs = [
            r#"{}"#,
            r#"{"image_mean": [0.485, 0.456, 0.406], "image_std": [0.229, 0.224, 0.225]}"#,
            r#"{"rescale_factor": 0.00392156862745098, "image_mean": [0.48145466, 0.4578275, 0.40821073], "image_std": [0.26862954, 0.26130258, 0.27577711]}"#,
            r#"{"do_rescale": false, "image_mean": [127.5, 100, 3], "image_std": [58.4, 57.1, 0.7]}"#,
            r#"{"do_normalize": false}"#,
            r#"{"do_normalize": false, "do_rescale": false}"#,
            r#"{"rescale_factor": 0.0078125, "image_mean": 1e-3, "image_std": 3.3}"#,
        ];
        for json in configs {
            for channels in [1, 3] {
                let json = if channels == 1 {
                    json.replace("[0.485, 0.456, 0.406]", "[0.485]")
                        .replace("[0.229, 0.224, 0.225]", "[0.229]")
                        .replace("[0.48145466, 0.4578275, 0.40821073]", "[0.48]")
                        .replace("[0.26862954, 0.26130258, 0.27577711]", "[0.27]")
                        .replace("[127.5, 100, 3]", "[127.5]")
                        .replace("[58.4, 57.1, 0.7]", "[58.4]")
                } else {
                    json.to_string()
                };
                let cfg = PreprocessConfig::from_json_str_for_channels(&json, channels).unwrap();
                // Every byte value in every channel.
                let hwc: Vec<u8> = (0..256 * channels).map(|i| (i / channels) as u8).collect();
                let table = normalization_table(&cfg);
                let mut chw = vec![0f32; hwc.len()];
                normalize_into(&hwc, channels, &table, &mut chw);
                let expected = rescale_and_normalize(&hwc, channels, &cfg);
                let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&chw), bits(&expected), "{json} ({channels} channels)");
            }
        }
    }

    #[test]
    fn the_table_equals_the_per_sample_arithmetic_on_the_fixtures() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/images");
        let cfg = PreprocessConfig::from_json_str(
            r#"{"image_mean": [0.485, 0.456, 0.406], "image_std": [0.229, 0.224, 0.225]}"#,
        )
        .unwrap();
        let mut loader = ImageLoader::new(&cfg, ImageLimits::default());
        let table = normalization_table(&cfg);
        for name in [
            "cat.jpg",
            "coffee.png",
            "astronaut.webp",
            "coffee_exif6.jpg",
        ] {
            let mut hwc = vec![0; loader.output_bytes()];
            loader.load_file_into(&dir.join(name), &mut hwc).unwrap();
            let mut chw = vec![0f32; hwc.len()];
            normalize_into(&hwc, 3, &table, &mut chw);
            let expected = rescale_and_normalize(&hwc, 3, &cfg);
            assert!(
                chw.iter()
                    .zip(&expected)
                    .all(|(a, b)| a.to_bits() == b.to_bits()),
                "{name}"
            );
        }
    }
}
