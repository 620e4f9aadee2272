//! SigLIP 2 NaFlex's preprocessing, as transformers 5.17's `Siglip2ImageProcessorPil`
//! (`image_processing_pil_siglip2.py`) does it, image by image:
//! 1. the target size: the largest scale (found by its binary search, in f64 as Python runs
//!    it) at which both sides, each rounded up to a multiple of the patch size (and at least
//!    one patch), give at most `max_num_patches` patches;
//! 2. PIL's resize to that size (`resample`, bilinear by default), rescale and normalise with
//!    the arithmetic of every PIL processor ([`super::normalization_table`]);
//! 3. the patches, row by row of the grid, each flattened as (y, x, channel), channel fastest;
//! 4. zero rows up to `max_num_patches`, the mask (1 for a real patch) and the grid
//!    (`spatial_shapes`).
//!
//! The host path only: the device decoding path (engine/, `device_batch.rs`) makes one size
//! for a whole batch, while each NaFlex image has its own.

use super::{
    decode_image, normalization_table, normalize_into, read_limited, resize::Resizer, DecodedImage,
    ImageLimits, PreprocessConfig, PreprocessError, Resample, MAX_IMAGE_PIXELS,
};
use serde_json::Value;
use std::path::Path;

/// `preprocessor_config.json` of a NaFlex checkpoint, with the class's defaults.
#[derive(Clone, Debug, PartialEq)]
pub struct NaflexProcessor {
    pub patch_size: usize,
    pub max_num_patches: usize,
    pub do_resize: bool,
    pub resample: Resample,
    /// Rescale and normalisation, in the form the shared normalisation table reads.
    normalization: PreprocessConfig,
    pub do_convert_rgb: bool,
}

/// One batch as the processor returns it.
#[derive(Clone, Debug, PartialEq)]
pub struct NaflexBatch {
    /// `[B, max_num_patches, 3·p·p]`.
    pub pixel_values: Vec<f32>,
    /// `[B, max_num_patches]`, 1 for a real patch.
    pub pixel_attention_mask: Vec<f32>,
    /// Each image's patch grid (rows, cols).
    pub spatial_shapes: Vec<(usize, usize)>,
}

const CLASSES: [&str; 3] = [
    "Siglip2ImageProcessor",
    "Siglip2ImageProcessorFast",
    "Siglip2ImageProcessorPil",
];

impl NaflexProcessor {
    pub fn from_json_file(path: &Path) -> Result<NaflexProcessor, PreprocessError> {
        let text = std::fs::read_to_string(path).map_err(|e| PreprocessError::InvalidConfig {
            origin: path.display().to_string(),
            reason: e.to_string(),
        })?;
        NaflexProcessor::from_json_str(&text).map_err(|reason| PreprocessError::InvalidConfig {
            origin: path.display().to_string(),
            reason,
        })
    }

