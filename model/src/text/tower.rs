//! The text tower of a CLIP, SigLIP or open_clip checkpoint as a graph: token and position
//! embeddings, the shared encoder (causal in CLIP and open_clip), the final layernorm, the
//! pooled token (CLIP's end-of-text token, SigLIP's last, open_clip's highest id) and its
//! projection (CLIP's `text_projection`, SigLIP's `head`, open_clip's `text_projection`
//! matrix). Also the scores' parameters of a dual tower (`logit_scale`, SigLIP's
//! `logit_bias`).

use super::config::TextConfig;
use crate::encoder::{
    self, collect_layers, encoder_block, layer_norm, linear, make_param, LayerKeys, LinearKeys,
    NormKeys, ParamMap, ParamTable,
};
use crate::error::ModelError;
use crate::model::transposed_matrix;
use crate::names::TensorNames;
use crate::rules::{PooledToken, ScoreKind, TextProjection};
use std::collections::BTreeMap;
use std::path::Path;
use vitrt_runtime::passes::{self, Fusion};
use vitrt_runtime::{EndToken, Graph, Op, ParamStore, RuntimeError};
use vitrt_weights::Checkpoint;

/// The graph's input: token ids, [batch, context], as f32 (exact below 2^24).
pub const INPUT_IDS: &str = "input_ids";

struct TextKeys {
    tokens: String,
    positions: String,
    layers: Vec<LayerKeys>,
    final_norm: NormKeys,
    /// CLIP's `text_projection` (no bias), SigLIP's `head` or open_clip's `text_projection`
    /// (transposed); None for a `CLIPTextModel` without projection.
    projection: Option<LinearKeys>,
}

/// How a dual tower turns cosine similarities into scores.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ScoreRule {
    /// CLIP: softmax over the labels of `exp(logit_scale) · cos`.
    Softmax { logit_scale: f32 },
    /// SigLIP: each label's own sigmoid of `exp(logit_scale) · cos + logit_bias`.
    Sigmoid { logit_scale: f32, logit_bias: f32 },
}

impl ScoreRule {
    /// The factor cosines are multiplied by: `exp(logit_scale)`.
    pub fn scale(self) -> f32 {
        match self {
            ScoreRule::Softmax { logit_scale } | ScoreRule::Sigmoid { logit_scale, .. } => {
                logit_scale.exp()
            }
        }
    }

    pub fn bias(self) -> f32 {
        match self {
            ScoreRule::Softmax { .. } => 0.0,
            ScoreRule::Sigmoid { logit_bias, .. } => logit_bias,
        }
    }
}

/// Which outputs a text graph writes, besides the text embeddings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TextGraphOptions {
    /// `hidden_states.{i}`, `last_hidden_state` and `pooler_output` too (parity).
    pub all_outputs: bool,
    /// The text embeddings divided by their norms (zero-shot scores, `--normalize`).
    pub normalize: bool,
    pub fusion: Fusion,
}

pub struct TextModel {
    pub config: TextConfig,
    checkpoint: Checkpoint,
    keys: TextKeys,
    params: ParamMap,
}

impl TextModel {
    /// The text tower of the checkpoint in `dir` (config.json, or a family's own config
    /// file, and safetensors).
    pub fn load(dir: &Path) -> Result<TextModel, ModelError> {
        let config = TextConfig::of_checkpoint(dir)?;
        let checkpoint = Checkpoint::open(dir)?;
        TextModel::from_parts(config, checkpoint)
    }

