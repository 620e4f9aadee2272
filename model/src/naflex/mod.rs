//! SigLIP 2's NaFlex vision tower (`Siglip2VisionModel`, the vision side of `Siglip2Model`;
//! `model_type` `siglip2_vision_model` or `siglip2`): each image is resized to its own patch
//! grid under `max_num_patches`, flattened into `[max_num_patches, 3·p·p]` patch rows (zero
//! rows past its own), embedded by a Linear, plus the position embeddings resized to its grid
//! ([`positions::resize_positions`], on the host: a function of the grid and the learned table
//! only), then SigLIP's encoder with the key padding mask in every attention and the masked
//! attention-pooling head (the probe attends to valid patches only).
//!
//! The graph's inputs, per batch of B images padded to N patches:
//! - `pixel_values` [B, N, 3·p·p]: the patch rows as transformers' processor lays them out,
//! - `positions` [B, N, D]: [`NaflexVisionModel::positions`] of the spatial shapes,
//! - `key_mask` [B, N] and `key_lengths` [B]: `vitrt_runtime::KeyPadding` of the
//!   `pixel_attention_mask`.
//!
//! Where the backend's fused attention does not take the head dim (so400m's 72) but takes the
//! next multiple of 16, the encoder's heads are padded with zeros to it, as the fixed-size
//! families' are (`encoder::padded_head_dim`), so that the masked attention stays fused.
//!
//! Its outputs are transformers': `last_hidden_state` (after `post_layernorm`, every position,
//! padded ones included, as transformers returns them), `pooler_output` (the head's vector) and
//! `hidden_states.{i}`.

pub mod positions;
pub mod synthetic;

use crate::config::parse_activation;
use crate::encoder::{
    attention, encoder_block, layer_norm, linear, make_param, padded_attention_keys,
    padded_head_dim, stacked_rows, KeyPaddingInputs, LayerKeys, LinearKeys, MlpKeys, NormKeys,
    ParamTable,
};
use crate::error::ModelError;
use crate::model::ZeroShotLabels;
use crate::runner::ForwardTimes;
use crate::text::ScoreRule;
use serde_json::{Map, Value};
use std::path::Path;
use vitrt_runtime::executor::ParamStore;
use vitrt_runtime::passes::{self, Fusion};
use vitrt_runtime::{Activation, Graph, KeyPadding, Op, RuntimeError};
use vitrt_weights::Checkpoint;

/// The vision config a NaFlex checkpoint's `config.json` holds (its `vision_config` for
/// `Siglip2Model`), with transformers' `Siglip2VisionConfig` defaults.
#[derive(Clone, Debug, PartialEq)]
pub struct NaflexConfig {
    pub hidden_size: usize,
    pub intermediate_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    pub num_channels: usize,
    pub patch_size: usize,
    /// The learned position table's rows: a square grid of `num_patches.sqrt()` a side.
    pub num_patches: usize,
    pub hidden_act: Activation,
    pub layer_norm_eps: f32,
    /// The attention-pooling head is part of the model (`vision_use_head`, true by default).
    pub vision_use_head: bool,
}

impl NaflexConfig {
    /// Reads `config.json`'s text; a config of another `model_type` is refused.
    pub fn from_json_str(text: &str) -> Result<NaflexConfig, String> {
        let root: Value = serde_json::from_str(text).map_err(|e| format!("not valid JSON: {e}"))?;
        let root = root.as_object().ok_or("config.json is not a JSON object")?;
        let fields = match root.get("model_type").and_then(Value::as_str) {
            Some("siglip2_vision_model") => root,
            Some("siglip2") => match root.get("vision_config") {
                Some(Value::Object(vision)) => vision,
                _ => return Err("a siglip2 config needs its \"vision_config\" object".into()),
            },
            other => {
                return Err(format!(
                    "model_type {other:?} is not SigLIP 2's NaFlex (siglip2, \
                     siglip2_vision_model)"
                ))
            }
        };
        let size = |key: &str, default: usize| field_usize(fields, key, default);
        let act = fields
            .get("hidden_act")
            .and_then(Value::as_str)
            .unwrap_or("gelu_pytorch_tanh");
        let config = NaflexConfig {
            hidden_size: size("hidden_size", 768)?,
            intermediate_size: size("intermediate_size", 3072)?,
            num_hidden_layers: size("num_hidden_layers", 12)?,
            num_attention_heads: size("num_attention_heads", 12)?,
            num_channels: size("num_channels", 3)?,
            patch_size: size("patch_size", 16)?,
            num_patches: size("num_patches", 256)?,
            hidden_act: parse_activation(act)
                .ok_or_else(|| format!("hidden_act \"{act}\" is not an activation vitrt has"))?,
            layer_norm_eps: match fields.get("layer_norm_eps") {
                None => 1e-6,
                Some(v) => v.as_f64().ok_or("layer_norm_eps must be a number")? as f32,
            },
            vision_use_head: match fields.get("vision_use_head") {
                None => true,
                Some(v) => v.as_bool().ok_or("vision_use_head must be true or false")?,
            },
        };
        let side = config.position_side();
        if side * side != config.num_patches || config.num_patches == 0 {
            return Err(format!(
                "num_patches {} is not a square grid of positions",
                config.num_patches
            ));
        }
        if config.num_attention_heads == 0
            || !config
                .hidden_size
                .is_multiple_of(config.num_attention_heads)
        {
            return Err(format!(
                "hidden_size {} is no whole number of {} heads",
                config.hidden_size, config.num_attention_heads
            ));
        }
        Ok(config)
    }

