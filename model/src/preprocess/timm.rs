//! timm's eval transform, from the `pretrained_cfg` of a timm checkpoint's config.json:
//! `timm.data.create_transform(**timm.data.resolve_data_config(pretrained_cfg),
//! is_training=False)`, which is also what transformers' `TimmWrapperImageProcessor` runs.
//!
//! For the "center" crop mode that is torchvision's `Resize(floor(side / crop_pct))` of the
//! shortest edge (PIL's resize, with the long side truncated as HF truncates it), its
//! `CenterCrop(side)` ([`CenterCropRounding::Torchvision`]), `ToTensor` and `Normalize`; for
//! "squash", a `Resize` to `floor(side / crop_pct)` on both sides, then the same crop.
//!
//! `ToTensor`'s `x.float().div(255)` in float32 equals HF's `(x as f64 * (1/255)) as f32` for
//! every byte (each is the correctly rounded x / 255: the f64 product is within 2^-53 relative
//! of x / 255, which is never that close to a midpoint between two f32s), and `Normalize`'s
//! `sub_(mean).div_(std)` with float32 tensors of mean and std is HF's `(x - mean) / std` in
//! f32, so the normalization table serves both unchanged.

use serde_json::{Map, Value};

use super::classes::{IMAGENET_MEAN, IMAGENET_STD};
use super::config::{CenterCropRounding, PreprocessConfig};
use super::error::PreprocessError;
use super::resampling::{Resample, ResizeTarget};

/// timm's `DEFAULT_CROP_PCT`.
const DEFAULT_CROP_PCT: f64 = 0.875;

impl PreprocessConfig {
    /// The preprocessing of a timm checkpoint: its config.json's `pretrained_cfg` object, read
    /// as `timm.data.resolve_data_config` reads it (`input_size` [C, H, W], default
    /// [3, 224, 224]; `interpolation`, default "bicubic"; `mean` and `std`, default ImageNet's,
    /// one value standing for every channel; `crop_pct`, default 0.875; `crop_mode`, default
    /// "center"), reproducing timm's eval transform for the "center" and "squash" crop modes.
    /// "border" mode, a non-square `input_size` in "center" mode (timm's `ResizeKeepRatio`) and
    /// interpolations PIL does not have are errors.
    ///
    /// `test_input_size` and `test_crop_pct` are not read, as neither timm's
    /// `resolve_data_config` nor transformers' `TimmWrapperImageProcessor` reads them by default.
    /// The model's channel count is `input_size[0]` ([`num_channels`](Self::num_channels)); files
    /// are loaded as for HF's pipeline (EXIF orientation, then RGB, or L for one channel), and
    /// `do_convert_rgb` is off, as timm's transform has no such step.
    pub fn from_timm_pretrained_cfg(pretrained_cfg: &Value) -> Result<Self, PreprocessError> {
        let invalid = |reason: String| PreprocessError::InvalidConfig {
            origin: "(timm pretrained_cfg)".into(),
            reason,
        };
        let Value::Object(fields) = pretrained_cfg else {
            return Err(invalid(format!(
                "pretrained_cfg must be a JSON object, not {pretrained_cfg}"
            )));
        };
        let config = timm_config(fields).map_err(invalid)?;
        config.validate().map_err(invalid)?;
        Ok(config)
    }
}

