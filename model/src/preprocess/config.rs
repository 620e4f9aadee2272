//! preprocessor_config.json: parsing and validation.

use std::path::Path;

use serde_json::{Map, Value};

use super::classes::ProcessorClass;
use super::error::{PreprocessError, MAX_OUTPUT_SIDE};
use super::resampling::{Resample, ResizeTarget};

/// A parsed and validated preprocessor_config.json, for a model taking `num_channels`-channel
/// images.
#[derive(Debug, Clone, PartialEq)]
pub struct PreprocessConfig {
    pub(super) do_resize: bool,
    pub(super) size: ResizeTarget,
    /// (height, width) of HF's `center_crop`, when `do_center_crop` is on.
    pub(super) crop_size: Option<(usize, usize)>,
    pub(super) resample: Resample,
    pub(super) do_rescale: bool,
    pub(super) rescale_factor: f64,
    pub(super) do_normalize: bool,
    pub(super) image_mean: Vec<f32>,
    pub(super) image_std: Vec<f32>,
    pub(super) num_channels: usize,
    /// Where the center crop's window goes when the margin is odd or the crop is larger.
    pub(super) crop_rounding: CenterCropRounding,
    /// Whether the processor's `convert_to_rgb` runs (`do_convert_rgb`, or its class default).
    pub(super) do_convert_rgb: bool,
    /// Whether the steps work on 8-bit pixels as PIL's or on floats as DINOv3's tensors.
    pub(super) arithmetic: PixelArithmetic,
}

/// The arithmetic of a processor's steps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PixelArithmetic {
    /// PIL's: the resize and the crop on 8-bit pixels, then rescale and normalise (every
    /// class but DINOv3's, and timm's and open_clip's transforms).
    Pil8Bit,
    /// `DINOv3ViTImageProcessor`'s torch tensors: rescale to f32 first, then resize the
    /// floats with torchvision's antialiased resize, crop and normalise
    /// (`preprocess/torchvision_float.rs`). The loader's output is then the model's input
    /// itself, f32 values, rather than bytes for the normalisation table.
    TorchvisionFloat,
}

/// How a center crop places its window: HF's image processors and torchvision's `CenterCrop`
/// (which timm's eval transform uses) round differently when the margin is odd, and pad a crop
/// larger than the image on different sides.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CenterCropRounding {
    /// HF's `center_crop`: the window starts `(side - crop) // 2` in (floor division), so a
    /// crop larger than the image has `ceil(missing / 2)` zeros before it.
    Hf,
    /// torchvision's `center_crop`: the window starts `int(round((side - crop) / 2.0))` in
    /// (Python's round, half to even: a margin of 1 starts at 0, 3 at 2, 5 at 2), and a crop
    /// larger than the image has `floor(missing / 2)` zeros before it.
    Torchvision,
}

impl CenterCropRounding {
    /// Where a window of `crop` pixels starts along a side of `side` pixels, in the side's
    /// coordinates (negative when the crop is larger and zeros come first).
    pub fn window_start(self, side: usize, crop: usize) -> i64 {
        let margin = side as i64 - crop as i64;
        match self {
            Self::Hf => margin.div_euclid(2),
            Self::Torchvision if margin < 0 => -((-margin) / 2),
            Self::Torchvision => {
                let half = margin / 2;
                // margin / 2.0 is half + 0.5 when odd: round half to even.
                if margin % 2 == 1 && half % 2 == 1 {
                    half + 1
                } else {
                    half
                }
            }
        }
    }
}

impl PreprocessConfig {
    /// Reads preprocessor_config.json for a three-channel (RGB) model, as HF's pipeline serves.
    pub fn from_json_file(path: &Path) -> Result<Self, PreprocessError> {
        Self::from_json_file_for_channels(path, 3)
    }

    /// Parses preprocessor_config.json text for a three-channel (RGB) model.
    pub fn from_json_str(s: &str) -> Result<Self, PreprocessError> {
        Self::parse(s, 3, "(JSON text)", None)
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
        Self::parse(&text, num_channels, &path.display().to_string(), None)
    }