    /// The side of the learned position grid.
    pub fn position_side(&self) -> usize {
        (self.num_patches as f64).sqrt().round() as usize
    }

    /// Values per patch row: `num_channels · patch_size²`.
    pub fn patch_values(&self) -> usize {
        self.num_channels * self.patch_size * self.patch_size
    }

    fn head_dim(&self) -> usize {
        self.hidden_size / self.num_attention_heads
    }

    fn encoder(&self) -> crate::config::EncoderConfig {
        crate::config::EncoderConfig {
            hidden_size: self.hidden_size,
            num_hidden_layers: self.num_hidden_layers,
            num_attention_heads: self.num_attention_heads,
            intermediate_size: self.intermediate_size,
            hidden_act: self.hidden_act,
            layer_norm_eps: self.layer_norm_eps,
            norm: crate::config::Norm::Layer,
            qkv_bias: true,
            key_bias: true,
            attention_output_bias: true,
            mlp_bias: true,
            layer_scale: false,
            mlp: crate::config::Mlp::Standard,
            causal: false,
        }
    }
}

fn field_usize(fields: &Map<String, Value>, key: &str, default: usize) -> Result<usize, String> {
    match fields.get(key) {
        None => Ok(default),
        Some(v) => v
            .as_u64()
            .map(|n| n as usize)
            .ok_or_else(|| format!("{key} must be a whole number, got {v}")),
    }
}

/// The masked attention-pooling head's keys.
#[derive(Clone, Debug)]
struct HeadKeys {
    probe: String,
    query: LinearKeys,
    key: LinearKeys,
    value: LinearKeys,
    output: LinearKeys,
    norm: NormKeys,
    up: LinearKeys,
    down: LinearKeys,
}

pub struct NaflexVisionModel {
    pub config: NaflexConfig,
    checkpoint: Checkpoint,
    patch: LinearKeys,
    position_table: String,
    layers: Vec<LayerKeys>,
    final_norm: NormKeys,
    head: Option<HeadKeys>,
    params: crate::encoder::ParamMap,
    /// The labels zero-shot scores are computed against, when set, and their parameters'
    /// keys (one pair per label set, so a backend never reuses another set's upload).
    zero_shot: Option<(ZeroShotLabels, String, String)>,
}

/// The outputs a NaFlex graph can give: the vision tower's, then `image_embeds` (the pooled
/// output: Siglip2Model has no projection) and, with zero-shot labels set, the scores.
pub const OUTPUTS: [&str; 2] = ["last_hidden_state", "pooler_output"];
pub const ZERO_SHOT_OUTPUTS: [&str; 3] = ["image_embeds", "logits_per_image", "probs"];
/// Each image's mean over its own patches of `last_hidden_state` [B, D] (padded positions left
/// out), as `Siglip2ForImageClassification` pools before its classifier: `vitrt embed --pool
/// mean`. Made by [`NaflexRunner::run`] from `last_hidden_state`.
pub const PATCH_MEAN: &str = "patch_mean";

/// [`PATCH_MEAN`] of `last_hidden_state` [B, N, D] for images of `lengths` valid patches.
fn patch_mean(
    last_hidden_state: &vitrt_runtime::HostTensor,
    lengths: &[usize],
) -> vitrt_runtime::HostTensor {
    let (batch, tokens, width) = (
        last_hidden_state.shape[0],
        last_hidden_state.shape[1],
        last_hidden_state.shape[2],
    );
    let mut data = Vec::with_capacity(batch * width);
    for (item, &len) in lengths.iter().enumerate().take(batch) {
        let rows = &last_hidden_state.data[item * tokens * width..][..len * width];
        let mut sum = vec![0f64; width];
        for row in rows.chunks(width) {
            sum.iter_mut().zip(row).for_each(|(s, &v)| *s += v as f64);
        }
        data.extend(sum.iter().map(|s| (s / len.max(1) as f64) as f32));
    }
    vitrt_runtime::HostTensor {
        name: PATCH_MEAN.to_string(),
        shape: vec![batch, width],
        data,
    }
}

/// Numbers label sets (see `zero_shot`).
static LABEL_SETS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

impl NaflexVisionModel {
    /// Reads `config.json` and the safetensors weights of a model folder and checks every
    /// tensor the graph reads (the vision tower under `vision_model.` in a `Siglip2Model`).
    pub fn load(dir: &Path) -> Result<NaflexVisionModel, ModelError> {
        let path = dir.join("config.json");
        let text = std::fs::read_to_string(&path).map_err(|e| ModelError::Config {
            path: path.display().to_string(),
            message: e.to_string(),
        })?;
        let config = NaflexConfig::from_json_str(&text).map_err(|message| ModelError::Config {
            path: path.display().to_string(),
            message,
        })?;
        let checkpoint = Checkpoint::open(dir)?;
        NaflexVisionModel::from_parts(config, checkpoint)
    }

