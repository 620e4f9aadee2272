//! A ViT-family checkpoint as a graph. One encoder (pre-norm blocks of attention and MLP)
//! serves every family; what differs is around it and is read from the config and the
//! checkpoint's tensors:
//! - the tokens ahead of the patches (CLS; DeiT's distillation token; DINOv2's and timm's
//!   registers; none in SigLIP) and the position table (covering the prefix tokens or not),
//!   resampled for the input size;
//! - CLIP's (and timm's `pre_norm`) layernorm before the encoder; AIMv2's RMSNorm of the
//!   patch embedding before its positions are added (a learned table, or a sin-cos one for
//!   any grid), and RMSNorms everywhere; DINOv2's layer scale and SwiGLU MLP;
//! - the layernorm after it (on every token, or CLIP's on the pooled token only; timm's
//!   `fc_norm` on its pooled vector);
//! - the heads: a classifier (on the CLS token; DeiT's mean of two heads; DINOv2's CLS token
//!   and patch mean; CLIP's and SigLIP's token means; timm's pooled vector), ViT's and DeiT's
//!   pooler, SigLIP's attention-pooling head, AIMv2's (its learned query token attending
//!   through key and value projections, then an output projection), timm's `global_pool`
//!   (the CLS token, the patch mean or an attention-pooling head), CLIP's projection.

use crate::config::{GlobalPool, ModelConfig, PositionSource};
use crate::encoder::{
    self, attention, collect_layers, encoder_block, layer_norm, linear, make_param, stacked_rows,
    LayerKeys, LinearKeys, NormKeys, ParamMap, ParamTable,
};
use crate::error::ModelError;
use crate::family::Family;
use crate::names::TensorNames;
use crate::params::{PositionTable, Recipe};
use crate::rules::{
    AttentionPoolNames, AttentionPoolProjections, EmbeddingLayout, ImageProjection, PoolerKind,
    QueryTokenAttentionNames,
};
use crate::text::ScoreRule;
use std::collections::BTreeMap;
use std::path::Path;
use vitrt_runtime::passes::{self, Fusion};
use vitrt_runtime::{Activation, Epilogue, Graph, Op, ParamStore, RopeGrid, RuntimeError, ValueId};
use vitrt_weights::Checkpoint;

pub use crate::rules::ClassifierInput;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Head {
    /// `*ForImageClassification`: logits.
    Classifier {
        num_labels: usize,
        input: ClassifierInput,
    },
    /// The bare model: the final hidden states (and the pooled outputs the family has).
    Base,
}

/// A tensor a graph can output.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Output {
    Logits,
    LastHiddenState,
    /// transformers' `pooler_output`: ViT's and DeiT's pooler, DINOv2's CLS token, CLIP's
    /// normalised CLS token, SigLIP's and AIMv2's attention-pooling heads; timm's pre-logits
    /// features (`forward_head(x, pre_logits=True)`: its `global_pool`, then `fc_norm`).
    PoolerOutput,
    /// CLIP's projected `pooler_output`; SigLIP's `pooler_output` (its image features).
    ImageEmbeds,
    /// Token 0 of `last_hidden_state`.
    ClassToken,
    /// The mean of the patch tokens of `last_hidden_state` (after the prefix tokens).
    PatchMean,
    /// CLIP's and SigLIP's `logits_per_image` against the zero-shot labels set on the model
    /// ([`VisionModel::set_zero_shot`]): the scaled cosine similarities (plus SigLIP's bias).
    ZeroShotLogits,
    /// The labels' probabilities: CLIP's softmax over the labels, SigLIP's sigmoid of each.
    ZeroShotProbs,
}

impl Output {
    pub const ALL: [Output; 8] = [
        Output::Logits,
        Output::LastHiddenState,
        Output::PoolerOutput,
        Output::ImageEmbeds,
        Output::ClassToken,
        Output::PatchMean,
        Output::ZeroShotLogits,
        Output::ZeroShotProbs,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Output::Logits => "logits",
            Output::LastHiddenState => "last_hidden_state",
            Output::PoolerOutput => "pooler_output",
            Output::ImageEmbeds => "image_embeds",
            Output::ClassToken => "cls_token",
            Output::PatchMean => "patch_mean",
            Output::ZeroShotLogits => "logits_per_image",
            Output::ZeroShotProbs => "probs",
        }
    }

    fn bit(self) -> u8 {
        1 << Output::ALL.iter().position(|&o| o == self).unwrap_or(0)
    }
}

/// A set of outputs, in [`Output::ALL`]'s order.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct OutputSet(u8);

impl OutputSet {
    pub fn of(outputs: &[Output]) -> OutputSet {
        OutputSet(outputs.iter().fold(0, |bits, o| bits | o.bit()))
    }

    pub fn contains(self, output: Output) -> bool {
        self.0 & output.bit() != 0
    }

    pub fn iter(self) -> impl Iterator<Item = Output> {
        Output::ALL.into_iter().filter(move |&o| self.contains(o))
    }

    pub fn is_empty(self) -> bool {
        self.0 == 0
    }
}

/// What a graph should produce.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GraphOptions {
    /// Also output `hidden_states.{i}`, indexed as HF's `output_hidden_states`.
    pub hidden_states: bool,
    pub fusion: Fusion,
    /// The outputs; empty means the model's primary output.
    pub outputs: OutputSet,
}

impl Default for GraphOptions {
    fn default() -> Self {
        GraphOptions {
            hidden_states: false,
            fusion: Fusion::ALL,
            outputs: OutputSet::default(),
        }
    }
}

/// An attention-pooling head (SigLIP's; timm's `map` pool): a learned query attends over the
/// tokens, then a residual MLP.
#[derive(Clone, Debug)]
struct AttentionPoolKeys {
    /// The head's base name, which its graph nodes are named after.
    base: String,
    probe: String,
    query: LinearKeys,
    key: LinearKeys,
    value: LinearKeys,
    output: LinearKeys,
    norm: NormKeys,
    up: LinearKeys,
    down: LinearKeys,
}

/// AIMv2's attention-pooling head: the learned query token attends over the tokens through
/// key and value projections, then an output projection.
#[derive(Clone, Debug)]
struct QueryTokenAttentionKeys {
    /// The head's base name, which its graph nodes are named after.
    base: String,
    query_token: String,
    key: LinearKeys,
    value: LinearKeys,
    output: LinearKeys,
}

