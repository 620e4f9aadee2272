//! Typed results every front door shares: an image's top-k labels (a classifier's logits or
//! zero-shot probabilities), embeddings (rows of an output, L2 normalisation), and zero-shot labels encoded by the text tower.

use anyhow::{bail, Context, Result};
use std::path::Path;
use vitrt_model::config::ModelConfig;
use vitrt_model::labels::{top_k, Prediction};
use vitrt_model::text::labels::average_templates;
use vitrt_model::text::{TextModel, TextTokenizer};
use vitrt_model::{Output, OutputSet, Runner, ZeroShotLabels};
use vitrt_runtime::HostTensor;

/// What the model's output for an image holds.
pub enum Scores<'a> {
    /// A classifier's `logits`, turned into probabilities by a softmax; the labels are the
    /// config's.
    Logits(&'a ModelConfig),
    /// Zero-shot `probs`, one per label (a softmax over them for CLIP, each its own sigmoid
    /// for SigLIP).
    Probabilities(&'a [String]),
}

impl Scores<'_> {
    /// The name of the output the scores are read from.
    pub fn output(&self) -> &'static str {
        match self {
            Scores::Logits(_) => "logits",
            Scores::Probabilities(_) => "probs",
        }
    }

    /// The `k` most probable labels of one image's row, ties broken by the lower index.
    pub fn top_k(&self, row: &[f32], k: usize) -> Vec<Prediction> {
        match self {
            Scores::Logits(config) => top_k(row, k, config),
            Scores::Probabilities(labels) => vitrt_model::labels::top_indices(row, k)
                .into_iter()
                .map(|index| Prediction {
                    index,
                    label: labels[index].clone(),
                    probability: row[index],
                })
                .collect(),
        }
    }
}

/// The tensor named `name` of a batch's outputs, checked to be [count, width]: (width, data).
pub fn output_rows(
    outputs: Vec<HostTensor>,
    name: &str,
    count: usize,
) -> Result<(usize, Vec<f32>)> {
    let tensor = named_output(outputs, name)?;
    match tensor.shape[..] {
        [rows, width] if rows == count => Ok((width, tensor.data)),
        _ => bail!(
            "the model's {name} has shape {:?}, not [{count}, width]",
            tensor.shape
        ),
    }
}

/// The output called `name` among a batch's outputs.
pub fn named_output(outputs: Vec<HostTensor>, name: &str) -> Result<HostTensor> {
    outputs
        .into_iter()
        .find(|t| t.name == name)
        .with_context(|| format!("the model produced no {name}"))
}

/// Scales `row` to unit L2 norm (summed in f64); a zero vector stays zero.
pub fn normalize(row: &mut [f32]) {
    let norm = row
        .iter()
        .map(|&v| f64::from(v) * f64::from(v))
        .sum::<f64>()
        .sqrt();
    if norm > 0.0 {
        for v in row {
            *v = (f64::from(*v) / norm) as f32;
        }
    }
}

/// Zero-shot labels as the text tower encoded them, for `Runner::set_zero_shot`.
pub struct EncodedLabels {
    pub labels: ZeroShotLabels,
    /// Texts encoded (labels times templates).
    pub texts: usize,
}

/// Encodes `labels` put into each of `templates` (at its `{}`) with the text tower of the
/// checkpoint in `dir` on `runner`'s backend, the templates of a label averaged (CLIP's
/// prompt ensembling); an error for a checkpoint without both towers. `name` names the model
/// in errors.
pub fn encode_zero_shot_labels(
    runner: &mut Runner,
    dir: &Path,
    name: &str,
    labels: &[String],
    templates: &[String],
) -> Result<EncodedLabels> {
    let Some(width) = runner.model.image_embeds_width() else {
        bail!(
            "{name} is a {} checkpoint without image embeddings; zero-shot labels need a CLIP \
             or SigLIP checkpoint with both towers",
            runner.model.config.family.name()
        );
    };
    encode_labels_with(width, dir, name, labels, templates, &mut |text, ids, n| {
        Ok(runner.embed_texts(text, ids, n, true)?)
    })
}

