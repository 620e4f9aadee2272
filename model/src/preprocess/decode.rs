//! Decoding as `transformers.image_utils.load_image` does: the file's format told by content,
//! JPEG through libjpeg-turbo (mozjpeg), PNG and WebP through the `image` crate, EXIF
//! orientation applied, then PIL's `convert("RGB")` or `convert("L")`. Everything lands in
//! buffers the caller keeps, so a worker decoding same-size images allocates nothing of its own.

use std::io::{BufRead, Read};

use image::metadata::Orientation;
use image::{ColorType, ImageDecoder, ImageFormat};

use super::error::{ImageLimits, PreprocessError};
use super::pil_metadata;
use super::resize::scratch;

/// A decoder's reusable buffers: `pixels` ends up holding the upright image in PIL's mode.
#[derive(Default)]
pub(super) struct DecodeBuffers {
    pub(super) pixels: Vec<u8>,
    scratch: Vec<u8>,
}

/// Decodes `bytes` into `buffers.pixels` as upright HWC 8-bit RGB (`channels` 3) or L (1).
/// Returns (height, width); the pixels are the first height * width * channels bytes.
///
/// `convert_rgb` is the processor's `do_convert_rgb`, which HF applies after `load_image`:
/// its `convert_to_rgb` composites an image that still carries a `transparency` colour onto
/// white. After `load_image`'s `convert("RGB")` only a PNG whose tRNS chunk names a single
/// colour carries one (see [`png_transparent_colour`]), so for RGB output the pixels of that
/// colour become white; alpha channels are already gone, as `load_image` dropped them.
pub(super) fn decode_into(
    bytes: &[u8],
    name: &str,
    channels: usize,
    convert_rgb: bool,
    limits: &ImageLimits,
    buffers: &mut DecodeBuffers,
) -> Result<(usize, usize), PreprocessError> {
    if bytes.is_empty() {
        return Err(PreprocessError::EmptyImage {
            image: name.to_string(),
        });
    }
    let format = image::guess_format(bytes).map_err(|_| PreprocessError::NotAnImage {
        image: name.to_string(),
    })?;
    let raw = match format {
        ImageFormat::Jpeg => decode_jpeg(bytes, name, limits, &mut buffers.scratch)?,
        ImageFormat::Png | ImageFormat::WebP => {
            decode_with_image_crate(bytes, format, name, limits, &mut buffers.scratch)?
        }
        other => {
            return Err(PreprocessError::UnsupportedFormat {
                image: name.to_string(),
                format: format!("{other:?}"),
            })
        }
    };
    let (height, width) = (raw.height, raw.width);
    // Conversion and orientation act on each pixel alone, so their order does not matter;
    // converting first moves fewer bytes.
    if raw.layout == (Layout::Rgb { stride: 3 }) && channels == 3 {
        std::mem::swap(&mut buffers.pixels, &mut buffers.scratch);
    } else {
        let len = height * width * channels;
        to_pil_mode(
            &buffers.scratch[..height * width * raw.layout.stride()],
            raw.layout,
            scratch(&mut buffers.pixels, len),
            channels,
        );
    }
    if convert_rgb && channels == 3 && format == ImageFormat::Png {
        if let Some(colour) = png_transparent_colour(bytes) {
            whiten_colour(&mut buffers.pixels[..height * width * 3], colour);
        }
    }
    if raw.orientation == Orientation::NoTransforms {
        return Ok((height, width));
    }
    let len = height * width * channels;
    let (out_height, out_width) = orient(
        &buffers.pixels[..len],
        (height, width, channels),
        raw.orientation,
        scratch(&mut buffers.scratch, len),
    );
    std::mem::swap(&mut buffers.pixels, &mut buffers.scratch);
    Ok((out_height, out_width))
}

/// Interleaved 8-bit samples as a decoder left them: `stride` per pixel, of which the first 1
/// (grey) or 3 (RGB) count, the rest being alpha.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Layout {
    Grey { stride: usize },
    Rgb { stride: usize },
}

impl Layout {
    fn stride(self) -> usize {
        match self {
            Self::Grey { stride } | Self::Rgb { stride } => stride,
        }
    }
}