#[derive(Clone, Debug)]
enum PoolerKeys {
    /// ViT, DeiT: activation(dense(CLS token)).
    Dense(LinearKeys),
    /// DINOv2: the CLS token of the final hidden states.
    ClassToken,
    /// CLIP: post_layernorm(CLS token).
    NormedClassToken(NormKeys),
    /// SigLIP.
    AttentionPool(Box<AttentionPoolKeys>),
    /// AIMv2.
    QueryTokenAttention(Box<QueryTokenAttentionKeys>),
    /// timm: the pool its config names (the attention-pooling head's keys with `map`), then
    /// `fc_norm` where it has one.
    GlobalPool {
        pool: GlobalPool,
        attention_pool: Option<Box<AttentionPoolKeys>>,
        fc_norm: Option<NormKeys>,
    },
}

#[derive(Clone, Debug)]
enum ClassifierKeys {
    One(LinearKeys),
    /// Two linear layers whose outputs are added: DeiT's two heads (halved), DINOv2's halves
    /// of one classifier.
    Two(LinearKeys, LinearKeys),
}

#[derive(Clone, Debug)]
struct Keys {
    patch: LinearKeys,
    prefix: Option<String>,
    /// The positions the patch embedding adds (zeros where they are added later).
    positions: String,
    pre_norm: Option<NormKeys>,
    /// AIMv2: the `[T, hidden]` position table added after `pre_norm`, one per image.
    positions_after_pre_norm: Option<String>,
    layers: Vec<LayerKeys>,
    final_norm: Option<NormKeys>,
    pooler: Option<PoolerKeys>,
    projection: Option<LinearKeys>,
    classifier: Option<ClassifierKeys>,
}

pub struct VisionModel {
    pub config: ModelConfig,
    pub head: Head,
    names: TensorNames,
    checkpoint: Checkpoint,
    /// (height, width) of the images the graph takes.
    input_size: (usize, usize),
    keys: Keys,
    /// Every parameter the graph may read: how to make it, and its shape.
    params: ParamMap,
    /// The labels zero-shot scores are computed against, when set, and their number.
    zero_shot: Option<(ZeroShotLabels, u64)>,
}

/// The labels of a zero-shot run, as the text tower encoded them.
#[derive(Clone, Debug, PartialEq)]
pub struct ZeroShotLabels {
    /// `[labels, embedding size]`, each row of unit length.
    pub text_embeds: Vec<f32>,
    pub labels: usize,
    pub rule: ScoreRule,
}

/// Numbers each label set, so that its parameters get keys of their own: a backend uploads a
/// parameter once per key, and a second label set must not find the first one's there.
static LABEL_SETS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

impl VisionModel {
    /// Reads the config (`config.json`, or a family's own file such as open_clip's
    /// `open_clip_config.json`) and the safetensors weights of a model folder and checks that
    /// every tensor the graph needs is there with the right shape.
    pub fn load(dir: &Path) -> Result<VisionModel, ModelError> {
        let config = ModelConfig::from_file(&crate::families::config_file(dir))?;
        let checkpoint = Checkpoint::open(dir)?;
        VisionModel::from_parts(config, checkpoint)
    }

    pub fn from_parts(
        config: ModelConfig,
        checkpoint: Checkpoint,
    ) -> Result<VisionModel, ModelError> {
        let names = TensorNames::find(config.family, &checkpoint).ok_or_else(|| {
            let probe = TensorNames {
                family: config.family,
                prefix: String::new(),
            }
            .patch_weight();
            ModelError::Checkpoint(format!(
                "no {} weights found: no tensor named like \"{probe}\" (under any prefix {} \
                 checkpoints use) is in {}",
                config.family.name(),
                config.family.name(),
                checkpoint.location().display()
            ))
        })?;
        // A config that does not describe the checkpoint would run part of it, or label its
        // classes wrongly, without a word (transformers warns of unused weights, and refuses a
        // classifier whose size disagrees with id2label).
        let layers = names.layers_in(&checkpoint);
        if layers > config.num_hidden_layers {
            return Err(ModelError::Checkpoint(format!(
                "{} holds {layers} encoder layers but config.json's num_hidden_layers is {}: \
                 the config does not describe this checkpoint",
                checkpoint.location().display(),
                config.num_hidden_layers
            )));
        }
        let head = detect_head(&config, &checkpoint)?;
        if let (Head::Classifier { num_labels, .. }, Some((&last, _))) =
            (head, config.id2label.last_key_value())
        {
            if config.id2label.len() != num_labels || last >= num_labels {
                return Err(ModelError::Checkpoint(format!(
                    "config.json's id2label names {} classes (indices up to {last}) but the \
                     classifier of {} has {num_labels}",
                    config.id2label.len(),
                    checkpoint.location().display()
                )));
            }
        }
        let input_size = config.image_size;
        let (keys, params) = collect_params(&config, &names, &checkpoint, head, input_size)?;
        Ok(VisionModel {
            config,
            head,
            names,
            checkpoint,
            input_size,
            keys,
            params,
            zero_shot: None,
        })
    }

    /// The same model taking images of `(height, width)`: the position table is resampled
    /// to the new patch grid (as transformers' `interpolate_pos_encoding`). A remainder of
    /// less than a patch is dropped, as the patch embedding's strided Conv2d drops it.
    pub fn with_input_size(mut self, size: (usize, usize)) -> Result<VisionModel, ModelError> {
        self.set_input_size(size)?;
        Ok(self)
    }

    /// [`VisionModel::with_input_size`] in place; on an error the model is unchanged.
    pub fn set_input_size(&mut self, size: (usize, usize)) -> Result<(), ModelError> {
        let p = self.config.patch_size;
        if size.0 < p || size.1 < p {
            return Err(ModelError::Usage(format!(
                "images of {}x{} hold no {p}x{p} patch",
                size.0, size.1
            )));
        }
        crate::limits::check_image_size(size, p).map_err(ModelError::Usage)?;
        let (keys, params) =
            collect_params(&self.config, &self.names, &self.checkpoint, self.head, size)?;
        (self.input_size, self.keys, self.params) = (size, keys, params);
        Ok(())
    }

    /// (height, width) of the images the graph takes.
    pub fn input_size(&self) -> (usize, usize) {
        self.input_size
    }

