//! Image preprocessing, reproducing what Hugging Face does to an image file before a ViT sees
//! it: `transformers.image_utils.load_image` (EXIF orientation, then PIL's `convert("RGB")`)
//! followed by the slow, PIL-based `ViTImageProcessor` (resize, rescale, normalise).
//!
//! The aim is the same numbers as HF, not merely a similar picture, so each step copies PIL's
//! arithmetic:
//! - JPEG is decoded by libjpeg-turbo's decoder (through mozjpeg, a fork of it that decodes the
//!   same way), as PIL does; the `image` crate's pure-Rust JPEG decoder differs from PIL by up to
//!   4 levels on a quarter of the pixels of our photo fixtures. PNG and WebP go through the
//!   `image` crate, which decodes them exactly as PIL does.
//! - Colour conversion is PIL's: RGBA loses its alpha (no compositing), grey is replicated, and
//!   the one-channel "L" mode uses PIL's fixed-point ITU-R 601-2 luma.
//! - Resizing is our own implementation of PIL's separable convolution in 8-bit fixed point,
//!   which rounds and clips to u8 after the first pass and again after the second, with
//!   Pillow 13's choice of which pass goes first.
//!   `image`'s `resize` and `fast_image_resize` were measured first: both come within one level
//!   for bilinear and Hamming but are off by up to 3 (bicubic), 5 (Lanczos), 31 (box) and 56
//!   (nearest) levels on the fixtures, against 0 for this implementation.
//! - Rescale and normalise use numpy's precisions: `(u8 as f64 * factor) as f32`, then
//!   `(x - mean) / std` in f32.

use std::io::{BufRead, Read};
use std::path::{Path, PathBuf};

use image::metadata::Orientation;
use image::{DynamicImage, ImageDecoder, ImageFormat};
use serde_json::{Map, Value};

/// PIL refuses images above twice its decompression-bomb threshold (`Image.MAX_IMAGE_PIXELS`).
pub const MAX_IMAGE_PIXELS: u64 = 2 * 89_478_485;

/// Longest output side accepted in a config, so that a typo cannot ask for gigabytes.
pub const MAX_OUTPUT_SIDE: usize = 16_384;

#[derive(Debug, thiserror::Error)]
pub enum PreprocessError {
    #[error("image file {path} does not exist")]
    FileNotFound { path: PathBuf },
    #[error("cannot read image file {path}: {source}")]
    FileRead {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
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
        "image {image} has {width}x{height} pixels, more than the {MAX_IMAGE_PIXELS} PIL accepts"
    )]
    ImageTooLarge {
        image: String,
        width: u64,
        height: u64,
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
    #[error("cannot read preprocessor config {path}: {source}")]
    ConfigRead {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("invalid preprocessor config {origin}: {reason}")]
    InvalidConfig { origin: String, reason: String },
}

/// PIL's resampling filters, by the ids that `resample` uses in preprocessor_config.json.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resample {
    Nearest,
    Lanczos,
    Bilinear,
    Bicubic,
    Box,
    Hamming,
}

impl Resample {
    pub fn from_pil_id(id: i64) -> Result<Self, String> {
        match id {
            0 => Ok(Self::Nearest),
            1 => Ok(Self::Lanczos),
            2 => Ok(Self::Bilinear),
            3 => Ok(Self::Bicubic),
            4 => Ok(Self::Box),
            5 => Ok(Self::Hamming),
            6 | 7 => Err(format!(
                "resample {id} is Pillow's MKS{} filter, which vitrt does not implement",
                if id == 6 { 2013 } else { 2021 }
            )),
            _ => Err(format!(
                "unknown resample filter {id}: PIL's are 0 nearest, 1 lanczos, 2 bilinear, \
                 3 bicubic, 4 box, 5 hamming"
            )),
        }
    }

    pub fn pil_id(self) -> u8 {
        match self {
            Self::Nearest => 0,
            Self::Lanczos => 1,
            Self::Bilinear => 2,
            Self::Bicubic => 3,
            Self::Box => 4,
            Self::Hamming => 5,
        }
    }

    /// Half-width of the filter at scale 1, in input pixels.
    fn support(self) -> f64 {
        match self {
            Self::Nearest | Self::Box => 0.5,
            Self::Bilinear | Self::Hamming => 1.0,
            Self::Bicubic => 2.0,
            Self::Lanczos => 3.0,
        }
    }

