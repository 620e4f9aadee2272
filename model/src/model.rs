//! A ViT-family checkpoint as a graph. One encoder (pre-norm blocks of attention and MLP)
//! serves every family; what differs is around it and is read from the config and the
//! checkpoint's tensors:
//! - the tokens ahead of the patches (CLS; DeiT's distillation token; DINOv2's registers;
//!   none in SigLIP) and the position table, resampled for the input size;
//! - CLIP's layernorm before the encoder; DINOv2's layer scale and SwiGLU MLP;
//! - the layernorm after it (on every token, or CLIP's on the pooled token only);
//! - the heads: a classifier (on the CLS token; DeiT's mean of two heads; DINOv2's CLS token
//!   and patch mean; CLIP's and SigLIP's token means), ViT's and DeiT's pooler, SigLIP's
//!   attention-pooling head, CLIP's projection.

use crate::config::{Family, Mlp, ModelConfig};
use crate::error::ModelError;
use crate::names::{LayerPart, TensorNames};
use crate::params::{PositionTable, Recipe};
use crate::positions::Resampling;
use std::collections::BTreeMap;
use std::path::Path;
use vitrt_runtime::passes::{self, AttentionFusion, Fusion};
use vitrt_runtime::{Epilogue, Graph, HeadSlice, Op, ParamStore, RuntimeError, ValueId};
use vitrt_weights::Checkpoint;

/// What the classifier reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClassifierInput {
    /// The CLS token after the final layernorm (ViT, DeiT without teacher).
    ClassToken,
    /// DeiT with teacher: the mean of a head on the CLS token and one on the distillation
    /// token.
    ClassAndDistillationTokens,
    /// DINOv2: the CLS token and the mean of the patch tokens, side by side.
    ClassTokenAndPatchMean,
    /// CLIP: the mean of the patch tokens of the encoder's output (no layernorm).
    PatchMean,
    /// SigLIP: the mean of every token after the final layernorm.
    TokenMean,
}

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
    /// normalised CLS token, SigLIP's attention-pooling head.
    PoolerOutput,
    /// CLIP's projected `pooler_output`; SigLIP's `pooler_output` (its image features).
    ImageEmbeds,
    /// Token 0 of `last_hidden_state`.
    ClassToken,
    /// The mean of the patch tokens of `last_hidden_state` (after the prefix tokens).
    PatchMean,
}

impl Output {
    pub const ALL: [Output; 6] = [
        Output::Logits,
        Output::LastHiddenState,
        Output::PoolerOutput,
        Output::ImageEmbeds,
        Output::ClassToken,
        Output::PatchMean,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Output::Logits => "logits",
            Output::LastHiddenState => "last_hidden_state",
            Output::PoolerOutput => "pooler_output",
            Output::ImageEmbeds => "image_embeds",
            Output::ClassToken => "cls_token",
            Output::PatchMean => "patch_mean",
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

/// A linear layer's parameter keys.
#[derive(Clone, Debug)]
struct LinearKeys {
    weight: String,
    bias: Option<String>,
    /// Output and input features.
    n: usize,
    k: usize,
}

#[derive(Clone, Debug)]
struct NormKeys {
    gamma: String,
    beta: String,
}

#[derive(Clone, Debug)]
enum MlpKeys {
    Standard {
        up: LinearKeys,
        down: LinearKeys,
    },
    /// The gate and up projections as one matmul of twice the width.
    SwiGlu {
        gate_up: LinearKeys,
        down: LinearKeys,
    },
}

#[derive(Clone, Debug)]
struct LayerKeys {
    norm_before: NormKeys,
    query: LinearKeys,
    key: LinearKeys,
    value: LinearKeys,
    attention_output: LinearKeys,
    /// The same projections with each head padded with zeros to a multiple of 16, where the
    /// head dim is not one (see [`VisionModel::padded_head_dim`]).
    padded: Option<PaddedAttentionKeys>,
    norm_after: NormKeys,
    mlp: MlpKeys,
}

#[derive(Clone, Debug)]
struct PaddedAttentionKeys {
    head_dim: usize,
    query: LinearKeys,
    key: LinearKeys,
    value: LinearKeys,
    attention_output: LinearKeys,
}

/// SigLIP's attention-pooling head: a learned query attends over the tokens, then a residual
/// MLP.
#[derive(Clone, Debug)]
struct AttentionPoolKeys {
    probe: String,
    query: LinearKeys,
    key: LinearKeys,
    value: LinearKeys,
    output: LinearKeys,
    norm: NormKeys,
    up: LinearKeys,
    down: LinearKeys,
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
    positions: String,
    pre_norm: Option<NormKeys>,
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
}

/// Parameter key to how it is made and its shape.
type ParamMap = BTreeMap<String, (Recipe, Vec<usize>)>;

/// Collects the parameters, checking each checkpoint tensor's shape as it is named.
struct ParamTable<'a> {
    checkpoint: &'a Checkpoint,
    params: ParamMap,
}

impl ParamTable<'_> {
    fn check(&self, name: &str, want: &[usize]) -> Result<(), ModelError> {
        match self.checkpoint.shape(name) {
            None => Err(ModelError::Checkpoint(format!(
                "missing tensor {name} (expected shape {want:?})"
            ))),
            Some(found) if found != want => Err(ModelError::Checkpoint(format!(
                "tensor {name} has shape {found:?}, expected {want:?}"
            ))),
            Some(_) => Ok(()),
        }
    }

