//! The FP8 choice: which linear layers `vitrt quantize-report` (or `vitrt calibrate
//! --max-cosine-drop`) kept in 16 bits for a model, with the budget it was chosen for and what
//! it measured. It is saved in a file of its own, read back by `--dtype fp8 --fp8-layers FILE`,
//! or inside a static scales file (`crate::fp8_scales`), which `--fp8-scales FILE` then honours.

use crate::error::ModelError;
use crate::fp8_scales::Fp8ScalesFile;
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
    #[serde(flatten)]
    pub choice: Fp8Choice,
}

/// A choice of FP8 layers and what it measured.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Fp8Choice {
    /// Linear layers in FP8, by graph node name.
    pub fp8: Vec<String>,
    /// The other candidates the report weighed, kept in the compute type (for the reader).
    pub keep: Vec<String>,
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

impl Fp8Choice {
    /// The runner's choice: the layers named as FP8.
    pub fn layers(&self) -> Fp8Layers {
        Fp8Layers::only(self.fp8.iter().cloned())
    }
}

/// The layers a run with `--dtype fp8` puts in FP8: those `choice` (`--fp8-layers`) names;
/// else, with static scales, the choice saved in their file, or without one
/// [`Fp8Layers::default_choice_with_static_scales`]; else [`Fp8Layers::default_choice`].
pub fn layers_to_run(choice: Option<&Fp8ChoiceFile>, scales: Option<&Fp8ScalesFile>) -> Fp8Layers {
    match (choice, scales) {
        (Some(file), _) => file.choice.layers(),
        (None, Some(scales)) => match &scales.choice {
            Some(saved) => saved.layers(),
            None => Fp8Layers::default_choice_with_static_scales(),
        },
        (None, None) => Fp8Layers::default_choice(),
    }
}

impl Fp8ChoiceFile {
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

impl Fp8Measurement {
    /// `outputs` against `reference`, one vector an image: cosine similarities, and how many
    /// images keep their top-1 class (`classes`: the vectors are logits) or their nearest
    /// neighbour among the other images (embeddings; with one image, it counts as kept).
    pub fn of(reference: &[Vec<f32>], outputs: &[Vec<f32>], classes: bool) -> Fp8Measurement {
        let cosines: Vec<f64> = reference
            .iter()
            .zip(outputs)
            .map(|(r, o)| cosine(r, o))
            .collect();
        let same_top1 = (0..reference.len())
            .filter(|&i| {
                if classes {
                    argmax(&reference[i]) == argmax(&outputs[i])
                } else {
                    nearest(reference, i) == nearest(outputs, i)
                }
            })
            .count();
        Fp8Measurement {
            images: reference.len(),
            mean_cosine: cosines.iter().sum::<f64>() / cosines.len().max(1) as f64,
            worst_cosine: cosines.iter().copied().fold(f64::INFINITY, f64::min),
            same_top1,
        }
    }

