//! The graph of ops: the one place a model is described. Values are written once (SSA);
//! nodes are kept in an order where every input is produced before it is read.

use crate::error::RuntimeError;
use vitrt_kernels::gather::EndToken;
use vitrt_kernels::rope::RopeGrid;
use vitrt_kernels::{Activation, DType, Epilogue};

pub type ValueId = usize;
pub type NodeId = usize;

/// Where a value's bytes come from.
#[derive(Clone, Debug, PartialEq)]
pub enum ValueKind {
    /// Fed by the caller at every run as f32 values (pixels, patch rows, masks), stored as the
    /// plan says (`plan::value_dtypes`: f32 unless a matmul reads it in another type).
    Input,
    /// A weight, loaded once.
    Param(ParamSource),
    /// Computed by a node.
    Activation,
}

/// How a parameter is assembled from checkpoint tensors.
#[derive(Clone, Debug, PartialEq)]
pub enum ParamSource {
    Tensor(String),
    /// Several tensors stacked along their first dimension (fused Q, K, V projections).
    Concat(Vec<String>),
    /// A weight `[N, K]` of an FP8 linear layer as e4m3 values: each row divided by its
    /// scale ([`ParamSource::Fp8Scale`]) and rounded (`crate::fp8::quantize_weight`).
    Fp8Weight(Box<ParamSource>),
    /// The per-output-channel scales `[N]` of that weight (`[N, columns]`), f32.
    Fp8Scale {
        weight: Box<ParamSource>,
        columns: usize,
    },
    /// The calibrated static scale `[1]` (f32) of the input of the FP8 linear layer `layer`
    /// (a `vitrt calibrate` file's, `crate::fp8::use_static_scales`).
    Fp8InputScale {
        layer: String,
        scale: f32,
    },
    /// A linear layer's weight `[N, K]` with its input's layernorm's gamma `[K]` folded in
    /// (`W[n, k] · γ[k]`, `crate::layernorm_fold`).
    LayernormWeight {
        weight: Box<ParamSource>,
        gamma: Box<ParamSource>,
    },
    /// That layer's bias `[N]` (zero if it has none) plus its weight times the layernorm's
    /// beta; `columns` is K.
    LayernormBias {
        weight: Box<ParamSource>,
        bias: Option<Box<ParamSource>>,
        beta: Box<ParamSource>,
        columns: usize,
    },
    /// The column sums `[N]` (f32, `Σ_k W'[n, k]`) of the folded weight `[N, columns]` as
    /// stored in `dtype`.
    LayernormColumnSums {
        weight: Box<ParamSource>,
        gamma: Box<ParamSource>,
        columns: usize,
        dtype: DType,
    },
}

impl ParamSource {
    /// A key that names the assembled parameter, so backends upload each once.
    pub fn key(&self) -> String {
        match self {
            ParamSource::Tensor(name) => name.clone(),
            ParamSource::Concat(names) => format!("concat({})", names.join(",")),
            ParamSource::Fp8Weight(source) => format!("e4m3({})", source.key()),
            ParamSource::Fp8Scale { weight, .. } => format!("e4m3_scale({})", weight.key()),
            // The value is in the key: two files' scales for one layer are two parameters.
            ParamSource::Fp8InputScale { layer, scale } => {
                format!("e4m3_input_scale({layer};{:08x})", scale.to_bits())
            }
            ParamSource::LayernormWeight { weight, gamma } => {
                format!("layernorm_weight({};{})", weight.key(), gamma.key())
            }
            ParamSource::LayernormBias {
                weight, bias, beta, ..
            } => format!(
                "layernorm_bias({};{};{})",
                weight.key(),
                bias.as_ref().map(|b| b.key()).unwrap_or_default(),
                beta.key()
            ),
            ParamSource::LayernormColumnSums {
                weight,
                gamma,
                dtype,
                ..
            } => format!(
                "layernorm_column_sums({};{};{dtype})",
                weight.key(),
                gamma.key()
            ),
        }
    }
}

#[derive(Clone, Debug)]
pub struct Value {
    pub name: String,
    pub shape: Vec<usize>,
    pub kind: ValueKind,
    /// Its storage carries, after its elements, each row's statistics over every 64 columns,
    /// which its producer writes and a layernorm folded into its readers combines
    /// (`crate::layernorm_fold::StatisticsLayout`). Set by `fold_layernorms`.
    pub row_statistics: bool,
}

