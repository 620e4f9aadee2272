//! The encoder every tower shares: pre-norm blocks of attention and an MLP, as the vision
//! towers of every family and the text towers of CLIP and SigLIP run them. Here are the keys
//! of its parameters (collected and checked against the checkpoint by a [`ParamTable`]), the
//! graph of one block, and the small graph pieces the heads are built of.

use crate::config::{EncoderConfig, Mlp, Norm};
use crate::error::ModelError;
use crate::names::TensorNames;
use crate::params::Recipe;
use crate::rules::{LayerPart, QkvLayout};
use std::collections::BTreeMap;
use vitrt_runtime::passes::{self, AttentionFusion, Fusion};
use vitrt_runtime::{Epilogue, Graph, HeadSlice, Op, RopeGrid, RuntimeError, ValueId};
use vitrt_weights::Checkpoint;

/// A linear layer's parameter keys.
#[derive(Clone, Debug)]
pub(crate) struct LinearKeys {
    pub weight: String,
    pub bias: Option<String>,
    /// Output and input features.
    pub n: usize,
    pub k: usize,
}

/// A norm's parameter keys: a LayerNorm's gamma and beta, or an RMSNorm's weight (`gamma`)
/// and no `beta`.
#[derive(Clone, Debug)]
pub(crate) struct NormKeys {
    pub gamma: String,
    pub beta: Option<String>,
}

#[derive(Clone, Debug)]
pub(crate) enum MlpKeys {
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
pub(crate) struct LayerKeys {
    pub norm_before: NormKeys,
    pub query: LinearKeys,
    pub key: LinearKeys,
    pub value: LinearKeys,
    pub attention_output: LinearKeys,
    /// The same projections with each head padded with zeros to a multiple of 16, where the
    /// head dim is not one (see [`VisionModel::padded_head_dim`]).
    pub padded: Option<PaddedAttentionKeys>,
    pub norm_after: NormKeys,
    pub mlp: MlpKeys,
}

#[derive(Clone, Debug)]
pub(crate) struct PaddedAttentionKeys {
    pub head_dim: usize,
    pub query: LinearKeys,
    pub key: LinearKeys,
    pub value: LinearKeys,
    pub attention_output: LinearKeys,
}

/// Parameter key to how it is made and its shape.
pub(crate) type ParamMap = BTreeMap<String, (Recipe, Vec<usize>)>;

/// Collects the parameters, checking each checkpoint tensor's shape as it is named.
pub(crate) struct ParamTable<'a> {
    pub checkpoint: &'a Checkpoint,
    pub params: ParamMap,
}