    /// The filter's weight at distance `x` (in filter units) from the sample centre. The
    /// formulas, including which end of an interval is open, are PIL's: the fixed-point
    /// rounding that follows makes the results sensitive to them.
    fn weight(self, x: f64) -> f64 {
        use std::f64::consts::PI;
        let sinc = |x: f64| {
            if x == 0.0 {
                1.0
            } else {
                (PI * x).sin() / (PI * x)
            }
        };
        match self {
            Self::Nearest | Self::Box => {
                if x > -0.5 && x <= 0.5 {
                    1.0
                } else {
                    0.0
                }
            }
            Self::Bilinear => {
                let x = x.abs();
                if x < 1.0 {
                    1.0 - x
                } else {
                    0.0
                }
            }
            Self::Hamming => {
                let x = x.abs();
                if x == 0.0 {
                    1.0
                } else if x >= 1.0 {
                    0.0
                } else {
                    let px = x * PI;
                    px.sin() / px * (0.54 + 0.46 * px.cos())
                }
            }
            Self::Bicubic => {
                // Keys' cubic with a = -0.5, as PIL uses.
                let a = -0.5;
                let x = x.abs();
                if x < 1.0 {
                    ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0
                } else if x < 2.0 {
                    (((x - 5.0) * x + 8.0) * x - 4.0) * a
                } else {
                    0.0
                }
            }
            Self::Lanczos => {
                if (-3.0..3.0).contains(&x) {
                    sinc(x) * sinc(x / 3.0)
                } else {
                    0.0
                }
            }
        }
    }
}

/// A parsed and validated preprocessor_config.json, for a model taking `num_channels`-channel
/// images.
#[derive(Debug, Clone, PartialEq)]
pub struct PreprocessConfig {
    do_resize: bool,
    height: usize,
    width: usize,
    resample: Resample,
    do_rescale: bool,
    rescale_factor: f64,
    do_normalize: bool,
    image_mean: Vec<f32>,
    image_std: Vec<f32>,
    num_channels: usize,
}

impl PreprocessConfig {
    /// Reads preprocessor_config.json for a three-channel (RGB) model, as HF's pipeline serves.
    pub fn from_json_file(path: &Path) -> Result<Self, PreprocessError> {
        Self::from_json_file_for_channels(path, 3)
    }

    /// Parses preprocessor_config.json text for a three-channel (RGB) model.
    pub fn from_json_str(s: &str) -> Result<Self, PreprocessError> {
        Self::parse(s, 3, "(JSON text)")
    }

    /// Reads preprocessor_config.json for a model with `num_channels` (1 or 3) input channels.
    pub fn from_json_file_for_channels(
        path: &Path,
        num_channels: usize,
    ) -> Result<Self, PreprocessError> {
        let text = std::fs::read_to_string(path).map_err(|source| PreprocessError::ConfigRead {
            path: path.to_path_buf(),
            source,
        })?;
        Self::parse(&text, num_channels, &path.display().to_string())
    }

    /// Parses preprocessor_config.json text for a model with `num_channels` (1 or 3) channels.
    pub fn from_json_str_for_channels(
        s: &str,
        num_channels: usize,
    ) -> Result<Self, PreprocessError> {
        Self::parse(s, num_channels, "(JSON text)")
    }

    /// HF's defaults for a model whose config has this image size and channel count: resize to
    /// image_size x image_size, bilinear, rescale by 1/255, mean = std = 0.5 for every channel
    /// (HF's defaults are three 0.5s; a one-channel model gets one). A model that preprocessing
    /// cannot serve (no size, or a channel count other than 1 or 3) gets a config that
    /// `preprocess_*` refuses with an error.
    pub fn hf_default(image_size: usize, num_channels: usize) -> Self {
        Self {
            do_resize: true,
            height: image_size,
            width: image_size,
            resample: Resample::Bilinear,
            do_rescale: true,
            rescale_factor: 1.0 / 255.0,
            do_normalize: true,
            image_mean: vec![0.5; num_channels],
            image_std: vec![0.5; num_channels],
            num_channels,
        }
    }

    /// (height, width) of the images `preprocess_*` returns.
    pub fn output_size(&self) -> (usize, usize) {
        (self.height, self.width)
    }

    pub fn num_channels(&self) -> usize {
        self.num_channels
    }

    pub fn do_resize(&self) -> bool {
        self.do_resize
    }

    pub fn resample(&self) -> Resample {
        self.resample
    }

    /// The factor pixels are multiplied by, when `do_rescale` is on.
    pub fn rescale_factor(&self) -> Option<f64> {
        self.do_rescale.then_some(self.rescale_factor)
    }

    /// Per-channel (mean, std), when `do_normalize` is on.
    pub fn normalization(&self) -> Option<(&[f32], &[f32])> {
        self.do_normalize
            .then_some((self.image_mean.as_slice(), self.image_std.as_slice()))
    }