    pub fn from_json_str(text: &str) -> Result<NaflexProcessor, String> {
        let root: Value = serde_json::from_str(text).map_err(|e| format!("not valid JSON: {e}"))?;
        let fields = root.as_object().ok_or("not a JSON object")?;
        match fields.get("image_processor_type").and_then(Value::as_str) {
            None => {}
            Some(class) if CLASSES.contains(&class) => {}
            Some(class) => {
                return Err(format!(
                    "image_processor_type {class} is not SigLIP 2's ({})",
                    CLASSES.join(", ")
                ))
            }
        }
        let whole = |key: &str, default: usize| -> Result<usize, String> {
            match fields.get(key) {
                None | Some(Value::Null) => Ok(default),
                Some(v) => v
                    .as_u64()
                    .filter(|&n| n > 0)
                    .map(|n| n as usize)
                    .ok_or_else(|| format!("{key} must be a positive whole number, got {v}")),
            }
        };
        let flag = |key: &str, default: bool| -> Result<bool, String> {
            match fields.get(key) {
                None | Some(Value::Null) => Ok(default),
                Some(v) => v
                    .as_bool()
                    .ok_or_else(|| format!("{key} must be true or false")),
            }
        };
        let number = |key: &str, default: f64| -> Result<f64, String> {
            match fields.get(key) {
                None | Some(Value::Null) => Ok(default),
                Some(v) => v.as_f64().ok_or_else(|| format!("{key} must be a number")),
            }
        };
        let triple = |key: &str| -> Result<[f32; 3], String> {
            match fields.get(key) {
                None | Some(Value::Null) => Ok([0.5; 3]),
                Some(Value::Number(n)) => Ok([n.as_f64().unwrap_or(f64::NAN) as f32; 3]),
                Some(Value::Array(values)) if values.len() == 3 => {
                    let mut out = [0.0f32; 3];
                    for (o, v) in out.iter_mut().zip(values) {
                        // Python floats (f64), rounded to f32 as numpy does.
                        *o = v
                            .as_f64()
                            .ok_or_else(|| format!("{key} holds a non-number"))?
                            as f32;
                    }
                    Ok(out)
                }
                Some(v) => Err(format!("{key} must be three numbers, got {v}")),
            }
        };
        let resample = match fields.get("resample") {
            None | Some(Value::Null) => Resample::Bilinear,
            Some(v) => {
                Resample::from_pil_id(v.as_i64().ok_or("resample must be a PIL filter id")?)?
            }
        };
        let image_std = triple("image_std")?;
        if image_std.iter().any(|&s| s == 0.0 || !s.is_finite()) {
            return Err(format!(
                "image_std {image_std:?} must be finite and non-zero"
            ));
        }
        let mut normalization = PreprocessConfig::hf_default(224, 3);
        normalization.do_rescale = flag("do_rescale", true)?;
        normalization.rescale_factor = number("rescale_factor", 1.0 / 255.0)?;
        normalization.do_normalize = flag("do_normalize", true)?;
        normalization.image_mean = triple("image_mean")?.to_vec();
        normalization.image_std = image_std.to_vec();
        Ok(NaflexProcessor {
            patch_size: whole("patch_size", 16)?,
            max_num_patches: whole("max_num_patches", 256)?,
            do_resize: flag("do_resize", true)?,
            resample,
            normalization,
            do_convert_rgb: flag("do_convert_rgb", false)?,
        })
    }

    /// Preprocesses the images of `files` (PNG, JPEG or WebP) into one batch.
    pub fn preprocess_files(&self, files: &[&Path]) -> Result<NaflexBatch, PreprocessError> {
        let mut batch = NaflexBatch {
            pixel_values: Vec::new(),
            pixel_attention_mask: Vec::new(),
            spatial_shapes: Vec::new(),
        };
        let mut resizer = Resizer::default();
        let limits = ImageLimits {
            max_pixels: MAX_IMAGE_PIXELS,
            ..ImageLimits::default()
        };
        for path in files {
            let image = self.preprocess_file_with(path, &limits, &mut resizer)?;
            batch.push(&image, self.max_num_patches);
        }
        Ok(batch)
    }

    /// One image file's patch rows (padded to `max_num_patches`) and grid, read and decoded
    /// within `limits`.
    pub fn preprocess_file(
        &self,
        path: &Path,
        limits: &ImageLimits,
    ) -> Result<NaflexImage, PreprocessError> {
        self.preprocess_file_with(path, limits, &mut Resizer::default())
    }

    fn preprocess_file_with(
        &self,
        path: &Path,
        limits: &ImageLimits,
        resizer: &mut Resizer,
    ) -> Result<NaflexImage, PreprocessError> {
        let mut bytes = Vec::new();
        read_limited(path, limits.max_file_bytes, &mut bytes)?;
        self.preprocess_bytes_with(&bytes, &path.display().to_string(), limits, resizer)
    }

    /// The contents of an image file (PNG, JPEG or WebP), decoded as a file's within
    /// `limits`; `name` names it in errors.
    pub fn preprocess_bytes(
        &self,
        bytes: &[u8],
        name: &str,
        limits: &ImageLimits,
    ) -> Result<NaflexImage, PreprocessError> {
        self.preprocess_bytes_with(bytes, name, limits, &mut Resizer::default())
    }