impl Value {
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }
}

/// Which columns of a `[B, T, width]` activation hold the heads of Q, K or V: head `h`
/// starts at column `column_offset + h * head_dim`. Lets attention read Q, K and V where the
/// projections wrote them, whether as three tensors or one fused QKV tensor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HeadSlice {
    pub column_offset: usize,
}

/// How an FP8 linear layer's input is scaled and what it writes ([`Op::Fp8Linear`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Fp8Io {
    /// x is quantised with one calibrated static scale, an input of the node, instead of a
    /// scale a row.
    pub static_input: bool,
    /// The output is e4m3 codes with the static scale of its readers' input, an input of the
    /// node.
    pub e4m3_output: bool,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Op {
    /// Inputs: pixels [B,C,H,W] (f32), weight [hidden, C·P·P], bias [hidden], pos [T, hidden],
    /// then, when `prefix_tokens` S > 0, the prefix tokens [S, hidden] (CLS, DeiT's
    /// distillation token, DINOv2's registers). Output [B, T, hidden] with T = S + (H/P)·(W/P):
    /// token j < S is prefix[j] + pos[j], token S + i is patch i projected, plus the bias and
    /// pos[S + i]. Needs a workspace for the patch rows.
    PatchEmbed { patch: usize, prefix_tokens: usize },
    /// Inputs: x [.., C], gamma [C], beta [C].
    LayerNorm { eps: f32 },
    /// Inputs: x [.., C], weight [C]. x / sqrt(mean(x²) + eps) · weight over the last
    /// dimension (AIMv2's RMSNorm).
    RmsNorm { eps: f32 },
    /// Inputs: x [.., K], weight [N, K], then bias [N] if `epilogue.bias`, then residual
    /// [.., N] if `epilogue.residual`. Output [.., N].
    Linear { epilogue: Epilogue },
    /// A `Linear` whose product runs in FP8 (made by `crate::fp8::quantize_linears`). Inputs:
    /// x [.., K] (the compute type, or e4m3 codes its producer wrote), the weight's e4m3
    /// values [N, K] and their per-row scales [N] (f32), with `io.static_input` x's calibrated
    /// scale [1] (f32), with `io.e4m3_output` the output's scale [1] (f32), then bias and
    /// residual as `Linear`'s (`crate::fp8::Fp8Slots` numbers them). Each row of x is
    /// quantised to e4m3 with its own scale (its largest magnitude over 448) as the node runs,
    /// or with the static one; the product accumulates in fp32 and is scaled back, then the
    /// epilogue runs as `Linear`'s. With `io.e4m3_output` the result is stored as e4m3 codes
    /// of `v / out_scale` (the input of the next FP8 layer, written by this one's epilogue).
    Fp8Linear { epilogue: Epilogue, io: Fp8Io },
    /// A `LayerNorm` whose output is written as e4m3 codes with a calibrated static scale,
    /// read only by FP8 linear layers with that input scale (made by
    /// `crate::fp8::use_static_scales`). Inputs: x [.., C], gamma [C], beta [C], the scale [1]
    /// (f32). Output [.., C] of codes of `y / scale`.
    LayerNormE4m3 { eps: f32 },
    /// A `Linear` reading a layernorm's output, with the layernorm folded in (made by
    /// `crate::layernorm_fold::fold_layernorms`). Inputs: the layernorm's input x [.., K] (in
    /// the compute type), the folded weight [N, K] (W·diag(γ)), the folded bias [N]
    /// (b + W·β) and the folded weight's column sums [N] (f32). Output [.., N] =
    /// act(rstd · (x·W'ᵀ − mean · colsum) + b') with each row's mean and 1/sqrt(var + eps):
    /// act(LayerNorm(x)·Wᵀ + b).
    LayerNormLinear { eps: f32, activation: Activation },
    /// Element-wise activation (fused into the producing Linear by a pass).
    Activation(Activation),
    /// Element-wise sum of two tensors of one shape.
    Add,
    /// Inputs: the tensors holding Q, [B or 1, Tq, width], and K, [B, Tk, width]. Output
    /// [B, heads, Tq, Tk] = scale · Q·Kᵀ per head. A Q of batch 1 is shared by every image (the
    /// learned probe query of SigLIP's attention-pooling head).
    ///
    /// `key_padding`: two more inputs, the key padding mask in the two forms the kernels read
    /// (both made by [`crate::key_padding::KeyPadding`]): the additive mask [B, Tk] (0 for a
    /// valid key, -inf for a padded one), added to every score of item b so that the softmax
    /// gives padded keys probability exactly 0, as transformers adds its mask; and the key
    /// lengths [B], which the unfused chain does not read but carries for `Attention` when
    /// `passes::fuse_attention` fuses it.
    AttentionScores {
        heads: usize,
        head_dim: usize,
        scale: f32,
        q: HeadSlice,
        k: HeadSlice,
        key_padding: bool,
    },
    /// Row-wise softmax over the last dimension. `causal`: the input is [.., T, T] scores and
    /// row i keeps keys 0..=i only (the rest get probability 0), as CLIP's text tower masks
    /// them.
    Softmax { causal: bool },
    /// Inputs: probabilities [B, heads, Tq, Tk] and the tensor holding V, [B, Tk, width].
    /// Output [B, Tq, heads·head_dim], heads side by side as HF lays them out.
    AttentionContext {
        heads: usize,
        head_dim: usize,
        v: HeadSlice,
    },
    /// Scores, softmax and context in one node (made by `passes::fuse_attention`): inputs the
    /// tensors holding Q, K and V, [B, T, width]; output [B, T, heads·head_dim] =
    /// softmax(scale · Q·Kᵀ)·V per head, heads side by side as `AttentionContext` writes them.
    /// The scores and probabilities are never stored. `causal` as in `Softmax`.
    /// `key_padding`: a fourth input, the key lengths [B] ([`crate::key_padding`]): item b
    /// attends to its first `len[b]` keys only (the kernels' `attention_with_key_lengths`).
    /// Not with `causal`.
    Attention {
        heads: usize,
        head_dim: usize,
        scale: f32,
        q: HeadSlice,
        k: HeadSlice,
        v: HeadSlice,
        causal: bool,
        key_padding: bool,
    },
    /// Input [B, T, C]; output [B, C], the token at `index` of each sequence.
    SelectToken { index: usize },
    /// Input [B, T, C]; output [B, C], the mean of tokens `start..T` of each sequence.
    MeanTokens { start: usize },
    /// Input [.., 2H]; output [.., H] = silu(x[.., :H]) · x[.., H:] (SwiGLU's gate).
    SwiGlu,
    /// Inputs: token ids [B, T] (f32 holding integers), the token table [V, C] and the
    /// position table [P >= T, C]. Output [B, T, C]: row (b, t) is table[ids[b, t]] +
    /// positions[t]. An id outside the table gives a row of NaN, never another row.
    TokenEmbedding,
    /// Inputs: hidden states [B, T, C] and the token ids [B, T] they came from. Output
    /// [B, C], each sequence's end-of-text token as `rule` finds it (CLIP's pooled token).
    SelectEndToken { rule: EndToken },
    /// Each row over the last dimension divided by its Euclidean norm (CLIP's and SigLIP's
    /// embeddings before their cosine similarities).
    L2Normalize,
    /// Input [B, T, heads·head_dim] (Q or K); output the same with every head of every patch
    /// token rotated by its position on `grid` (DINOv3's rotary embeddings: the formulas are
    /// vitrt_kernels::rope's), the tokens ahead of the patches copied.
    Rope {
        heads: usize,
        head_dim: usize,
        grid: RopeGrid,
    },
}

