//! A Hugging Face ViT checkpoint as a graph: `ViTForImageClassification` (weights under
//! `vit.` plus a `classifier`) or `ViTModel` (no prefix; the output is `last_hidden_state`).

use crate::config::VitConfig;
use crate::error::ModelError;
use std::collections::BTreeMap;
use std::path::Path;
use vitrt_runtime::passes::{self, Fusion};
use vitrt_runtime::{Epilogue, Graph, HeadSlice, Op, ParamStore, RuntimeError, ValueId};
use vitrt_weights::Checkpoint;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Head {
    /// ViTForImageClassification: logits from the CLS token.
    Classifier { num_labels: usize },
    /// ViTModel: the final hidden states.
    Base,
}

/// What a graph should produce beyond the model's main output.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GraphOptions {
    /// Also output `hidden_states.{i}`, indexed as HF's `output_hidden_states`.
    pub hidden_states: bool,
    pub fusion: Fusion,
}

impl Default for GraphOptions {
    fn default() -> Self {
        GraphOptions {
            hidden_states: false,
            fusion: Fusion::ALL,
        }
    }
}

pub struct VitModel {
    pub config: VitConfig,
    pub head: Head,
    checkpoint: Checkpoint,
    /// "vit." for ViTForImageClassification, "" for ViTModel.
    prefix: String,
    /// Checkpoint shape of every tensor the graph reads, checked at load (in name order, so
    /// the first problem reported is always the same one).
    expected: BTreeMap<String, Vec<usize>>,
}

impl VitModel {
    /// Reads `config.json` and the safetensors weights of a model folder and checks that every
    /// tensor the graph needs is there with the right shape.
    pub fn load(dir: &Path) -> Result<VitModel, ModelError> {
        let config = VitConfig::from_file(&dir.join("config.json"))?;
        let checkpoint = Checkpoint::open(dir)?;
        VitModel::from_parts(config, checkpoint)
    }

    pub fn from_parts(config: VitConfig, checkpoint: Checkpoint) -> Result<VitModel, ModelError> {
        let probe = "embeddings.patch_embeddings.projection.weight";
        let prefix = if checkpoint.contains(&format!("vit.{probe}")) {
            "vit."
        } else if checkpoint.contains(probe) {
            ""
        } else {
            return Err(ModelError::Checkpoint(format!(
                "no ViT weights found: neither \"vit.{probe}\" (ViTForImageClassification) nor \"{probe}\" (ViTModel) is in {}",
                checkpoint.location().display()
            )));
        };
        let head = match checkpoint.shape("classifier.weight") {
            Some(shape) if shape.len() == 2 => Head::Classifier {
                num_labels: shape[0],
            },
            Some(shape) => {
                return Err(ModelError::Checkpoint(format!(
                    "classifier.weight has shape {shape:?}, expected [num_labels, {}]",
                    config.hidden_size
                )))
            }
            None => Head::Base,
        };
        let mut model = VitModel {
            config,
            head,
            checkpoint,
            prefix: prefix.to_string(),
            expected: BTreeMap::new(),
        };
        model.expected = model.expected_tensors();
        for (name, shape) in &model.expected {
            match model.checkpoint.shape(name) {
                None => {
                    return Err(ModelError::Checkpoint(format!(
                        "missing tensor {name} (expected shape {shape:?})"
                    )))
                }
                Some(found) if found != shape.as_slice() => {
                    return Err(ModelError::Checkpoint(format!(
                        "tensor {name} has shape {found:?}, expected {shape:?}"
                    )))
                }
                Some(_) => {}
            }
        }
        Ok(model)
    }

    pub fn num_labels(&self) -> Option<usize> {
        match self.head {
            Head::Classifier { num_labels } => Some(num_labels),
            Head::Base => None,
        }
    }

