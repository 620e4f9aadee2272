//! Calibrated static activation scales for FP8 linear layers: the file `vitrt calibrate`
//! writes (the largest magnitude of each FP8 candidate's input over calibration images, run in
//! f32) and `--fp8-scales FILE` reads, so that every FP8 layer quantises its input with one
//! scale for the whole tensor, fixed beforehand (`vitrt_runtime::fp8::use_static_scales`).
//!
//! The file names every candidate of the model it was made for with its weight's shape, and is
//! refused by a model whose candidates differ: a scale calibrated for another model's layer
//! would saturate or waste e4m3's range silently.
//!
//! The file may also hold a choice of FP8 layers measured with these scales (`vitrt calibrate
//! --max-cosine-drop`), which a run given the file and no `--fp8-layers` follows.
//!
//! The scale of a layer is `margin · amax / 448`: the calibration's largest input maps to
//! `448 / margin`. The default margin is 2. e4m3's normal values span 2^-6 to 448, about 2^15,
//! with the same relative spacing (3 mantissa bits) throughout, so halving every code costs
//! precision only to inputs under `amax / 2^14` (which turn subnormal), a share of a
//! layer's sum too small to see; without it, an unseen image whose input exceeds the
//! calibration's largest by up to 2x saturates at 448 instead of being represented.

use crate::error::ModelError;
use crate::fp8_choice::Fp8Choice;
use serde::{Deserialize, Serialize};
use std::path::Path;
use vitrt_runtime::fp8::StaticScales;

/// What the file's `format` field says.
pub const FORMAT: &str = "vitrt-fp8-scales";

/// The version this build writes and reads.
pub const VERSION: u32 = 1;

/// The margin `vitrt calibrate` applies unless told otherwise (see the module's documentation).
pub const DEFAULT_MARGIN: f32 = 2.0;

/// The file, as JSON.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Fp8ScalesFile {
    pub format: String,
    pub version: u32,
    /// The model the scales were calibrated on, as `--model` named it (for the reader; the
    /// layers are what is checked).
    pub model: String,
    /// How many images the calibration read.
    pub images: usize,
    /// Each scale is `margin · input_amax / 448`.
    pub margin: f32,
    /// Every FP8 candidate of the model, in graph order.
    pub layers: Vec<LayerScale>,
    /// The layers to run in FP8 with these scales, chosen for a budget by measurement
    /// (`vitrt calibrate --max-cosine-drop`); absent, a run takes the default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub choice: Option<Fp8Choice>,
}

/// One candidate linear layer's calibration.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct LayerScale {
    /// The graph node's name.
    pub name: String,
    /// Its weight's shape `[N, K]`.
    pub weight_shape: Vec<usize>,
    /// The largest magnitude of its input over the calibration images, in the f32 run.
    pub input_amax: f32,
    /// The static scale its input is quantised with.
    pub scale: f32,
}

/// A candidate of a model: its node's name and its weight's shape
/// (`Runner::fp8_candidate_shapes`).
pub type Candidate = (String, Vec<usize>);

impl LayerScale {
    /// The layer's calibration from its input's largest magnitude: `margin · amax / 448`,
    /// never under the kernels' smallest scale (a layer whose input was all zeros).
    pub fn new(name: String, weight_shape: Vec<usize>, input_amax: f32, margin: f32) -> Self {
        let scale =
            (margin * input_amax / vitrt_runtime::fp8::E4M3_MAX).max(vitrt_runtime::fp8::MIN_SCALE);
        LayerScale {
            name,
            weight_shape,
            input_amax,
            scale,
        }
    }
}

impl Fp8ScalesFile {
    pub fn new(model: String, images: usize, margin: f32, layers: Vec<LayerScale>) -> Self {
        Fp8ScalesFile {
            format: FORMAT.into(),
            version: VERSION,
            model,
            images,
            margin,
            layers,
            choice: None,
        }
    }

    /// Reads and checks a file: its format and version, and every scale positive and finite.
    pub fn read(path: &Path) -> Result<Fp8ScalesFile, ModelError> {
        let usage = |message: String| ModelError::Usage(format!("{}: {message}", path.display()));
        let text = std::fs::read_to_string(path).map_err(|e| usage(e.to_string()))?;
        let file: Fp8ScalesFile = serde_json::from_str(&text)
            .map_err(|e| usage(format!("not an FP8 scales file written by calibrate ({e})")))?;
        if file.format != FORMAT || file.version != VERSION {
            return Err(usage(format!(
                "format {:?} version {}; this build reads {FORMAT:?} version {VERSION}",
                file.format, file.version
            )));
        }
        if let Some(bad) = file
            .layers
            .iter()
            .find(|l| !(l.scale > 0.0 && l.scale.is_finite()))
        {
            return Err(usage(format!(
                "the scale of {:?} is {}; a scale is positive and finite",
                bad.name, bad.scale
            )));
        }
        if let Some(choice) = &file.choice {
            if let Some(stray) = choice
                .fp8
                .iter()
                .chain(&choice.keep)
                .find(|name| !file.layers.iter().any(|l| &l.name == *name))
            {
                return Err(usage(format!(
                    "its FP8 choice names a layer {stray:?} that has no scale in it"
                )));
            }
        }
        Ok(file)
    }

    pub fn write(&self, path: &Path) -> Result<(), ModelError> {
        let text = serde_json::to_string_pretty(self)
            .map_err(|e| ModelError::Usage(format!("encoding the FP8 scales: {e}")))?;
        std::fs::write(path, text + "\n")
            .map_err(|e| ModelError::Usage(format!("{}: {e}", path.display())))
    }