    /// Tokens per image at the input size.
    pub fn tokens(&self) -> usize {
        self.config.tokens_at(self.input_size)
    }

    /// The head dim the encoder's attention runs at when the backend's fused kernel does not
    /// take the model's but takes it padded with zeros to the next multiple of 16 (SigLIP
    /// so400m: 72 as 80): the projections then write padded heads, for 11% more attention
    /// work instead of the unfused path's score matrices (benchmarks/NOTES.md, 2026-11-24,
    /// "head dims padded"). None: no padding.
    pub fn padded_head_dim(
        &self,
        batch: usize,
        fusion: Fusion,
        supports: passes::Supports,
    ) -> Option<usize> {
        let shape = (batch, self.tokens());
        let encoder = self.config.encoder();
        encoder::padded_head_dim(
            &self.keys.layers,
            &encoder,
            shape,
            (false, false),
            fusion,
            supports,
        )
    }

    pub fn num_labels(&self) -> Option<usize> {
        match self.head {
            Head::Classifier { num_labels, .. } => Some(num_labels),
            Head::Base => None,
        }
    }

    /// The main output: `logits` with a classifier, else `last_hidden_state`.
    pub fn primary_output(&self) -> Output {
        match self.head {
            Head::Classifier { .. } => Output::Logits,
            Head::Base => Output::LastHiddenState,
        }
    }