    /// The preprocessing a checkpoint folder describes: its preprocessor_config.json, else
    /// (timm checkpoints) the `pretrained_cfg` of its config.json, else (open_clip checkpoints,
    /// which have no config.json) its open_clip_config.json; None when it has none of them.
    pub fn of_checkpoint(dir: &Path, num_channels: usize) -> Result<Option<Self>, PreprocessError> {
        let hf = dir.join("preprocessor_config.json");
        let config = dir.join("config.json");
        if hf.exists() {
            let text =
                std::fs::read_to_string(&hf).map_err(|source| PreprocessError::ConfigRead {
                    path: hf.clone(),
                    source,
                })?;
            // Without a class name, transformers' AutoImageProcessor takes the class its
            // mapping gives config.json's model_type (AIMv2's, CLIP's, DINOv2's, ...).
            let model_class =
                model_type_of(&config).and_then(|t| ProcessorClass::for_model_type(&t));
            return Self::parse(&text, num_channels, &hf.display().to_string(), model_class)
                .map(Some);
        }
        let open_clip = dir.join("open_clip_config.json");
        if !config.exists() && open_clip.exists() {
            return Self::from_open_clip_file(&open_clip, num_channels).map(Some);
        }
        let Ok(text) = std::fs::read_to_string(&config) else {
            return Ok(None);
        };
        let Ok(Value::Object(json)) = serde_json::from_str::<Value>(&text) else {
            return Ok(None);
        };
        let Some(pretrained_cfg) = json.get("pretrained_cfg") else {
            return Ok(None);
        };
        let pre = Self::from_timm_pretrained_cfg(pretrained_cfg)?;
        if pre.num_channels() != num_channels {
            return Err(PreprocessError::InvalidConfig {
                origin: config.display().to_string(),
                reason: format!(
                    "pretrained_cfg makes {}-channel images for a {num_channels}-channel model",
                    pre.num_channels()
                ),
            });
        }
        Ok(Some(pre))
    }

    /// The preprocessing of an open_clip_config.json, for a model of `num_channels` channels
    /// (open_clip's image towers take three).
    fn from_open_clip_file(path: &Path, num_channels: usize) -> Result<Self, PreprocessError> {
        let invalid = |reason: String| PreprocessError::InvalidConfig {
            origin: path.display().to_string(),
            reason,
        };
        let text = std::fs::read_to_string(path).map_err(|source| PreprocessError::ConfigRead {
            path: path.to_path_buf(),
            source,
        })?;
        let json: Value =
            serde_json::from_str(&text).map_err(|e| invalid(format!("not valid JSON: {e}")))?;
        let pre = Self::from_open_clip_config(&json)?;
        if pre.num_channels() != num_channels {
            return Err(invalid(format!(
                "open_clip makes 3-channel images, for a {num_channels}-channel model"
            )));
        }
        Ok(pre)
    }

    /// Parses preprocessor_config.json text for a model with `num_channels` (1 or 3) channels.
    pub fn from_json_str_for_channels(
        s: &str,
        num_channels: usize,
    ) -> Result<Self, PreprocessError> {
        Self::parse(s, num_channels, "(JSON text)", None)
    }

    /// HF's defaults for a model whose config has this image size and channel count: resize to
    /// image_size x image_size, bilinear, rescale by 1/255, mean = std = 0.5 for every channel
    /// (HF's defaults are three 0.5s; a one-channel model gets one). A model that preprocessing
    /// cannot serve (no size, or a channel count other than 1 or 3) gets a config that
    /// `preprocess_*` refuses with an error.
    pub fn hf_default(image_size: usize, num_channels: usize) -> Self {
        Self::hf_default_sized(image_size, image_size, num_channels)
    }

    /// [`PreprocessConfig::hf_default`] for `height x width` images.
    pub fn hf_default_sized(height: usize, width: usize, num_channels: usize) -> Self {
        Self {
            do_resize: true,
            size: ResizeTarget::Fixed { height, width },
            crop_size: None,
            resample: Resample::Bilinear,
            do_rescale: true,
            rescale_factor: 1.0 / 255.0,
            do_normalize: true,
            image_mean: vec![0.5; num_channels],
            image_std: vec![0.5; num_channels],
            num_channels,
            crop_rounding: CenterCropRounding::Hf,
            do_convert_rgb: false,
            arithmetic: PixelArithmetic::Pil8Bit,
        }
    }

    /// (height, width) of the images `preprocess_*` returns: the crop size when
    /// `do_center_crop` is on, else `size`. A config that passed validation always has one;
    /// (0, 0) stands for the image-dependent sizes that validation refuses.
    pub fn output_size(&self) -> (usize, usize) {
        match (self.crop_size, self.size) {
            (Some(crop), _) => crop,
            (None, ResizeTarget::Fixed { height, width }) => (height, width),
            (None, ResizeTarget::ShortestEdge(_)) => (0, 0),
        }
    }