    /// 1 - the mean cosine.
    pub fn cosine_drop(&self) -> f64 {
        1.0 - self.mean_cosine
    }
}

/// The cosine similarity of two vectors, in f64 (0 where either is 0; NaN stays NaN).
pub fn cosine(a: &[f32], b: &[f32]) -> f64 {
    let (mut ab, mut aa, mut bb) = (0f64, 0f64, 0f64);
    for (&x, &y) in a.iter().zip(b) {
        let (x, y) = (x as f64, y as f64);
        ab += x * y;
        aa += x * x;
        bb += y * y;
    }
    if aa == 0.0 || bb == 0.0 {
        return 0.0;
    }
    ab / (aa.sqrt() * bb.sqrt())
}

fn argmax(v: &[f32]) -> Option<usize> {
    v.iter()
        .enumerate()
        .filter(|(_, x)| !x.is_nan())
        .max_by(|a, b| a.1.total_cmp(b.1))
        .map(|(i, _)| i)
}

/// The image whose vector is most similar (cosine) to image `i`'s, other than `i`.
fn nearest(vectors: &[Vec<f32>], i: usize) -> Option<usize> {
    (0..vectors.len())
        .filter(|&j| j != i)
        .map(|j| (j, cosine(&vectors[i], &vectors[j])))
        .filter(|(_, c)| !c.is_nan())
        .max_by(|a, b| a.1.total_cmp(&b.1))
        .map(|(j, _)| j)
}

/// The first guess at which layers to keep in 16 bits: each layer's drop of the mean cosine
/// when it alone runs in FP8 is taken as additive (measured on the real DINOv2: the sum of the
/// single-layer drops was the drop with every layer in FP8 to 3 digits, NOTES 2026-11-28), so
/// the most sensitive layers are kept until the sum of the others' drops is within `budget`.
/// Returns the names kept, most sensitive first.
pub fn first_guess(drops: &[(String, f64)], budget: f64) -> Vec<String> {
    let mut by_drop: Vec<&(String, f64)> = drops.iter().collect();
    by_drop.sort_by(|a, b| b.1.total_cmp(&a.1));
    let mut remaining: f64 = drops.iter().map(|(_, d)| d.max(0.0)).sum();
    let mut keep = Vec::new();
    for (name, drop) in by_drop {
        if remaining <= budget {
            break;
        }
        remaining -= drop.max(0.0);
        keep.push(name.clone());
    }
    keep
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn measurements_count_cosines_and_neighbours() {
        let reference = vec![vec![1.0, 0.0], vec![0.0, 1.0], vec![0.9, 0.1]];
        let same = Fp8Measurement::of(&reference, &reference, false);
        assert!((same.mean_cosine - 1.0).abs() < 1e-12 && same.same_top1 == 3);
        // Image 2 turns towards image 1: its neighbour changes from 0 to 1; images 0 and 1
        // keep theirs (image 2).
        let moved = vec![vec![1.0, 0.0], vec![0.0, 1.0], vec![0.1, 0.9]];
        let m = Fp8Measurement::of(&reference, &moved, false);
        assert_eq!(m.same_top1, 2);
        assert!(m.worst_cosine < 0.3 && m.mean_cosine < 0.8);
        // As logits: image 2's class changes (0 to 1), image 1's (1) stays.
        assert_eq!(Fp8Measurement::of(&reference, &moved, true).same_top1, 2);
    }

    #[test]
    fn the_first_guess_keeps_the_most_sensitive_layers() {
        let drops = vec![
            ("a".to_string(), 1e-4),
            ("b".to_string(), 8e-4),
            ("c".to_string(), 3e-4),
            ("d".to_string(), 2e-4),
        ];
        assert_eq!(first_guess(&drops, 1e-3), ["b"]);
        assert_eq!(first_guess(&drops, 2e-4), ["b", "c", "d"]);
        assert!(first_guess(&drops, 1.0).is_empty());
    }

    #[test]
    fn a_choice_reads_back_and_a_foreign_file_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("fp8.json");
        let file = Fp8ChoiceFile {
            format: FORMAT.into(),
            version: VERSION,
            model: "m".into(),
            choice: Fp8Choice {
                keep: vec!["encoder.layer.11.output.dense".into()],
                fp8: vec!["encoder.layer.0.output.dense".into()],
                max_cosine_drop: 2e-3,
                measured: Fp8Measurement {
                    images: 3,
                    mean_cosine: 0.999,
                    worst_cosine: 0.998,
                    same_top1: 3,
                },
            },
        };
        file.write(&path).unwrap();
        let back = Fp8ChoiceFile::read(&path).unwrap();
        assert_eq!(back, file);
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(
            text.contains("\"fp8\": [") && !text.contains("choice"),
            "{text}"
        );
        assert_eq!(
            layers_to_run(Some(&back), None),
            Fp8Layers::only(["encoder.layer.0.output.dense".to_string()])
        );

        std::fs::write(&path, "{\"format\": \"other\"}").unwrap();
        let err = Fp8ChoiceFile::read(&path).unwrap_err().to_string();
        assert!(err.contains("not an FP8 choice"), "{err}");
    }
}