    pub fn from_parts(
        config: NaflexConfig,
        checkpoint: Checkpoint,
    ) -> Result<NaflexVisionModel, ModelError> {
        let prefix = ["vision_model.", ""]
            .into_iter()
            .find(|p| {
                checkpoint
                    .shape(&format!("{p}embeddings.patch_embedding.weight"))
                    .is_some()
            })
            .ok_or_else(|| {
                ModelError::Checkpoint(format!(
                    "no SigLIP 2 NaFlex weights in {}: no tensor \
                     embeddings.patch_embedding.weight (under vision_model. or none)",
                    checkpoint.location().display()
                ))
            })?;
        let layers_found = (0..)
            .take_while(|l| {
                checkpoint
                    .shape(&format!("{prefix}encoder.layers.{l}.layer_norm1.weight"))
                    .is_some()
            })
            .count();
        if layers_found != config.num_hidden_layers {
            return Err(ModelError::Checkpoint(format!(
                "{} holds {layers_found} encoder layers but the config's num_hidden_layers is \
                 {}",
                checkpoint.location().display(),
                config.num_hidden_layers
            )));
        }
        let (d, inner) = (config.hidden_size, config.intermediate_size);
        let mut t = ParamTable {
            checkpoint: &checkpoint,
            params: Default::default(),
        };
        let name = |s: &str| format!("{prefix}{s}");
        let patch = t.linear(
            &name("embeddings.patch_embedding"),
            d,
            config.patch_values(),
            true,
        )?;
        let position_table = t.tensor(
            &name("embeddings.position_embedding.weight"),
            &[config.num_patches, d],
            &[config.num_patches, d],
        )?;
        let encoder = config.encoder();
        let mut layers = Vec::new();
        for l in 0..config.num_hidden_layers {
            let part = |s: &str| name(&format!("encoder.layers.{l}.{s}"));
            let query = t.linear(&part("self_attn.q_proj"), d, d, true)?;
            let key = t.linear(&part("self_attn.k_proj"), d, d, true)?;
            let value = t.linear(&part("self_attn.v_proj"), d, d, true)?;
            let attention_output = t.linear(&part("self_attn.out_proj"), d, d, true)?;
            // so400m's head dim 72 as 80 where the fused attention takes 80 but not 72.
            let padded =
                padded_attention_keys(&mut t, &encoder, [&query, &key, &value], &attention_output);
            layers.push(LayerKeys {
                norm_before: t.norm(&part("layer_norm1"), d)?,
                query,
                key,
                value,
                attention_output,
                padded,
                norm_after: t.norm(&part("layer_norm2"), d)?,
                mlp: MlpKeys::Standard {
                    up: t.linear(&part("mlp.fc1"), inner, d, true)?,
                    down: t.linear(&part("mlp.fc2"), d, inner, true)?,
                },
            });
        }
        let final_norm = t.norm(&name("post_layernorm"), d)?;
        let head = if config.vision_use_head {
            let part = |s: &str| name(&format!("head.{s}"));
            let (w, b) = (
                part("attention.in_proj_weight"),
                part("attention.in_proj_bias"),
            );
            let [query, key, value] = stacked_rows(&mut t, (&w, Some(&b)), d, ["q", "k", "v"])?;
            Some(HeadKeys {
                probe: t.tensor(&part("probe"), &[1, 1, d], &[1, 1, d])?,
                query,
                key,
                value,
                output: t.linear(&part("attention.out_proj"), d, d, true)?,
                norm: t.norm(&part("layernorm"), d)?,
                up: t.linear(&part("mlp.fc1"), inner, d, true)?,
                down: t.linear(&part("mlp.fc2"), d, inner, true)?,
            })
        } else {
            None
        };
        let params = t.params;
        Ok(NaflexVisionModel {
            config,
            checkpoint,
            patch,
            position_table,
            layers,
            final_norm,
            head,
            params,
            zero_shot: None,
        })
    }

    /// Scores images against `labels` (the text tower's unit embeddings and its score rule)
    /// from now on: `logits_per_image` (`exp(logit_scale)` times the cosine plus
    /// `logit_bias`, as Siglip2Model) and `probs` (each label's sigmoid) become available.
    pub fn set_zero_shot(&mut self, labels: ZeroShotLabels) -> Result<(), ModelError> {
        if self.head.is_none() {
            return Err(ModelError::Usage(
                "this SigLIP 2 checkpoint has no pooling head, so no image embeddings to score \
                 labels against"
                    .into(),
            ));
        }
        let width = self.config.hidden_size;
        if labels.labels == 0 || labels.text_embeds.len() != labels.labels * width {
            return Err(ModelError::Usage(format!(
                "{} zero-shot labels need {} text embedding values of width {width}, got {}",
                labels.labels,
                labels.labels * width,
                labels.text_embeds.len()
            )));
        }
        let set = LABEL_SETS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.zero_shot = Some((
            labels,
            format!("naflex.zero_shot[{set}].text_embeds"),
            format!("naflex.zero_shot[{set}].logit_bias"),
        ));
        Ok(())
    }

    /// The width of `image_embeds` (the pooled output), when the checkpoint has the head.
    pub fn image_embeds_width(&self) -> Option<usize> {
        self.head.as_ref().map(|_| self.config.hidden_size)
    }