    fn parse(text: &str, num_channels: usize, origin: &str) -> Result<Self, PreprocessError> {
        let invalid = |reason: String| PreprocessError::InvalidConfig {
            origin: origin.to_string(),
            reason,
        };
        let root: Value =
            serde_json::from_str(text).map_err(|e| invalid(format!("not valid JSON: {e}")))?;
        let Value::Object(fields) = root else {
            return Err(invalid("the top level must be a JSON object".into()));
        };
        let mut config = Self::hf_default(224, num_channels);
        config.read_fields(&fields).map_err(invalid)?;
        config.validate().map_err(invalid)?;
        Ok(config)
    }

    fn read_fields(&mut self, fields: &Map<String, Value>) -> Result<(), String> {
        // A null value means "the processor's default", as in HF.
        let field = |key: &str| fields.get(key).filter(|v| !v.is_null());
        let flag = |key: &str, default: bool| match field(key) {
            None => Ok(default),
            Some(Value::Bool(b)) => Ok(*b),
            Some(other) => Err(format!("{key} must be true or false, not {other}")),
        };

        self.do_resize = flag("do_resize", true)?;
        if let Some(size) = field("size") {
            (self.height, self.width) = parse_size(size)?;
        }
        if let Some(resample) = field("resample") {
            let id = resample
                .as_i64()
                .ok_or_else(|| format!("resample must be an integer filter id, not {resample}"))?;
            self.resample = Resample::from_pil_id(id)?;
        }
        self.do_rescale = flag("do_rescale", true)?;
        if let Some(factor) = field("rescale_factor") {
            self.rescale_factor = factor
                .as_f64()
                .ok_or_else(|| format!("rescale_factor must be a number, not {factor}"))?;
        }
        self.do_normalize = flag("do_normalize", true)?;
        if let Some(mean) = field("image_mean") {
            self.image_mean = parse_channel_values("image_mean", mean, self.num_channels)?;
        }
        if let Some(std) = field("image_std") {
            self.image_std = parse_channel_values("image_std", std, self.num_channels)?;
        }
        // Files are always converted the way HF's load_image converts them (to RGB, or to L
        // for one-channel models) before the processor runs, so do_convert_rgb changes nothing;
        // it is still checked, so that a malformed config is not silently accepted.
        flag("do_convert_rgb", true)?;
        // Steps other image processors share with ViT's in transformers 5, which vitrt does
        // not perform: refuse rather than skip them.
        for step in ["do_center_crop", "do_pad"] {
            if flag(step, false)? {
                return Err(format!(
                    "{step} is true, which vitrt's preprocessing does not do"
                ));
            }
        }
        Ok(())
    }

    fn validate(&self) -> Result<(), String> {
        if self.num_channels != 1 && self.num_channels != 3 {
            return Err(format!(
                "models with {} input channels are not supported (1 or 3)",
                self.num_channels
            ));
        }
        for (name, side) in [("height", self.height), ("width", self.width)] {
            if side == 0 || side > MAX_OUTPUT_SIDE {
                return Err(format!(
                    "size {name} must be between 1 and {MAX_OUTPUT_SIDE}, not {side}"
                ));
            }
        }
        if !(self.rescale_factor.is_finite() && self.rescale_factor > 0.0) {
            return Err(format!(
                "rescale_factor must be a positive number, not {}",
                self.rescale_factor
            ));
        }
        for (name, values) in [
            ("image_mean", &self.image_mean),
            ("image_std", &self.image_std),
        ] {
            if values.len() != self.num_channels {
                return Err(format!(
                    "{name} has {} values but the model takes {}-channel images",
                    values.len(),
                    self.num_channels
                ));
            }
            if let Some(bad) = values.iter().find(|v| !v.is_finite()) {
                return Err(format!("{name} must hold finite numbers, not {bad}"));
            }
        }
        if self.image_std.contains(&0.0) {
            return Err(format!(
                "image_std must not be 0 (it divides): {:?}",
                self.image_std
            ));
        }
        Ok(())
    }
}

/// `size` as ViTImageProcessor reads it: an int (square), [height, width], or
/// {"height", "width"}. The aspect-preserving forms ({"shortest_edge"}, {"max_height",
/// "max_width"}) give an image-dependent size, which a ViT's fixed position embeddings cannot
/// take (transformers 4.x's ViTImageProcessor rejects them as well).
fn parse_size(size: &Value) -> Result<(usize, usize), String> {
    let side = |v: &Value, what: &str| -> Result<usize, String> {
        match v.as_i64() {
            Some(n) if n > 0 => Ok(n as usize),
            _ => Err(format!("size {what} must be a positive integer, not {v}")),
        }
    };
    match size {
        Value::Number(_) => side(size, "").map(|s| (s, s)),
        Value::Array(sides) if sides.len() == 1 => side(&sides[0], "[0]").map(|s| (s, s)),
        Value::Array(sides) if sides.len() == 2 => {
            Ok((side(&sides[0], "[0]")?, side(&sides[1], "[1]")?))
        }
        Value::Object(keys) => {
            let present: Vec<&str> = keys
                .iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, _)| k.as_str())
                .collect();
            if present
                .iter()
                .any(|k| ["shortest_edge", "longest_edge", "max_height", "max_width"].contains(k))
            {
                return Err(format!(
                    "size {size} makes the output size depend on the image; a ViT needs a fixed \
                     {{\"height\", \"width\"}}"
                ));
            }
            match (keys.get("height"), keys.get("width")) {
                (Some(h), Some(w)) if present.len() == 2 => {
                    Ok((side(h, "height")?, side(w, "width")?))
                }
                _ => Err(format!(
                    "size {size} must have exactly the keys \"height\" and \"width\""
                )),
            }
        }
        _ => Err(format!(
            "size must be an integer, [height, width] or {{\"height\", \"width\"}}, not {size}"
        )),
    }
}