/// A decoded image in a decoder's buffer, before conversion and orientation.
struct Raw {
    height: usize,
    width: usize,
    layout: Layout,
    orientation: Orientation,
}

fn check_limits(
    width: u64,
    height: u64,
    decoded_bytes: u64,
    what: &str,
    name: &str,
    limits: &ImageLimits,
) -> Result<(), PreprocessError> {
    if width.saturating_mul(height) > limits.max_pixels {
        return Err(PreprocessError::ImageTooLarge {
            image: name.to_string(),
            width,
            height,
            max_pixels: limits.max_pixels,
        });
    }
    if decoded_bytes > limits.max_decoded_bytes {
        return Err(PreprocessError::DecodedTooLarge {
            image: name.to_string(),
            width,
            height,
            pixel_type: what.to_string(),
            bytes: decoded_bytes,
            max_decoded_bytes: limits.max_decoded_bytes,
        });
    }
    Ok(())
}

/// Refuses a WebP file shorter than its RIFF header says, as PIL (libwebp) does: the image
/// crate decodes such a file with its missing bytes as zeros.
fn check_webp_is_whole(bytes: &[u8], name: &str) -> Result<(), PreprocessError> {
    let Some(size) = bytes.get(4..8) else {
        return Ok(()); // Too short for a RIFF header: the decoder says what is wrong.
    };
    let declared = u64::from(u32::from_le_bytes([size[0], size[1], size[2], size[3]])) + 8;
    if (bytes.len() as u64) < declared {
        return Err(PreprocessError::CorruptImage {
            image: name.to_string(),
            detail: format!(
                "the file is truncated: its RIFF header says {declared} bytes, it holds {}",
                bytes.len()
            ),
        });
    }
    Ok(())
}