    /// The position embeddings of a batch: each image's `(rows, cols)` patch grid
    /// (transformers' `spatial_shapes`) resized from the learned table and padded to
    /// `max_patches`: `[B, max_patches, D]`.
    pub fn positions(
        &self,
        spatial_shapes: &[(usize, usize)],
        max_patches: usize,
    ) -> Result<Vec<f32>, ModelError> {
        let table = self.checkpoint.load_f32(&self.position_table)?;
        let mut out =
            Vec::with_capacity(spatial_shapes.len() * max_patches * self.config.hidden_size);
        for &grid in spatial_shapes {
            out.extend(positions::resize_positions(
                &table,
                self.config.position_side(),
                self.config.hidden_size,
                grid,
                max_patches,
            )?);
        }
        Ok(out)
    }

    /// The graph of a batch of `batch` images padded to `max_patches`: its outputs `outputs`
    /// (of [`OUTPUTS`]) and, with `hidden_states`, `hidden_states.{i}`.
    pub fn build_graph(
        &self,
        batch: usize,
        max_patches: usize,
        outputs: &[&str],
        hidden_states: bool,
        fusion: Fusion,
        supports: passes::Supports,
    ) -> Result<Graph, ModelError> {
        let c = &self.config;
        let d = c.hidden_size;
        let mut g = Graph::default();
        let pixels = g.add_input("pixel_values", &[batch, max_patches, c.patch_values()]);
        let positions = g.add_input("positions", &[batch, max_patches, d]);
        let padding = KeyPaddingInputs {
            mask: g.add_input("key_mask", &[batch, max_patches]),
            lengths: g.add_input("key_lengths", &[batch]),
        };
        // patch rows · Wᵀ + b + the resized positions, one matmul.
        let w = g.add_param(&self.patch.weight, &[d, c.patch_values()]);
        let b = g.add_param(self.patch.bias.as_deref().unwrap_or_default(), &[d]);
        let embedding = Op::Linear {
            epilogue: vitrt_runtime::Epilogue {
                bias: true,
                residual: true,
                ..vitrt_runtime::Epilogue::NONE
            },
        };
        let mut x = g.add_node("embeddings", embedding, &[pixels, w, b, positions])?;
        if hidden_states {
            g.mark_output("hidden_states.0", x);
        }
        let encoder = c.encoder();
        // Heads padded with zeros to the fused attention's next head dim where it takes that
        // one and not the model's (the same outputs; see encoder::padded_head_dim).
        let pad = padded_head_dim(
            &self.layers,
            &encoder,
            (batch, max_patches),
            (false, true),
            fusion,
            supports,
        )
        .is_some();
        for (l, layer) in self.layers.iter().enumerate() {
            let name = format!("layer.{l}");
            x = encoder_block(&mut g, &encoder, &name, layer, x, pad, None, Some(padding))?;
            if hidden_states {
                g.mark_output(&format!("hidden_states.{}", l + 1), x);
            }
        }
        // Named as the fixed-size models' final norm is, so that profiles of the two line up.
        let last = layer_norm(&mut g, "layernorm", x, &self.final_norm, c.layer_norm_eps)?;
        // The pooled vector and the zero-shot logits, each built once.
        let mut pooled = None;
        let mut logits = None;
        for &output in outputs {
            let mut pool = |g: &mut Graph| -> Result<vitrt_runtime::ValueId, ModelError> {
                if let Some(v) = pooled {
                    return Ok(v);
                }
                let head = self.head.as_ref().ok_or_else(|| {
                    ModelError::Usage(format!(
                        "this SigLIP 2 checkpoint has no pooling head (vision_use_head is \
                         false): no {output}"
                    ))
                })?;
                Ok(*pooled.insert(self.pool(g, last, head, padding)?))
            };
            let value = match output {
                "last_hidden_state" => last,
                "pooler_output" | "image_embeds" => pool(&mut g)?,
                "logits_per_image" | "probs" => {
                    let scores = match logits {
                        Some(v) => v,
                        None => {
                            let embeds = pool(&mut g)?;
                            *logits.insert(self.zero_shot_logits(&mut g, embeds)?)
                        }
                    };
                    if output == "probs" {
                        g.add_node(
                            "zero_shot.probs",
                            Op::Activation(Activation::Sigmoid),
                            &[scores],
                        )?
                    } else {
                        scores
                    }
                }
                other => {
                    return Err(ModelError::Usage(format!(
                        "SigLIP 2 NaFlex has no output {other} (it has: {}, {})",
                        OUTPUTS.join(", "),
                        ZERO_SHOT_OUTPUTS.join(", ")
                    )))
                }
            };
            g.mark_output(output, value);
        }
        passes::apply_for(&mut g, fusion, supports).map_err(ModelError::Usage)?;
        g.validate()?;
        Ok(g)
    }