impl Op {
    pub fn kind_name(&self) -> &'static str {
        match self {
            Op::PatchEmbed { .. } => "patch_embed",
            Op::LayerNorm { .. } => "layernorm",
            Op::LayerNormE4m3 { .. } => "layernorm_e4m3",
            Op::RmsNorm { .. } => "rmsnorm",
            Op::Linear { .. } => "linear",
            Op::Fp8Linear { .. } => "fp8_linear",
            Op::LayerNormLinear { .. } => "layernorm_linear",
            Op::Activation(_) => "activation",
            Op::Add => "add",
            Op::AttentionScores { .. } => "attention_scores",
            Op::Softmax { .. } => "softmax",
            Op::AttentionContext { .. } => "attention_context",
            Op::Attention { .. } => "attention",
            Op::SelectToken { .. } => "select_token",
            Op::MeanTokens { .. } => "mean_tokens",
            Op::SwiGlu => "swiglu",
            Op::TokenEmbedding => "token_embedding",
            Op::SelectEndToken { .. } => "select_end_token",
            Op::L2Normalize => "l2_normalize",
            Op::Rope { .. } => "rope",
        }
    }

    /// The output shape, or an error saying which input does not fit.
    pub fn output_shape(&self, inputs: &[&[usize]]) -> Result<Vec<usize>, String> {
        let arity = |n: usize| {
            if inputs.len() == n {
                Ok(())
            } else {
                Err(format!(
                    "{} takes {n} inputs, got {}",
                    self.kind_name(),
                    inputs.len()
                ))
            }
        };
        let last = |s: &[usize]| s.last().copied().unwrap_or(0);
        match self {
            Op::PatchEmbed {
                patch,
                prefix_tokens,
            } => {
                arity(4 + (*prefix_tokens > 0) as usize)?;
                let (px, w, b, pos) = (inputs[0], inputs[1], inputs[2], inputs[3]);
                let [batch, c, h, wd] = px else {
                    return Err(format!("pixels must be [B,C,H,W], got {px:?}"));
                };
                // A remainder is dropped, as a strided Conv2d drops it.
                if *patch == 0 || h < patch || wd < patch {
                    return Err(format!("image {h}x{wd} holds no {patch}x{patch} patch"));
                }
                let hidden = w.first().copied().unwrap_or(0);
                let tokens = prefix_tokens + (h / patch) * (wd / patch);
                if w != [hidden, c * patch * patch] {
                    return Err(format!(
                        "patch weight must be [{hidden}, {}], got {w:?}",
                        c * patch * patch
                    ));
                }
                if b != [hidden] || pos != [tokens, hidden] {
                    return Err(format!(
                        "patch bias/pos must be [{hidden}]/[{tokens}, {hidden}], got {b:?}/{pos:?}"
                    ));
                }
                if *prefix_tokens > 0 && inputs[4] != [*prefix_tokens, hidden] {
                    return Err(format!(
                        "prefix tokens must be [{prefix_tokens}, {hidden}], got {:?}",
                        inputs[4]
                    ));
                }
                Ok(vec![*batch, tokens, hidden])
            }
            Op::LayerNorm { .. } => {
                arity(3)?;
                let c = last(inputs[0]);
                if inputs[1] != [c] || inputs[2] != [c] {
                    return Err(format!(
                        "layernorm over {c} columns got gamma {:?}, beta {:?}",
                        inputs[1], inputs[2]
                    ));
                }
                Ok(inputs[0].to_vec())
            }
            Op::RmsNorm { .. } => {
                arity(2)?;
                let c = last(inputs[0]);
                if inputs[1] != [c] {
                    return Err(format!(
                        "rmsnorm over {c} columns got weight {:?}",
                        inputs[1]
                    ));
                }
                Ok(inputs[0].to_vec())
            }
            Op::Linear { epilogue } => {
                arity(2 + epilogue.bias as usize + epilogue.residual as usize)?;
                let (x, w) = (inputs[0], inputs[1]);
                let k = last(x);
                if w.len() != 2 || w[1] != k {
                    return Err(format!("linear weight must be [N, {k}], got {w:?}"));
                }
                let mut out = x.to_vec();
                *out.last_mut().ok_or("linear input has no dimensions")? = w[0];
                let mut next = 2;
                if epilogue.bias {
                    if inputs[next] != [w[0]] {
                        return Err(format!(
                            "linear bias must be [{}], got {:?}",
                            w[0], inputs[next]
                        ));
                    }
                    next += 1;
                }
                if epilogue.residual && inputs[next] != out.as_slice() {
                    return Err(format!(
                        "linear residual must be {out:?}, got {:?}",
                        inputs[next]
                    ));
                }
                Ok(out)
            }
            Op::Fp8Linear { epilogue, io } => {
                let slots = crate::fp8::Fp8Slots::of(*epilogue, *io);
                arity(slots.count)?;
                let (w, scales) = (inputs[1], inputs[2]);
                if w.len() != 2 || scales != [w[0]] {
                    return Err(format!(
                        "fp8_linear scales must be [N] for a weight [N, K], got {scales:?} for \
                         {w:?}"
                    ));
                }
                for slot in [slots.input_scale, slots.output_scale]
                    .into_iter()
                    .flatten()
                {
                    if inputs[slot] != [1] {
                        return Err(format!(
                            "fp8_linear static scales are [1], got {:?}",
                            inputs[slot]
                        ));
                    }
                }
                if io.e4m3_output && epilogue.residual {
                    return Err("an fp8_linear writing e4m3 adds no residual".into());
                }
                let linear_inputs: Vec<&[usize]> = [Some(0), Some(1), slots.bias, slots.residual]
                    .into_iter()
                    .flatten()
                    .map(|slot| inputs[slot])
                    .collect();
                Op::Linear {
                    epilogue: *epilogue,
                }
                .output_shape(&linear_inputs)
            }
            Op::LayerNormE4m3 { eps } => {
                arity(4)?;
                if inputs[3] != [1] {
                    return Err(format!(
                        "layernorm_e4m3's static scale is [1], got {:?}",
                        inputs[3]
                    ));
                }
                Op::LayerNorm { eps: *eps }.output_shape(&inputs[..3])
            }
            Op::LayerNormLinear { .. } => {
                arity(4)?;
                let (w, sums) = (inputs[1], inputs[3]);
                if w.len() != 2 || sums != [w[0]] {
                    return Err(format!(
                        "layernorm_linear column sums must be [N] for a weight [N, K], got \
                         {sums:?} for {w:?}"
                    ));
                }
                Op::Linear {
                    epilogue: Epilogue {
                        bias: true,
                        ..Epilogue::NONE
                    },
                }
                .output_shape(&inputs[..3])
            }
            Op::Activation(_) | Op::Softmax { causal: false } | Op::L2Normalize => {
                arity(1)?;
                Ok(inputs[0].to_vec())
            }
            Op::Softmax { causal: true } => {
                arity(1)?;
                let s = inputs[0];
                if s.len() < 2 || s[s.len() - 1] != s[s.len() - 2] {
                    return Err(format!(
                        "a causal softmax needs [.., T, T] scores, got {s:?}"
                    ));
                }
                Ok(s.to_vec())
            }
            Op::TokenEmbedding => {
                arity(3)?;
                let (ids, table, positions) = (inputs[0], inputs[1], inputs[2]);
                let [b, t] = ids else {
                    return Err(format!("token ids must be [B, T], got {ids:?}"));
                };
                let [_, c] = table else {
                    return Err(format!("the token table must be [V, C], got {table:?}"));
                };
                if positions.len() != 2 || positions[1] != *c || positions[0] < *t {
                    return Err(format!(
                        "the position table must be [P >= {t}, {c}], got {positions:?}"
                    ));
                }
                Ok(vec![*b, *t, *c])
            }
            Op::SelectEndToken { .. } => {
                arity(2)?;
                let [b, t, c] = inputs[0] else {
                    return Err(format!(
                        "select_end_token needs [B,T,C], got {:?}",
                        inputs[0]
                    ));
                };
                if inputs[1] != [*b, *t] {
                    return Err(format!(
                        "select_end_token needs ids [{b}, {t}], got {:?}",
                        inputs[1]
                    ));
                }
                Ok(vec![*b, *c])
            }
            Op::Add => {
                arity(2)?;
                if inputs[0] != inputs[1] {
                    return Err(format!("add of {:?} and {:?}", inputs[0], inputs[1]));
                }
                Ok(inputs[0].to_vec())
            }
            Op::AttentionScores {
                heads,
                head_dim,
                q,
                k,
                key_padding,
                ..
            } => {
                arity(2 + 2 * *key_padding as usize)?;
                for (src, slice) in [(inputs[0], q), (inputs[1], k)] {
                    check_head_source(src, *heads, *head_dim, slice)?;
                }
                let (q_batch, batch) = (inputs[0][0], inputs[1][0]);
                if q_batch != batch && q_batch != 1 {
                    return Err(format!(
                        "Q {:?} and K {:?} differ in batch (a Q of batch 1 is shared)",
                        inputs[0], inputs[1]
                    ));
                }
                let keys = inputs[1][1];
                if *key_padding {
                    check_key_padding(inputs[2], inputs[3], batch, keys)?;
                }
                Ok(vec![batch, *heads, inputs[0][1], keys])
            }
            Op::AttentionContext { heads, head_dim, v } => {
                arity(2)?;
                check_head_source(inputs[1], *heads, *head_dim, v)?;
                let (b, tk) = (inputs[1][0], inputs[1][1]);
                let p = inputs[0];
                if p.len() != 4 || p[0] != b || p[1] != *heads || p[3] != tk {
                    return Err(format!(
                        "attention probabilities must be [{b}, {heads}, Tq, {tk}], got {p:?}"
                    ));
                }
                Ok(vec![b, p[2], heads * head_dim])
            }
            Op::Attention {
                heads,
                head_dim,
                q,
                k,
                v,
                causal,
                key_padding,
                ..
            } => {
                arity(3 + *key_padding as usize)?;
                for (src, slice) in [(inputs[0], q), (inputs[1], k), (inputs[2], v)] {
                    check_head_source(src, *heads, *head_dim, slice)?;
                }
                if inputs[1][..2] != inputs[0][..2] || inputs[2][..2] != inputs[0][..2] {
                    return Err(format!(
                        "Q {:?}, K {:?} and V {:?} differ in batch or tokens",
                        inputs[0], inputs[1], inputs[2]
                    ));
                }
                if *key_padding {
                    if *causal {
                        return Err("attention with both the causal mask and the key padding \
                                    mask is not built (no model asks for both)"
                            .into());
                    }
                    if inputs[3] != [inputs[0][0]] {
                        return Err(format!(
                            "key lengths must be [{}], got {:?}",
                            inputs[0][0], inputs[3]
                        ));
                    }
                }
                Ok(vec![inputs[0][0], inputs[0][1], heads * head_dim])
            }
            Op::SelectToken { index } => {
                arity(1)?;
                let [b, t, c] = inputs[0] else {
                    return Err(format!("select_token needs [B,T,C], got {:?}", inputs[0]));
                };
                if index >= t {
                    return Err(format!("token {index} of {t}"));
                }
                Ok(vec![*b, *c])
            }
            Op::MeanTokens { start } => {
                arity(1)?;
                let [b, t, c] = inputs[0] else {
                    return Err(format!("mean_tokens needs [B,T,C], got {:?}", inputs[0]));
                };
                if start >= t {
                    return Err(format!("mean of tokens {start}.. of {t}"));
                }
                Ok(vec![*b, *c])
            }
            Op::Rope {
                heads,
                head_dim,
                grid,
            } => {
                arity(1)?;
                let [_, t, c] = inputs[0] else {
                    return Err(format!("rope needs [B,T,C], got {:?}", inputs[0]));
                };
                if *c != heads * head_dim {
                    return Err(format!(
                        "rope over {heads} heads of {head_dim} needs {} columns, got {c}",
                        heads * head_dim
                    ));
                }
                grid.check(*t, *head_dim)?;
                Ok(inputs[0].to_vec())
            }
            Op::SwiGlu => {
                arity(1)?;
                let width = last(inputs[0]);
                if width == 0 || width % 2 != 0 {
                    return Err(format!(
                        "swiglu needs an even last dimension, got {:?}",
                        inputs[0]
                    ));
                }
                let mut out = inputs[0].to_vec();
                *out.last_mut().expect("checked above") = width / 2;
                Ok(out)
            }
        }
    }
}