fn decode_with_image_crate(
    bytes: &[u8],
    format: ImageFormat,
    name: &str,
    limits: &ImageLimits,
    buffer: &mut Vec<u8>,
) -> Result<Raw, PreprocessError> {
    if format == ImageFormat::WebP {
        check_webp_is_whole(bytes, name)?;
    }
    let to_error = |error: image::ImageError| match error {
        image::ImageError::Unsupported(e) => PreprocessError::UnsupportedImage {
            image: name.to_string(),
            reason: e.to_string(),
        },
        image::ImageError::Limits(_) => PreprocessError::UnsupportedImage {
            image: name.to_string(),
            reason: error.to_string(),
        },
        other => PreprocessError::CorruptImage {
            image: name.to_string(),
            detail: other.to_string(),
        },
    };
    // The image decoder is as lenient as Pillow with what Pillow does not check in a PNG.
    let lenient_copy = match format {
        ImageFormat::Png => pil_metadata::png_with_pillows_leniency(
            bytes,
            // The image data inflated: the decoded bytes, one filter byte a row, and the
            // passes of an interlaced image, within twice the decoded limit.
            usize::try_from(limits.max_decoded_bytes.saturating_mul(2)).unwrap_or(usize::MAX),
        ),
        _ => None,
    };
    let decoded_bytes = lenient_copy.as_deref().unwrap_or(bytes);
    // Our own limits, checked below from the header, replace the image crate's.
    let mut reader = image::ImageReader::with_format(std::io::Cursor::new(decoded_bytes), format);
    reader.no_limits();
    let decoder = reader.into_decoder().map_err(to_error)?;
    let (width, height) = decoder.dimensions();
    let color = decoder.color_type();
    check_limits(
        width.into(),
        height.into(),
        decoder.total_bytes(),
        &format!("{color:?}"),
        name,
        limits,
    )?;
    // A 16-bit greyscale PNG (with or without a tRNS chunk, which the decoder turns into an
    // alpha channel) is Pillow's "I;16", whose conversion clips each value to 255.
    let pil_i16 = format == ImageFormat::Png && png_is_16_bit_grey(bytes);
    let (layout, sample) = match color {
        ColorType::L8 => (Layout::Grey { stride: 1 }, Sample::Eight),
        ColorType::La8 => (Layout::Grey { stride: 2 }, Sample::Eight),
        ColorType::Rgb8 => (Layout::Rgb { stride: 3 }, Sample::Eight),
        ColorType::Rgba8 => (Layout::Rgb { stride: 4 }, Sample::Eight),
        ColorType::L16 => (Layout::Grey { stride: 1 }, Sample::SixteenClipped),
        ColorType::La16 if pil_i16 => (Layout::Grey { stride: 2 }, Sample::SixteenClipped),
        ColorType::La16 => (Layout::Grey { stride: 2 }, Sample::SixteenHighByte),
        ColorType::Rgb16 => (Layout::Rgb { stride: 3 }, Sample::SixteenHighByte),
        ColorType::Rgba16 => (Layout::Rgb { stride: 4 }, Sample::SixteenHighByte),
        other => {
            return Err(PreprocessError::UnsupportedImage {
                image: name.to_string(),
                reason: format!("pixel type {other:?}"),
            })
        }
    };
    // The orientation as Pillow's getexif finds it in the file's own chunks (the decoders'
    // metadata readers differ: the WebP one does not strip an "Exif\0\0" prefix, and
    // allocated a chunk's declared size before reading it, 2.4 GB for a 914-byte fuzzed file).
    let refused_by_pil = |reason: String| PreprocessError::CorruptImage {
        image: name.to_string(),
        detail: format!("{reason} (Pillow refuses it)"),
    };
    let orientation = if format == ImageFormat::Png {
        let metadata = pil_metadata::png_metadata(bytes).map_err(refused_by_pil)?;
        let exif = metadata.exif_block().map_err(refused_by_pil)?;
        pil_metadata::pil_orientation(exif.as_deref(), metadata.xmp.as_deref())
    } else {
        if let Some(reason) = pil_metadata::webp_structure_error(bytes) {
            return Err(refused_by_pil(reason));
        }
        let (exif, xmp) = pil_metadata::webp_exif_and_xmp(bytes);
        pil_metadata::pil_orientation(exif, xmp)
    }
    .map_err(refused_by_pil)?;
    let total =
        usize::try_from(decoder.total_bytes()).map_err(|_| PreprocessError::UnsupportedImage {
            image: name.to_string(),
            reason: "too large for this machine's address space".into(),
        })?;
    let samples = scratch(buffer, total);
    decoder.read_image(samples).map_err(to_error)?;
    // PIL reads 16-bit RGB(A) and grey+alpha PNGs by keeping each sample's high byte, and
    // converts "I;16" by clipping. The decoder wrote native-endian u16s; compact them in
    // place (sample i is read from bytes 2i and 2i + 1 before byte i is written).
    let to_eight_bits = match sample {
        Sample::Eight => None,
        Sample::SixteenHighByte => Some((|v: u16| (v >> 8) as u8) as fn(u16) -> u8),
        Sample::SixteenClipped => Some((|v: u16| v.min(255) as u8) as fn(u16) -> u8),
    };
    if let Some(to_eight_bits) = to_eight_bits {
        for i in 0..total / 2 {
            samples[i] = to_eight_bits(u16::from_ne_bytes([samples[2 * i], samples[2 * i + 1]]));
        }
    }
    Ok(Raw {
        height: height as usize,
        width: width as usize,
        layout,
        orientation,
    })
}

/// How a decoder's samples become PIL's 8-bit ones.
#[derive(Clone, Copy)]
enum Sample {
    Eight,
    /// 16-bit samples of which PIL keeps the high byte (its ";16B" raw modes).
    SixteenHighByte,
    /// 16-bit grey that PIL opens as "I;16" and converts by clipping to 255.
    SixteenClipped,
}

/// Whether a PNG's IHDR says 16-bit greyscale (colour type 0, bit depth 16).
fn png_is_16_bit_grey(bytes: &[u8]) -> bool {
    bytes.get(12..16) == Some(b"IHDR") && bytes.get(24..26) == Some(&[16, 0])
}