    /// `logits_per_image`: the image embeddings normalised, against the labels' unit text
    /// embeddings, times `exp(logit_scale)` (the matmul's alpha), plus `logit_bias`.
    fn zero_shot_logits(
        &self,
        g: &mut Graph,
        embeds: vitrt_runtime::ValueId,
    ) -> Result<vitrt_runtime::ValueId, ModelError> {
        let (labels, text_key, bias_key) = self.zero_shot.as_ref().ok_or_else(|| {
            ModelError::Usage("no zero-shot labels were set: no logits_per_image or probs".into())
        })?;
        let ScoreRule::Sigmoid { .. } = labels.rule else {
            return Err(ModelError::Usage(
                "SigLIP 2 scores labels with a sigmoid; these labels were encoded for a softmax"
                    .into(),
            ));
        };
        let width = self.config.hidden_size;
        let normed = g.add_node(
            "zero_shot.image_embeds_normalized",
            Op::L2Normalize,
            &[embeds],
        )?;
        let text = g.add_param(text_key, &[labels.labels, width]);
        let bias = g.add_param(bias_key, &[labels.labels]);
        let epilogue = vitrt_runtime::Epilogue {
            alpha: labels.rule.scale(),
            bias: true,
            ..vitrt_runtime::Epilogue::NONE
        };
        Ok(g.add_node(
            "zero_shot.logits",
            Op::Linear { epilogue },
            &[normed, text, bias],
        )?)
    }

    /// The attention-pooling head: the probe attends to each image's valid patches only.
    fn pool(
        &self,
        g: &mut Graph,
        last: vitrt_runtime::ValueId,
        head: &HeadKeys,
        padding: KeyPaddingInputs,
    ) -> Result<vitrt_runtime::ValueId, ModelError> {
        let c = &self.config;
        let d = c.hidden_size;
        let probe = g.add_param(&head.probe, &[1, 1, d]);
        let q = linear(g, "head.attention.query", probe, &head.query)?;
        let k = linear(g, "head.attention.key", last, &head.key)?;
        let v = linear(g, "head.attention.value", last, &head.value)?;
        let heads = (c.num_attention_heads, c.head_dim());
        let scale = 1.0 / (c.head_dim() as f32).sqrt();
        let context = attention(
            g,
            "head.attention",
            (q, k, v),
            heads,
            scale,
            false,
            Some(padding),
        )?;
        let attended = linear(g, "head.attention.output", context, &head.output)?;
        let normed = layer_norm(g, "head.layernorm", attended, &head.norm, c.layer_norm_eps)?;
        let up = linear(g, "head.mlp.fc1", normed, &head.up)?;
        let act = g.add_node("head.mlp.act", Op::Activation(c.hidden_act), &[up])?;
        let down = linear(g, "head.mlp.fc2", act, &head.down)?;
        let pooled = g.add_node("head.residual", Op::Add, &[down, attended])?;
        Ok(g.add_node("head.pooled", Op::SelectToken { index: 0 }, &[pooled])?)
    }
}

/// The graph inputs of a batch as transformers' processor gives it: `pixel_values`
/// `[B, N, 3·p·p]`, `pixel_attention_mask` `[B, N]` (1 for a real patch) and `spatial_shapes`
/// `[B, 2]`. Checks that each mask's length is its grid's size.
pub struct NaflexInputs {
    pub batch: usize,
    pub max_patches: usize,
    pub pixel_values: Vec<f32>,
    pub positions: Vec<f32>,
    pub key_padding: KeyPadding,
}

impl NaflexInputs {
    pub fn new(
        model: &NaflexVisionModel,
        pixel_values: Vec<f32>,
        pixel_attention_mask: &[f32],
        spatial_shapes: &[(usize, usize)],
    ) -> Result<NaflexInputs, ModelError> {
        let batch = spatial_shapes.len();
        let per_row = model.config.patch_values();
        if batch == 0 || !pixel_values.len().is_multiple_of(batch * per_row) {
            return Err(ModelError::Usage(format!(
                "pixel_values of {} values is no [{batch}, N, {per_row}] batch",
                pixel_values.len()
            )));
        }
        let max_patches = pixel_values.len() / (batch * per_row);
        if pixel_attention_mask.len() != batch * max_patches {
            return Err(ModelError::Usage(format!(
                "pixel_attention_mask has {} values, not [{batch}, {max_patches}]",
                pixel_attention_mask.len()
            )));
        }
        let key_padding = KeyPadding::from_mask(pixel_attention_mask, max_patches)?;
        for (item, (&len, &(rows, cols))) in
            key_padding.lengths().iter().zip(spatial_shapes).enumerate()
        {
            if len != rows * cols {
                return Err(ModelError::Usage(format!(
                    "image {item}: pixel_attention_mask marks {len} patches but its spatial \
                     shape is {rows} x {cols}"
                )));
            }
        }
        let positions = model.positions(spatial_shapes, max_patches)?;
        Ok(NaflexInputs {
            batch,
            max_patches,
            pixel_values,
            positions,
            key_padding,
        })
    }