/// image_mean / image_std: one number for every channel, or one per channel.
fn parse_channel_values(
    name: &str,
    value: &Value,
    num_channels: usize,
) -> Result<Vec<f32>, String> {
    let number = |v: &Value| {
        v.as_f64()
            .map(|x| x as f32)
            .ok_or_else(|| format!("{name} must hold numbers, not {v}"))
    };
    match value {
        Value::Number(_) => Ok(vec![number(value)?; num_channels]),
        Value::Array(items) => items.iter().map(number).collect(),
        _ => Err(format!(
            "{name} must be a number or a list of numbers, not {value}"
        )),
    }
}

/// Decodes an image file (PNG, JPEG or WebP, told apart by content), applies its EXIF
/// orientation, converts it to RGB (or L for one-channel models), resizes, rescales and
/// normalises it. Returns `num_channels x height x width` f32 values, channel-major (CHW).
pub fn preprocess_file(path: &Path, cfg: &PreprocessConfig) -> Result<Vec<f32>, PreprocessError> {
    let bytes = std::fs::read(path).map_err(|source| match source.kind() {
        std::io::ErrorKind::NotFound => PreprocessError::FileNotFound {
            path: path.to_path_buf(),
        },
        _ => PreprocessError::FileRead {
            path: path.to_path_buf(),
            source,
        },
    })?;
    preprocess_named(&bytes, &path.display().to_string(), cfg)
}

/// As [`preprocess_file`], for an image already in memory.
pub fn preprocess_bytes(bytes: &[u8], cfg: &PreprocessConfig) -> Result<Vec<f32>, PreprocessError> {
    preprocess_named(bytes, "(in-memory bytes)", cfg)
}

fn preprocess_named(
    bytes: &[u8],
    name: &str,
    cfg: &PreprocessConfig,
) -> Result<Vec<f32>, PreprocessError> {
    cfg.validate()
        .map_err(|reason| PreprocessError::InvalidConfig {
            origin: "(in memory)".into(),
            reason,
        })?;
    let upright = decode_upright(bytes, name)?;
    let image = to_pil_mode(upright, cfg.num_channels, name)?;
    let image = if cfg.do_resize {
        resize_like_pil(&image, cfg.height, cfg.width, cfg.resample)
    } else if (image.height, image.width) == (cfg.height, cfg.width) {
        image
    } else {
        return Err(PreprocessError::SizeMismatch {
            image: name.to_string(),
            height: image.height,
            width: image.width,
            expected_height: cfg.height,
            expected_width: cfg.width,
        });
    };
    Ok(rescale_and_normalize(&image, cfg))
}

/// 8-bit pixels, interleaved (HWC), as PIL holds them.
#[derive(Debug, Clone, PartialEq)]
struct Pixels {
    width: usize,
    height: usize,
    channels: usize,
    data: Vec<u8>,
}

fn decode_upright(bytes: &[u8], name: &str) -> Result<DynamicImage, PreprocessError> {
    if bytes.is_empty() {
        return Err(PreprocessError::EmptyImage {
            image: name.to_string(),
        });
    }
    let format = image::guess_format(bytes).map_err(|_| PreprocessError::NotAnImage {
        image: name.to_string(),
    })?;
    let (mut image, orientation) = match format {
        ImageFormat::Jpeg => decode_jpeg(bytes, name)?,
        ImageFormat::Png | ImageFormat::WebP => decode_with_image_crate(bytes, format, name)?,
        other => {
            return Err(PreprocessError::UnsupportedFormat {
                image: name.to_string(),
                format: format!("{other:?}"),
            })
        }
    };
    image.apply_orientation(orientation);
    Ok(image)
}

fn check_pixel_count(width: u64, height: u64, name: &str) -> Result<(), PreprocessError> {
    if width.saturating_mul(height) > MAX_IMAGE_PIXELS {
        return Err(PreprocessError::ImageTooLarge {
            image: name.to_string(),
            width,
            height,
        });
    }
    Ok(())
}

