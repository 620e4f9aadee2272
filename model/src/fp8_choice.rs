//! The FP8 choice saved to a file: which linear layers `vitrt quantize-report` kept in 16 bits
//! for a model, with the budget it was chosen for and what it measured, read back by
//! `--dtype fp8 --fp8-layers FILE`.

use crate::error::ModelError;
use serde::{Deserialize, Serialize};
use std::path::Path;
use vitrt_runtime::fp8::Fp8Layers;

/// What the file's `format` field says.
pub const FORMAT: &str = "vitrt-fp8-layers";

/// The version this build writes and reads.
pub const VERSION: u32 = 1;

/// The file, as JSON.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Fp8ChoiceFile {
    pub format: String,
    pub version: u32,
    /// The model the choice was made for, as `--model` named it.
    pub model: String,
    /// Linear layers kept in the compute type, by graph node name.
    pub keep: Vec<String>,
    /// Linear layers in FP8, by graph node name (for the reader; `keep` decides).
    pub fp8: Vec<String>,
    /// The budget the choice meets: the largest drop of the mean cosine similarity to the f32
    /// outputs over the calibration images.
    pub max_cosine_drop: f64,
    /// What the chosen model measured on the calibration images.
    pub measured: Fp8Measurement,
}

/// FP8 against f32 over a set of images.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq)]
pub struct Fp8Measurement {
    pub images: usize,
    pub mean_cosine: f64,
    pub worst_cosine: f64,
    /// Images whose top-1 class (classifiers) or nearest neighbour among the images
    /// (embeddings) is the f32 run's.
    pub same_top1: usize,
}

impl Fp8ChoiceFile {
    /// The runner's choice: every candidate but those kept.
    pub fn layers(&self) -> Fp8Layers {
        Fp8Layers::keeping(self.keep.iter().cloned())
    }

    pub fn read(path: &Path) -> Result<Fp8ChoiceFile, ModelError> {
        let usage = |message: String| ModelError::Usage(format!("{}: {message}", path.display()));
        let text = std::fs::read_to_string(path).map_err(|e| usage(e.to_string()))?;
        let file: Fp8ChoiceFile = serde_json::from_str(&text).map_err(|e| {
            usage(format!(
                "not an FP8 choice written by quantize-report ({e})"
            ))
        })?;
        if file.format != FORMAT || file.version != VERSION {
            return Err(usage(format!(
                "format {:?} version {}; this build reads {FORMAT:?} version {VERSION}",
                file.format, file.version
            )));
        }
        Ok(file)
    }

    pub fn write(&self, path: &Path) -> Result<(), ModelError> {
        let text = serde_json::to_string_pretty(self)
            .map_err(|e| ModelError::Usage(format!("encoding the FP8 choice: {e}")))?;
        std::fs::write(path, text + "\n")
            .map_err(|e| ModelError::Usage(format!("{}: {e}", path.display())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_choice_reads_back_and_a_foreign_file_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("fp8.json");
        let file = Fp8ChoiceFile {
            format: FORMAT.into(),
            version: VERSION,
            model: "m".into(),
            keep: vec!["encoder.layer.11.output.dense".into()],
            fp8: vec!["encoder.layer.0.output.dense".into()],
            max_cosine_drop: 2e-3,
            measured: Fp8Measurement {
                images: 3,
                mean_cosine: 0.999,
                worst_cosine: 0.998,
                same_top1: 3,
            },
        };
        file.write(&path).unwrap();
        let back = Fp8ChoiceFile::read(&path).unwrap();
        assert_eq!(back, file);
        assert!(back.layers().keep.contains("encoder.layer.11.output.dense"));

        std::fs::write(&path, "{\"format\": \"other\"}").unwrap();
        let err = Fp8ChoiceFile::read(&path).unwrap_err().to_string();
        assert!(err.contains("not an FP8 choice"), "{err}");
    }
}