    /// The graph's named inputs, in the executor's form.
    pub fn named(&self) -> [(&'static str, Vec<f32>); 4] {
        [
            ("pixel_values", self.pixel_values.clone()),
            ("positions", self.positions.clone()),
            ("key_mask", self.key_padding.mask_input()),
            ("key_lengths", self.key_padding.lengths_input()),
        ]
    }
}

impl ParamStore for NaflexVisionModel {
    fn load(&self, name: &str, shape: &[usize]) -> Result<Vec<f32>, RuntimeError> {
        if let Some((labels, text_key, bias_key)) = &self.zero_shot {
            if name == text_key {
                return Ok(labels.text_embeds.clone());
            }
            if name == bias_key {
                return Ok(vec![labels.rule.bias(); labels.labels]);
            }
        }
        make_param(&self.params, &self.checkpoint, name, shape)
    }
}

/// Whether a model folder's `config.json` is SigLIP 2 NaFlex's (`model_type` `siglip2` or
/// `siglip2_vision_model`); false when it cannot be read (the usual loader then says why).
pub fn is_naflex_dir(dir: &Path) -> bool {
    std::fs::read_to_string(dir.join("config.json"))
        .ok()
        .and_then(|text| serde_json::from_str::<Value>(&text).ok())
        .and_then(|root| root.get("model_type")?.as_str().map(str::to_owned))
        .is_some_and(|t| t == "siglip2" || t == "siglip2_vision_model")
}

impl NaflexInputs {
    /// The batch of a tensor file holding what transformers' processor returns:
    /// `pixel_values` [B, N, 3·p·p], `pixel_attention_mask` [B, N] and `spatial_shapes`
    /// [B, 2] (whole numbers stored as f32).
    pub fn from_tensors(
        model: &NaflexVisionModel,
        tensors: &[vitrt_runtime::HostTensor],
    ) -> Result<NaflexInputs, ModelError> {
        let find = |name: &str| {
            tensors.iter().find(|t| t.name == name).ok_or_else(|| {
                ModelError::Usage(format!(
                    "no tensor named {name}: SigLIP 2 NaFlex takes pixel_values [B, N, {}], \
                     pixel_attention_mask [B, N] and spatial_shapes [B, 2], as \
                     Siglip2ImageProcessor returns them",
                    model.config.patch_values()
                ))
            })
        };
        let (pixels, mask, shapes) = (
            find("pixel_values")?,
            find("pixel_attention_mask")?,
            find("spatial_shapes")?,
        );
        let per_row = model.config.patch_values();
        let [batch, patches, width] = pixels.shape[..] else {
            return Err(ModelError::Usage(format!(
                "pixel_values has shape {:?}; SigLIP 2 NaFlex takes [B, N, {per_row}] patch rows",
                pixels.shape
            )));
        };
        if width != per_row || batch == 0 || patches == 0 {
            return Err(ModelError::Usage(format!(
                "pixel_values has shape {:?}; this model takes [B, N, {per_row}] ({} channels \
                 of {p} x {p} patches)",
                pixels.shape,
                model.config.num_channels,
                p = model.config.patch_size
            )));
        }
        if mask.shape != [batch, patches] || shapes.shape != [batch, 2] {
            return Err(ModelError::Usage(format!(
                "pixel_attention_mask {:?} and spatial_shapes {:?} do not fit pixel_values \
                 {:?} (they must be [{batch}, {patches}] and [{batch}, 2])",
                mask.shape, shapes.shape, pixels.shape
            )));
        }
        if let Some(at) = pixels.data.iter().position(|v| !v.is_finite()) {
            return Err(ModelError::Usage(format!(
                "pixel_values[{}, {}, {}] is {}; the model takes finite values only",
                at / (patches * width),
                at / width % patches,
                at % width,
                pixels.data[at]
            )));
        }
        let mut grid = Vec::with_capacity(batch);
        for (item, pair) in shapes.data.chunks(2).enumerate() {
            let whole = |v: f32| (v >= 1.0 && v.fract() == 0.0).then_some(v as usize);
            match (whole(pair[0]), whole(pair[1])) {
                (Some(rows), Some(cols)) => grid.push((rows, cols)),
                _ => {
                    return Err(ModelError::Usage(format!(
                        "spatial_shapes[{item}] is {pair:?}; each image's patch grid is two \
                         whole numbers of at least 1"
                    )))
                }
            }
        }
        NaflexInputs::new(model, pixels.data.clone(), &mask.data, &grid)
    }
}

/// What a NaFlex graph and its plan depend on beyond the model: the batch's shape, the
/// outputs asked for, and the zero-shot label set (its parameters' key).
#[derive(Clone, Debug, PartialEq, Eq)]
struct PlanKey {
    batch: usize,
    max_patches: usize,
    outputs: Vec<String>,
    hidden_states: bool,
    labels: Option<String>,
}

/// How many planned graphs a runner keeps by default: a run over files has a full batch shape
/// and a last, shorter one; a Python caller a few batch sizes. A server, whose batches take
/// every size up to its largest, keeps more ([`NaflexRunner::with_plans_kept`]).
const PLANS_KEPT: usize = 4;

/// A NaFlex model on a backend: builds and plans the graph of each batch shape it is given
/// (batch and padded length) and runs it. The last [`PLANS_KEPT`] plans are kept, so a batch
/// of a shape seen before runs on its executor as it is (and, on CUDA, replays its captured
/// graph).
pub struct NaflexRunner {
    pub model: NaflexVisionModel,
    backend: Box<dyn vitrt_runtime::Backend>,
    fusion: Fusion,
    precision: vitrt_runtime::Precision,
    /// Planned graphs, the most recently used last.
    plans: Vec<(PlanKey, vitrt_runtime::Executor)>,
    plans_built: usize,
    /// Whether kept plans capture their forward pass and replay it where the backend can
    /// (CUDA graphs; see `Executor::with_graph_replay`).
    graph_replay: bool,
    /// How many plans are kept, the least recently used dropped past it.
    plans_kept: usize,
}

impl NaflexRunner {
    /// The residual stream as `Precision::default_for` the backend's dtype says.
    pub fn new(
        model: NaflexVisionModel,
        backend: Box<dyn vitrt_runtime::Backend>,
        fusion: Fusion,
    ) -> NaflexRunner {
        let precision = vitrt_runtime::Precision::default_for(backend.dtype());
        NaflexRunner {
            model,
            backend,
            fusion,
            precision,
            plans: Vec::new(),
            plans_built: 0,
            graph_replay: true,
            plans_kept: PLANS_KEPT,
        }
    }