/// The two forms of a key padding mask an `AttentionScores` takes: the additive mask
/// [B, Tk] and the key lengths [B].
fn check_key_padding(
    mask: &[usize],
    lengths: &[usize],
    batch: usize,
    keys: usize,
) -> Result<(), String> {
    if mask != [batch, keys] || lengths != [batch] {
        return Err(format!(
            "the key padding mask must be [{batch}, {keys}] with lengths [{batch}], got \
             {mask:?} and {lengths:?}"
        ));
    }
    Ok(())
}

fn check_head_source(
    shape: &[usize],
    heads: usize,
    head_dim: usize,
    slice: &HeadSlice,
) -> Result<(), String> {
    if shape.len() != 3 {
        return Err(format!(
            "attention operand must be [B,T,width], got {shape:?}"
        ));
    }
    if slice.column_offset + heads * head_dim > shape[2] {
        return Err(format!(
            "{heads} heads of {head_dim} at column {} overrun width {}",
            slice.column_offset, shape[2]
        ));
    }
    Ok(())
}

#[derive(Clone, Debug)]
pub struct Node {
    /// A readable name, HF-like ("layer.3.attention.query"), used by profiles and errors.
    pub name: String,
    pub op: Op,
    pub inputs: Vec<ValueId>,
    pub output: ValueId,
}