    /// The name of the main output.
    pub fn output_name(&self) -> &'static str {
        self.primary_output().name()
    }

    /// Every output this model can produce.
    pub fn available_outputs(&self) -> OutputSet {
        let mut outputs = vec![Output::LastHiddenState, Output::PatchMean];
        if self.config.has_class_token() {
            outputs.push(Output::ClassToken);
        }
        if self.keys.classifier.is_some() {
            outputs.push(Output::Logits);
        }
        if self.keys.pooler.is_some() {
            outputs.push(Output::PoolerOutput);
        }
        if self.keys.projection.is_some()
            || matches!(self.keys.pooler, Some(PoolerKeys::AttentionPool(_)))
        {
            outputs.push(Output::ImageEmbeds);
            if self.zero_shot.is_some() {
                outputs.extend([Output::ZeroShotLogits, Output::ZeroShotProbs]);
            }
        }
        OutputSet::of(&outputs)
    }

    /// What `infer` writes: the main output, the pooled outputs, the image embeddings.
    pub fn model_outputs(&self) -> OutputSet {
        let available = self.available_outputs();
        OutputSet::of(
            &[
                self.primary_output(),
                Output::PoolerOutput,
                Output::ImageEmbeds,
            ]
            .into_iter()
            .filter(|&o| available.contains(o))
            .collect::<Vec<_>>(),
        )
    }

    /// The forward pass for `batch` images as HF computes it, then the fusion passes, for a
    /// backend that runs every op (the CPU).
    pub fn build_graph(&self, batch: usize, options: GraphOptions) -> Result<Graph, ModelError> {
        self.build_graph_for(batch, options, &|_, _| Ok(()))
    }

    /// [`VisionModel::build_graph`] for a backend that may lack a kernel for a fused op:
    /// `supports` (the backend's `Backend::supports`) says which attention can be fused.
    pub fn build_graph_for(
        &self,
        batch: usize,
        options: GraphOptions,
        supports: passes::Supports,
    ) -> Result<Graph, ModelError> {
        let c = &self.config;
        let k = &self.keys;
        let (h, w) = self.input_size;
        let mut g = Graph::default();
        let pixels = g.add_input("pixel_values", &[batch, c.num_channels, h, w]);
        let prefix_rows = c.prefix_tokens();

        let patch_w = g.add_param(&k.patch.weight, &[k.patch.n, k.patch.k]);
        let patch_b = g.add_param(k.patch.bias.as_deref().unwrap_or_default(), &[k.patch.n]);
        let pos = g.add_param(&k.positions, &[self.tokens(), c.hidden_size]);
        let mut embed_inputs = vec![pixels, patch_w, patch_b, pos];
        if let Some(prefix) = &k.prefix {
            embed_inputs.push(g.add_param(prefix, &[prefix_rows, c.hidden_size]));
        }
        let mut x = g.add_node(
            "embeddings",
            Op::PatchEmbed {
                patch: c.patch_size,
                prefix_tokens: prefix_rows,
            },
            &embed_inputs,
        )?;
        if let Some(norm) = &k.pre_norm {
            x = layer_norm(&mut g, "pre_layernorm", x, norm, c.layer_norm_eps)?;
        }
        if let Some(positions) = &k.positions_after_pre_norm {
            let table = g.add_param(
                &repeated_key(positions, batch),
                &[batch, self.tokens(), c.hidden_size],
            );
            x = g.add_node("embeddings.positions", Op::Add, &[x, table])?;
        }
        if options.hidden_states {
            g.mark_output("hidden_states.0", x);
        }
        let pad = self
            .padded_head_dim(batch, options.fusion, supports)
            .is_some();
        let encoder = c.encoder();
        let rope = c.rope_theta.map(|theta| RopeGrid {
            prefix_tokens: prefix_rows,
            rows: h / c.patch_size,
            cols: w / c.patch_size,
            theta,
        });
        for (l, layer) in k.layers.iter().enumerate() {
            x = encoder_block(
                &mut g,
                &encoder,
                &format!("layer.{l}"),
                layer,
                x,
                pad,
                rope,
                None,
            )?;
            if options.hidden_states {
                g.mark_output(&format!("hidden_states.{}", l + 1), x);
            }
        }
        let encoded = x;
        let last = match &k.final_norm {
            Some(norm) => layer_norm(&mut g, "layernorm", x, norm, c.layer_norm_eps)?,
            None => x,
        };

        let outputs = if options.outputs.is_empty() {
            OutputSet::of(&[self.primary_output()])
        } else {
            options.outputs
        };
        let available = self.available_outputs();
        // The pooled output, the image embeddings and the zero-shot logits, each built once
        // however many outputs read it.
        let mut pooled = None;
        let mut embeds = None;
        let mut zero_shot_logits = None;
        for output in outputs.iter() {
            if !available.contains(output) {
                let reason = match output {
                    Output::ZeroShotLogits | Output::ZeroShotProbs if self.zero_shot.is_none() => {
                        " (no zero-shot labels were set)"
                    }
                    _ => "",
                };
                return Err(ModelError::Usage(format!(
                    "this {} checkpoint has no {}{reason} (it has: {})",
                    c.family.name(),
                    output.name(),
                    available
                        .iter()
                        .map(Output::name)
                        .collect::<Vec<_>>()
                        .join(", ")
                )));
            }
            let mut image_embeds = |g: &mut Graph| -> Result<ValueId, ModelError> {
                if let Some(v) = embeds {
                    return Ok(v);
                }
                let p = match pooled {
                    Some(v) => v,
                    None => *pooled.insert(self.pooler(g, last)?),
                };
                let v = match &k.projection {
                    Some(projection) => linear(g, "visual_projection", p, projection)?,
                    None => p,
                };
                Ok(*embeds.insert(v))
            };
            let value = match output {
                Output::LastHiddenState => last,
                Output::Logits => {
                    // A classifier on the pooled output shares the pooler's nodes.
                    let pooled_input = match self.head {
                        Head::Classifier {
                            input: ClassifierInput::PooledOutput,
                            ..
                        } => Some(match pooled {
                            Some(v) => v,
                            None => *pooled.insert(self.pooler(&mut g, last)?),
                        }),
                        _ => None,
                    };
                    self.classifier(&mut g, encoded, last, pooled_input)?
                }
                Output::PoolerOutput => match pooled {
                    Some(v) => v,
                    None => *pooled.insert(self.pooler(&mut g, last)?),
                },
                Output::ImageEmbeds => image_embeds(&mut g)?,
                Output::ClassToken => {
                    g.add_node("cls_token", Op::SelectToken { index: 0 }, &[last])?
                }
                Output::PatchMean => {
                    g.add_node("patch_mean", Op::MeanTokens { start: prefix_rows }, &[last])?
                }
                Output::ZeroShotLogits | Output::ZeroShotProbs => {
                    let logits = match zero_shot_logits {
                        Some(v) => v,
                        None => {
                            let embeds = image_embeds(&mut g)?;
                            *zero_shot_logits.insert(self.zero_shot_logits(&mut g, embeds)?)
                        }
                    };
                    if output == Output::ZeroShotLogits {
                        logits
                    } else {
                        self.zero_shot_probs(&mut g, logits)?
                    }
                }
            };
            g.mark_output(output.name(), value);
        }
        passes::apply_for(&mut g, options.fusion, supports).map_err(ModelError::Usage)?;
        g.validate()?;
        Ok(g)
    }

    /// The logits; `pooled` is the pooler's output where the classifier reads it.
    fn classifier(
        &self,
        g: &mut Graph,
        encoded: ValueId,
        last: ValueId,
        pooled: Option<ValueId>,
    ) -> Result<ValueId, ModelError> {
        let Head::Classifier { input, .. } = self.head else {
            return Err(ModelError::Usage(
                "this checkpoint has no classifier".into(),
            ));
        };
        let keys = self
            .keys
            .classifier
            .as_ref()
            .ok_or_else(|| ModelError::Usage("this checkpoint has no classifier".into()))?;
        let select =
            |g: &mut Graph, name: &str, index| g.add_node(name, Op::SelectToken { index }, &[last]);
        Ok(match (input, keys) {
            (ClassifierInput::ClassToken, ClassifierKeys::One(head)) => {
                let cls = select(g, "cls_token", 0)?;
                linear(g, "classifier", cls, head)?
            }
            (
                ClassifierInput::ClassAndDistillationTokens,
                ClassifierKeys::Two(cls_head, dist_head),
            ) => {
                let cls = select(g, "cls_token", 0)?;
                let dist = select(g, "distillation_token", 1)?;
                let a = linear(g, "cls_classifier", cls, cls_head)?;
                let b = linear(g, "distillation_classifier", dist, dist_head)?;
                g.add_node("classifier.mean", Op::Add, &[a, b])?
            }
            (ClassifierInput::ClassTokenAndPatchMean, ClassifierKeys::Two(cls_half, mean_half)) => {
                let cls = select(g, "cls_token", 0)?;
                let mean = g.add_node(
                    "classifier.mean_tokens",
                    Op::MeanTokens {
                        start: self.config.prefix_tokens(),
                    },
                    &[last],
                )?;
                let a = linear(g, "classifier.cls", cls, cls_half)?;
                let b = linear(g, "classifier.patch_mean", mean, mean_half)?;
                g.add_node("classifier", Op::Add, &[a, b])?
            }
            (ClassifierInput::PatchMean, ClassifierKeys::One(head)) => {
                let mean = g.add_node(
                    "classifier.mean_tokens",
                    Op::MeanTokens { start: 1 },
                    &[encoded],
                )?;
                linear(g, "classifier", mean, head)?
            }
            (ClassifierInput::PooledOutput, ClassifierKeys::One(head)) => {
                let pooled =
                    pooled.ok_or_else(|| ModelError::Usage("inconsistent classifier".into()))?;
                linear(g, "classifier", pooled, head)?
            }
            (ClassifierInput::TokenMean, ClassifierKeys::One(head)) => {
                let mean = g.add_node(
                    "classifier.mean_tokens",
                    Op::MeanTokens { start: 0 },
                    &[last],
                )?;
                linear(g, "classifier", mean, head)?
            }
            _ => return Err(ModelError::Usage("inconsistent classifier".into())),
        })
    }

    /// Scores images against the labels `labels` from now on: the zero-shot outputs become
    /// available. The embeddings must be as wide as this tower's image embeddings.
    pub fn set_zero_shot(&mut self, labels: ZeroShotLabels) -> Result<(), ModelError> {
        let width = self.image_embeds_width().ok_or_else(|| {
            ModelError::Usage(format!(
                "this {} checkpoint has no image embeddings to score labels against",
                self.config.family.name()
            ))
        })?;
        if labels.labels == 0 || labels.text_embeds.len() != labels.labels * width {
            return Err(ModelError::Usage(format!(
                "{} zero-shot labels need {} text embedding values of width {width}, got {}",
                labels.labels,
                labels.labels * width,
                labels.text_embeds.len()
            )));
        }
        let set = LABEL_SETS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.zero_shot = Some((labels, set));
        Ok(())
    }

    /// The parameter keys of the label set's text embeddings and bias.
    fn zero_shot_keys(set: u64) -> (String, String) {
        (
            format!("zero_shot[{set}].text_embeds"),
            format!("zero_shot[{set}].logit_bias"),
        )
    }

    /// The width of `image_embeds`, when the model has them.
    pub fn image_embeds_width(&self) -> Option<usize> {
        if !self.available_outputs().contains(Output::ImageEmbeds) {
            return None;
        }
        Some(match &self.keys.projection {
            Some(projection) => projection.n,
            None => self.config.hidden_size,
        })
    }

    /// `logits_per_image`: the image embeddings normalised, against the labels' normalised
    /// text embeddings, times `exp(logit_scale)` (the matmul's alpha), plus SigLIP's bias.
    fn zero_shot_logits(&self, g: &mut Graph, embeds: ValueId) -> Result<ValueId, ModelError> {
        let (labels, set) = self
            .zero_shot
            .as_ref()
            .ok_or_else(|| ModelError::Usage("no zero-shot labels were set".into()))?;
        let (text_key, bias_key) = Self::zero_shot_keys(*set);
        let width = labels.text_embeds.len() / labels.labels;
        let normed = g.add_node(
            "zero_shot.image_embeds_normalized",
            Op::L2Normalize,
            &[embeds],
        )?;
        let text = g.add_param(&text_key, &[labels.labels, width]);
        let mut inputs = vec![normed, text];
        let bias = matches!(labels.rule, ScoreRule::Sigmoid { .. });
        if bias {
            inputs.push(g.add_param(&bias_key, &[labels.labels]));
        }
        let epilogue = Epilogue {
            alpha: labels.rule.scale(),
            bias,
            ..Epilogue::NONE
        };
        Ok(g.add_node("zero_shot.logits", Op::Linear { epilogue }, &inputs)?)
    }

    /// The labels' probabilities from `logits_per_image`.
    fn zero_shot_probs(&self, g: &mut Graph, logits: ValueId) -> Result<ValueId, ModelError> {
        let rule = self.zero_shot.as_ref().map(|(z, _)| z.rule);
        Ok(match rule {
            Some(ScoreRule::Sigmoid { .. }) => g.add_node(
                "zero_shot.probs",
                Op::Activation(Activation::Sigmoid),
                &[logits],
            )?,
            _ => g.add_node("zero_shot.probs", Op::Softmax { causal: false }, &[logits])?,
        })
    }

    fn pooler(&self, g: &mut Graph, last: ValueId) -> Result<ValueId, ModelError> {
        let c = &self.config;
        let pooler = self
            .keys
            .pooler
            .as_ref()
            .ok_or_else(|| ModelError::Usage("this checkpoint has no pooler".into()))?;
        Ok(match pooler {
            PoolerKeys::Dense(dense) => {
                let cls = g.add_node("pooler.cls_token", Op::SelectToken { index: 0 }, &[last])?;
                let z = linear(g, "pooler.dense", cls, dense)?;
                g.add_node("pooler.act", Op::Activation(c.pooler_act), &[z])?
            }
            PoolerKeys::ClassToken => {
                g.add_node("pooler", Op::SelectToken { index: 0 }, &[last])?
            }
            PoolerKeys::NormedClassToken(norm) => {
                let cls = g.add_node("pooler.cls_token", Op::SelectToken { index: 0 }, &[last])?;
                layer_norm(g, "post_layernorm", cls, norm, c.layer_norm_eps)?
            }
            PoolerKeys::AttentionPool(head) => self.attention_pool(g, last, head, false)?,
            PoolerKeys::QueryTokenAttention(head) => {
                let node = |what: &str| format!("{}.{what}", head.base);
                // The query token is one query shared by every image, [1, 1, d], as it is.
                let q = g.add_param(&head.query_token, &[1, 1, c.hidden_size]);
                let k = linear(g, &node("key"), last, &head.key)?;
                let v = linear(g, &node("value"), last, &head.value)?;
                let heads = (c.num_attention_heads, c.head_dim());
                let scale = 1.0 / (c.head_dim() as f32).sqrt();
                let context =
                    attention(g, &node("attention"), (q, k, v), heads, scale, false, None)?;
                let out = linear(g, &node("output"), context, &head.output)?;
                g.add_node(&node("pooled"), Op::SelectToken { index: 0 }, &[out])?
            }
            PoolerKeys::GlobalPool {
                pool,
                attention_pool,
                fc_norm,
            } => {
                let pooled = match (pool, attention_pool) {
                    (GlobalPool::ClassToken, _) => {
                        g.add_node("pool.cls_token", Op::SelectToken { index: 0 }, &[last])?
                    }
                    (GlobalPool::PatchMean, _) => g.add_node(
                        "pool.patch_mean",
                        Op::MeanTokens {
                            start: c.prefix_tokens(),
                        },
                        &[last],
                    )?,
                    (GlobalPool::TokenMean, _) => {
                        g.add_node("pool.token_mean", Op::MeanTokens { start: 0 }, &[last])?
                    }
                    // timm's head reads the pool's vector as a matmul operand.
                    (GlobalPool::AttentionPool, Some(head)) => {
                        self.attention_pool(g, last, head, true)?
                    }
                    (GlobalPool::AttentionPool, None) => {
                        return Err(ModelError::Usage("inconsistent pooler".into()))
                    }
                };
                match fc_norm {
                    Some(norm) => layer_norm(g, "fc_norm", pooled, norm, c.layer_norm_eps)?,
                    None => pooled,
                }
            }
        })
    }

    /// An attention-pooling head over every token of `last`: one vector per image. Its
    /// residual sum is in the residual stream's type (f32 in bf16 runs); `for_a_matmul`: the
    /// vector is taken out as the mean of its one token, which writes the compute type that a
    /// matmul reading it needs, with the same value, rounded once (the token selection keeps
    /// the stream's type, as SigLIP's `pooler_output` is best kept).
    fn attention_pool(
        &self,
        g: &mut Graph,
        last: ValueId,
        head: &AttentionPoolKeys,
        for_a_matmul: bool,
    ) -> Result<ValueId, ModelError> {
        let c = &self.config;
        let d = c.hidden_size;
        let node = |what: &str| format!("{}.{what}", head.base);
        // The probe is one query shared by every image: [1, 1, d].
        let probe = g.add_param(&head.probe, &[1, 1, d]);
        let q = linear(g, &node("attention.query"), probe, &head.query)?;
        let k = linear(g, &node("attention.key"), last, &head.key)?;
        let v = linear(g, &node("attention.value"), last, &head.value)?;
        let heads = (c.num_attention_heads, c.head_dim());
        let scale = 1.0 / (c.head_dim() as f32).sqrt();
        let context = attention(g, &node("attention"), (q, k, v), heads, scale, false, None)?;
        let attended = linear(g, &node("attention.output"), context, &head.output)?;
        let normed = layer_norm(
            g,
            &node("layernorm"),
            attended,
            &head.norm,
            c.layer_norm_eps,
        )?;
        let up = linear(g, &node("mlp.fc1"), normed, &head.up)?;
        let act = g.add_node(&node("mlp.act"), Op::Activation(c.hidden_act), &[up])?;
        let down = linear(g, &node("mlp.fc2"), act, &head.down)?;
        let pooled = g.add_node(&node("residual"), Op::Add, &[down, attended])?;
        let squeeze = if for_a_matmul {
            Op::MeanTokens { start: 0 }
        } else {
            Op::SelectToken { index: 0 }
        };
        Ok(g.add_node(&node("pooled"), squeeze, &[pooled])?)
    }
}