/// The `transparency` colour Pillow gives a PNG, as its RGB conversion carries it: the tRNS
/// chunk read as Pillow's PngImagePlugin reads it, then translated by `convert("RGB")`.
/// - Palette: a tRNS of one 0 among 255s (Pillow's `_simple_palette` regex, whose `$` also
///   lets a final newline byte through) names one transparent index, whose palette colour is
///   the transparent colour (black past the end of the palette); any other tRNS is a byte
///   string, which `convert("RGB")` drops.
/// - Grey: the raw 16-bit value t (1-bit images: 255 if t else 0), as (t, t, t) with t clipped
///   to 255 by `putpixel`; it is compared with the 8-bit samples, so for 2- and 4-bit images,
///   which Pillow scales to 0-255, it rarely matches, as in Pillow.
/// - RGB: the three raw 16-bit values, compared with the 8-bit samples (the high bytes of a
///   16-bit image), so a value above 255 matches nothing.
///
/// Values are u16 so that such a value stays unmatched. None when the file has no usable tRNS
/// chunk before its image data. Pillow refuses a truncated tRNS chunk outright; here it only
/// has no colour.
pub(super) fn png_transparent_colour(bytes: &[u8]) -> Option<[u16; 3]> {
    let mut at = 8usize;
    let (mut bit_depth, mut colour_type) = (0u8, u8::MAX);
    let mut palette: &[u8] = &[];
    while let Some(header) = bytes.get(at..at + 8) {
        let length = u32::from_be_bytes([header[0], header[1], header[2], header[3]]) as usize;
        let kind = &header[4..8];
        let data = bytes.get(at + 8..(at + 8).checked_add(length)?)?;
        match kind {
            b"IHDR" if data.len() >= 10 => (bit_depth, colour_type) = (data[8], data[9]),
            b"PLTE" => palette = data,
            b"tRNS" => {
                let u16_at =
                    |i: usize| data.get(i..i + 2).map(|b| u16::from_be_bytes([b[0], b[1]]));
                return match colour_type {
                    3 => {
                        let index = simple_palette_index(data)?;
                        let c = palette.get(3 * index..3 * index + 3).unwrap_or(&[0, 0, 0]);
                        Some([u16::from(c[0]), u16::from(c[1]), u16::from(c[2])])
                    }
                    0 => {
                        let t = u16_at(0)?;
                        let t = if bit_depth == 1 && t != 0 {
                            255
                        } else {
                            t.min(255)
                        };
                        Some([t; 3])
                    }
                    2 => Some([u16_at(0)?, u16_at(2)?, u16_at(4)?]),
                    _ => None,
                };
            }
            b"IDAT" | b"IEND" => return None,
            _ => {}
        }
        // Length, type, data and CRC.
        at = at.checked_add(12 + length)?;
    }
    None
}

/// The index of Pillow's `_simple_palette` match (`^\xff*\x00\xff*$`, where `$` also matches
/// before a final newline): the one 0 in a run of 255s.
fn simple_palette_index(trns: &[u8]) -> Option<usize> {
    let body = trns.strip_suffix(b"\n").unwrap_or(trns);
    let index = body.iter().position(|&b| b == 0)?;
    body.iter()
        .enumerate()
        .all(|(i, &b)| b == 0xff || i == index)
        .then_some(index)
}

/// HF's `convert_to_rgb` of an RGB image with a transparency colour: the pixels of that colour
/// get alpha 0 and are composited onto white; the others are opaque and unchanged.
fn whiten_colour(rgb: &mut [u8], colour: [u16; 3]) {
    for pixel in rgb.chunks_exact_mut(3) {
        if pixel.iter().zip(colour).all(|(&p, c)| u16::from(p) == c) {
            pixel.fill(255);
        }
    }
}

/// A reader over the file's bytes that notes when libjpeg asks for data past their end. PIL
/// refuses such a file as truncated; libjpeg itself only warns and pads the image with grey.
struct EndAwareReader<'a> {
    rest: &'a [u8],
    ran_past_end: &'a std::cell::Cell<bool>,
}

impl Read for EndAwareReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let available = self.fill_buf()?;
        let n = available.len().min(buf.len());
        buf[..n].copy_from_slice(&available[..n]);
        self.consume(n);
        Ok(n)
    }
}

impl BufRead for EndAwareReader<'_> {
    fn fill_buf(&mut self) -> std::io::Result<&[u8]> {
        if self.rest.is_empty() {
            self.ran_past_end.set(true);
        }
        Ok(self.rest)
    }

    fn consume(&mut self, amount: usize) {
        self.rest = &self.rest[amount.min(self.rest.len())..];
    }
}