#[derive(Clone, Debug, Default)]
pub struct Graph {
    pub values: Vec<Value>,
    pub nodes: Vec<Node>,
    /// Named results the caller reads back; they stay live to the end of a run.
    pub outputs: Vec<(String, ValueId)>,
}

impl Graph {
    pub fn add_input(&mut self, name: &str, shape: &[usize]) -> ValueId {
        self.push_value(name, shape.to_vec(), ValueKind::Input)
    }

    pub fn add_param(&mut self, name: &str, shape: &[usize]) -> ValueId {
        self.push_value(
            name,
            shape.to_vec(),
            ValueKind::Param(ParamSource::Tensor(name.into())),
        )
    }

    /// A parameter assembled as `source` says, named after its key.
    pub fn add_param_source(&mut self, source: ParamSource, shape: &[usize]) -> ValueId {
        let name = source.key();
        self.push_value(&name, shape.to_vec(), ValueKind::Param(source))
    }

    /// Appends a node after checking its inputs' shapes; returns its output value.
    pub fn add_node(
        &mut self,
        name: &str,
        op: Op,
        inputs: &[ValueId],
    ) -> Result<ValueId, RuntimeError> {
        let shapes: Vec<&[usize]> = inputs
            .iter()
            .map(|&v| self.values[v].shape.as_slice())
            .collect();
        let shape = op
            .output_shape(&shapes)
            .map_err(|e| RuntimeError::Graph(format!("node {name}: {e}")))?;
        let output = self.push_value(name, shape, ValueKind::Activation);
        self.nodes.push(Node {
            name: name.into(),
            op,
            inputs: inputs.to_vec(),
            output,
        });
        Ok(output)
    }