/// Every parameter a graph of the checkpoint may read at `input_size`, and the keys the graph
/// builder names them by. The tensors named are checked as they are named.
fn collect_params(
    c: &ModelConfig,
    names: &TensorNames,
    checkpoint: &Checkpoint,
    head: Head,
    input_size: (usize, usize),
) -> Result<(Keys, ParamMap), ModelError> {
    let (d, p, ch) = (c.hidden_size, c.patch_size, c.num_channels);
    let patch_len = ch * p * p;
    let mut t = ParamTable {
        checkpoint,
        params: BTreeMap::new(),
    };

    // Embeddings.
    let patch_weight = names.patch_weight();
    let weight = t.tensor(&patch_weight, &[d, ch, p, p], &[d, patch_len])?;
    let bias = match names.patch_bias().filter(|_| c.patch_bias) {
        Some(b) => t.tensor(&b, &[d], &[d])?,
        None => t.derived("zeros(patch bias)".into(), Recipe::Zeros(d), &[d]),
    };
    let patch = LinearKeys {
        weight,
        bias: Some(bias),
        n: d,
        k: patch_len,
    };
    let mut prefix_tensors = Vec::new();
    if let Some(cls) = names.class_token().filter(|_| c.has_class_token()) {
        let stored: &[usize] = match names.embedding_layout() {
            EmbeddingLayout::Batched => &[1, 1, d],
            EmbeddingLayout::Unbatched => &[d],
        };
        t.check(&cls, stored)?;
        prefix_tensors.push(cls);
    }
    if let Some(dist) = names.distillation_token() {
        t.check(&dist, &[1, 1, d])?;
        prefix_tensors.push(dist);
    }
    if let Some(registers) = names.register_tokens(c) {
        t.check(&registers, &[1, c.num_register_tokens, d])?;
        prefix_tensors.push(registers);
    }
    let prefix_rows = c.prefix_tokens();
    let prefix = (prefix_rows > 0).then(|| {
        let key = format!("stack({})", prefix_tensors.join(","));
        t.derived(key, Recipe::Stack(prefix_tensors), &[prefix_rows, d])
    });
    let input_grid = (input_size.0 / p, input_size.1 / p);
    let positions = match names
        .positions()
        .filter(|_| c.positions == PositionSource::Checkpoint)
    {
        // transformers' AIMv2 adds its learned table as it is: no other grid has positions.
        Some(positions_name)
            if c.family == Family::Aimv2
                && input_grid != (c.image_size.0 / p, c.image_size.1 / p) =>
        {
            return Err(ModelError::Usage(format!(
                "this AIMv2 checkpoint's position table is learned for {}x{} pixels \
                 ({positions_name}) and transformers does not resample it: images of {}x{} \
                 have no positions (AIMv2's native-resolution checkpoints, is_native, take any \
                 size)",
                c.image_size.0, c.image_size.1, input_size.0, input_size.1
            )));
        }
        Some(positions_name) => {
            let table_prefix = c.positioned_prefix_tokens();
            let table_grid = (c.image_size.0 / p, c.image_size.1 / p);
            let table_rows = table_prefix + table_grid.0 * table_grid.1;
            let stored: Vec<usize> = match names.embedding_layout() {
                EmbeddingLayout::Batched => vec![1, table_rows, d],
                EmbeddingLayout::Unbatched => vec![table_rows, d],
            };
            t.check(&positions_name, &stored)?;
            let table = PositionTable {
                tensor: positions_name.clone(),
                hidden: d,
                table_prefix,
                zero_rows: prefix_rows - table_prefix,
                table_grid,
                input_grid,
                resampling: (c.family.rules().position_resampling)(c),
            };
            let rows = table.rows();
            t.derived(
                format!(
                    "positions({positions_name}, {}x{})",
                    input_size.0, input_size.1
                ),
                Recipe::Positions(table),
                &[rows, d],
            )
        }
        // AIMv2's native-resolution checkpoints: a fixed table for the input's grid.
        None if c.positions == PositionSource::SinCos2d => t.derived(
            format!("sincos2d({}x{}, {d})", input_grid.0, input_grid.1),
            Recipe::SinCos2d {
                grid: input_grid,
                hidden: d,
            },
            &[input_grid.0 * input_grid.1, d],
        ),
        // No table (DINOv3: rotary embeddings in the attention): the patch embedding adds zeros.
        None => {
            let rows = prefix_rows + input_grid.0 * input_grid.1;
            t.derived(
                format!("zeros({rows}x{d})"),
                Recipe::Zeros(rows * d),
                &[rows, d],
            )
        }
    };
    let pre_norm = match names.pre_norm().filter(|_| c.pre_norm) {
        Some(base) => Some(t.norm_of(c.norm, &base, d)?),
        None => None,
    };
    // AIMv2 normalises the patch embedding before the positions are added: the patch
    // embedding adds zeros, and the table comes after the norm.
    let (positions, positions_after_pre_norm) = match (c.positions_after_pre_norm, &pre_norm) {
        (true, Some(_)) => {
            let rows = prefix_rows + input_grid.0 * input_grid.1;
            let zeros = t.derived(
                format!("zeros({rows}x{d})"),
                Recipe::Zeros(rows * d),
                &[rows, d],
            );
            (zeros, Some(positions))
        }
        (true, None) => {
            return Err(ModelError::Usage(format!(
                "{} adds its positions after the patch embedding's norm, which it has none of",
                c.family.name()
            )))
        }
        (false, _) => (positions, None),
    };

    // Encoder blocks.
    let layers = collect_layers(&mut t, &c.encoder(), names, checkpoint)?;
    let final_norm = match names.final_norm().filter(|_| c.final_norm) {
        Some(base) => Some(t.norm_of(c.norm, &base, d)?),
        None => None,
    };

    // Heads.
    let rules = c.family.rules();
    let pooler = match rules.pooler {
        Some(PoolerKind::Dense(dense)) => {
            let base = format!("{}{dense}", names.prefix);
            match checkpoint.shape(&format!("{base}.weight")) {
                Some(shape) if shape.len() == 2 => {
                    Some(PoolerKeys::Dense(t.linear(&base, shape[0], d, true)?))
                }
                Some(shape) => {
                    return Err(ModelError::Checkpoint(format!(
                        "{base}.weight has shape {shape:?}, expected [pooler size, {d}]"
                    )))
                }
                None => None,
            }
        }
        Some(PoolerKind::ClassToken) => Some(PoolerKeys::ClassToken),
        Some(PoolerKind::NormedClassToken(norm)) => Some(PoolerKeys::NormedClassToken(
            t.norm(&format!("{}{norm}", names.prefix), d)?,
        )),
        Some(PoolerKind::AttentionPool(head)) => {
            let probe = format!("{}{}.{}", names.prefix, head.base, head.query_token);
            if c.vision_use_head && checkpoint.contains(&probe) {
                Some(PoolerKeys::AttentionPool(Box::new(attention_pool_keys(
                    &mut t,
                    &names.prefix,
                    &head,
                    c,
                )?)))
            } else {
                None
            }
        }
        Some(PoolerKind::QueryTokenAttention(head)) if c.vision_use_head => {
            Some(PoolerKeys::QueryTokenAttention(Box::new(
                query_token_attention_keys(&mut t, &names.prefix, &head, c)?,
            )))
        }
        Some(PoolerKind::QueryTokenAttention(_)) => None,
        Some(PoolerKind::GlobalPool {
            attention_pool,
            fc_norm,
        }) => Some(PoolerKeys::GlobalPool {
            pool: c.global_pool,
            attention_pool: match (c.global_pool, attention_pool) {
                (GlobalPool::AttentionPool, Some(head)) => Some(Box::new(attention_pool_keys(
                    &mut t,
                    &names.prefix,
                    &head,
                    c,
                )?)),
                (GlobalPool::AttentionPool, None) => {
                    return Err(ModelError::Usage(format!(
                        "{} has no attention-pooling head",
                        c.family.name()
                    )))
                }
                _ => None,
            },
            fc_norm: match c.fc_norm {
                true => Some(t.norm(&format!("{}{fc_norm}", names.prefix), d)?),
                false => None,
            },
        }),
        None => None,
    };
    let projection = match rules.image_projection {
        Some(ImageProjection::Linear(name)) => match checkpoint.shape(&format!("{name}.weight")) {
            Some(shape) if shape.len() == 2 => Some(t.linear(name, shape[0], d, false)?),
            _ => None,
        },
        Some(ImageProjection::Matrix(name)) => {
            let name = format!("{}{name}", names.prefix);
            match checkpoint.shape(&name) {
                Some(&[rows, embed]) if rows == d => {
                    Some(transposed_matrix(&mut t, &name, d, embed))
                }
                Some(shape) => {
                    return Err(ModelError::Checkpoint(format!(
                        "{name} has shape {shape:?}, expected [{d}, embedding size]"
                    )))
                }
                None => None,
            }
        }
        None => None,
    };
    let classifier = match head {
        Head::Base => None,
        Head::Classifier { num_labels, input } => Some(match input {
            ClassifierInput::ClassAndDistillationTokens => {
                let [cls_head, distillation_head] = rules
                    .classifier
                    .with_teacher
                    .ok_or_else(|| ModelError::Usage("inconsistent classifier".into()))?;
                let half = |t: &mut ParamTable, base: &str| -> Result<LinearKeys, ModelError> {
                    let (w, b) = (format!("{base}.weight"), format!("{base}.bias"));
                    t.check(&w, &[num_labels, d])?;
                    t.check(&b, &[num_labels])?;
                    let scaled = |tensor: String| Recipe::Scaled {
                        tensor,
                        factor: 0.5,
                    };
                    Ok(LinearKeys {
                        weight: t.derived(format!("{w}/2"), scaled(w.clone()), &[num_labels, d]),
                        bias: Some(t.derived(format!("{b}/2"), scaled(b.clone()), &[num_labels])),
                        n: num_labels,
                        k: d,
                    })
                };
                ClassifierKeys::Two(half(&mut t, cls_head)?, half(&mut t, distillation_head)?)
            }
            ClassifierInput::ClassTokenAndPatchMean => {
                let classifier = names.classifier();
                let (w, b) = (format!("{classifier}.weight"), format!("{classifier}.bias"));
                t.check(&w, &[num_labels, 2 * d])?;
                let columns = |start| Recipe::Columns {
                    tensor: w.clone(),
                    cols: 2 * d,
                    start,
                    len: d,
                };
                let cls = LinearKeys {
                    weight: t.derived(format!("{w}[:, :{d}]"), columns(0), &[num_labels, d]),
                    bias: Some(t.tensor(&b, &[num_labels], &[num_labels])?),
                    n: num_labels,
                    k: d,
                };
                let mean = LinearKeys {
                    weight: t.derived(format!("{w}[:, {d}:]"), columns(d), &[num_labels, d]),
                    bias: None,
                    n: num_labels,
                    k: d,
                };
                ClassifierKeys::Two(cls, mean)
            }
            _ => ClassifierKeys::One(t.linear(names.classifier(), num_labels, d, true)?),
        }),
    };
    let keys = Keys {
        patch,
        prefix,
        positions,
        pre_norm,
        positions_after_pre_norm,
        layers,
        final_norm,
        pooler,
        projection,
        classifier,
    };
    Ok((keys, t.params))
}