    fn preprocess_bytes_with(
        &self,
        bytes: &[u8],
        name: &str,
        limits: &ImageLimits,
        resizer: &mut Resizer,
    ) -> Result<NaflexImage, PreprocessError> {
        let image = decode_image(bytes, name, 3, self.do_convert_rgb, limits)?;
        self.preprocess_decoded(image, name, resizer)
    }

    /// Pixels already decoded (HWC, 8 bits, RGB or grey, which is replicated to RGB as PIL's
    /// `convert("RGB")` does); `name` names the image in errors.
    pub fn preprocess_pixels(
        &self,
        image: DecodedImage,
        name: &str,
    ) -> Result<NaflexImage, PreprocessError> {
        let image = match image.channels {
            3 => image,
            1 => DecodedImage {
                pixels: image.pixels.iter().flat_map(|&v| [v, v, v]).collect(),
                channels: 3,
                ..image
            },
            other => {
                return Err(PreprocessError::UnsupportedImage {
                    image: name.to_string(),
                    reason: format!("{other} channels; RGB (3) or grey (1) images are read"),
                })
            }
        };
        if image.height == 0
            || image.width == 0
            || image.pixels.len() != image.height * image.width * 3
        {
            return Err(PreprocessError::UnsupportedImage {
                image: name.to_string(),
                reason: format!(
                    "{} bytes are not {}x{} RGB pixels of at least one pixel",
                    image.pixels.len(),
                    image.height,
                    image.width
                ),
            });
        }
        self.preprocess_decoded(image, name, &mut Resizer::default())
    }

    fn preprocess_decoded(
        &self,
        image: DecodedImage,
        name: &str,
        resizer: &mut Resizer,
    ) -> Result<NaflexImage, PreprocessError> {
        let name = name.to_string();
        let (height, width) = if self.do_resize {
            target_size(
                image.height,
                image.width,
                self.patch_size,
                self.max_num_patches,
            )
        } else {
            (image.height, image.width)
        };
        let (rows, cols) = (height / self.patch_size, width / self.patch_size);
        if rows == 0 || cols == 0 || rows * cols > self.max_num_patches {
            // Only without do_resize: the image as it is must fit.
            return Err(PreprocessError::UnsupportedImage {
                image: name,
                reason: format!(
                    "do_resize is false and its {height}x{width} pixels give {rows} x {cols} \
                     patches of {}, not 1 to {}",
                    self.patch_size, self.max_num_patches
                ),
            });
        }
        let resized = if (height, width) == (image.height, image.width) {
            image.pixels
        } else {
            let mut out = vec![0u8; height * width * 3];
            resizer.resize(
                &image.pixels,
                (image.height, image.width, 3),
                &mut out,
                height,
                width,
                self.resample,
            );
            out
        };
        let mut chw = vec![0.0f32; resized.len()];
        normalize_into(
            &resized,
            3,
            &normalization_table(&self.normalization),
            &mut chw,
        );
        Ok(NaflexImage {
            patch_rows: patch_rows(&chw, (height, width), self.patch_size, self.max_num_patches),
            grid: (rows, cols),
        })
    }
}

/// One image as the processor makes it: `max_num_patches` patch rows (zeros past its own)
/// and its grid (rows, cols).
#[derive(Clone, Debug, PartialEq)]
pub struct NaflexImage {
    pub patch_rows: Vec<f32>,
    pub grid: (usize, usize),
}

impl NaflexBatch {
    pub fn new() -> NaflexBatch {
        NaflexBatch {
            pixel_values: Vec::new(),
            pixel_attention_mask: Vec::new(),
            spatial_shapes: Vec::new(),
        }
    }

    /// Appends an image made for `max_num_patches` patches.
    pub fn push(&mut self, image: &NaflexImage, max_num_patches: usize) {
        let valid = image.grid.0 * image.grid.1;
        self.pixel_values.extend_from_slice(&image.patch_rows);
        self.pixel_attention_mask
            .extend((0..max_num_patches).map(|i| if i < valid { 1.0 } else { 0.0 }));
        self.spatial_shapes.push(image.grid);
    }

