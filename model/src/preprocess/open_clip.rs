//! open_clip's eval transform, from an `open_clip_config.json`: `open_clip.image_transform`
//! with `is_train=False` on the `PreprocessCfg` that `create_model_and_transforms` makes (its
//! defaults, the file's `preprocess_cfg` over them, `size` from `model_cfg.vision_cfg.image_size`).
//!
//! - `resize_mode` "shortest" (the default): torchvision's `Resize(size)` of the shortest edge
//!   (PIL's resize of the image, the long side truncated as torchvision truncates it), then
//!   `CenterCrop(size)` with torchvision's rounding ([`CenterCropRounding::Torchvision`]);
//! - "squash": `Resize((size, size))`, no crop;
//! - "longest" (`ResizeKeepRatio` of the longest edge, then `CenterCropOrPad` with
//!   `fill_color`) is refused, as is a non-square size in "shortest" mode (`ResizeKeepRatio`).
//!
//! `interpolation` "bilinear" is PIL's bilinear; anything else is bicubic, as open_clip's eval
//! transform maps it. `ToTensor` and `Normalize` are timm's (see `timm.rs`): the same floats as
//! HF's rescale and normalise. `MaybeConvertMode` converts to RGB after the resize, where
//! vitrt loads every file as RGB first (as transformers' `load_image` does): the same pixels
//! for RGB files; for a palette or greyscale file PIL resizes the converted image instead.

use serde_json::{Map, Value};

use super::config::{CenterCropRounding, PreprocessConfig};
use super::error::PreprocessError;
use super::resampling::{Resample, ResizeTarget};

/// `open_clip.constants.OPENAI_DATASET_MEAN` and `_STD`, `PreprocessCfg`'s defaults.
/// Python floats, made f32 as `Normalize` makes them.
const OPENAI_MEAN: [f64; 3] = [0.48145466, 0.4578275, 0.40821073];
const OPENAI_STD: [f64; 3] = [0.26862954, 0.26130258, 0.27577711];

impl PreprocessConfig {
    /// The preprocessing an `open_clip_config.json` (the whole file) describes.
    pub fn from_open_clip_config(config: &Value) -> Result<Self, PreprocessError> {
        let invalid = |reason: String| PreprocessError::InvalidConfig {
            origin: "(open_clip_config.json)".into(),
            reason,
        };
        let config = open_clip_config(config).map_err(invalid)?;
        config.validate().map_err(invalid)?;
        Ok(config)
    }
}