    pub fn from_parts(config: TextConfig, checkpoint: Checkpoint) -> Result<TextModel, ModelError> {
        let c = &config;
        let d = c.hidden_size;
        let rules = c.family.rules();
        let tensors = &rules.tensors;
        // The tower's prefix: the first under which the checkpoint holds the token embedding.
        let Some(prefix) = tensors
            .prefixes
            .iter()
            .find(|prefix| checkpoint.contains(&format!("{prefix}{}", tensors.token_embedding)))
        else {
            return Err(ModelError::Checkpoint(format!(
                "no {} text tower in {}: no tensor named \"{}{}\"",
                c.family.name(),
                checkpoint.location().display(),
                tensors.prefixes.first().copied().unwrap_or_default(),
                tensors.token_embedding
            )));
        };
        let mut t = ParamTable {
            checkpoint: &checkpoint,
            params: BTreeMap::new(),
        };
        let tokens_name = format!("{prefix}{}", tensors.token_embedding);
        let tokens = t.tensor(&tokens_name, &[c.vocab_size, d], &[c.vocab_size, d])?;
        let p = c.max_position_embeddings;
        let positions = t.tensor(&format!("{prefix}{}", tensors.positions), &[p, d], &[p, d])?;
        let names = TensorNames {
            family: rules.family,
            prefix: prefix.to_string(),
        };
        let layers = collect_layers(&mut t, &c.encoder(), &names, &checkpoint)?;
        let final_norm = t.norm(&format!("{prefix}{}", tensors.final_norm), d)?;
        let projection = match rules.projection {
            TextProjection::AfterPooler(name) if checkpoint.contains(&format!("{name}.weight")) => {
                Some(t.linear(name, c.projection_size, d, false)?)
            }
            TextProjection::AfterPooler(_) => None,
            TextProjection::Head(head) => {
                Some(t.linear(&format!("{prefix}{head}"), c.projection_size, d, true)?)
            }
            TextProjection::Matrix(name) => {
                let name = format!("{prefix}{name}");
                if checkpoint.contains(&name) {
                    t.check(&name, &[d, c.projection_size])?;
                    Some(transposed_matrix(&mut t, &name, d, c.projection_size))
                } else {
                    None
                }
            }
        };
        let params = t.params;
        Ok(TextModel {
            keys: TextKeys {
                tokens,
                positions,
                layers,
                final_norm,
                projection,
            },
            params,
            config,
            checkpoint,
        })
    }

    /// Token sequences are padded or cut to this many ids.
    pub fn context(&self) -> usize {
        self.config.max_position_embeddings
    }

    /// The width of the text embeddings.
    pub fn embedding_size(&self) -> usize {
        match &self.keys.projection {
            Some(p) => p.n,
            None => self.config.hidden_size,
        }
    }

    /// How the dual tower scores an image against a text, from its `logit_scale` (and
    /// `logit_bias`); an error for a checkpoint of the text tower alone.
    pub fn score_rule(&self) -> Result<ScoreRule, ModelError> {
        let scalar = |name: &str| -> Result<f32, ModelError> {
            match self.checkpoint.shape(name) {
                Some(shape) if shape.iter().product::<usize>() == 1 => {
                    Ok(self.checkpoint.load_f32(name)?[0])
                }
                Some(shape) => Err(ModelError::Checkpoint(format!(
                    "{name} has shape {shape:?}, expected one value"
                ))),
                None => Err(ModelError::Usage(format!(
                    "this checkpoint has no {name}: zero-shot scores need a {} checkpoint with \
                     both towers",
                    self.config.family.name()
                ))),
            }
        };
        Ok(match self.config.family.rules().scores {
            ScoreKind::Softmax => ScoreRule::Softmax {
                logit_scale: scalar("logit_scale")?,
            },
            ScoreKind::Sigmoid => ScoreRule::Sigmoid {
                logit_scale: scalar("logit_scale")?,
                logit_bias: scalar("logit_bias")?,
            },
        })
    }

    /// The pooled token: CLIP's end-of-text token (the first position of `eos_token_id`, or
    /// the highest id for configs saved with the old id 2, as transformers picks it).
    fn end_token(&self) -> EndToken {
        if self.config.eos_token_id == 2 {
            EndToken::HighestId
        } else {
            EndToken::FirstOf(self.config.eos_token_id)
        }
    }