impl ParamTable<'_> {
    pub(crate) fn check(&self, name: &str, want: &[usize]) -> Result<(), ModelError> {
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
    pub(crate) fn tensor(
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

    pub(crate) fn derived(&mut self, key: String, recipe: Recipe, shape: &[usize]) -> String {
        self.params.insert(key.clone(), (recipe, shape.to_vec()));
        key
    }

    /// A LayerNorm's weight and bias, `{base}.weight` and `{base}.bias`.
    pub(crate) fn norm(&mut self, base: &str, d: usize) -> Result<NormKeys, ModelError> {
        self.norm_of(Norm::Layer, base, d)
    }

    /// A norm of kind `norm`: a LayerNorm's `{base}.weight` and `{base}.bias`, an RMSNorm's
    /// `{base}.weight` alone.
    pub(crate) fn norm_of(
        &mut self,
        norm: Norm,
        base: &str,
        d: usize,
    ) -> Result<NormKeys, ModelError> {
        Ok(NormKeys {
            gamma: self.tensor(&format!("{base}.weight"), &[d], &[d])?,
            beta: match norm {
                Norm::Layer => Some(self.tensor(&format!("{base}.bias"), &[d], &[d])?),
                Norm::Rms => None,
            },
        })
    }

    pub(crate) fn linear(
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
    pub(crate) fn pick(&self, candidates: &[String]) -> String {
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
    pub(crate) fn scaled_linear(
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

/// Projections stored as rows of one stacked tensor (`[N·d, d]`, bias `[N·d]`), one `d`-row
/// block each, named by `parts` in their order: Q, K and V in timm's `attn.qkv` and torch's
/// `MultiheadAttention.in_proj_*` (SigLIP's head, open_clip's blocks); K and V in timm's
/// attention pool's `kv`.
pub(crate) fn stacked_rows<const N: usize>(
    t: &mut ParamTable,
    (weight, bias): (&str, Option<&str>),
    d: usize,
    parts: [&str; N],
) -> Result<[LinearKeys; N], ModelError> {
    t.check(weight, &[N * d, d])?;
    if let Some(bias) = bias {
        t.check(bias, &[N * d])?;
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
    let mut index = 0;
    Ok(parts.map(|what| {
        index += 1;
        projection(index - 1, what)
    }))
}

pub(crate) fn stacked_projections(
    t: &mut ParamTable,
    base: &str,
    d: usize,
    bias: bool,
) -> Result<[LinearKeys; 3], ModelError> {
    let (weight, bias_name) = (format!("{base}.weight"), format!("{base}.bias"));
    stacked_rows(
        t,
        (&weight, bias.then_some(bias_name.as_str())),
        d,
        ["q", "k", "v"],
    )
}

/// Q, K, V and output projections with every head padded with zeros to the next multiple of
/// 16 (the fused attention kernel's head dims), where the head dim is not one and the padded
/// one is at most 128. Derived lazily: made only if a graph uses them.
pub(crate) fn padded_attention_keys(
    t: &mut ParamTable,
    c: &EncoderConfig,
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

/// The head dim an encoder's attention runs at when the backend's fused kernel does not take
/// the model's but takes it padded with zeros to the next multiple of 16 (SigLIP so400m: 72 as
/// 80): the projections then write padded heads, for 11% more attention work instead of the
/// unfused path's score matrices (benchmarks/NOTES.md, 2026-11-24, "head dims padded"). None:
/// no padding. `shape`: batch and tokens of the attention's input; `key_padding`: the
/// attention takes a key padding mask (SigLIP 2 NaFlex).
pub(crate) fn padded_head_dim(
    layers: &[LayerKeys],
    c: &EncoderConfig,
    (batch, tokens): (usize, usize),
    (causal, key_padding): (bool, bool),
    fusion: Fusion,
    supports: passes::Supports,
) -> Option<usize> {
    let padded = layers.first()?.padded.as_ref()?.head_dim;
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
            causal,
            key_padding,
        };
        let shape = [batch, tokens, heads * head_dim];
        supports(&op, &[&shape, &shape, &shape]).is_ok()
    };
    (!probe(c.hidden_size / heads) && probe(padded)).then_some(padded)
}

/// The keys of every encoder block of the checkpoint, their shapes checked.
pub(crate) fn collect_layers(
    t: &mut ParamTable,
    c: &EncoderConfig,
    names: &TensorNames,
    checkpoint: &Checkpoint,
) -> Result<Vec<LayerKeys>, ModelError> {
    let d = c.hidden_size;
    let swiglu_fused = names.swiglu_fused(checkpoint, c.mlp);
    let mut layers = Vec::new();
    for l in 0..c.num_hidden_layers {
        let part = |t: &ParamTable, part| t.pick(&names.layer(l, part));
        let norm_before = t.norm_of(c.norm, &part(t, LayerPart::NormBefore), d)?;
        let [query, key, value] = match names.qkv() {
            QkvLayout::Stacked => {
                let qkv = part(t, LayerPart::Query);
                stacked_projections(t, &qkv, d, c.qkv_bias)?
            }
            QkvLayout::InProjection => {
                let in_proj = part(t, LayerPart::Query);
                let (weight, bias) = (format!("{in_proj}_weight"), format!("{in_proj}_bias"));
                let bias = c.qkv_bias.then_some(bias.as_str());
                stacked_rows(t, (&weight, bias), d, ["q", "k", "v"])?
            }
            QkvLayout::Separate => {
                let mut key = t.linear(&part(t, LayerPart::Key), d, d, c.qkv_bias && c.key_bias)?;
                if c.qkv_bias && !c.key_bias {
                    // Zeros, so that the three projections stay alike (fused into one matmul).
                    key.bias = Some(t.derived(format!("zeros({d})"), Recipe::Zeros(d), &[d]));
                }
                [
                    t.linear(&part(t, LayerPart::Query), d, d, c.qkv_bias)?,
                    key,
                    t.linear(&part(t, LayerPart::Value), d, d, c.qkv_bias)?,
                ]
            }
        };
        let attention_output_base = part(t, LayerPart::AttentionOutput);
        let attention_output = if c.layer_scale {
            let scale = part(t, LayerPart::AttentionScale);
            t.scaled_linear(&attention_output_base, &scale, d, d)?
        } else {
            t.linear(&attention_output_base, d, d, c.attention_output_bias)?
        };
        let padded = padded_attention_keys(t, c, [&query, &key, &value], &attention_output);
        let norm_after = t.norm_of(c.norm, &part(t, LayerPart::NormAfter), d)?;
        let i = c.intermediate_size;
        let down_of = |t: &mut ParamTable, base: &str| {
            if c.layer_scale {
                let scale = t.pick(&names.layer(l, LayerPart::MlpScale));
                t.scaled_linear(base, &scale, d, i)
            } else {
                t.linear(base, d, i, c.mlp_bias)
            }
        };
        let mlp = match c.mlp {
            Mlp::Standard => {
                let up = t.linear(&part(t, LayerPart::Up), i, d, c.mlp_bias)?;
                let down_base = part(t, LayerPart::Down);
                MlpKeys::Standard {
                    up,
                    down: down_of(t, &down_base)?,
                }
            }
            Mlp::SwiGlu => {
                let gate_up = if swiglu_fused {
                    t.linear(&part(t, LayerPart::SwiGluIn), 2 * i, d, c.mlp_bias)?
                } else {
                    let gate = part(t, LayerPart::SwiGluGate);
                    let up = part(t, LayerPart::SwiGluUp);
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
                    let bias = match c.mlp_bias {
                        true => Some(stacked("bias", &[i], &[2 * i])?),
                        false => None,
                    };
                    LinearKeys {
                        weight: stacked("weight", &[i, d], &[2 * i, d])?,
                        bias,
                        n: 2 * i,
                        k: d,
                    }
                };
                let down_base = part(t, LayerPart::SwiGluOut);
                MlpKeys::SwiGlu {
                    gate_up,
                    down: down_of(t, &down_base)?,
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
    Ok(layers)
}

/// The key padding mask's two graph inputs (`vitrt_runtime::key_padding`): the additive mask
/// `[B, T]` and the key lengths `[B]`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct KeyPaddingInputs {
    pub mask: ValueId,
    pub lengths: ValueId,
}

/// One encoder block over `x`. `rope`: the patch grid Q and K are rotated on (DINOv3's
/// rotary embeddings, `ModelConfig::rope_theta`); it rules out `pad`. `key_padding`: each
/// item attends to its first keys only (SigLIP 2 NaFlex's padded sequences).
#[allow(clippy::too_many_arguments)]
pub(crate) fn encoder_block(
    g: &mut Graph,
    c: &EncoderConfig,
    name: &str,
    layer: &LayerKeys,
    x: ValueId,
    pad: bool,
    rope: Option<RopeGrid>,
    key_padding: Option<KeyPaddingInputs>,
) -> Result<ValueId, ModelError> {
    let n = |s: &str| format!("{name}.{s}");
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
    let (query, key, value, output, head_dim) = match (&layer.padded, pad && rope.is_none()) {
        (Some(p), true) => (&p.query, &p.key, &p.value, &p.attention_output, p.head_dim),
        _ => (
            &layer.query,
            &layer.key,
            &layer.value,
            &layer.attention_output,
            c.head_dim(),
        ),
    };
    let mut q = linear(g, &n("attention.query"), normed, query)?;
    let mut k = linear(g, &n("attention.key"), normed, key)?;
    let v = linear(g, &n("attention.value"), normed, value)?;
    if let Some(grid) = rope {
        let op = Op::Rope {
            heads: c.num_attention_heads,
            head_dim,
            grid,
        };
        q = g.add_node(&n("attention.query.rope"), op.clone(), &[q])?;
        k = g.add_node(&n("attention.key.rope"), op, &[k])?;
    }
    let scale = 1.0 / (c.head_dim() as f32).sqrt();
    let heads = (c.num_attention_heads, head_dim);
    let context = attention(
        g,
        &n("attention"),
        (q, k, v),
        heads,
        scale,
        c.causal,
        key_padding,
    )?;
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
            let act = g.add_node(&n("intermediate.act"), Op::Activation(c.hidden_act), &[up])?;
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

pub(crate) fn linear(
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

/// A LayerNorm over the last dimension, or an RMSNorm where the keys have no beta.
pub(crate) fn layer_norm(
    g: &mut Graph,
    node: &str,
    x: ValueId,
    keys: &NormKeys,
    eps: f32,
) -> Result<ValueId, RuntimeError> {
    let d = g.values[x].shape.last().copied().unwrap_or(0);
    let gamma = g.add_param(&keys.gamma, &[d]);
    match &keys.beta {
        Some(beta) => {
            let beta = g.add_param(beta, &[d]);
            g.add_node(node, Op::LayerNorm { eps }, &[x, gamma, beta])
        }
        None => g.add_node(node, Op::RmsNorm { eps }, &[x, gamma]),
    }
}

/// Scaled dot-product attention as three ops (scores, softmax, context), which the fusion
/// pass makes one where the backend has the kernel. `causal`: each query sees only the keys
/// up to its own position (CLIP's text tower). `key_padding`: keys past each item's length
/// are masked (-inf scores before the softmax; the fused kernel reads the lengths).
pub(crate) fn attention(
    g: &mut Graph,
    node: &str,
    (q, k, v): (ValueId, ValueId, ValueId),
    (heads, head_dim): (usize, usize),
    scale: f32,
    causal: bool,
    key_padding: Option<KeyPaddingInputs>,
) -> Result<ValueId, RuntimeError> {
    let mut inputs = vec![q, k];
    if let Some(padding) = key_padding {
        inputs.extend([padding.mask, padding.lengths]);
    }
    let scores = g.add_node(
        &format!("{node}.scores"),
        Op::AttentionScores {
            heads,
            head_dim,
            scale,
            q: HeadSlice { column_offset: 0 },
            k: HeadSlice { column_offset: 0 },
            key_padding: key_padding.is_some(),
        },
        &inputs,
    )?;
    let probs = g.add_node(
        &format!("{node}.softmax"),
        Op::Softmax { causal },
        &[scores],
    )?;
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

/// Makes parameter `name` as its recipe in `params` says, as `shape` (a view of the same size
/// as the shape it was collected with: a conv weight as a matrix, the probe as a sequence).
pub(crate) fn make_param(
    params: &ParamMap,
    checkpoint: &Checkpoint,
    name: &str,
    shape: &[usize],
) -> Result<Vec<f32>, RuntimeError> {
    let (recipe, own) = params.get(name).ok_or_else(|| RuntimeError::Param {
        name: name.into(),
        message: "not a tensor this model reads".into(),
    })?;
    if own.iter().product::<usize>() != shape.iter().product::<usize>() {
        return Err(RuntimeError::Param {
            name: name.into(),
            message: format!("made as {own:?}, cannot be viewed as {shape:?}"),
        });
    }
    let values = recipe.make(checkpoint).map_err(|e| RuntimeError::Param {
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