    /// Why images under this config cannot be decoded on the device, if they cannot: the image
    /// kernels make RGB and resize with taps, so one-channel models and nearest-neighbour
    /// resizes stay on the host.
    pub fn device_decode_refusal(&self) -> Option<&'static str> {
        if self.arithmetic == PixelArithmetic::TorchvisionFloat {
            Some(
                "DINOv3's image processor resizes floats with torchvision's antialiased \
                 resize (the GPU path resizes 8-bit pixels as PIL does)",
            )
        } else if self.num_channels != 3 {
            Some("the model takes one-channel images (the GPU path makes RGB)")
        } else if self.do_resize && self.resample == Resample::Nearest {
            Some("the preprocessing resizes with nearest-neighbour sampling (the GPU path resizes with filter taps)")
        } else {
            None
        }
    }

    /// What `size` asks the resize for.
    pub fn resize_target(&self) -> ResizeTarget {
        self.size
    }

    /// (height, width) of `do_center_crop`'s crop, when it is on.
    pub fn crop_size(&self) -> Option<(usize, usize)> {
        self.crop_size
    }

    /// Where the center crop's window goes: HF's rounding, or torchvision's for timm's transform.
    pub fn crop_rounding(&self) -> CenterCropRounding {
        self.crop_rounding
    }

    /// Whether the processor converts images to RGB itself (`do_convert_rgb`, or its class's
    /// default). For a file, after `load_image`'s own conversion, this changes one thing: a
    /// PNG whose tRNS chunk names a transparent colour has that colour turned white.
    pub fn do_convert_rgb(&self) -> bool {
        self.do_convert_rgb
    }

    pub fn num_channels(&self) -> usize {
        self.num_channels
    }

    /// Whether the steps work on 8-bit pixels (PIL's) or floats (DINOv3's tensors).
    pub fn arithmetic(&self) -> PixelArithmetic {
        self.arithmetic
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

    /// `model_class`: the class of the checkpoint's model type, for a config that names none.
    fn parse(
        text: &str,
        num_channels: usize,
        origin: &str,
        model_class: Option<ProcessorClass>,
    ) -> Result<Self, PreprocessError> {
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
        config.read_fields(&fields, model_class).map_err(invalid)?;
        config.validate().map_err(invalid)?;
        Ok(config)
    }

    fn read_fields(
        &mut self,
        fields: &Map<String, Value>,
        model_class: Option<ProcessorClass>,
    ) -> Result<(), String> {
        // A null value means "the processor's default", as in HF.
        let field = |key: &str| fields.get(key).filter(|v| !v.is_null());
        let flag = |key: &str, default: bool| match field(key) {
            None => Ok(default),
            Some(Value::Bool(b)) => Ok(*b),
            Some(other) => Err(format!("{key} must be true or false, not {other}")),
        };

        // A field left out takes the default of the class `image_processor_type` names (its
        // 4.x name, `feature_extractor_type`, where only that is given), else of the class of
        // the model type; an unknown class takes ViT's, as vitrt always did.
        let type_name = ["image_processor_type", "feature_extractor_type"]
            .iter()
            .find_map(|key| field(key))
            .map(|v| {
                v.as_str()
                    .ok_or_else(|| format!("image_processor_type must be a string, not {v}"))
            })
            .transpose()?;
        let class = match type_name {
            Some(name) => ProcessorClass::from_type_name(name)?,
            None => model_class,
        };
        let defaults = class.unwrap_or(ProcessorClass::Vit).defaults();
        let channel_default = |values: [f64; 3]| {
            // A one-channel model gets one value where the class's three are equal (HF's
            // own defaults are three and do not serve one channel at all).
            let values = values.map(|v| v as f32);
            if self.num_channels == 1 && values.iter().all(|&v| v == values[0]) {
                vec![values[0]]
            } else {
                values.to_vec()
            }
        };
        let (default_mean, default_std) = (
            channel_default(defaults.image_mean),
            channel_default(defaults.image_std),
        );

        self.do_resize = flag("do_resize", true)?;
        self.size = match field("size") {
            Some(size) => parse_size(size, defaults.int_size_is_shortest_edge)?,
            None => defaults.size,
        };
        // crop_size matters only when do_center_crop is on, as in HF's processors.
        self.crop_size = None;
        let do_center_crop = flag("do_center_crop", defaults.do_center_crop)?;
        if do_center_crop {
            self.crop_size = Some(match field("crop_size") {
                Some(crop) => parse_crop_size(crop)?,
                None => defaults.crop_size.ok_or_else(|| {
                    format!(
                        "do_center_crop is true but crop_size is missing, and {} has no \
                         default crop size: give it as an integer or {{\"height\", \"width\"}}",
                        class.unwrap_or(ProcessorClass::Vit).name()
                    )
                })?,
            });
        }
        self.resample = match field("resample") {
            Some(resample) => Resample::from_pil_id(resample.as_i64().ok_or_else(|| {
                format!("resample must be an integer filter id, not {resample}")
            })?)?,
            None => defaults.resample,
        };
        self.do_rescale = flag("do_rescale", true)?;
        self.rescale_factor = match field("rescale_factor") {
            Some(factor) => factor
                .as_f64()
                .ok_or_else(|| format!("rescale_factor must be a number, not {factor}"))?,
            None => defaults.rescale_factor,
        };
        self.do_normalize = flag("do_normalize", true)?;
        self.image_mean = match field("image_mean") {
            Some(mean) => parse_channel_values("image_mean", mean, self.num_channels)?,
            None => default_mean,
        };
        self.image_std = match field("image_std") {
            Some(std) => parse_channel_values("image_std", std, self.num_channels)?,
            None => default_std,
        };
        self.do_convert_rgb = flag("do_convert_rgb", defaults.do_convert_rgb)?;
        self.arithmetic = defaults.arithmetic;
        if let Some(default_crop_pct) = defaults.crop_pct {
            let crop_pct = match field("crop_pct") {
                Some(v) => v
                    .as_f64()
                    .filter(|p| p.is_finite() && *p > 0.0)
                    .ok_or_else(|| format!("crop_pct must be a positive number, not {v}"))?,
                None => default_crop_pct,
            };
            self.apply_convnext_crop_pct(crop_pct, do_center_crop)?;
        }
        // A step other image processors share with ViT's in transformers 5, which vitrt does
        // not perform: refuse rather than skip it.
        if flag("do_pad", false)? {
            return Err("do_pad is true, which vitrt's preprocessing does not do".into());
        }
        Ok(())
    }

    /// ConvNeXT's resize, which reads `crop_pct`: below a `size` of 384 it resizes the shortest
    /// edge to `int(size / crop_pct)` and crops the middle `size x size` (HF's crop); from 384
    /// on it resizes to `size x size`. Its own `do_center_crop` would crop again after that,
    /// which vitrt's single crop does not do.
    fn apply_convnext_crop_pct(
        &mut self,
        crop_pct: f64,
        do_center_crop: bool,
    ) -> Result<(), String> {
        let ResizeTarget::ShortestEdge(edge) = self.size else {
            return Err(
                "ConvNextImageProcessor needs size as {\"shortest_edge\"} or an integer".into(),
            );
        };
        if do_center_crop {
            return Err(
                "do_center_crop with ConvNextImageProcessor crops twice (its resize already \
                 crops), which vitrt does not do"
                    .into(),
            );
        }
        if !self.do_resize {
            return Ok(());
        }
        if edge < 384 {
            // Python's int() of a float division truncates toward zero.
            let resized_edge = (edge as f64 / crop_pct) as usize;
            self.size = ResizeTarget::ShortestEdge(resized_edge);
            self.crop_size = Some((edge, edge));
        } else {
            self.size = ResizeTarget::Fixed {
                height: edge,
                width: edge,
            };
        }
        Ok(())
    }

    pub(super) fn validate(&self) -> Result<(), String> {
        if self.num_channels != 1 && self.num_channels != 3 {
            return Err(format!(
                "models with {} input channels are not supported (1 or 3)",
                self.num_channels
            ));
        }
        let sides = match self.size {
            ResizeTarget::Fixed { height, width } => {
                vec![("size height", height), ("size width", width)]
            }
            ResizeTarget::ShortestEdge(edge) => vec![("size shortest_edge", edge)],
        };
        let crop_sides = self
            .crop_size
            .map(|(height, width)| [("crop_size height", height), ("crop_size width", width)]);
        for (name, side) in sides.into_iter().chain(crop_sides.into_iter().flatten()) {
            if side == 0 || side > MAX_OUTPUT_SIDE {
                return Err(format!(
                    "{name} must be between 1 and {MAX_OUTPUT_SIDE}, not {side}"
                ));
            }
        }
        if let (ResizeTarget::ShortestEdge(edge), None) = (self.size, self.crop_size) {
            return Err(format!(
                "size {{\"shortest_edge\": {edge}}} without do_center_crop makes the output size \
                 depend on the image; a ViT needs a fixed size: set do_center_crop and crop_size, \
                 or give size as {{\"height\", \"width\"}}"
            ));
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
        if self.arithmetic == PixelArithmetic::TorchvisionFloat {
            if !self.do_rescale {
                return Err(
                    "do_rescale false with DINOv3ViTImageProcessor resizes 8-bit tensors \
                     with torchvision's uint8 kernel and then fails to normalise them (torch \
                     normalises floats only); vitrt reproduces the processor with do_rescale \
                     true"
                        .into(),
                );
            }
            if self.do_resize && !super::torchvision_float::has_filter(self.resample) {
                return Err(format!(
                    "resample {} ({:?}) with DINOv3ViTImageProcessor is torchvision's tensor \
                     resize without antialiasing or a filter it lacks, which vitrt does not \
                     reproduce (it reproduces 2, bilinear, and 3, bicubic)",
                    self.resample.pil_id(),
                    self.resample
                ));
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

/// `size` as HF's image processors read it: an int (a square, or the shortest edge for the
/// classes whose `default_to_square` is false), [height, width], {"height", "width"} or
/// {"shortest_edge"}. The other aspect-preserving forms ({"shortest_edge", "longest_edge"},
/// {"max_height", "max_width"}) give an image-dependent size even after a crop of the
/// shortest edge's kind, and are refused.
/// config.json's `model_type`, where the file exists and names one.
fn model_type_of(config: &Path) -> Option<String> {
    let text = std::fs::read_to_string(config).ok()?;
    let json: Value = serde_json::from_str(&text).ok()?;
    Some(json.get("model_type")?.as_str()?.to_string())
}

fn parse_size(size: &Value, int_is_shortest_edge: bool) -> Result<ResizeTarget, String> {
    let square = |side| {
        if int_is_shortest_edge {
            ResizeTarget::ShortestEdge(side)
        } else {
            ResizeTarget::Fixed {
                height: side,
                width: side,
            }
        }
    };
    let fixed = |(height, width)| ResizeTarget::Fixed { height, width };
    match size {
        Value::Number(_) => positive(size, "size").map(square),
        Value::Array(sides) if sides.len() == 1 => positive(&sides[0], "size [0]").map(square),
        Value::Array(sides) if sides.len() == 2 => Ok(fixed((
            positive(&sides[0], "size [0]")?,
            positive(&sides[1], "size [1]")?,
        ))),
        Value::Object(keys) => {
            let present = present_keys(keys);
            if present
                .iter()
                .any(|k| ["longest_edge", "max_height", "max_width"].contains(k))
            {
                return Err(format!(
                    "size {size} makes the output size depend on the image; vitrt takes \
                     {{\"height\", \"width\"}} or {{\"shortest_edge\"}} (with do_center_crop)"
                ));
            }
            if present == ["shortest_edge"] {
                return positive(&keys["shortest_edge"], "size shortest_edge")
                    .map(ResizeTarget::ShortestEdge);
            }
            height_width(keys, &present, "size").map(fixed)
        }
        _ => Err(format!(
            "size must be an integer, [height, width], {{\"height\", \"width\"}} or \
             {{\"shortest_edge\"}}, not {size}"
        )),
    }
}

/// `crop_size` as HF reads it: an int (a square, for every processor), [height, width] or
/// {"height", "width"}.
fn parse_crop_size(crop: &Value) -> Result<(usize, usize), String> {
    match crop {
        Value::Number(_) => positive(crop, "crop_size").map(|s| (s, s)),
        Value::Array(sides) if sides.len() == 1 => {
            positive(&sides[0], "crop_size [0]").map(|s| (s, s))
        }
        Value::Array(sides) if sides.len() == 2 => Ok((
            positive(&sides[0], "crop_size [0]")?,
            positive(&sides[1], "crop_size [1]")?,
        )),
        Value::Object(keys) => height_width(keys, &present_keys(keys), "crop_size"),
        _ => Err(format!(
            "crop_size must be an integer, [height, width] or {{\"height\", \"width\"}}, \
             not {crop}"
        )),
    }
}

fn positive(v: &Value, what: &str) -> Result<usize, String> {
    match v.as_i64() {
        Some(n) if n > 0 => Ok(n as usize),
        _ => Err(format!("{what} must be a positive integer, not {v}")),
    }
}

/// The keys of a size object whose values are not null.
fn present_keys(keys: &Map<String, Value>) -> Vec<&str> {
    keys.iter()
        .filter(|(_, v)| !v.is_null())
        .map(|(k, _)| k.as_str())
        .collect()
}

fn height_width(
    keys: &Map<String, Value>,
    present: &[&str],
    name: &str,
) -> Result<(usize, usize), String> {
    match (keys.get("height"), keys.get("width")) {
        (Some(h), Some(w)) if present.len() == 2 => Ok((
            positive(h, &format!("{name} height"))?,
            positive(w, &format!("{name} width"))?,
        )),
        _ => Err(format!(
            "{name} {} must have exactly the keys \"height\" and \"width\"",
            Value::Object(keys.clone())
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
