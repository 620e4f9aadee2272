//! What can go wrong in preprocessing, and the limits checked before any large allocation.

use std::path::PathBuf;

/// PIL refuses images above twice its decompression-bomb threshold (`Image.MAX_IMAGE_PIXELS`);
/// `preprocess_file` and `preprocess_bytes` accept up to this many pixels, as HF does.
pub const MAX_IMAGE_PIXELS: u64 = 2 * PIL_MAX_IMAGE_PIXELS;

/// PIL's `Image.MAX_IMAGE_PIXELS`, above which it warns of a decompression bomb; the default
/// of [`ImageLimits::max_pixels`].
pub const PIL_MAX_IMAGE_PIXELS: u64 = 89_478_485;

/// Longest output side accepted in a config, so that a typo cannot ask for gigabytes.
pub const MAX_OUTPUT_SIDE: usize = 16_384;

#[derive(Debug, thiserror::Error)]
pub enum PreprocessError {
    #[error("image file {path} does not exist")]
    FileNotFound { path: PathBuf },
    /// The cause is the source, not part of this message, so that a printed chain says it once.
    #[error("cannot read image file {path}")]
    FileRead {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "image file {path} is larger than the limit of {max_file_bytes} bytes \
         (--max-file-size raises it)"
    )]
    FileTooLarge { path: PathBuf, max_file_bytes: u64 },
    #[error("image {image} is empty (0 bytes)")]
    EmptyImage { image: String },
    #[error("{image} is not an image: its first bytes match no known image format")]
    NotAnImage { image: String },
    #[error("image {image} is {format}; vitrt reads PNG, JPEG and WebP")]
    UnsupportedFormat { image: String, format: String },
    #[error("image {image} is not supported: {reason}")]
    UnsupportedImage { image: String, reason: String },
    #[error("image {image} is corrupt: {detail}")]
    CorruptImage { image: String, detail: String },
    #[error(
        "image {image} has {width}x{height} pixels, more than the limit of {max_pixels} \
         (--max-pixels raises it)"
    )]
    ImageTooLarge {
        image: String,
        width: u64,
        height: u64,
        max_pixels: u64,
    },
    #[error(
        "image {image} ({width}x{height}, {pixel_type}) takes {bytes} bytes decoded, more than \
         the limit of {max_decoded_bytes} (--max-decoded-bytes raises it)"
    )]
    DecodedTooLarge {
        image: String,
        width: u64,
        height: u64,
        pixel_type: String,
        bytes: u64,
        max_decoded_bytes: u64,
    },
    #[error(
        "do_resize is false, so image {image} must already be {expected_height}x{expected_width} \
         (height x width) as the config's size says, but it is {height}x{width}"
    )]
    SizeMismatch {
        image: String,
        height: usize,
        width: usize,
        expected_height: usize,
        expected_width: usize,
    },
    #[error(
        "image {image} ({width}x{height}) resized to a shortest edge of {shortest_edge} would be \
         {resized_width}x{resized_height}, more than the limit of {max_pixels} pixels \
         (--max-pixels raises it)"
    )]
    ResizedTooLarge {
        image: String,
        width: usize,
        height: usize,
        shortest_edge: usize,
        resized_width: usize,
        resized_height: usize,
        max_pixels: u64,
    },
    #[error(
        "the output buffer for image {image} has {len} bytes; a preprocessed image takes \
         {expected} (height x width x channels)"
    )]
    OutputSize {
        image: String,
        len: usize,
        expected: usize,
    },
    /// The cause is the source, not part of this message, so that a printed chain says it once.
    #[error("cannot read preprocessor config {path}")]
    ConfigRead {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("invalid preprocessor config {origin}: {reason}")]
    InvalidConfig { origin: String, reason: String },
}

/// Limits checked before any large allocation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ImageLimits {
    /// Most pixels (width x height) an image may have, checked from its header.
    pub max_pixels: u64,
    /// Most bytes the decoded image may take before conversion (width x height x channels x
    /// bytes per sample, as the decoder produces it), checked from its header.
    pub max_decoded_bytes: u64,
    /// Largest image file read; no more than this plus one byte is ever read.
    pub max_file_bytes: u64,
}

impl Default for ImageLimits {
    /// PIL's `Image.MAX_IMAGE_PIXELS` pixels, 1 GiB decoded, 512 MiB of file.
    fn default() -> Self {
        Self {
            max_pixels: PIL_MAX_IMAGE_PIXELS,
            max_decoded_bytes: 1 << 30,
            max_file_bytes: 512 << 20,
        }
    }
}