    /// The name of the main output: `logits` or `last_hidden_state`.
    pub fn output_name(&self) -> &'static str {
        match self.head {
            Head::Classifier { .. } => "logits",
            Head::Base => "last_hidden_state",
        }
    }

    fn name(&self, suffix: &str) -> String {
        format!("{}{suffix}", self.prefix)
    }

    fn layer(&self, i: usize, suffix: &str) -> String {
        self.name(&format!("encoder.layer.{i}.{suffix}"))
    }

    /// Every checkpoint tensor the graph reads, with its shape as stored.
    fn expected_tensors(&self) -> BTreeMap<String, Vec<usize>> {
        let c = &self.config;
        let (d, i) = (c.hidden_size, c.intermediate_size);
        let mut t = BTreeMap::new();
        t.insert(self.name("embeddings.cls_token"), vec![1, 1, d]);
        t.insert(
            self.name("embeddings.position_embeddings"),
            vec![1, c.tokens(), d],
        );
        t.insert(
            self.name("embeddings.patch_embeddings.projection.weight"),
            vec![d, c.num_channels, c.patch_size, c.patch_size],
        );
        t.insert(
            self.name("embeddings.patch_embeddings.projection.bias"),
            vec![d],
        );
        for l in 0..c.num_hidden_layers {
            for ln in ["layernorm_before", "layernorm_after"] {
                t.insert(self.layer(l, &format!("{ln}.weight")), vec![d]);
                t.insert(self.layer(l, &format!("{ln}.bias")), vec![d]);
            }
            for p in ["query", "key", "value"] {
                t.insert(
                    self.layer(l, &format!("attention.attention.{p}.weight")),
                    vec![d, d],
                );
                if c.qkv_bias {
                    t.insert(
                        self.layer(l, &format!("attention.attention.{p}.bias")),
                        vec![d],
                    );
                }
            }
            t.insert(self.layer(l, "attention.output.dense.weight"), vec![d, d]);
            t.insert(self.layer(l, "attention.output.dense.bias"), vec![d]);
            t.insert(self.layer(l, "intermediate.dense.weight"), vec![i, d]);
            t.insert(self.layer(l, "intermediate.dense.bias"), vec![i]);
            t.insert(self.layer(l, "output.dense.weight"), vec![d, i]);
            t.insert(self.layer(l, "output.dense.bias"), vec![d]);
        }
        t.insert(self.name("layernorm.weight"), vec![d]);
        t.insert(self.name("layernorm.bias"), vec![d]);
        if let Head::Classifier { num_labels } = self.head {
            t.insert("classifier.weight".into(), vec![num_labels, d]);
            t.insert("classifier.bias".into(), vec![num_labels]);
        }
        t
    }

    /// The forward pass for `batch` images as HF computes it, then the fusion passes, for a
    /// backend that runs every op (the CPU).
    pub fn build_graph(&self, batch: usize, options: GraphOptions) -> Result<Graph, ModelError> {
        self.build_graph_for(batch, options, &|_, _| Ok(()))
    }

    /// [`VitModel::build_graph`] for a backend that may lack a kernel for a fused op:
    /// `supports` (the backend's `Backend::supports`) says which attention can be fused.
    pub fn build_graph_for(
        &self,
        batch: usize,
        options: GraphOptions,
        supports: passes::Supports,
    ) -> Result<Graph, ModelError> {
        let c = &self.config;
        let (d, inter, heads, hd) = (
            c.hidden_size,
            c.intermediate_size,
            c.num_attention_heads,
            c.head_dim(),
        );
        let (h, w) = c.image_size;
        let mut g = Graph::default();
        let pixels = g.add_input("pixel_values", &[batch, c.num_channels, h, w]);
        let param = |g: &mut Graph, name: String, shape: &[usize]| g.add_param(&name, shape);
        let linear = |g: &mut Graph,
                      node: &str,
                      x: ValueId,
                      weight: String,
                      bias: Option<String>,
                      n: usize,
                      k: usize| {
            let wv = g.add_param(&weight, &[n, k]);
            let mut inputs = vec![x, wv];
            if let Some(b) = &bias {
                inputs.push(g.add_param(b, &[n]));
            }
            let epilogue = Epilogue {
                bias: bias.is_some(),
                ..Epilogue::NONE
            };
            g.add_node(node, Op::Linear { epilogue }, &inputs)
        };

        let patch_w = param(
            &mut g,
            self.name("embeddings.patch_embeddings.projection.weight"),
            &[d, c.num_channels * c.patch_size * c.patch_size],
        );
        let patch_b = param(
            &mut g,
            self.name("embeddings.patch_embeddings.projection.bias"),
            &[d],
        );
        let cls = param(&mut g, self.name("embeddings.cls_token"), &[d]);
        let pos = param(
            &mut g,
            self.name("embeddings.position_embeddings"),
            &[c.tokens(), d],
        );
        let mut x = g.add_node(
            "embeddings",
            Op::PatchEmbed {
                patch: c.patch_size,
            },
            &[pixels, patch_w, patch_b, cls, pos],
        )?;
        if options.hidden_states {
            g.mark_output("hidden_states.0", x);
        }

        for l in 0..c.num_hidden_layers {
            let n = |s: &str| format!("layer.{l}.{s}");
            let ln = |g: &mut Graph, which: &str, x: ValueId| -> Result<ValueId, RuntimeError> {
                let gamma = g.add_param(&self.layer(l, &format!("{which}.weight")), &[d]);
                let beta = g.add_param(&self.layer(l, &format!("{which}.bias")), &[d]);
                g.add_node(
                    &n(which),
                    Op::LayerNorm {
                        eps: c.layer_norm_eps,
                    },
                    &[x, gamma, beta],
                )
            };
            let normed = ln(&mut g, "layernorm_before", x)?;
            let mut qkv = Vec::new();
            for p in ["query", "key", "value"] {
                let weight = self.layer(l, &format!("attention.attention.{p}.weight"));
                let bias = c
                    .qkv_bias
                    .then(|| self.layer(l, &format!("attention.attention.{p}.bias")));
                qkv.push(linear(
                    &mut g,
                    &n(&format!("attention.{p}")),
                    normed,
                    weight,
                    bias,
                    d,
                    d,
                )?);
            }
            let scores = g.add_node(
                &n("attention.scores"),
                Op::AttentionScores {
                    heads,
                    head_dim: hd,
                    scale: 1.0 / (hd as f32).sqrt(),
                    q: HeadSlice { column_offset: 0 },
                    k: HeadSlice { column_offset: 0 },
                },
                &[qkv[0], qkv[1]],
            )?;
            let probs = g.add_node(&n("attention.softmax"), Op::Softmax, &[scores])?;
            let context = g.add_node(
                &n("attention.context"),
                Op::AttentionContext {
                    heads,
                    head_dim: hd,
                    v: HeadSlice { column_offset: 0 },
                },
                &[probs, qkv[2]],
            )?;
            let attn_out = linear(
                &mut g,
                &n("attention.output"),
                context,
                self.layer(l, "attention.output.dense.weight"),
                Some(self.layer(l, "attention.output.dense.bias")),
                d,
                d,
            )?;
            let h1 = g.add_node(&n("attention.residual"), Op::Add, &[attn_out, x])?;
            let normed2 = ln(&mut g, "layernorm_after", h1)?;
            let up = linear(
                &mut g,
                &n("intermediate"),
                normed2,
                self.layer(l, "intermediate.dense.weight"),
                Some(self.layer(l, "intermediate.dense.bias")),
                inter,
                d,
            )?;
            let act = g.add_node(&n("intermediate.act"), Op::Activation(c.hidden_act), &[up])?;
            let down = linear(
                &mut g,
                &n("output"),
                act,
                self.layer(l, "output.dense.weight"),
                Some(self.layer(l, "output.dense.bias")),
                d,
                inter,
            )?;
            x = g.add_node(&n("output.residual"), Op::Add, &[down, h1])?;
            if options.hidden_states {
                g.mark_output(&format!("hidden_states.{}", l + 1), x);
            }
        }

        let gamma = param(&mut g, self.name("layernorm.weight"), &[d]);
        let beta = param(&mut g, self.name("layernorm.bias"), &[d]);
        let last = g.add_node(
            "layernorm",
            Op::LayerNorm {
                eps: c.layer_norm_eps,
            },
            &[x, gamma, beta],
        )?;
        match self.head {
            Head::Base => g.mark_output("last_hidden_state", last),
            Head::Classifier { num_labels } => {
                let cls_token = g.add_node("cls_token", Op::SelectToken { index: 0 }, &[last])?;
                let logits = linear(
                    &mut g,
                    "classifier",
                    cls_token,
                    "classifier.weight".into(),
                    Some("classifier.bias".into()),
                    num_labels,
                    d,
                )?;
                g.mark_output("logits", logits);
            }
        }
        passes::apply_for(&mut g, options.fusion, supports).map_err(ModelError::Usage)?;
        g.validate()?;
        Ok(g)
    }
}

impl ParamStore for VitModel {
    /// Loads a checkpoint tensor as f32; the graph may view it with another shape of the same
    /// size (a conv weight as a matrix, the CLS token as a vector).
    fn load(&self, name: &str, shape: &[usize]) -> Result<Vec<f32>, RuntimeError> {
        let stored = self.expected.get(name).ok_or_else(|| RuntimeError::Param {
            name: name.into(),
            message: "not a tensor this model reads".into(),
        })?;
        if stored.iter().product::<usize>() != shape.iter().product::<usize>() {
            return Err(RuntimeError::Param {
                name: name.into(),
                message: format!("stored as {stored:?}, cannot be viewed as {shape:?}"),
            });
        }
        self.checkpoint
            .load_f32_shaped(name, stored)
            .map_err(|e| RuntimeError::Param {
                name: name.into(),
                message: e.to_string(),
            })
    }
}