fn decode_with_image_crate(
    bytes: &[u8],
    format: ImageFormat,
    name: &str,
) -> Result<(DynamicImage, Orientation), PreprocessError> {
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
    let mut decoder = image::ImageReader::with_format(std::io::Cursor::new(bytes), format)
        .into_decoder()
        .map_err(to_error)?;
    let (width, height) = decoder.dimensions();
    check_pixel_count(width.into(), height.into(), name)?;
    // Like PIL's exif_transpose, a missing or unreadable orientation leaves the image as stored.
    let exif_orientation = decoder
        .exif_metadata()
        .ok()
        .flatten()
        .and_then(|exif| Orientation::from_exif_chunk(&exif));
    let orientation = match exif_orientation {
        Some(orientation) => orientation,
        None => decoder
            .xmp_metadata()
            .ok()
            .flatten()
            .and_then(|xmp| orientation_from_xmp(&xmp))
            .unwrap_or(Orientation::NoTransforms),
    };
    let image = DynamicImage::from_decoder(decoder).map_err(to_error)?;
    Ok((image, orientation))
}

/// Pillow's getexif falls back to the XMP packet's `tiff:Orientation` when the EXIF has none.
fn orientation_from_xmp(xmp: &[u8]) -> Option<Orientation> {
    let text = String::from_utf8_lossy(xmp);
    let after = &text[text.find("tiff:Orientation")? + "tiff:Orientation".len()..];
    let digits = after
        .strip_prefix("=\"")
        .or_else(|| after.strip_prefix('>'))?;
    let digit = digits.chars().next()?.to_digit(10)?;
    Orientation::from_exif(digit as u8)
}

/// A reader over the file's bytes that notes when libjpeg asks for data past their end. PIL
/// refuses such a file as truncated; libjpeg itself only warns and pads the image with grey.
struct EndAwareReader<'a> {
    rest: &'a [u8],
    ran_past_end: std::rc::Rc<std::cell::Cell<bool>>,
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
        rgb: Vec<u8>,
        orientation: Orientation,
    },
    TooLarge {
        width: usize,
        height: usize,
    },
    UnsupportedColorSpace(String),
}