/// A bias-free projection stored as the `[k, n]` matrix of `x @ W` (open_clip's `proj` and
/// `text_projection`), as a linear layer's `[n, k]` weight.
pub(crate) fn transposed_matrix(t: &mut ParamTable, name: &str, k: usize, n: usize) -> LinearKeys {
    let weight = t.derived(
        format!("transpose({name})"),
        Recipe::Transposed {
            tensor: name.into(),
            rows: k,
            cols: n,
        },
        &[n, k],
    );
    LinearKeys {
        weight,
        bias: None,
        n,
        k,
    }
}

/// The classifier a checkpoint holds, from its tensors.
fn detect_head(config: &ModelConfig, checkpoint: &Checkpoint) -> Result<Head, ModelError> {
    let rows = |name: &str| -> Result<Option<usize>, ModelError> {
        match checkpoint.shape(name) {
            None => Ok(None),
            Some([n, _]) => Ok(Some(*n)),
            Some(shape) => Err(ModelError::Checkpoint(format!(
                "{name} has shape {shape:?}, expected [num_labels, features]"
            ))),
        }
    };
    let classifier = &config.family.rules().classifier;
    if let Some([cls_head, _]) = classifier.with_teacher {
        if let Some(num_labels) = rows(&format!("{cls_head}.weight"))? {
            return Ok(Head::Classifier {
                num_labels,
                input: ClassifierInput::ClassAndDistillationTokens,
            });
        }
    }
    let Some(num_labels) = rows(&format!("{}.weight", classifier.name))? else {
        return Ok(Head::Base);
    };
    Ok(Head::Classifier {
        num_labels,
        input: classifier.input,
    })
}