    /// The scales by layer name, once the file's layers are checked to be exactly the
    /// model's `candidates` (names and weight shapes): a file made for another model, or
    /// missing one of this model's layers, is refused with the first difference.
    pub fn scales_for(&self, candidates: &[Candidate]) -> Result<StaticScales, ModelError> {
        let refuse = |what: String| {
            ModelError::Usage(format!(
                "the FP8 scales were calibrated for another model ({}): {what}; run `vitrt \
                 calibrate` on this one",
                self.model
            ))
        };
        for (name, shape) in candidates {
            match self.layers.iter().find(|l| &l.name == name) {
                None => {
                    return Err(refuse(format!(
                        "they have no scale for this model's layer {name:?}"
                    )))
                }
                Some(l) if &l.weight_shape != shape => {
                    return Err(refuse(format!(
                        "its layer {name:?} has a weight {shape:?}, theirs {:?}",
                        l.weight_shape
                    )))
                }
                Some(_) => {}
            }
        }
        if let Some(extra) = self
            .layers
            .iter()
            .find(|l| !candidates.iter().any(|(name, _)| name == &l.name))
        {
            return Err(refuse(format!(
                "they name a layer {:?} this model does not have",
                extra.name
            )));
        }
        Ok(self
            .layers
            .iter()
            .map(|l| (l.name.clone(), l.scale))
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file() -> Fp8ScalesFile {
        Fp8ScalesFile::new(
            "m".into(),
            3,
            DEFAULT_MARGIN,
            vec![
                LayerScale::new("a.layer.0.qkv".into(), vec![96, 32], 44.8, 2.0),
                LayerScale::new("a.layer.0.fc2".into(), vec![32, 64], 0.0, 2.0),
            ],
        )
    }

    fn candidates() -> Vec<Candidate> {
        vec![
            ("a.layer.0.qkv".into(), vec![96, 32]),
            ("a.layer.0.fc2".into(), vec![32, 64]),
        ]
    }

    #[test]
    fn a_scale_is_the_margin_times_amax_over_448() {
        let f = file();
        assert_eq!(f.layers[0].scale, 2.0 * 44.8 / 448.0);
        // All zeros: the kernels' smallest scale, not 0.
        assert_eq!(f.layers[1].scale, vitrt_runtime::fp8::MIN_SCALE);
        let scales = f.scales_for(&candidates()).unwrap();
        assert_eq!(scales["a.layer.0.qkv"], f.layers[0].scale);
    }

    #[test]
    fn another_models_layers_are_refused() {
        let f = file();
        let message = |c: &[Candidate]| f.scales_for(c).unwrap_err().to_string();
        let mut other = candidates();
        other[0].1 = vec![96, 48];
        assert!(message(&other).contains("has a weight [96, 48]"));
        let mut more = candidates();
        more.push(("a.layer.1.qkv".into(), vec![96, 32]));
        assert!(message(&more).contains("no scale for this model's layer \"a.layer.1.qkv\""));
        assert!(message(&candidates()[..1]).contains("\"a.layer.0.fc2\" this model does not"));
    }

    #[test]
    fn malformed_files_are_refused() {
        let dir = std::env::temp_dir().join(format!("vitrt-fp8-scales-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("scales.json");
        let read = |text: &str| {
            std::fs::write(&path, text).unwrap();
            Fp8ScalesFile::read(&path).unwrap_err().to_string()
        };
        assert!(read("{").contains("not an FP8 scales file"));
        let mut f = file();
        f.version = 9;
        assert!(read(&serde_json::to_string(&f).unwrap()).contains("version 9"));
        let mut f = file();
        f.layers[0].scale = -1.0;
        assert!(read(&serde_json::to_string(&f).unwrap()).contains("positive and finite"));
        // What it writes, it reads.
        file().write(&path).unwrap();
        assert_eq!(Fp8ScalesFile::read(&path).unwrap(), file());
        // A saved choice may only name the file's layers.
        let mut f = file();
        f.choice = Some(choice(&["a.layer.0.qkv"], &["a.layer.1.fc2"]));
        assert!(read(&serde_json::to_string(&f).unwrap())
            .contains("names a layer \"a.layer.1.fc2\" that has no scale"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    fn choice(fp8: &[&str], keep: &[&str]) -> Fp8Choice {
        Fp8Choice {
            fp8: fp8.iter().map(|s| s.to_string()).collect(),
            keep: keep.iter().map(|s| s.to_string()).collect(),
            max_cosine_drop: 2e-3,
            measured: crate::fp8_choice::Fp8Measurement {
                images: 3,
                mean_cosine: 0.999,
                worst_cosine: 0.998,
                same_top1: 3,
            },
        }
    }

    #[test]
    fn a_saved_choice_is_what_a_run_with_the_scales_takes() {
        use crate::fp8_choice::layers_to_run;
        use vitrt_runtime::fp8::Fp8Layers;
        let plain = file();
        assert_eq!(
            layers_to_run(None, Some(&plain)),
            Fp8Layers::default_choice_with_static_scales()
        );
        let mut chosen = file();
        chosen.choice = Some(choice(&["a.layer.0.qkv"], &["a.layer.0.fc2"]));
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("scales.json");
        chosen.write(&path).unwrap();
        let back = Fp8ScalesFile::read(&path).unwrap();
        assert_eq!(back, chosen);
        assert_eq!(
            layers_to_run(None, Some(&back)),
            Fp8Layers::only(["a.layer.0.qkv".to_string()])
        );
        // A file without the field (as calibrate wrote before it could choose) still reads.
        let text = serde_json::to_string(&plain).unwrap();
        assert!(!text.contains("choice"));
    }
}