/// What the JPEG decoder found, short of an I/O or libjpeg error.
enum JpegOutcome {
    Decoded {
        width: usize,
        height: usize,
        orientation: Orientation,
        /// libjpeg asked for data past the end before it had every line of the image.
        truncated: bool,
    },
    Refused(PreprocessError),
}

fn decode_jpeg(
    bytes: &[u8],
    name: &str,
    limits: &ImageLimits,
    buffer: &mut Vec<u8>,
) -> Result<Raw, PreprocessError> {
    use mozjpeg::{ColorSpace, Decompress, Marker};

    let corrupt = |detail: String| PreprocessError::CorruptImage {
        image: name.to_string(),
        detail,
    };
    let ran_past_end = std::cell::Cell::new(false);
    let reader = EndAwareReader {
        rest: bytes,
        ran_past_end: &ran_past_end,
    };
    // libjpeg reports fatal errors by unwinding out of the decoder (mozjpeg turns its
    // error_exit into a panic payload without running the panic hook); catch that here and
    // turn it into an error. This relies on panic = "unwind", Rust's default.
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(
        || -> std::io::Result<JpegOutcome> {
            let decompress = Decompress::builder()
                .with_markers(&[Marker::APP(0), Marker::APP(1)])
                .from_reader(reader)?;
            let (width, height) = decompress.size();
            // Four-component JPEGs (CMYK, or YCCK, which libjpeg turns into CMYK) are decoded
            // as CMYK, 4 bytes a pixel, then converted; the rest are decoded to RGB (grey
            // JPEGs too: libjpeg replicates the grey, as PIL's convert("RGB") does), 3 bytes.
            let cmyk = matches!(
                decompress.color_space(),
                ColorSpace::JCS_CMYK | ColorSpace::JCS_YCCK
            );
            let (decoded_channels, what) = if cmyk {
                (4, "JPEG decoded to CMYK8")
            } else {
                (3, "JPEG decoded to RGB8")
            };
            let decoded_bytes = (width as u64)
                .saturating_mul(height as u64)
                .saturating_mul(decoded_channels as u64);
            if let Err(refusal) = check_limits(
                width as u64,
                height as u64,
                decoded_bytes,
                what,
                name,
                limits,
            ) {
                return Ok(JpegOutcome::Refused(refusal));
            }
            let orientation = match jpeg_orientation(&decompress) {
                Ok(orientation) => orientation,
                Err(reason) => {
                    return Ok(JpegOutcome::Refused(PreprocessError::CorruptImage {
                        image: name.to_string(),
                        detail: format!("{reason} (Pillow refuses it)"),
                    }))
                }
            };
            let mut started = if cmyk {
                decompress.to_colorspace(ColorSpace::JCS_CMYK)?
            } else {
                decompress.rgb()?
            };
            if (started.width(), started.height()) != (width, height) {
                return Err(std::io::Error::other(
                    "libjpeg's output size differs from the header's",
                ));
            }
            let pixels = scratch(buffer, width * height * decoded_channels);
            if !pixels.is_empty() {
                started.read_scanlines_into::<u8>(pixels)?;
            }
            let truncated = ran_past_end.get();
            // Pillow then finishes the decompression, which reads what follows the image
            // data up to EOI: libjpeg's errors there make it refuse the file, unless the data
            // ran out first (Pillow's reader then suspends, and an image with all its lines
            // is kept).
            let finished =
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| started.finish()));
            if !ran_past_end.get() {
                match finished {
                    Ok(result) => result?,
                    Err(payload) => std::panic::resume_unwind(payload),
                }
            }
            if cmyk {
                adobe_cmyk_to_rgb_in_place(pixels);
            }
            Ok(JpegOutcome::Decoded {
                width,
                height,
                orientation,
                truncated,
            })
        },
    ));
    let outcome = match outcome {
        Ok(Ok(outcome)) => outcome,
        Ok(Err(io_error)) => return Err(corrupt(io_error.to_string())),
        Err(payload) => {
            let message = payload
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "libjpeg failed".into());
            return Err(corrupt(message));
        }
    };
    match outcome {
        JpegOutcome::Refused(error) => Err(error),
        JpegOutcome::Decoded {
            truncated: true, ..
        } => Err(corrupt("the JPEG data ends before the image does".into())),
        JpegOutcome::Decoded {
            width,
            height,
            orientation,
            truncated: false,
        } => Ok(Raw {
            height,
            width,
            layout: Layout::Rgb { stride: 3 },
            orientation,
        }),
    }
}