/// The keys of AIMv2's attention-pooling head named as `names` says, under `prefix`: the key
/// and value projections have biases with `qkv_bias`, the output projection always.
fn query_token_attention_keys(
    t: &mut ParamTable,
    prefix: &str,
    names: &QueryTokenAttentionNames,
    c: &ModelConfig,
) -> Result<QueryTokenAttentionKeys, ModelError> {
    let d = c.hidden_size;
    let name = |part: &str| format!("{prefix}{}.{part}", names.base);
    Ok(QueryTokenAttentionKeys {
        base: names.base.to_string(),
        query_token: t.tensor(&name(names.query_token), &[1, 1, d], &[1, 1, d])?,
        key: t.linear(&name(names.key), d, d, c.qkv_bias)?,
        value: t.linear(&name(names.value), d, d, c.qkv_bias)?,
        output: t.linear(&name(names.output), d, d, true)?,
    })
}

/// The key of parameter `key` repeated `times` over (one table per image of a batch), which
/// [`VisionModel`]'s `load` makes from `key`'s recipe.
fn repeated_key(key: &str, times: usize) -> String {
    format!("repeat({key}, {times})")
}

/// The parameter key and count of a [`repeated_key`].
fn parse_repeated_key(name: &str) -> Option<(&str, usize)> {
    let (key, times) = name
        .strip_prefix("repeat(")?
        .strip_suffix(')')?
        .rsplit_once(", ")?;
    Some((key, times.parse().ok()?))
}