    /// A tensor as stored (shape `stored`), read by the graph as `shape`.
    fn tensor(
        &mut self,
        name: &str,
        stored: &[usize],
        shape: &[usize],
    ) -> Result<String, ModelError> {
        self.check(name, stored)?;
        self.params
            .insert(name.into(), (Recipe::Tensor(name.into()), shape.to_vec()));
        Ok(name.into())
    }

    fn derived(&mut self, key: String, recipe: Recipe, shape: &[usize]) -> String {
        self.params.insert(key.clone(), (recipe, shape.to_vec()));
        key
    }

    fn norm(&mut self, base: &str, d: usize) -> Result<NormKeys, ModelError> {
        Ok(NormKeys {
            gamma: self.tensor(&format!("{base}.weight"), &[d], &[d])?,
            beta: self.tensor(&format!("{base}.bias"), &[d], &[d])?,
        })
    }

    fn linear(
        &mut self,
        base: &str,
        n: usize,
        k: usize,
        bias: bool,
    ) -> Result<LinearKeys, ModelError> {
        let weight = self.tensor(&format!("{base}.weight"), &[n, k], &[n, k])?;
        let bias = if bias {
            Some(self.tensor(&format!("{base}.bias"), &[n], &[n])?)
        } else {
            None
        };
        Ok(LinearKeys { weight, bias, n, k })
    }

    /// The first of `candidates` (base names) whose weight the checkpoint holds, else the
    /// first (so the error names the common spelling).
    fn pick(&self, candidates: &[String]) -> String {
        candidates
            .iter()
            .find(|c| {
                self.checkpoint.contains(&format!("{c}.weight"))
                    || self.checkpoint.contains(c.as_str())
            })
            .or(candidates.first())
            .cloned()
            .unwrap_or_default()
    }

    /// A linear layer whose output is scaled per channel by `scale` (DINOv2's layer scale),
    /// folded into its weight and bias.
    fn scaled_linear(
        &mut self,
        base: &str,
        scale: &str,
        n: usize,
        k: usize,
    ) -> Result<LinearKeys, ModelError> {
        let weight_name = format!("{base}.weight");
        let bias_name = format!("{base}.bias");
        self.check(&weight_name, &[n, k])?;
        self.check(&bias_name, &[n])?;
        self.check(scale, &[n])?;
        let weight = self.derived(
            format!("{weight_name}*{scale}"),
            Recipe::ScaledRows {
                tensor: weight_name,
                scale: scale.into(),
                cols: k,
            },
            &[n, k],
        );
        let bias = self.derived(
            format!("{bias_name}*{scale}"),
            Recipe::ScaledRows {
                tensor: bias_name,
                scale: scale.into(),
                cols: 1,
            },
            &[n],
        );
        Ok(LinearKeys {
            weight,
            bias: Some(bias),
            n,
            k,
        })
    }
}