/// Pillow's reading of a four-component JPEG's samples, then its `convert("RGB")`, over
/// `samples` (CMYK as libjpeg gives them, 4 bytes a pixel), leaving RGB in the first three
/// quarters. Pillow assumes Adobe's convention, inverted CMYK, for every such JPEG (raw mode
/// "CMYK;I": each sample s read as 255 - s), then converts CMYK to RGB with
/// R = 255 - K - C (255 - K) / 255 and likewise G and B, in its own rounding (`cmyk2rgb`,
/// whose division by 255 is `(x + 128 + ((x + 128) >> 8)) >> 8`). With the inversion folded
/// in: nk = 255 - (255 - k) = k, and R = k - (255 - c) k / 255.
fn adobe_cmyk_to_rgb_in_place(samples: &mut [u8]) {
    let pixels = samples.len() / 4;
    for i in 0..pixels {
        // Pixel i is read from bytes 4i..4i+4 before bytes 3i..3i+3 are written, which lie
        // at or before them.
        let [c, m, y, k] = [0, 1, 2, 3].map(|j| u32::from(samples[4 * i + j]));
        for (j, inverted) in [255 - c, 255 - m, 255 - y].into_iter().enumerate() {
            samples[3 * i + j] = k.saturating_sub(pil_mul_div_255(inverted, k)) as u8;
        }
    }
}

/// Pillow's `MULDIV255`: a * b / 255, rounded as its `SHIFTFORDIV255` rounds.
fn pil_mul_div_255(a: u32, b: u32) -> u32 {
    let x = a * b + 128;
    ((x >> 8) + x) >> 8
}

/// The orientation Pillow finds in the APP0 and APP1 segments; an error where Pillow's
/// getexif raises.
fn jpeg_orientation<R>(decompress: &mozjpeg::Decompress<R>) -> Result<Orientation, String> {
    let segments = decompress.markers().filter_map(|m| match m.marker {
        mozjpeg::Marker::APP(n) => Some((n, m.data)),
        _ => None,
    });
    pil_metadata::jpeg_orientation(segments)
}

/// Converts pixels already decoded (HWC, `from_channels` 1 for grey or 3 for RGB) to PIL's
/// mode for `channels` (3: RGB, grey replicated; 1: L, PIL's luma), into `out`, which is
/// resized to height * width * `channels` bytes.
pub(super) fn convert_decoded(
    samples: &[u8],
    from_channels: usize,
    out: &mut Vec<u8>,
    channels: usize,
) {
    let layout = if from_channels == 1 {
        Layout::Grey { stride: 1 }
    } else {
        Layout::Rgb {
            stride: from_channels,
        }
    };
    let len = samples.len() / from_channels * channels;
    to_pil_mode(samples, layout, scratch(out, len), channels);
}

/// PIL's `convert("RGB")` (3 channels) or `convert("L")` (1 channel) of 8-bit samples: RGBA
/// loses its alpha (no compositing), grey is replicated, and L is PIL's fixed-point luma.
fn to_pil_mode(samples: &[u8], layout: Layout, out: &mut [u8], channels: usize) {
    let stride = layout.stride();
    let pixels = samples.chunks_exact(stride);
    match (channels, layout) {
        (1, Layout::Grey { .. }) => {
            for (o, p) in out.iter_mut().zip(pixels) {
                *o = p[0];
            }
        }
        (1, Layout::Rgb { .. }) => {
            for (o, p) in out.iter_mut().zip(pixels) {
                *o = pil_luma(p[0], p[1], p[2]);
            }
        }
        (_, Layout::Grey { .. }) => {
            for (o, p) in out.chunks_exact_mut(3).zip(pixels) {
                o.fill(p[0]);
            }
        }
        (_, Layout::Rgb { .. }) => {
            for (o, p) in out.chunks_exact_mut(3).zip(pixels) {
                o.copy_from_slice(&p[..3]);
            }
        }
    }
}