fn timm_config(fields: &Map<String, Value>) -> Result<PreprocessConfig, String> {
    // resolve_data_config falls back to the default wherever a value is missing or falsy.
    let field = |key: &str| {
        fields.get(key).filter(|v| match v {
            Value::Null | Value::Bool(false) => false,
            Value::String(s) => !s.is_empty(),
            Value::Array(a) => !a.is_empty(),
            Value::Number(n) => n.as_f64() != Some(0.0),
            _ => true,
        })
    };
    let positive = |v: &Value, what: &str| match v.as_i64() {
        Some(n) if n > 0 => Ok(n as usize),
        _ => Err(format!("{what} must be a positive integer, not {v}")),
    };

    let (channels, height, width) = match field("input_size") {
        Some(Value::Array(sides)) if sides.len() == 3 => (
            positive(&sides[0], "input_size [0] (channels)")?,
            positive(&sides[1], "input_size [1] (height)")?,
            positive(&sides[2], "input_size [2] (width)")?,
        ),
        Some(other) => {
            return Err(format!(
                "input_size must be [channels, height, width], not {other}"
            ))
        }
        None => {
            let channels = match field("in_chans").or_else(|| field("chans")) {
                Some(v) => positive(v, "in_chans")?,
                None => 3,
            };
            match field("img_size") {
                Some(v) => {
                    let side = positive(v, "img_size")?;
                    (channels, side, side)
                }
                None => (channels, 224, 224),
            }
        }
    };

    let resample = match field("interpolation") {
        None => Resample::Bicubic,
        Some(Value::String(name)) => match name.as_str() {
            "bicubic" => Resample::Bicubic,
            "bilinear" => Resample::Bilinear,
            "nearest" => Resample::Nearest,
            "box" => Resample::Box,
            "hamming" => Resample::Hamming,
            "lanczos" => Resample::Lanczos,
            other => {
                return Err(format!(
                    "interpolation \"{other}\" is not one of timm's eval interpolations \
                     (bicubic, bilinear, nearest, box, hamming, lanczos)"
                ))
            }
        },
        Some(other) => return Err(format!("interpolation must be a string, not {other}")),
    };

    let channel_values = |key: &str, default: [f64; 3]| -> Result<Vec<f32>, String> {
        let Some(value) = field(key) else {
            return Ok(if channels == 3 {
                default.map(|v| v as f32).to_vec()
            } else {
                // timm's ImageNet default has three values; torch would broadcast them
                // against one channel only by failing.
                return Err(format!(
                    "{key} is missing and timm's default has 3 values, but input_size has \
                     {channels} channels"
                ));
            });
        };
        let Value::Array(items) = value else {
            return Err(format!("{key} must be a list of numbers, not {value}"));
        };
        let numbers = items
            .iter()
            .map(|v| {
                v.as_f64()
                    .map(|x| x as f32)
                    .ok_or_else(|| format!("{key} must hold numbers, not {v}"))
            })
            .collect::<Result<Vec<f32>, String>>()?;
        match numbers.len() {
            // resolve_data_config repeats a single value for every channel.
            1 => Ok(vec![numbers[0]; channels]),
            n if n == channels => Ok(numbers),
            n => Err(format!(
                "{key} has {n} values but input_size has {channels} channels"
            )),
        }
    };
    let image_mean = channel_values("mean", IMAGENET_MEAN)?;
    let image_std = channel_values("std", IMAGENET_STD)?;

    let crop_pct = match field("crop_pct") {
        None => DEFAULT_CROP_PCT,
        Some(v) => v
            .as_f64()
            .filter(|p| p.is_finite() && *p > 0.0)
            .ok_or_else(|| format!("crop_pct must be a positive number, not {v}"))?,
    };
    // math.floor(side / crop_pct), in f64 as Python computes it.
    let scale = |side: usize| (side as f64 / crop_pct).floor();
    let (scale_height, scale_width) = (scale(height), scale(width));
    if !(scale_height >= 1.0 && scale_width >= 1.0 && scale_height < 1e9 && scale_width < 1e9) {
        return Err(format!(
            "crop_pct {crop_pct} makes a resize of {scale_height} x {scale_width}"
        ));
    }
    let (scale_height, scale_width) = (scale_height as usize, scale_width as usize);

    let crop_mode = match field("crop_mode") {
        None => "center",
        Some(Value::String(mode)) => mode.as_str(),
        Some(other) => return Err(format!("crop_mode must be a string, not {other}")),
    };
    let size = match crop_mode {
        "center" if scale_height == scale_width => ResizeTarget::ShortestEdge(scale_height),
        "center" => {
            return Err(format!(
                "input_size {height} x {width} with crop_pct {crop_pct} resizes to \
                 {scale_height} x {scale_width}: timm's \"center\" mode then keeps the aspect \
                 ratio with its ResizeKeepRatio, which vitrt does not implement"
            ))
        }
        "squash" => ResizeTarget::Fixed {
            height: scale_height,
            width: scale_width,
        },
        "border" => {
            return Err(
                "crop_mode \"border\" (resize the longest edge, pad with the mean colour) is \
                 not implemented by vitrt; \"center\" and \"squash\" are"
                    .into(),
            )
        }
        other => {
            return Err(format!(
                "crop_mode \"{other}\" is not one of timm's (center, squash, border)"
            ))
        }
    };

    let mut config = PreprocessConfig::hf_default(height, channels);
    config.do_resize = true;
    config.size = size;
    config.crop_size = Some((height, width));
    config.crop_rounding = CenterCropRounding::Torchvision;
    config.resample = resample;
    config.do_rescale = true;
    config.rescale_factor = 1.0 / 255.0;
    config.do_normalize = true;
    config.image_mean = image_mean;
    config.image_std = image_std;
    Ok(config)
}