    pub fn len(&self) -> usize {
        self.spatial_shapes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.spatial_shapes.is_empty()
    }
}

impl Default for NaflexBatch {
    fn default() -> Self {
        NaflexBatch::new()
    }
}

/// The size transformers' `get_image_size_for_max_num_patches` gives an image: a binary
/// search over the scale, in f64, for the largest at which the sides, rounded up to whole
/// patches, give at most `max_num_patches` patches.
pub fn target_size(
    height: usize,
    width: usize,
    patch_size: usize,
    max_num_patches: usize,
) -> (usize, usize) {
    let eps = 1e-5;
    let patch = patch_size as f64;
    let scaled = |scale: f64, size: usize| -> usize {
        let size = (size as f64 * scale / patch).ceil() * patch;
        size.max(patch) as usize
    };
    let (mut low, mut high) = (eps / 10.0, 100.0);
    while high - low >= eps {
        let scale = (low + high) / 2.0;
        let (h, w) = (scaled(scale, height), scaled(scale, width));
        let patches = (h as f64 / patch) * (w as f64 / patch);
        if patches <= max_num_patches as f64 {
            low = scale;
        } else {
            high = scale;
        }
    }
    (scaled(low, height), scaled(low, width))
}

/// A CHW image's patches, row by row of the grid, each `(y, x, channel)` with the channel
/// fastest (transformers' `convert_image_to_patches`), then zero rows up to `max_patches`.
fn patch_rows(
    chw: &[f32],
    (height, width): (usize, usize),
    patch: usize,
    max_patches: usize,
) -> Vec<f32> {
    let channels = chw.len() / (height * width);
    let row_len = channels * patch * patch;
    let mut out = vec![0.0f32; max_patches * row_len];
    let (rows, cols) = (height / patch, width / patch);
    for r in 0..rows {
        for c in 0..cols {
            let dst = &mut out[(r * cols + c) * row_len..][..row_len];
            for y in 0..patch {
                for x in 0..patch {
                    for ch in 0..channels {
                        let src = ch * height * width + (r * patch + y) * width + c * patch + x;
                        dst[(y * patch + x) * channels + ch] = chw[src];
                    }
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn target_sizes_are_transformers() {
        // Values transformers 5.17's get_image_size_for_max_num_patches gives.
        assert_eq!(target_size(23, 61, 4, 24), (12, 32));
        assert_eq!(target_size(57, 12, 4, 24), (40, 8));
        assert_eq!(target_size(30, 30, 4, 24), (16, 16));
        assert_eq!(target_size(224, 224, 16, 256), (256, 256));
        assert_eq!(target_size(480, 640, 16, 256), (224, 288));
    }

    #[test]
    fn patches_are_row_major_with_the_channel_fastest() {
        // 2 channels of 2 x 4 pixels, patches of 2: a grid of 1 x 2.
        let chw: Vec<f32> = (0..16).map(|v| v as f32).collect();
        let rows = patch_rows(&chw, (2, 4), 2, 3);
        assert_eq!(
            rows,
            [
                0.0, 8.0, 1.0, 9.0, 4.0, 12.0, 5.0, 13.0, // patch (0, 0)
                2.0, 10.0, 3.0, 11.0, 6.0, 14.0, 7.0, 15.0, // patch (0, 1)
                0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, // padding
            ]
        );
    }

    #[test]
    fn another_class_and_bad_fields_are_refused() {
        let e = NaflexProcessor::from_json_str(r#"{"image_processor_type": "ViTImageProcessor"}"#)
            .unwrap_err();
        assert!(e.contains("not SigLIP 2's"), "{e}");
        let e = NaflexProcessor::from_json_str(r#"{"max_num_patches": 0}"#).unwrap_err();
        assert!(e.contains("max_num_patches"), "{e}");
        let ok = NaflexProcessor::from_json_str("{}").unwrap();
        assert_eq!((ok.patch_size, ok.max_num_patches), (16, 256));
    }
}