    /// The graph of `batch` token sequences of [`TextModel::context`] ids: `text_embeds`
    /// (the projected pooled token, normalised with `options.normalize`), and with `options.all_outputs` every hidden state,
    /// `last_hidden_state` and `pooler_output` too.
    /// The head dim the tower's attention runs at when the backend's fused kernel takes it
    /// only padded to a multiple of 16 (SigLIP so400m's 72 as 80), as the vision tower's
    /// (`VisionModel::padded_head_dim`); None: no padding.
    pub fn padded_head_dim(
        &self,
        batch: usize,
        fusion: Fusion,
        supports: passes::Supports,
    ) -> Option<usize> {
        let causal = self.config.family.rules().causal;
        let shape = (batch, self.context());
        let encoder = self.config.encoder();
        encoder::padded_head_dim(
            &self.keys.layers,
            &encoder,
            shape,
            (causal, false),
            fusion,
            supports,
        )
    }

    pub fn build_graph(
        &self,
        batch: usize,
        options: TextGraphOptions,
        supports: passes::Supports,
    ) -> Result<Graph, ModelError> {
        let pad = self
            .padded_head_dim(batch, options.fusion, supports)
            .is_some();
        let c = &self.config;
        let k = &self.keys;
        let (d, context) = (c.hidden_size, self.context());
        let mut g = Graph::default();
        let ids = g.add_input(INPUT_IDS, &[batch, context]);
        let tokens = g.add_param(&k.tokens, &[c.vocab_size, d]);
        let positions = g.add_param(&k.positions, &[c.max_position_embeddings, d]);
        let mut x = g.add_node(
            "text.embeddings",
            Op::TokenEmbedding,
            &[ids, tokens, positions],
        )?;
        if options.all_outputs {
            g.mark_output("hidden_states.0", x);
        }
        let encoder = c.encoder();
        for (l, layer) in k.layers.iter().enumerate() {
            x = encoder_block(
                &mut g,
                &encoder,
                &format!("text.layer.{l}"),
                layer,
                x,
                pad,
                None,
                None,
            )?;
            if options.all_outputs {
                g.mark_output(&format!("hidden_states.{}", l + 1), x);
            }
        }
        let last = layer_norm(
            &mut g,
            "text.final_layernorm",
            x,
            &k.final_norm,
            c.layer_norm_eps,
        )?;
        let rules = c.family.rules();
        let pooled = match rules.pooled_token {
            PooledToken::EndToken => g.add_node(
                "text.pooled",
                Op::SelectEndToken {
                    rule: self.end_token(),
                },
                &[last, ids],
            )?,
            PooledToken::HighestId => g.add_node(
                "text.pooled",
                Op::SelectEndToken {
                    rule: EndToken::HighestId,
                },
                &[last, ids],
            )?,
            PooledToken::LastToken => g.add_node(
                "text.pooled",
                Op::SelectToken { index: context - 1 },
                &[last],
            )?,
        };
        // SigLIP's pooler output is the head's; CLIP's is the pooled token.
        let (pooler_output, embeds) = match (&k.projection, rules.projection) {
            (Some(head), TextProjection::Head(_)) => {
                let out = linear(&mut g, "text.head", pooled, head)?;
                (out, out)
            }
            (Some(projection), TextProjection::AfterPooler(_) | TextProjection::Matrix(_)) => {
                let out = linear(&mut g, "text.projection", pooled, projection)?;
                (pooled, out)
            }
            (None, _) => (pooled, pooled),
        };
        let embeds = if options.normalize {
            g.add_node("text.embeds_normalized", Op::L2Normalize, &[embeds])?
        } else {
            embeds
        };
        g.mark_output("text_embeds", embeds);
        if options.all_outputs {
            g.mark_output("last_hidden_state", last);
            g.mark_output("pooler_output", pooler_output);
        }
        passes::apply_for(&mut g, options.fusion, supports).map_err(ModelError::Usage)?;
        g.validate()?;
        Ok(g)
    }
}

impl ParamStore for TextModel {
    fn load(&self, name: &str, shape: &[usize]) -> Result<Vec<f32>, RuntimeError> {
        make_param(&self.params, &self.checkpoint, name, shape)
    }
}