/// Runs a text tower: the unit embeddings of `n` sequences of token ids.
pub type EmbedTexts<'a> = dyn FnMut(&TextModel, &[u32], usize) -> Result<Vec<f32>> + 'a;

/// [`encode_zero_shot_labels`] for a vision tower whose image embeddings are `width` wide,
/// `embed` running the text tower.
pub fn encode_labels_with(
    width: usize,
    dir: &Path,
    name: &str,
    labels: &[String],
    templates: &[String],
    embed: &mut EmbedTexts<'_>,
) -> Result<EncodedLabels> {
    let text = TextModel::load(dir)
        .with_context(|| format!("loading the text tower of {name} (zero-shot labels need it)"))?;
    let rule = text.score_rule()?;
    if text.embedding_size() != width {
        bail!(
            "the text tower's embeddings have {} values and the vision tower's {width}: not \
             one checkpoint's towers",
            text.embedding_size()
        );
    }
    let tokenizer = TextTokenizer::from_checkpoint(dir, text.context(), text.config.family)?;
    let texts: Vec<String> = labels
        .iter()
        .flat_map(|label| templates.iter().map(move |t| t.replacen("{}", label, 1)))
        .collect();
    let tokens = tokenizer.encode(&texts)?;
    let embeds = embed(&text, &tokens.ids, texts.len())?;
    let text_embeds = average_templates(&embeds, labels.len(), templates.len(), width)?;
    Ok(EncodedLabels {
        labels: ZeroShotLabels {
            text_embeds,
            labels: labels.len(),
            rule,
        },
        texts: texts.len(),
    })
}

/// Sets `runner` up to score images against labels the text tower encoded: its graphs end in
/// the labels' probabilities (`Output::ZeroShotProbs`).
pub fn score_against(runner: &mut Runner, encoded: EncodedLabels) -> Result<()> {
    runner.set_zero_shot(encoded.labels)?;
    runner.set_outputs(OutputSet::of(&[Output::ZeroShotProbs]));
    Ok(())
}

/// A checkpoint's text tower with its tokenizer, loaded once, to embed texts on a vision
/// runner's backend (`/v1/embeddings`' text inputs).
pub struct TextTower {
    pub model: TextModel,
    pub tokenizer: TextTokenizer,
}

impl TextTower {
    /// The text tower of the checkpoint in `dir`, if it has one whose embeddings are as wide
    /// as the vision tower's (`width`).
    pub fn load(dir: &Path, width: usize) -> Result<TextTower> {
        let model = TextModel::load(dir)?;
        if model.embedding_size() != width {
            bail!(
                "the text tower's embeddings have {} values and the vision tower's {width}: not \
                 one checkpoint's towers",
                model.embedding_size()
            );
        }
        let tokenizer = TextTokenizer::from_checkpoint(dir, model.context(), model.config.family)?;
        Ok(TextTower { model, tokenizer })
    }

    /// The embeddings of `texts`, one row of `width` each, on `runner`'s backend, each scaled
    /// to unit length when `normalize`; also the tokens each text took (for usage counts).
    pub fn embed(
        &self,
        runner: &mut Runner,
        texts: &[String],
        normalize: bool,
    ) -> Result<(Vec<f32>, Vec<usize>)> {
        let tokens = self.tokenizer.encode(texts)?;
        let rows = runner.embed_texts(&self.model, &tokens.ids, texts.len(), normalize)?;
        Ok((rows, tokens.lengths))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalize_makes_unit_rows_and_keeps_zero_rows() {
        let mut row = vec![3.0f32, 4.0];
        normalize(&mut row);
        assert_eq!(row, [0.6, 0.8]);
        let mut zero = vec![0.0f32; 3];
        normalize(&mut zero);
        assert_eq!(zero, [0.0; 3]);
    }
}