fn open_clip_config(top: &Value) -> Result<PreprocessConfig, String> {
    let empty = Map::new();
    let object = |v: Option<&Value>, what: &str| -> Result<Map<String, Value>, String> {
        match v {
            None | Some(Value::Null) => Ok(empty.clone()),
            Some(Value::Object(map)) => Ok(map.clone()),
            Some(other) => Err(format!("{what} must be an object, not {other}")),
        }
    };
    let preprocess = object(top.get("preprocess_cfg"), "preprocess_cfg")?;
    let vision = object(
        top.get("model_cfg").and_then(|m| m.get("vision_cfg")),
        "model_cfg.vision_cfg",
    )?;
    // merge_preprocess_dict: a null in preprocess_cfg keeps the default.
    let field = |key: &str| preprocess.get(key).filter(|v| !v.is_null());
    let positive = |v: &Value, what: &str| match v.as_u64() {
        Some(n) if n > 0 => Ok(n as usize),
        _ => Err(format!("{what} must be a positive integer, not {v}")),
    };
    // The model's image size wins over preprocess_cfg's `size` (create_model sets it from
    // `model.visual.image_size`).
    let (height, width) = match vision.get("image_size").or(field("size")) {
        None | Some(Value::Null) => (224, 224),
        Some(Value::Array(sides)) if sides.len() == 2 => (
            positive(&sides[0], "image_size [0]")?,
            positive(&sides[1], "image_size [1]")?,
        ),
        Some(v) => {
            let side = positive(v, "image_size")?;
            (side, side)
        }
    };
    if let Some(mode) = field("mode") {
        if mode.as_str() != Some("RGB") {
            return Err(format!("preprocess_cfg.mode {mode} is not \"RGB\""));
        }
    }
    let resample = match field("interpolation") {
        None => Resample::Bicubic,
        Some(Value::String(name)) if name == "bilinear" => Resample::Bilinear,
        // open_clip's eval transform: InterpolationMode.BILINEAR if interpolation ==
        // 'bilinear' else InterpolationMode.BICUBIC.
        Some(Value::String(_)) => Resample::Bicubic,
        Some(other) => {
            return Err(format!(
                "preprocess_cfg.interpolation must be a string, not {other}"
            ))
        }
    };
    let channel_values = |key: &str, default: [f64; 3]| -> Result<Vec<f32>, String> {
        match field(key) {
            None => Ok(default.map(|v| v as f32).to_vec()),
            Some(Value::Array(items)) if items.len() == 3 => items
                .iter()
                .map(|v| {
                    v.as_f64()
                        .map(|x| x as f32)
                        .ok_or_else(|| format!("preprocess_cfg.{key} must hold numbers, not {v}"))
                })
                .collect(),
            Some(other) => Err(format!(
                "preprocess_cfg.{key} must be three numbers (RGB), not {other}"
            )),
        }
    };
    let image_mean = channel_values("mean", OPENAI_MEAN)?;
    let image_std = channel_values("std", OPENAI_STD)?;
    let mode = match field("resize_mode") {
        None => "shortest",
        Some(Value::String(mode)) => mode.as_str(),
        Some(other) => {
            return Err(format!(
                "preprocess_cfg.resize_mode must be a string, not {other}"
            ))
        }
    };
    let (size, crop_size) = match mode {
        "shortest" if height == width => {
            (ResizeTarget::ShortestEdge(height), Some((height, width)))
        }
        "shortest" => {
            return Err(format!(
                "image_size {height} x {width} in resize_mode \"shortest\": open_clip then \
                 resizes with its ResizeKeepRatio, which vitrt does not implement"
            ))
        }
        "squash" => (ResizeTarget::Fixed { height, width }, None),
        "longest" => {
            return Err(
                "resize_mode \"longest\" (resize the longest edge, then pad to a square with \
                 fill_color) is not implemented by vitrt; \"shortest\" and \"squash\" are"
                    .into(),
            )
        }
        other => {
            return Err(format!(
                "resize_mode \"{other}\" is not one of open_clip's (shortest, squash, longest)"
            ))
        }
    };

    let mut config = PreprocessConfig::hf_default_sized(height, width, 3);
    config.do_resize = true;
    config.size = size;
    config.crop_size = crop_size;
    config.crop_rounding = CenterCropRounding::Torchvision;
    config.resample = resample;
    config.do_rescale = true;
    config.rescale_factor = 1.0 / 255.0;
    config.do_normalize = true;
    config.image_mean = image_mean;
    config.image_std = image_std;
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(json: &str) -> Result<PreprocessConfig, PreprocessError> {
        PreprocessConfig::from_open_clip_config(&serde_json::from_str(json).unwrap())
    }

    #[test]
    fn open_clip_preprocessing_is_read_as_image_transform_makes_it() {
        let shortest = read(
            r#"{"model_cfg": {"vision_cfg": {"image_size": 336}},
                "preprocess_cfg": {"mean": [0.5, 0.5, 0.5], "std": [0.25, 0.25, 0.25]}}"#,
        )
        .unwrap();
        assert_eq!(shortest.size, ResizeTarget::ShortestEdge(336));
        assert_eq!(shortest.crop_size, Some((336, 336)));
        assert_eq!(shortest.crop_rounding, CenterCropRounding::Torchvision);
        assert_eq!(shortest.resample, Resample::Bicubic);
        assert_eq!(shortest.image_mean, vec![0.5; 3]);
        assert_eq!(shortest.output_size(), (336, 336));
        let squash = read(
            r#"{"model_cfg": {"vision_cfg": {"image_size": 64}},
                "preprocess_cfg": {"resize_mode": "squash", "interpolation": "bilinear"}}"#,
        )
        .unwrap();
        assert_eq!(
            squash.size,
            ResizeTarget::Fixed {
                height: 64,
                width: 64
            }
        );
        assert_eq!(squash.crop_size, None);
        assert_eq!(squash.resample, Resample::Bilinear);
        assert_eq!(squash.image_std, OPENAI_STD.map(|v| v as f32).to_vec());
    }

    #[test]
    fn open_clip_resize_modes_vitrt_cannot_run_are_refused_by_name() {
        for (json, want) in [
            (
                r#"{"preprocess_cfg": {"resize_mode": "longest"}}"#,
                "resize_mode \"longest\"",
            ),
            (
                r#"{"preprocess_cfg": {"resize_mode": "crop"}}"#,
                "resize_mode \"crop\" is not one of open_clip's",
            ),
            (
                r#"{"model_cfg": {"vision_cfg": {"image_size": [224, 320]}}}"#,
                "ResizeKeepRatio",
            ),
            (r#"{"preprocess_cfg": {"mean": [0.5]}}"#, "three numbers"),
        ] {
            let err = read(json).unwrap_err().to_string();
            assert!(err.contains(want), "{err} should mention {want}");
        }
    }
}