    /// The residual stream stored as `residual` (f32 or the backend's dtype).
    pub fn with_residual(
        mut self,
        residual: vitrt_runtime::DType,
    ) -> Result<NaflexRunner, ModelError> {
        self.precision = vitrt_runtime::Precision::new(self.backend.dtype(), residual)?;
        self.plans.clear();
        Ok(self)
    }

    /// Captures each kept plan's forward pass and replays it where the backend can (on, the
    /// default), or runs every pass node by node (off: nothing but the backend's own state is
    /// tied to the thread that runs it, as the Python `Model` needs with `cuda_graphs=False`).
    pub fn with_graph_replay(mut self, enabled: bool) -> NaflexRunner {
        self.graph_replay = enabled;
        self.plans.clear();
        self
    }

    /// Keeps the plans of the last `kept` batch shapes (at least one) instead of
    /// [`PLANS_KEPT`]: a server's batches take every size up to its largest, each shape's
    /// plan built once (the backend's arena is one, shared by all of them).
    pub fn with_plans_kept(mut self, kept: usize) -> NaflexRunner {
        self.plans_kept = kept.max(1);
        let excess = self.plans.len().saturating_sub(self.plans_kept);
        self.plans.drain(..excess);
        self
    }

    /// Chooses the kernels' programs whatever the batch size, so that an image's outputs are
    /// the same bytes whatever else shares its batch (see `Backend::set_batch_invariant`), as
    /// `Runner::with_batch_invariance` does.
    pub fn with_batch_invariance(mut self, on: bool) -> NaflexRunner {
        self.backend.set_batch_invariant(on);
        self.plans.clear();
        self
    }

    pub fn backend(&self) -> &dyn vitrt_runtime::Backend {
        self.backend.as_ref()
    }

    /// The model's `outputs` (of [`OUTPUTS`]; every one the checkpoint has when empty) for a
    /// batch, and with `hidden_states` every `hidden_states.{i}`.
    ///
    /// [`PATCH_MEAN`] is computed here from `last_hidden_state` (each image's mean over its
    /// own patches), which the graph then gives too, and is returned last.
    pub fn run(
        &mut self,
        inputs: &NaflexInputs,
        outputs: &[&str],
        hidden_states: bool,
    ) -> Result<Vec<vitrt_runtime::HostTensor>, ModelError> {
        let defaults = self.default_outputs();
        let outputs = if outputs.is_empty() {
            &defaults[..]
        } else {
            outputs
        };
        if !outputs.contains(&PATCH_MEAN) {
            return self.run_graph(inputs, outputs, hidden_states);
        }
        let mut graph_outputs: Vec<&str> = outputs
            .iter()
            .copied()
            .filter(|&o| o != PATCH_MEAN)
            .collect();
        let hidden_asked = graph_outputs.contains(&"last_hidden_state");
        if !hidden_asked {
            graph_outputs.push("last_hidden_state");
        }
        let mut ran = self.run_graph(inputs, &graph_outputs, hidden_states)?;
        let at = ran
            .iter()
            .position(|t| t.name == "last_hidden_state")
            .ok_or_else(|| ModelError::Usage("the graph gave no last_hidden_state".into()))?;
        let mean = patch_mean(&ran[at], inputs.key_padding.lengths());
        if !hidden_asked {
            ran.remove(at);
        }
        ran.push(mean);
        Ok(ran)
    }

    fn run_graph(
        &mut self,
        inputs: &NaflexInputs,
        outputs: &[&str],
        hidden_states: bool,
    ) -> Result<Vec<vitrt_runtime::HostTensor>, ModelError> {
        let key = PlanKey {
            batch: inputs.batch,
            max_patches: inputs.max_patches,
            outputs: outputs.iter().map(|o| o.to_string()).collect(),
            hidden_states,
            labels: self.model.zero_shot.as_ref().map(|(_, key, _)| key.clone()),
        };
        let at = match self.plans.iter().position(|(k, _)| *k == key) {
            Some(at) => {
                // Most recently used last.
                let entry = self.plans.remove(at);
                self.plans.push(entry);
                self.plans.len() - 1
            }
            None => {
                let backend = &self.backend;
                let graph = self.model.build_graph(
                    inputs.batch,
                    inputs.max_patches,
                    outputs,
                    hidden_states,
                    self.fusion,
                    &|op, shapes| backend.supports(op, shapes),
                )?;
                let executor = vitrt_runtime::Executor::new(
                    graph,
                    self.backend.as_mut(),
                    &self.model,
                    self.precision,
                )?
                .with_graph_replay(self.graph_replay);
                self.plans_built += 1;
                if self.plans.len() >= self.plans_kept {
                    self.plans.remove(0);
                }
                self.plans.push((key, executor));
                self.plans.len() - 1
            }
        };
        let named = inputs.named();
        let feeds: Vec<(&str, &[f32])> = named.iter().map(|(n, v)| (*n, v.as_slice())).collect();
        Ok(self.plans[at].1.run(self.backend.as_mut(), &feeds)?)
    }