impl VisionModel {
    /// Reads `config.json` and the safetensors weights of a model folder and checks that every
    /// tensor the graph needs is there with the right shape.
    pub fn load(dir: &Path) -> Result<VisionModel, ModelError> {
        let config = ModelConfig::from_file(&dir.join("config.json"))?;
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
        let head = detect_head(&config, &checkpoint)?;
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
        let c = &self.config;
        let padded = self.keys.layers.first()?.padded.as_ref()?.head_dim;
        if fusion.attention == AttentionFusion::Off {
            return None;
        }
        let heads = c.num_attention_heads;
        let probe = |head_dim: usize| {
            let op = Op::Attention {
                heads,
                head_dim,
                scale: 1.0,
                q: HeadSlice { column_offset: 0 },
                k: HeadSlice { column_offset: 0 },
                v: HeadSlice { column_offset: 0 },
            };
            let shape = [batch, self.tokens(), heads * head_dim];
            supports(&op, &[&shape, &shape, &shape]).is_ok()
        };
        (!probe(c.head_dim()) && probe(padded)).then_some(padded)
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
        if self.config.prefix_tokens() > 0 {
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
        if options.hidden_states {
            g.mark_output("hidden_states.0", x);
        }
        let pad = self
            .padded_head_dim(batch, options.fusion, supports)
            .is_some();
        for (l, layer) in k.layers.iter().enumerate() {
            x = self.encoder_block(&mut g, l, layer, x, pad)?;
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
        // The pooled output, built once when both it and the image embeddings are asked for.
        let mut pooled = None;
        for output in outputs.iter() {
            if !available.contains(output) {
                return Err(ModelError::Usage(format!(
                    "this {} checkpoint has no {} (it has: {})",
                    c.family.name(),
                    output.name(),
                    available
                        .iter()
                        .map(Output::name)
                        .collect::<Vec<_>>()
                        .join(", ")
                )));
            }
            let value = match output {
                Output::LastHiddenState => last,
                Output::Logits => self.classifier(&mut g, encoded, last)?,
                Output::PoolerOutput => *pooled.get_or_insert(self.pooler(&mut g, last)?),
                Output::ImageEmbeds => {
                    let pooled = match pooled {
                        Some(v) => v,
                        None => *pooled.insert(self.pooler(&mut g, last)?),
                    };
                    match &k.projection {
                        Some(projection) => {
                            linear(&mut g, "visual_projection", pooled, projection)?
                        }
                        None => pooled,
                    }
                }
                Output::ClassToken => {
                    g.add_node("cls_token", Op::SelectToken { index: 0 }, &[last])?
                }
                Output::PatchMean => {
                    g.add_node("patch_mean", Op::MeanTokens { start: prefix_rows }, &[last])?
                }
            };
            g.mark_output(output.name(), value);
        }
        passes::apply_for(&mut g, options.fusion, supports).map_err(ModelError::Usage)?;
        g.validate()?;
        Ok(g)
    }

    fn encoder_block(
        &self,
        g: &mut Graph,
        l: usize,
        layer: &LayerKeys,
        x: ValueId,
        pad: bool,
    ) -> Result<ValueId, ModelError> {
        let c = &self.config;
        let n = |s: &str| format!("layer.{l}.{s}");
        let normed = layer_norm(
            g,
            &n("layernorm_before"),
            x,
            &layer.norm_before,
            c.layer_norm_eps,
        )?;
        // Padded heads compute the same scores (the zero columns add nothing to Q·Kᵀ, scaled by
        // the true head dim) and the same output (the zero columns of the context meet zero
        // columns of the output projection).
        let (query, key, value, output, head_dim) = match (&layer.padded, pad) {
            (Some(p), true) => (&p.query, &p.key, &p.value, &p.attention_output, p.head_dim),
            _ => (
                &layer.query,
                &layer.key,
                &layer.value,
                &layer.attention_output,
                c.head_dim(),
            ),
        };
        let q = linear(g, &n("attention.query"), normed, query)?;
        let k = linear(g, &n("attention.key"), normed, key)?;
        let v = linear(g, &n("attention.value"), normed, value)?;
        let scale = 1.0 / (c.head_dim() as f32).sqrt();
        let heads = (c.num_attention_heads, head_dim);
        let context = attention(g, &n("attention"), (q, k, v), heads, scale)?;
        let attn_out = linear(g, &n("attention.output"), context, output)?;
        let h1 = g.add_node(&n("attention.residual"), Op::Add, &[attn_out, x])?;
        let normed2 = layer_norm(
            g,
            &n("layernorm_after"),
            h1,
            &layer.norm_after,
            c.layer_norm_eps,
        )?;
        let down = match &layer.mlp {
            MlpKeys::Standard { up, down } => {
                let up = linear(g, &n("intermediate"), normed2, up)?;
                let act =
                    g.add_node(&n("intermediate.act"), Op::Activation(c.hidden_act), &[up])?;
                linear(g, &n("output"), act, down)?
            }
            MlpKeys::SwiGlu { gate_up, down } => {
                let both = linear(g, &n("intermediate"), normed2, gate_up)?;
                let gated = g.add_node(&n("intermediate.swiglu"), Op::SwiGlu, &[both])?;
                linear(g, &n("output"), gated, down)?
            }
        };
        Ok(g.add_node(&n("output.residual"), Op::Add, &[down, h1])?)
    }

    fn classifier(
        &self,
        g: &mut Graph,
        encoded: ValueId,
        last: ValueId,
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
            PoolerKeys::AttentionPool(head) => {
                let d = c.hidden_size;
                // The probe is one query shared by every image: [1, 1, d].
                let probe = g.add_param(&head.probe, &[1, 1, d]);
                let q = linear(g, "head.attention.query", probe, &head.query)?;
                let k = linear(g, "head.attention.key", last, &head.key)?;
                let v = linear(g, "head.attention.value", last, &head.value)?;
                let heads = (c.num_attention_heads, c.head_dim());
                let scale = 1.0 / (c.head_dim() as f32).sqrt();
                let context = attention(g, "head.attention", (q, k, v), heads, scale)?;
                let attended = linear(g, "head.attention.output", context, &head.output)?;
                let normed =
                    layer_norm(g, "head.layernorm", attended, &head.norm, c.layer_norm_eps)?;
                let up = linear(g, "head.mlp.fc1", normed, &head.up)?;
                let act = g.add_node("head.mlp.act", Op::Activation(c.hidden_act), &[up])?;
                let down = linear(g, "head.mlp.fc2", act, &head.down)?;
                let pooled = g.add_node("head.residual", Op::Add, &[down, attended])?;
                g.add_node("head.pooled", Op::SelectToken { index: 0 }, &[pooled])?
            }
        })
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
    let bias = match names.patch_bias() {
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
    if let Some(cls) = names.class_token() {
        let stored: &[usize] = if c.family == Family::Clip {
            &[d]
        } else {
            &[1, 1, d]
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
    let table_prefix = prefix_rows - c.num_register_tokens;
    let table_grid = (c.image_size.0 / p, c.image_size.1 / p);
    let table_rows = table_prefix + table_grid.0 * table_grid.1;
    let positions_name = names.positions();
    let stored: Vec<usize> = match c.family {
        Family::Clip | Family::Siglip => vec![table_rows, d],
        _ => vec![1, table_rows, d],
    };
    t.check(&positions_name, &stored)?;
    let table = PositionTable {
        tensor: positions_name.clone(),
        hidden: d,
        table_prefix,
        zero_rows: c.num_register_tokens,
        table_grid,
        input_grid: (input_size.0 / p, input_size.1 / p),
        resampling: if c.model_type == "dinov2_with_registers" {
            Resampling::BicubicAntialiased
        } else {
            Resampling::Bicubic
        },
    };
    let rows = table.rows();
    let positions = t.derived(
        format!(
            "positions({positions_name}, {}x{})",
            input_size.0, input_size.1
        ),
        Recipe::Positions(table),
        &[rows, d],
    );
    let pre_norm = match names.pre_norm() {
        Some(base) => Some(t.norm(&base, d)?),
        None => None,
    };

    // Encoder blocks.
    let swiglu_fused = names.swiglu_fused(checkpoint, c);
    let mut layers = Vec::new();
    for l in 0..c.num_hidden_layers {
        let part = |t: &ParamTable, part| t.pick(&names.layer(l, part));
        let norm_before = t.norm(&part(&t, LayerPart::NormBefore), d)?;
        let [query, key, value] = if names.fused_qkv() {
            let qkv = part(&t, LayerPart::Query);
            stacked_projections(&mut t, &qkv, d, c.qkv_bias)?
        } else {
            [
                t.linear(&part(&t, LayerPart::Query), d, d, c.qkv_bias)?,
                t.linear(&part(&t, LayerPart::Key), d, d, c.qkv_bias)?,
                t.linear(&part(&t, LayerPart::Value), d, d, c.qkv_bias)?,
            ]
        };
        let attention_output_base = part(&t, LayerPart::AttentionOutput);
        let attention_output = if c.layer_scale {
            let scale = part(&t, LayerPart::AttentionScale);
            t.scaled_linear(&attention_output_base, &scale, d, d)?
        } else {
            t.linear(&attention_output_base, d, d, true)?
        };
        let padded = padded_attention_keys(&mut t, c, [&query, &key, &value], &attention_output);
        let norm_after = t.norm(&part(&t, LayerPart::NormAfter), d)?;
        let i = c.intermediate_size;
        let down_of = |t: &mut ParamTable, base: &str| {
            if c.layer_scale {
                let scale = t.pick(&names.layer(l, LayerPart::MlpScale));
                t.scaled_linear(base, &scale, d, i)
            } else {
                t.linear(base, d, i, true)
            }
        };
        let mlp = match c.mlp {
            Mlp::Standard => {
                let up = t.linear(&part(&t, LayerPart::Up), i, d, true)?;
                let down_base = part(&t, LayerPart::Down);
                MlpKeys::Standard {
                    up,
                    down: down_of(&mut t, &down_base)?,
                }
            }
            Mlp::SwiGlu => {
                let gate_up = if swiglu_fused {
                    t.linear(&part(&t, LayerPart::SwiGluIn), 2 * i, d, true)?
                } else {
                    let gate = part(&t, LayerPart::SwiGluGate);
                    let up = part(&t, LayerPart::SwiGluUp);
                    let mut stacked = |suffix: &str, shape: &[usize], full: &[usize]| {
                        let (g, u) = (format!("{gate}.{suffix}"), format!("{up}.{suffix}"));
                        t.check(&g, shape)?;
                        t.check(&u, shape)?;
                        Ok::<_, ModelError>(t.derived(
                            format!("stack({g},{u})"),
                            Recipe::Stack(vec![g, u]),
                            full,
                        ))
                    };
                    LinearKeys {
                        weight: stacked("weight", &[i, d], &[2 * i, d])?,
                        bias: Some(stacked("bias", &[i], &[2 * i])?),
                        n: 2 * i,
                        k: d,
                    }
                };
                let down_base = part(&t, LayerPart::SwiGluOut);
                MlpKeys::SwiGlu {
                    gate_up,
                    down: down_of(&mut t, &down_base)?,
                }
            }
        };
        layers.push(LayerKeys {
            norm_before,
            query,
            key,
            value,
            attention_output,
            padded,
            norm_after,
            mlp,
        });
    }
    let final_norm = match names.final_norm() {
        Some(base) => Some(t.norm(&base, d)?),
        None => None,
    };

    // Heads.
    let pooler = match c.family {
        Family::Vit | Family::Deit => {
            let base = format!("{}pooler.dense", names.prefix);
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
        Family::Dinov2 => Some(PoolerKeys::ClassToken),
        Family::Timm => None,
        Family::Clip => Some(PoolerKeys::NormedClassToken(
            t.norm(&names.pooled_norm().unwrap_or_default(), d)?,
        )),
        Family::Siglip => {
            let base = format!("{}head", names.prefix);
            if c.vision_use_head && checkpoint.contains(&format!("{base}.probe")) {
                Some(PoolerKeys::AttentionPool(Box::new(attention_pool_keys(
                    &mut t, &base, c,
                )?)))
            } else {
                None
            }
        }
    };
    let projection = match checkpoint.shape("visual_projection.weight") {
        Some(shape) if c.family == Family::Clip && shape.len() == 2 => {
            Some(t.linear("visual_projection", shape[0], d, false)?)
        }
        _ => None,
    };
    let classifier = match head {
        Head::Base => None,
        Head::Classifier { num_labels, input } => Some(match input {
            ClassifierInput::ClassAndDistillationTokens => {
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
                ClassifierKeys::Two(
                    half(&mut t, "cls_classifier")?,
                    half(&mut t, "distillation_classifier")?,
                )
            }
            ClassifierInput::ClassTokenAndPatchMean => {
                let (w, b) = ("classifier.weight".to_string(), "classifier.bias");
                t.check(&w, &[num_labels, 2 * d])?;
                let columns = |start| Recipe::Columns {
                    tensor: w.clone(),
                    cols: 2 * d,
                    start,
                    len: d,
                };
                let cls = LinearKeys {
                    weight: t.derived(format!("{w}[:, :{d}]"), columns(0), &[num_labels, d]),
                    bias: Some(t.tensor(b, &[num_labels], &[num_labels])?),
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
        layers,
        final_norm,
        pooler,
        projection,
        classifier,
    };
    Ok((keys, t.params))
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
    if config.family == Family::Deit {
        if let Some(num_labels) = rows("cls_classifier.weight")? {
            return Ok(Head::Classifier {
                num_labels,
                input: ClassifierInput::ClassAndDistillationTokens,
            });
        }
    }
    let head = if config.family == Family::Timm {
        "head.weight"
    } else {
        "classifier.weight"
    };
    let Some(num_labels) = rows(head)? else {
        return Ok(Head::Base);
    };
    let input = match config.family {
        Family::Vit | Family::Deit | Family::Timm => ClassifierInput::ClassToken,
        Family::Dinov2 => ClassifierInput::ClassTokenAndPatchMean,
        Family::Clip => ClassifierInput::PatchMean,
        Family::Siglip => ClassifierInput::TokenMean,
    };
    Ok(Head::Classifier { num_labels, input })
}

/// Q, K and V as rows of one stacked projection `base` (`[3·d, d]`, bias `[3·d]`), in that
/// order: timm's `attn.qkv`, torch's `MultiheadAttention.in_proj_*`.
fn stacked_rows(
    t: &mut ParamTable,
    (weight, bias): (&str, Option<&str>),
    d: usize,
) -> Result<[LinearKeys; 3], ModelError> {
    t.check(weight, &[3 * d, d])?;
    if let Some(bias) = bias {
        t.check(bias, &[3 * d])?;
    }
    let mut projection = |i: usize, what: &str| LinearKeys {
        weight: t.derived(
            format!("{weight}[{what}]"),
            Recipe::Rows {
                tensor: weight.into(),
                cols: d,
                start: i * d,
                len: d,
            },
            &[d, d],
        ),
        bias: bias.map(|bias| {
            t.derived(
                format!("{bias}[{what}]"),
                Recipe::Rows {
                    tensor: bias.into(),
                    cols: 1,
                    start: i * d,
                    len: d,
                },
                &[d],
            )
        }),
        n: d,
        k: d,
    };
    Ok([projection(0, "q"), projection(1, "k"), projection(2, "v")])
}

fn stacked_projections(
    t: &mut ParamTable,
    base: &str,
    d: usize,
    bias: bool,
) -> Result<[LinearKeys; 3], ModelError> {
    let (weight, bias_name) = (format!("{base}.weight"), format!("{base}.bias"));
    stacked_rows(t, (&weight, bias.then_some(bias_name.as_str())), d)
}

fn attention_pool_keys(
    t: &mut ParamTable,
    base: &str,
    c: &ModelConfig,
) -> Result<AttentionPoolKeys, ModelError> {
    let d = c.hidden_size;
    let probe = t.tensor(&format!("{base}.probe"), &[1, 1, d], &[1, 1, d])?;
    let (in_w, in_b) = (
        format!("{base}.attention.in_proj_weight"),
        format!("{base}.attention.in_proj_bias"),
    );
    // torch's MultiheadAttention stacks the Q, K and V projections in that order.
    let [query, key, value] = stacked_rows(t, (&in_w, Some(&in_b)), d)?;
    Ok(AttentionPoolKeys {
        probe,
        query,
        key,
        value,
        output: t.linear(&format!("{base}.attention.out_proj"), d, d, true)?,
        norm: t.norm(&format!("{base}.layernorm"), d)?,
        up: t.linear(&format!("{base}.mlp.fc1"), c.intermediate_size, d, true)?,
        down: t.linear(&format!("{base}.mlp.fc2"), d, c.intermediate_size, true)?,
    })
}

/// Q, K, V and output projections with every head padded with zeros to the next multiple of
/// 16 (the fused attention kernel's head dims), where the head dim is not one and the padded
/// one is at most 128. Derived lazily: made only if a graph uses them.
fn padded_attention_keys(
    t: &mut ParamTable,
    c: &ModelConfig,
    projections: [&LinearKeys; 3],
    output: &LinearKeys,
) -> Option<PaddedAttentionKeys> {
    let (heads, head_dim) = (c.num_attention_heads, c.head_dim());
    let padded = head_dim.next_multiple_of(16);
    // Only plain tensors are padded (a folded layer scale comes with head dims of 64).
    let plain = |key: &str| matches!(t.params.get(key), Some((Recipe::Tensor(_), _)));
    if head_dim.is_multiple_of(16)
        || padded > 128
        || !projections.iter().all(|p| plain(&p.weight))
        || !plain(&output.weight)
    {
        return None;
    }
    let width = heads * padded;
    let mut rows = |keys: &LinearKeys| {
        let pad = |tensor: &str, cols: usize| Recipe::PadHeadRows {
            tensor: tensor.into(),
            heads,
            head_dim,
            padded,
            cols,
        };
        LinearKeys {
            weight: t.derived(
                format!("pad_heads({}, {padded})", keys.weight),
                pad(&keys.weight, keys.k),
                &[width, keys.k],
            ),
            bias: keys
                .bias
                .as_ref()
                .map(|b| t.derived(format!("pad_heads({b}, {padded})"), pad(b, 1), &[width])),
            n: width,
            k: keys.k,
        }
    };
    let [query, key, value] = projections.map(&mut rows);
    let attention_output = LinearKeys {
        weight: t.derived(
            format!("pad_head_columns({}, {padded})", output.weight),
            Recipe::PadHeadColumns {
                tensor: output.weight.clone(),
                heads,
                head_dim,
                padded,
            },
            &[output.n, width],
        ),
        bias: output.bias.clone(),
        n: output.n,
        k: width,
    };
    Some(PaddedAttentionKeys {
        head_dim: padded,
        query,
        key,
        value,
        attention_output,
    })
}

fn linear(
    g: &mut Graph,
    node: &str,
    x: ValueId,
    keys: &LinearKeys,
) -> Result<ValueId, RuntimeError> {
    let weight = g.add_param(&keys.weight, &[keys.n, keys.k]);
    let mut inputs = vec![x, weight];
    if let Some(b) = &keys.bias {
        inputs.push(g.add_param(b, &[keys.n]));
    }
    let epilogue = Epilogue {
        bias: keys.bias.is_some(),
        ..Epilogue::NONE
    };
    g.add_node(node, Op::Linear { epilogue }, &inputs)
}

fn layer_norm(
    g: &mut Graph,
    node: &str,
    x: ValueId,
    keys: &NormKeys,
    eps: f32,
) -> Result<ValueId, RuntimeError> {
    let d = g.values[x].shape.last().copied().unwrap_or(0);
    let gamma = g.add_param(&keys.gamma, &[d]);
    let beta = g.add_param(&keys.beta, &[d]);
    g.add_node(node, Op::LayerNorm { eps }, &[x, gamma, beta])
}

/// Scaled dot-product attention as three ops (scores, softmax, context), which the fusion
/// pass makes one where the backend has the kernel.
fn attention(
    g: &mut Graph,
    node: &str,
    (q, k, v): (ValueId, ValueId, ValueId),
    (heads, head_dim): (usize, usize),
    scale: f32,
) -> Result<ValueId, RuntimeError> {
    let scores = g.add_node(
        &format!("{node}.scores"),
        Op::AttentionScores {
            heads,
            head_dim,
            scale,
            q: HeadSlice { column_offset: 0 },
            k: HeadSlice { column_offset: 0 },
        },
        &[q, k],
    )?;
    let probs = g.add_node(&format!("{node}.softmax"), Op::Softmax, &[scores])?;
    g.add_node(
        &format!("{node}.context"),
        Op::AttentionContext {
            heads,
            head_dim,
            v: HeadSlice { column_offset: 0 },
        },
        &[probs, v],
    )
}

impl ParamStore for VisionModel {
    /// Makes a parameter as its recipe says; the graph may view it with another shape of the
    /// same size (a conv weight as a matrix, the probe as a [1, 1, d] sequence).
    fn load(&self, name: &str, shape: &[usize]) -> Result<Vec<f32>, RuntimeError> {
        let (recipe, own) = self.params.get(name).ok_or_else(|| RuntimeError::Param {
            name: name.into(),
            message: "not a tensor this model reads".into(),
        })?;
        if own.iter().product::<usize>() != shape.iter().product::<usize>() {
            return Err(RuntimeError::Param {
                name: name.into(),
                message: format!("made as {own:?}, cannot be viewed as {shape:?}"),
            });
        }
        let values = recipe
            .make(&self.checkpoint)
            .map_err(|e| RuntimeError::Param {
                name: name.into(),
                message: e.to_string(),
            })?;
        if values.len() != shape.iter().product::<usize>() {
            return Err(RuntimeError::Param {
                name: name.into(),
                message: format!("made {} values for {shape:?}", values.len()),
            });
        }
        Ok(values)
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