/// The keys of an attention-pooling head named as `names` says, under `prefix`.
fn attention_pool_keys(
    t: &mut ParamTable,
    prefix: &str,
    names: &AttentionPoolNames,
    c: &ModelConfig,
) -> Result<AttentionPoolKeys, ModelError> {
    let d = c.hidden_size;
    let base = format!("{prefix}{}", names.base);
    let name = |part: &str| format!("{base}.{part}");
    let probe = t.tensor(&name(names.query_token), &[1, 1, d], &[1, 1, d])?;
    let [query, key, value] = match names.projections {
        AttentionPoolProjections::Stacked(in_proj) => {
            let (w, b) = (
                name(&format!("{in_proj}_weight")),
                name(&format!("{in_proj}_bias")),
            );
            stacked_rows(t, (&w, Some(&b)), d, ["q", "k", "v"])?
        }
        AttentionPoolProjections::QueryAndKeyValue { query, key_value } => {
            let query = t.linear(&name(query), d, d, true)?;
            let (w, b) = (
                name(&format!("{key_value}.weight")),
                name(&format!("{key_value}.bias")),
            );
            let [key, value] = stacked_rows(t, (&w, Some(&b)), d, ["k", "v"])?;
            [query, key, value]
        }
    };
    Ok(AttentionPoolKeys {
        base: names.base.to_string(),
        probe,
        query,
        key,
        value,
        output: t.linear(&name(names.output), d, d, true)?,
        norm: t.norm(&name(names.norm), d)?,
        up: t.linear(&name(names.up), c.intermediate_size, d, true)?,
        down: t.linear(&name(names.down), d, c.intermediate_size, true)?,
    })
}

impl ParamStore for VisionModel {
    /// Makes a parameter as its recipe says; the graph may view it with another shape of the
    /// same size (a conv weight as a matrix, the probe as a [1, 1, d] sequence).
    fn load(&self, name: &str, shape: &[usize]) -> Result<Vec<f32>, RuntimeError> {
        if let Some((labels, set)) = &self.zero_shot {
            let (text_key, bias_key) = Self::zero_shot_keys(*set);
            if name == text_key {
                return Ok(labels.text_embeds.clone());
            }
            if name == bias_key {
                return Ok(vec![labels.rule.bias(); labels.labels]);
            }
        }
        if let Some((key, times)) = parse_repeated_key(name) {
            if let Some((recipe, own)) = self.params.get(key) {
                let mut repeated = ParamMap::new();
                let recipe = Recipe::Repeated {
                    recipe: Box::new(recipe.clone()),
                    times,
                };
                let rows = own.first().copied().unwrap_or(0) * times;
                let shape_of_all = [&[rows][..], &own[1..]].concat();
                repeated.insert(name.to_string(), (recipe, shape_of_all));
                return make_param(&repeated, &self.checkpoint, name, shape);
            }
        }
        make_param(&self.params, &self.checkpoint, name, shape)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_sets_keep_their_order() {
        let set = OutputSet::of(&[Output::ImageEmbeds, Output::Logits]);
        assert_eq!(
            set.iter().collect::<Vec<_>>(),
            vec![Output::Logits, Output::ImageEmbeds]
        );
        assert!(!set.contains(Output::PoolerOutput));
        assert!(OutputSet::default().is_empty());
    }
}