    /// How many graphs this runner has built and planned so far (one per batch shape, output
    /// set and label set it has not kept a plan of).
    pub fn plans_built(&self) -> usize {
        self.plans_built
    }

    /// Times forward passes of a batch giving `outputs` (when empty, the default ones: the last
    /// hidden state and, with the head, the pooled vector): `warmup` untimed (at least one; the pass after the first
    /// captures the CUDA graph where the backend can), then `reps` each timed alone on the
    /// device (CUDA events; host time on the CPU), the inputs written once beforehand, as
    /// `Runner::time_forward` times the fixed-size families; `per_node` puts a mark after
    /// every node too (each node's time, the pass run node by node), as `vitrt profile` asks.
    /// Also returns the executor timed: its graph and plan say what each node was.
    pub fn time_forward(
        &mut self,
        inputs: &NaflexInputs,
        outputs: &[&str],
        (warmup, reps): (usize, usize),
        per_node: bool,
        progress: &mut dyn FnMut(),
    ) -> Result<(ForwardTimes, vitrt_runtime::Executor), ModelError> {
        let defaults = self.default_outputs();
        let outputs = if outputs.is_empty() {
            &defaults[..]
        } else {
            outputs
        };
        let backend = &self.backend;
        let graph = self.model.build_graph(
            inputs.batch,
            inputs.max_patches,
            outputs,
            false,
            self.fusion,
            &|op, shapes| backend.supports(op, shapes),
        )?;
        let executor = vitrt_runtime::Executor::new(
            graph,
            self.backend.as_mut(),
            &self.model,
            self.precision,
        )?;
        let backend = self.backend.as_mut();
        let named = inputs.named();
        let feeds: Vec<(&str, &[f32])> = named.iter().map(|(n, v)| (*n, v.as_slice())).collect();
        executor.write_inputs(backend, &feeds)?;
        let marks = if per_node {
            vitrt_runtime::Marks::EachNode
        } else {
            vitrt_runtime::Marks::Forward
        };
        let mut times = ForwardTimes::default();
        for rep in 0..warmup.max(1) + reps {
            executor.launch(backend, marks)?;
            // Reading the marks waits for the pass.
            let intervals = backend.take_mark_intervals()?;
            if rep >= warmup.max(1) {
                times.forward_ms.push(intervals.iter().sum());
                if per_node {
                    times.node_ms.push(intervals);
                }
            }
            progress();
        }
        Ok((times, executor))
    }

    /// What a run asking for no output in particular gives: transformers' vision outputs
    /// (`last_hidden_state`, and `pooler_output` with the head), and the scores once labels
    /// are set (`image_embeds` is `pooler_output` again, given when asked for).
    pub fn default_outputs(&self) -> Vec<&'static str> {
        self.available_outputs()
            .into_iter()
            .filter(|&o| o != "image_embeds" && o != PATCH_MEAN)
            .collect()
    }

    /// The text tower's embeddings of `n` token sequences `ids` on this runner's backend (for
    /// zero-shot labels), its parameters dropped from the backend afterwards.
    pub fn embed_texts(
        &mut self,
        tower: &crate::text::TextModel,
        ids: &[u32],
        n: usize,
        normalize: bool,
    ) -> Result<Vec<f32>, ModelError> {
        let held = self.backend.param_count();
        let embeds = crate::text::embed_texts(
            tower,
            self.backend.as_mut(),
            self.fusion,
            self.precision,
            ids,
            n,
            normalize,
        );
        self.backend.truncate_params(held);
        embeds
    }

    /// Scores images against `labels` from now on ([`NaflexVisionModel::set_zero_shot`]).
    pub fn set_zero_shot(&mut self, labels: ZeroShotLabels) -> Result<(), ModelError> {
        self.model.set_zero_shot(labels)?;
        // The plans of earlier label sets read parameters no later graph reads.
        self.plans.retain(|(key, _)| key.labels.is_none());
        Ok(())
    }

    /// Every output this checkpoint gives: `last_hidden_state`; `pooler_output` and
    /// `image_embeds` with its head; `logits_per_image` and `probs` once labels are set;
    /// [`PATCH_MEAN`].
    pub fn available_outputs(&self) -> Vec<&'static str> {
        let head = self.model.config.vision_use_head;
        let labels = self.model.zero_shot.is_some();
        OUTPUTS
            .into_iter()
            .chain(ZERO_SHOT_OUTPUTS)
            .filter(|&o| match o {
                "last_hidden_state" => true,
                "pooler_output" | "image_embeds" => head,
                _ => labels,
            })
            .chain([PATCH_MEAN])
            .collect()
    }
}