/// PIL's RGB to L: ITU-R 601-2 luma, L = R * 299/1000 + G * 587/1000 + B * 114/1000, in 16-bit
/// fixed point with rounding.
pub(super) fn pil_luma(r: u8, g: u8, b: u8) -> u8 {
    ((u32::from(r) * 19595 + u32::from(g) * 38470 + u32::from(b) * 7471 + 0x8000) >> 16) as u8
}

/// Applies an EXIF orientation to `src` (HWC, `shape`), writing into `out`, as the image
/// crate's `apply_orientation` (and PIL's `exif_transpose`) do. Returns the new (height, width).
fn orient(
    src: &[u8],
    shape: (usize, usize, usize),
    orientation: Orientation,
    out: &mut [u8],
) -> (usize, usize) {
    let (h, w, c) = shape;
    let swaps = matches!(
        orientation,
        Orientation::Rotate90
            | Orientation::Rotate270
            | Orientation::Rotate90FlipH
            | Orientation::Rotate270FlipH
    );
    let (out_h, out_w) = if swaps { (w, h) } else { (h, w) };
    // The input pixel (x, y) each output pixel (ox, oy) copies.
    let source = |ox: usize, oy: usize| -> (usize, usize) {
        match orientation {
            Orientation::NoTransforms => (ox, oy),
            Orientation::Rotate90 => (oy, h - 1 - ox),
            Orientation::Rotate180 => (w - 1 - ox, h - 1 - oy),
            Orientation::Rotate270 => (w - 1 - oy, ox),
            Orientation::FlipHorizontal => (w - 1 - ox, oy),
            Orientation::FlipVertical => (ox, h - 1 - oy),
            Orientation::Rotate90FlipH => (oy, ox),
            Orientation::Rotate270FlipH => (w - 1 - oy, h - 1 - ox),
        }
    };
    for (oy, out_row) in out.chunks_exact_mut(out_w * c).enumerate() {
        for (ox, out_pixel) in out_row.chunks_exact_mut(c).enumerate() {
            let (x, y) = source(ox, oy);
            out_pixel.copy_from_slice(&src[(y * w + x) * c..][..c]);
        }
    }
    (out_h, out_w)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// PNG chunks after the signature, without valid CRCs (the reader does not check them).
    fn png_with(chunks: &[(&[u8; 4], &[u8])]) -> Vec<u8> {
        let mut bytes = b"\x89PNG\r\n\x1a\n".to_vec();
        for (kind, data) in chunks {
            bytes.extend_from_slice(&(data.len() as u32).to_be_bytes());
            bytes.extend_from_slice(*kind);
            bytes.extend_from_slice(data);
            bytes.extend_from_slice(&[0; 4]);
        }
        bytes
    }

    fn ihdr(bit_depth: u8, colour_type: u8) -> [u8; 13] {
        let mut data = [0u8; 13];
        data[..8].copy_from_slice(&[0, 0, 0, 4, 0, 0, 0, 1]);
        (data[8], data[9]) = (bit_depth, colour_type);
        data
    }

    #[test]
    fn transparent_colours_are_read_as_pillow_reads_them() {
        let plte: &[u8] = &[10, 20, 30, 200, 100, 50];
        let palette = |trns: &[u8]| {
            png_transparent_colour(&png_with(&[
                (b"IHDR", &ihdr(8, 3)),
                (b"PLTE", plte),
                (b"tRNS", trns),
                (b"IDAT", &[]),
            ]))
        };
        assert_eq!(palette(&[0xff, 0]), Some([200, 100, 50]));
        assert_eq!(palette(&[0]), Some([10, 20, 30]));
        assert_eq!(
            palette(&[0xff, 0xff, 0]),
            Some([0, 0, 0]),
            "past the palette"
        );
        assert_eq!(palette(&[0xff, 0, b'\n']), Some([200, 100, 50]), "regex $");
        assert_eq!(
            palette(&[0, 0]),
            None,
            "two transparent entries are alpha bytes"
        );
        assert_eq!(palette(&[0xff, 0x80]), None);
        assert_eq!(palette(&[]), None);
        let grey = |bit_depth: u8, trns: &[u8]| {
            png_transparent_colour(&png_with(&[
                (b"IHDR", &ihdr(bit_depth, 0)),
                (b"tRNS", trns),
            ]))
        };
        assert_eq!(grey(8, &[0, 7]), Some([7; 3]));
        assert_eq!(grey(8, &[1, 44]), Some([255; 3]), "putpixel clips");
        assert_eq!(grey(1, &[0, 1]), Some([255; 3]));
        assert_eq!(grey(4, &[0, 1]), Some([1; 3]));
        assert_eq!(grey(8, &[7]), None, "truncated");
        let rgb = png_with(&[(b"IHDR", &ihdr(16, 2)), (b"tRNS", &[1, 2, 0, 3, 0, 4])]);
        assert_eq!(png_transparent_colour(&rgb), Some([258, 3, 4]));
        // A tRNS after the image data, a chunk running past the end, and no tRNS at all.
        let late = png_with(&[(b"IHDR", &ihdr(8, 0)), (b"IDAT", &[]), (b"tRNS", &[0, 7])]);
        assert_eq!(png_transparent_colour(&late), None);
        let mut cut = png_with(&[(b"IHDR", &ihdr(8, 0)), (b"tRNS", &[0, 7])]);
        cut.truncate(cut.len() - 6);
        assert_eq!(png_transparent_colour(&cut), None);
        assert_eq!(
            png_transparent_colour(&png_with(&[(b"IHDR", &ihdr(8, 2))])),
            None
        );
        assert_eq!(png_transparent_colour(b"\x89PNG"), None);
    }

    #[test]
    fn only_the_transparent_colour_turns_white() {
        let mut rgb = vec![1, 2, 3, 1, 2, 4, 1, 2, 3, 0, 0, 0];
        whiten_colour(&mut rgb, [1, 2, 3]);
        assert_eq!(rgb, [255, 255, 255, 1, 2, 4, 255, 255, 255, 0, 0, 0]);
        whiten_colour(&mut rgb, [256, 255, 255]);
        assert_eq!(
            rgb[..3],
            [255, 255, 255],
            "a 16-bit value matches no 8-bit sample"
        );
    }

    #[test]
    fn orientation_matches_the_image_crate_for_all_eight() {
        let (w, h) = (5u32, 3u32);
        let image = image::RgbImage::from_fn(w, h, |x, y| image::Rgb([x as u8, y as u8, 7]));
        for exif in 1..=8 {
            let orientation = Orientation::from_exif(exif).unwrap();
            let mut expected = image::DynamicImage::ImageRgb8(image.clone());
            expected.apply_orientation(orientation);
            let mut out = vec![0; (w * h * 3) as usize];
            let (oh, ow) = orient(image.as_raw(), (3, 5, 3), orientation, &mut out);
            assert_eq!(
                (ow as u32, oh as u32),
                (expected.width(), expected.height())
            );
            assert_eq!(out, expected.into_rgb8().into_raw(), "{orientation:?}");
        }
    }

    #[test]
    fn cmyk_converts_as_pillow_reads_and_converts_it() {
        // libjpeg's CMYK samples -> Pillow 13.0.0's RGB, from
        // Image.frombytes("CMYK", (1, 1), bytes(255 - v for v in cmyk)).convert("RGB").
        let cases: [([u8; 4], [u8; 3]); 5] = [
            ([0, 0, 0, 0], [0, 0, 0]),
            ([255, 255, 255, 255], [255, 255, 255]),
            ([10, 200, 30, 128], [5, 100, 15]),
            ([255, 0, 128, 200], [200, 0, 100]),
            ([77, 77, 77, 7], [2, 2, 2]),
        ];
        let mut samples: Vec<u8> = cases.iter().flat_map(|(cmyk, _)| *cmyk).collect();
        adobe_cmyk_to_rgb_in_place(&mut samples);
        let expected: Vec<u8> = cases.iter().flat_map(|(_, rgb)| *rgb).collect();
        assert_eq!(samples[..expected.len()], expected);
    }

    #[test]
    fn luma_matches_pil_on_primaries() {
        // PIL: Image.new("RGB", (1, 1), c).convert("L").getpixel((0, 0))
        assert_eq!(pil_luma(255, 0, 0), 76);
        assert_eq!(pil_luma(0, 255, 0), 150);
        assert_eq!(pil_luma(0, 0, 255), 29);
        assert_eq!(pil_luma(255, 255, 255), 255);
    }
}