    pub fn mark_output(&mut self, name: &str, value: ValueId) {
        self.outputs.push((name.into(), value));
    }

    pub fn inputs(&self) -> impl Iterator<Item = ValueId> + '_ {
        (0..self.values.len()).filter(|&v| self.values[v].kind == ValueKind::Input)
    }

    /// For each value, the nodes that read it.
    pub fn consumers(&self) -> Vec<Vec<NodeId>> {
        let mut users = vec![Vec::new(); self.values.len()];
        for (id, node) in self.nodes.iter().enumerate() {
            for &v in &node.inputs {
                if !users[v].contains(&id) {
                    users[v].push(id);
                }
            }
        }
        users
    }

    pub fn is_output(&self, value: ValueId) -> bool {
        self.outputs.iter().any(|(_, v)| *v == value)
    }

    /// Checks the invariants passes and the planner rely on: inputs defined before use,
    /// each activation produced by exactly one node, shapes consistent.
    pub fn validate(&self) -> Result<(), RuntimeError> {
        let mut defined: Vec<bool> = self
            .values
            .iter()
            .map(|v| v.kind != ValueKind::Activation)
            .collect();
        for node in &self.nodes {
            for &v in &node.inputs {
                if !defined[v] {
                    return Err(RuntimeError::Graph(format!(
                        "node {} reads {} before it is produced",
                        node.name, self.values[v].name
                    )));
                }
            }
            if defined[node.output] {
                return Err(RuntimeError::Graph(format!(
                    "value {} is produced twice",
                    self.values[node.output].name
                )));
            }
            let shapes: Vec<&[usize]> = node
                .inputs
                .iter()
                .map(|&v| self.values[v].shape.as_slice())
                .collect();
            let shape = node
                .op
                .output_shape(&shapes)
                .map_err(|e| RuntimeError::Graph(format!("node {}: {e}", node.name)))?;
            if shape != self.values[node.output].shape {
                return Err(RuntimeError::Graph(format!(
                    "node {}: output shape drifted",
                    node.name
                )));
            }
            defined[node.output] = true;
        }
        for (name, v) in &self.outputs {
            if !defined[*v] {
                return Err(RuntimeError::Graph(format!(
                    "output {name} is never produced"
                )));
            }
        }
        Ok(())
    }

    fn push_value(&mut self, name: &str, shape: Vec<usize>, kind: ValueKind) -> ValueId {
        self.values.push(Value {
            name: name.into(),
            shape,
            kind,
            row_statistics: false,
        });
        self.values.len() - 1
    }
}