fn decode_jpeg(bytes: &[u8], name: &str) -> Result<(DynamicImage, Orientation), PreprocessError> {
    use mozjpeg::{ColorSpace, Decompress, Marker};

    let corrupt = |detail: String| PreprocessError::CorruptImage {
        image: name.to_string(),
        detail,
    };
    let ran_past_end = std::rc::Rc::new(std::cell::Cell::new(false));
    let reader = EndAwareReader {
        rest: bytes,
        ran_past_end: ran_past_end.clone(),
    };
    // libjpeg reports fatal errors by unwinding out of the decoder (mozjpeg turns its
    // error_exit into a panic payload without running the panic hook); catch that here and
    // turn it into an error. This relies on panic = "unwind", Rust's default.
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(
        move || -> std::io::Result<JpegOutcome> {
            let decompress = Decompress::builder()
                .with_markers(&[Marker::APP(1)])
                .from_reader(reader)?;
            let (width, height) = decompress.size();
            if (width as u64).saturating_mul(height as u64) > MAX_IMAGE_PIXELS {
                return Ok(JpegOutcome::TooLarge { width, height });
            }
            let color_space = decompress.color_space();
            if matches!(color_space, ColorSpace::JCS_CMYK | ColorSpace::JCS_YCCK) {
                return Ok(JpegOutcome::UnsupportedColorSpace(format!(
                    "{color_space:?}"
                )));
            }
            let orientation = jpeg_orientation(&decompress);
            let rgb = decompress.rgb()?.read_scanlines::<u8>()?;
            Ok(JpegOutcome::Decoded {
                width,
                height,
                rgb,
                orientation,
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
        JpegOutcome::TooLarge { width, height } => Err(PreprocessError::ImageTooLarge {
            image: name.to_string(),
            width: width as u64,
            height: height as u64,
        }),
        JpegOutcome::UnsupportedColorSpace(color_space) => Err(PreprocessError::UnsupportedImage {
            image: name.to_string(),
            reason: format!("{color_space} JPEG (only greyscale and YCbCr/RGB ones are read)"),
        }),
        JpegOutcome::Decoded { .. } if ran_past_end.get() => {
            Err(corrupt("the JPEG data ends before the image does".into()))
        }
        JpegOutcome::Decoded {
            width,
            height,
            rgb,
            orientation,
        } => {
            let image =
                image::RgbImage::from_raw(width as u32, height as u32, rgb).ok_or_else(|| {
                    corrupt("libjpeg returned fewer pixels than the image has".into())
                })?;
            Ok((DynamicImage::ImageRgb8(image), orientation))
        }
    }
}

/// The orientation from the first EXIF APP1 segment (the one PIL keeps), else from XMP.
fn jpeg_orientation<R>(decompress: &mozjpeg::Decompress<R>) -> Orientation {
    const EXIF_HEADER: &[u8] = b"Exif\0\0";
    const XMP_HEADER: &[u8] = b"http://ns.adobe.com/xap/1.0/\0";
    let app1: Vec<&[u8]> = decompress
        .markers()
        .filter(|m| matches!(m.marker, mozjpeg::Marker::APP(1)))
        .map(|m| m.data)
        .collect();
    if let Some(exif) = app1.iter().find_map(|d| d.strip_prefix(EXIF_HEADER)) {
        if let Some(orientation) = Orientation::from_exif_chunk(exif) {
            return orientation;
        }
    }
    app1.iter()
        .find_map(|d| d.strip_prefix(XMP_HEADER))
        .and_then(orientation_from_xmp)
        .unwrap_or(Orientation::NoTransforms)
}

/// PIL's `convert("RGB")` (3 channels) or `convert("L")` (1 channel) of a decoded image.
fn to_pil_mode(
    image: DynamicImage,
    channels: usize,
    name: &str,
) -> Result<Pixels, PreprocessError> {
    let (width, height) = (image.width() as usize, image.height() as usize);
    // PIL reads 16-bit RGB(A) and grey+alpha PNGs by keeping each sample's high byte.
    let high_bytes = |samples: &[u16]| samples.iter().map(|s| (s >> 8) as u8).collect::<Vec<u8>>();
    // Interleaved samples with `stride` per pixel, of which the first 1 (grey) or 3 (RGB) count.
    let (samples, stride, grey) = match image {
        DynamicImage::ImageLuma8(i) => (i.into_raw(), 1, true),
        DynamicImage::ImageLumaA8(i) => (i.into_raw(), 2, true),
        DynamicImage::ImageRgb8(i) => (i.into_raw(), 3, false),
        DynamicImage::ImageRgba8(i) => (i.into_raw(), 4, false),
        DynamicImage::ImageLumaA16(i) => (high_bytes(i.as_raw()), 2, true),
        DynamicImage::ImageRgb16(i) => (high_bytes(i.as_raw()), 3, false),
        DynamicImage::ImageRgba16(i) => (high_bytes(i.as_raw()), 4, false),
        DynamicImage::ImageLuma16(_) => {
            // PIL opens these as "I;16" and its conversion to RGB or L clips every value
            // above 255 to white: copying that would hand the model a blank image.
            return Err(PreprocessError::UnsupportedImage {
                image: name.to_string(),
                reason: "16-bit greyscale (PIL turns it white; save it as 8-bit)".into(),
            });
        }
        other => {
            return Err(PreprocessError::UnsupportedImage {
                image: name.to_string(),
                reason: format!("pixel type {:?}", other.color()),
            })
        }
    };
    let data: Vec<u8> = match (channels, grey) {
        (1, true) => samples.chunks_exact(stride).map(|p| p[0]).collect(),
        (1, false) => samples
            .chunks_exact(stride)
            .map(|p| pil_luma(p[0], p[1], p[2]))
            .collect(),
        (_, true) => samples
            .chunks_exact(stride)
            .flat_map(|p| [p[0]; 3])
            .collect(),
        (_, false) => samples
            .chunks_exact(stride)
            .flat_map(|p| [p[0], p[1], p[2]])
            .collect(),
    };
    Ok(Pixels {
        width,
        height,
        channels,
        data,
    })
}

/// PIL's RGB to L: ITU-R 601-2 luma, L = R * 299/1000 + G * 587/1000 + B * 114/1000, in 16-bit
/// fixed point with rounding.
fn pil_luma(r: u8, g: u8, b: u8) -> u8 {
    ((u32::from(r) * 19595 + u32::from(g) * 38470 + u32::from(b) * 7471 + 0x8000) >> 16) as u8
}

/// Resizes as PIL's `Image.resize(size, resample)` does for 8-bit images.
fn resize_like_pil(image: &Pixels, height: usize, width: usize, filter: Resample) -> Pixels {
    if filter == Resample::Nearest {
        return resize_nearest(image, height, width);
    }
    // Each pass stores its result as u8 (rounded and clipped), so the order of the passes
    // changes the result. Pillow 13 runs the vertical pass first when the height shrinks by
    // more than twice as many pixels as the width does, and the horizontal one first otherwise
    // (Pillow 12 and older: always horizontal first; the two agree on ordinary photos). A pass
    // whose size does not change is skipped.
    let shrink_height = image.height as i64 - height as i64;
    let shrink_width = image.width as i64 - width as i64;
    let vertical_first = shrink_height > 0 && shrink_height > 2 * shrink_width;
    let horizontal = |img: &Pixels| {
        if width == img.width {
            img.clone()
        } else {
            convolve_rows(img, &ResampleTaps::new(img.width, width, filter))
        }
    };
    let vertical = |img: &Pixels| {
        if height == img.height {
            img.clone()
        } else {
            convolve_columns(img, &ResampleTaps::new(img.height, height, filter))
        }
    };
    if vertical_first {
        horizontal(&vertical(image))
    } else {
        vertical(&horizontal(image))
    }
}

/// Fractional bits of PIL's 8-bit fixed-point filter weights: 32 bits less 8 for the pixel
/// value and 2 of headroom for weights above 1 and their sums.
const PRECISION_BITS: u32 = 32 - 8 - 2;

/// For each output index along one axis, the input indices `first..first + count` it reads and
/// their fixed-point weights (`taps_per_output` slots each, the unused ones 0).
struct ResampleTaps {
    first: Vec<usize>,
    count: Vec<usize>,
    weights: Vec<i32>,
    taps_per_output: usize,
}

impl ResampleTaps {
    fn new(in_size: usize, out_size: usize, filter: Resample) -> Self {
        let scale = in_size as f64 / out_size as f64;
        // When shrinking, the filter widens with the scale so every input pixel contributes.
        let filter_scale = scale.max(1.0);
        let support = filter.support() * filter_scale;
        let taps_per_output = support.ceil() as usize * 2 + 1;
        let mut taps = Self {
            first: Vec::with_capacity(out_size),
            count: Vec::with_capacity(out_size),
            weights: vec![0; out_size * taps_per_output],
            taps_per_output,
        };
        let mut float_weights = Vec::with_capacity(taps_per_output);
        for out_index in 0..out_size {
            let center = (out_index as f64 + 0.5) * scale;
            // Truncation toward zero, as C's (int) cast, then clamped to the image.
            let first = ((center - support + 0.5) as i64).max(0) as usize;
            let end = ((center + support + 0.5) as i64).min(in_size as i64) as usize;
            float_weights.clear();
            float_weights.extend(
                (first..end).map(|x| filter.weight((x as f64 - center + 0.5) / filter_scale)),
            );
            let total: f64 = float_weights.iter().sum();
            let slot = &mut taps.weights[out_index * taps_per_output..][..taps_per_output];
            for (fixed, &w) in slot.iter_mut().zip(&float_weights) {
                let w = if total != 0.0 { w / total } else { w };
                let scaled = w * f64::from(1u32 << PRECISION_BITS);
                *fixed = if w < 0.0 {
                    (scaled - 0.5) as i32
                } else {
                    (scaled + 0.5) as i32
                };
            }
            taps.first.push(first);
            taps.count.push(end - first);
        }
        taps
    }

    fn weights_of(&self, out_index: usize) -> &[i32] {
        &self.weights[out_index * self.taps_per_output..][..self.count[out_index]]
    }
}

/// Sum of weighted samples in fixed point, rounded and clipped to u8 as PIL's clip8 does.
fn fixed_point_to_u8(accumulator: i64) -> u8 {
    (accumulator >> PRECISION_BITS).clamp(0, 255) as u8
}

const ROUNDING_HALF: i64 = 1 << (PRECISION_BITS - 1);

fn convolve_rows(image: &Pixels, taps: &ResampleTaps) -> Pixels {
    let channels = image.channels;
    let out_width = taps.first.len();
    let mut data = Vec::with_capacity(image.height * out_width * channels);
    for row in image.data.chunks_exact(image.width * channels) {
        for x in 0..out_width {
            let weights = taps.weights_of(x);
            let window = &row[taps.first[x] * channels..][..weights.len() * channels];
            // One accumulator per channel (images here have 1 or 3), so the taps are read once.
            let mut sums = [ROUNDING_HALF; 4];
            for (pixel, &w) in window.chunks_exact(channels).zip(weights) {
                for (sum, &sample) in sums.iter_mut().zip(pixel) {
                    *sum += i64::from(sample) * i64::from(w);
                }
            }
            data.extend(sums[..channels].iter().map(|&s| fixed_point_to_u8(s)));
        }
    }
    Pixels {
        width: out_width,
        height: image.height,
        channels,
        data,
    }
}

fn convolve_columns(image: &Pixels, taps: &ResampleTaps) -> Pixels {
    let row_len = image.width * image.channels;
    let out_height = taps.first.len();
    let mut data = Vec::with_capacity(out_height * row_len);
    let mut sums = vec![0i64; row_len];
    for y in 0..out_height {
        sums.fill(ROUNDING_HALF);
        for (i, &w) in taps.weights_of(y).iter().enumerate() {
            let row = &image.data[(taps.first[y] + i) * row_len..][..row_len];
            for (sum, &sample) in sums.iter_mut().zip(row) {
                *sum += i64::from(sample) * i64::from(w);
            }
        }
        data.extend(sums.iter().map(|&s| fixed_point_to_u8(s)));
    }
    Pixels {
        width: image.width,
        height: out_height,
        channels: image.channels,
        data,
    }
}

/// PIL's nearest-neighbour resize: an affine scale that samples the input pixel under each
/// output pixel's centre. The sample position advances by repeated addition, as in PIL, which
/// decides the rare pixel whose centre lands on an input pixel boundary.
fn resize_nearest(image: &Pixels, height: usize, width: usize) -> Pixels {
    let source_indices = |in_size: usize, out_size: usize| -> Vec<usize> {
        let step = in_size as f64 / out_size as f64;
        let mut position = step * 0.5;
        (0..out_size)
            .map(|_| {
                let index = (position as usize).min(in_size - 1);
                position += step;
                index
            })
            .collect()
    };
    let columns = source_indices(image.width, width);
    let rows = source_indices(image.height, height);
    let channels = image.channels;
    let mut data = Vec::with_capacity(height * width * channels);
    for &y in &rows {
        let row = &image.data[y * image.width * channels..][..image.width * channels];
        for &x in &columns {
            data.extend_from_slice(&row[x * channels..][..channels]);
        }
    }
    Pixels {
        width,
        height,
        channels,
        data,
    }
}

/// HF's rescale (u8 to f64, times the factor, stored as f32) and normalise ((x - mean) / std in
/// f32), laid out channel-major.
fn rescale_and_normalize(image: &Pixels, cfg: &PreprocessConfig) -> Vec<f32> {
    let plane = image.width * image.height;
    let mut out = vec![0f32; plane * image.channels];
    for (pixel_index, pixel) in image.data.chunks_exact(image.channels).enumerate() {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn gradient(width: usize, height: usize, channels: usize) -> Pixels {
        let data = (0..width * height * channels)
            .map(|i| ((i * 37) % 256) as u8)
            .collect();
        Pixels {
            width,
            height,
            channels,
            data,
        }
    }

    #[test]
    fn resize_to_the_same_size_is_the_identity() {
        let image = gradient(7, 5, 3);
        for filter in [
            Resample::Nearest,
            Resample::Lanczos,
            Resample::Bilinear,
            Resample::Bicubic,
            Resample::Box,
            Resample::Hamming,
        ] {
            assert_eq!(resize_like_pil(&image, 5, 7, filter), image, "{filter:?}");
        }
    }

    #[test]
    fn fixed_point_weights_of_each_output_sum_to_one() {
        for filter in [Resample::Lanczos, Resample::Bicubic, Resample::Bilinear] {
            for (in_size, out_size) in [(100, 37), (37, 100), (224, 224), (3, 1000)] {
                let taps = ResampleTaps::new(in_size, out_size, filter);
                for out_index in 0..out_size {
                    let total: i64 = taps
                        .weights_of(out_index)
                        .iter()
                        .map(|&w| i64::from(w))
                        .sum();
                    let one = 1i64 << PRECISION_BITS;
                    assert!((total - one).abs() <= 4, "{filter:?} {in_size}->{out_size}");
                }
            }
        }
    }

    #[test]
    fn a_flat_image_stays_flat_through_every_filter() {
        let flat = Pixels {
            width: 13,
            height: 9,
            channels: 1,
            data: vec![200; 13 * 9],
        };
        for filter in [Resample::Lanczos, Resample::Bicubic, Resample::Box] {
            let resized = resize_like_pil(&flat, 31, 4, filter);
            assert!(resized.data.iter().all(|&v| v == 200), "{filter:?}");
        }
    }

    #[test]
    fn luma_matches_pil_on_primaries() {
        // PIL: Image.new("RGB", (1, 1), c).convert("L").getpixel((0, 0))
        assert_eq!(pil_luma(255, 0, 0), 76);
        assert_eq!(pil_luma(0, 255, 0), 150);
        assert_eq!(pil_luma(0, 0, 255), 29);
        assert_eq!(pil_luma(255, 255, 255), 255);
    }

    #[test]
    fn xmp_orientation_is_read_in_both_spellings() {
        assert_eq!(
            orientation_from_xmp(b"<x tiff:Orientation=\"6\"/>"),
            Some(Orientation::Rotate90)
        );
        assert_eq!(
            orientation_from_xmp(b"<tiff:Orientation>3</tiff:Orientation>"),
            Some(Orientation::Rotate180)
        );
        assert_eq!(orientation_from_xmp(b"<x/>"), None);
    }
}
