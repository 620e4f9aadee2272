//! The config of a ViT-family checkpoint as the graph builder reads it ([`ModelConfig`],
//! [`EncoderConfig`], [`Mlp`]), and [`Fields`], the typed reader of a config object's fields
//! that the shared reader and each family's rules read with. What consults the families'
//! registry lives above them: reading `config.json` (`ModelConfig::from_file`,
//! `ModelConfig::from_json_str`) in `read_config.rs`, the sequence a config makes (prefix
//! tokens, sequence length, work per image) in `sequence.rs`.

use serde_json::{Map, Value};
use std::collections::BTreeMap;
use vitrt_runtime::Activation;

pub use crate::family::Family;

/// The MLP between the two layernorms of a block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mlp {
    /// fc1, the activation, fc2.
    Standard,
    /// DINOv2-giant's: one matmul into the gate and the up projection side by side,
    /// silu(gate)·up, then the down projection. `intermediate_size` is the gate's width.
    SwiGlu,
}

/// The normalisation of every norm the encoder and its embeddings have.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Norm {
    /// `(x - mean) / sqrt(var + eps) * gamma + beta` (torch.nn.LayerNorm): every family but
    /// AIMv2.
    Layer,
    /// `x / sqrt(mean(x²) + eps) * weight`, no bias (AIMv2's RMSNorm).
    Rms,
}

/// Where the position embedding comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PositionSource {
    /// The family's table in the checkpoint (`TensorRules::positions`), resampled for the
    /// input size; or none where the family has none (DINOv3's rotary embeddings).
    Checkpoint,
    /// AIMv2's `is_native`: a fixed 2-D sin-cos table computed for the input's patch grid
    /// (`params::sincos_positions`), none in the checkpoint.
    SinCos2d,
}

/// Which of the tokens ahead of the patches have rows in the position table; the others get
/// none (zeros).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PrefixPositions {
    /// The CLS and distillation tokens do, register tokens do not (transformers' families;
    /// DINOv2's registers are inserted after the positions are added).
    AllButRegisters,
    /// Every prefix token, registers included (timm's default, `no_embed_class=False`).
    All,
    /// None: the table covers the patches only (timm's `no_embed_class=True`).
    None,
}

/// How the pooler of a family whose pooler is configured per checkpoint
/// (`PoolerKind::GlobalPool`: timm's `global_pool`) makes one vector of an image's tokens.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GlobalPool {
    /// Token 0, the CLS token (`token`).
    ClassToken,
    /// The mean of the patch tokens, after the prefix tokens (`avg`).
    PatchMean,
    /// The mean of every token, prefix tokens included (`avg` with `pool_include_prefix`).
    TokenMean,
    /// The attention-pooling head: a learned query attends over every token, then a residual
    /// MLP (`map`).
    AttentionPool,
}

/// What the encoder's blocks are made of: the part of a tower's config every family's
/// encoder reads (vision towers through [`ModelConfig::encoder`], text towers through
/// `TextConfig::encoder`).
#[derive(Clone, Debug, PartialEq)]
pub struct EncoderConfig {
    pub hidden_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    pub intermediate_size: usize,
    pub hidden_act: Activation,
    pub layer_norm_eps: f32,
    /// What every norm of the blocks is (LayerNorm, or AIMv2's RMSNorm).
    pub norm: Norm,
    pub qkv_bias: bool,
    /// With `qkv_bias`, whether the key projection has its bias too (DINOv3's has none).
    pub key_bias: bool,
    /// The attention's output projection has a bias (AIMv2's only with `qkv_bias`).
    pub attention_output_bias: bool,
    /// The MLP's projections have biases (AIMv2's only with `mlp_bias`).
    pub mlp_bias: bool,
    /// DINOv2's per-channel scale of each block's attention and MLP outputs.
    pub layer_scale: bool,
    pub mlp: Mlp,
    /// Each token attends only to itself and the tokens before it (CLIP's text tower).
    pub causal: bool,
}

impl EncoderConfig {
    pub fn head_dim(&self) -> usize {
        self.hidden_size / self.num_attention_heads
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct ModelConfig {
    pub family: Family,
    /// `model_type` as the config spells it (for messages).
    pub model_type: String,
    pub hidden_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    pub intermediate_size: usize,
    pub hidden_act: Activation,
    /// The name as the config spells it, for messages.
    pub hidden_act_name: String,
    pub layer_norm_eps: f32,
    /// What every norm is: LayerNorm, or AIMv2's RMSNorm (its eps `rms_norm_eps`, kept in
    /// `layer_norm_eps`).
    pub norm: Norm,
    pub image_size: (usize, usize),
    pub patch_size: usize,
    pub num_channels: usize,
    pub qkv_bias: bool,
    /// With `qkv_bias`, whether the key projection has its bias too (DINOv3's
    /// `key_bias=False`: none).
    pub key_bias: bool,
    /// The attention's output projection has a bias (all but AIMv2 without `qkv_bias`).
    pub attention_output_bias: bool,
    /// The MLP's projections have biases (all but AIMv2 without `mlp_bias`).
    pub mlp_bias: bool,
    /// Where the position embedding comes from.
    pub positions: PositionSource,
    /// AIMv2: the patch embedding goes through the family's `pre_norm` before the positions
    /// are added (elsewhere the pre-norm comes after them).
    pub positions_after_pre_norm: bool,
    /// DINOv3: rotary position embeddings on the patch grid (`rope_theta`) instead of a
    /// position table.
    pub rope_theta: Option<f32>,
    /// DINOv2 with registers: register tokens after the CLS token (no position embedding).
    pub num_register_tokens: usize,
    /// DINOv2: each block's attention and MLP outputs are scaled per channel (`lambda1`).
    pub layer_scale: bool,
    pub mlp: Mlp,
    /// SigLIP: the attention-pooling head is part of the model.
    pub vision_use_head: bool,
    /// The family's CLS token (`TensorRules::class_token`), where it has one, leads the
    /// sequence: always in the families read from transformers' configs; timm's
    /// `class_token=False` drops it.
    pub class_token: bool,
    /// Which prefix tokens have rows in the position table.
    pub prefix_positions: PrefixPositions,
    /// The patch projection's bias (`TensorRules::patch_bias`), where the family names one,
    /// is part of the model (timm's has none with `pre_norm`).
    pub patch_bias: bool,
    /// The family's layernorm before the encoder (`TensorRules::pre_norm`), where it names
    /// one, is part of the model: CLIP's always, timm's with `pre_norm`.
    pub pre_norm: bool,
    /// The family's layernorm after the encoder (`TensorRules::final_norm`), where it names
    /// one, is part of the model: timm has none with `fc_norm` or `final_norm=False`.
    pub final_norm: bool,
    /// How a configured pooler (`PoolerKind::GlobalPool`, timm's) pools the tokens.
    pub global_pool: GlobalPool,
    /// A configured pooler's vector goes through a layernorm of its own (timm's `fc_norm`).
    pub fc_norm: bool,
    /// ViT and DeiT: the pooler's activation.
    pub pooler_act: Activation,
    /// Class index to label, when the config has one.
    pub id2label: BTreeMap<usize, String>,
}

impl ModelConfig {
    pub fn head_dim(&self) -> usize {
        self.hidden_size / self.num_attention_heads
    }

    /// The encoder's part of the config.
    pub fn encoder(&self) -> EncoderConfig {
        EncoderConfig {
            hidden_size: self.hidden_size,
            num_hidden_layers: self.num_hidden_layers,
            num_attention_heads: self.num_attention_heads,
            intermediate_size: self.intermediate_size,
            hidden_act: self.hidden_act,
            layer_norm_eps: self.layer_norm_eps,
            norm: self.norm,
            qkv_bias: self.qkv_bias,
            key_bias: self.key_bias,
            attention_output_bias: self.attention_output_bias,
            mlp_bias: self.mlp_bias,
            layer_scale: self.layer_scale,
            mlp: self.mlp,
            causal: false,
        }
    }

    pub fn num_patches(&self) -> usize {
        (self.image_size.0 / self.patch_size) * (self.image_size.1 / self.patch_size)
    }

    pub fn label(&self, index: usize) -> String {
        self.id2label
            .get(&index)
            .cloned()
            .unwrap_or_else(|| format!("LABEL_{index}"))
    }
}

/// Typed reads of one config object's fields, each missing or null field taking the default
/// given, each malformed one an error naming it.
pub(crate) struct Fields<'a>(pub &'a Map<String, Value>);

impl Fields<'_> {
    pub fn int(&self, key: &str, default: Option<usize>) -> Result<usize, String> {
        match self.0.get(key) {
            None | Some(Value::Null) => default.ok_or(format!("missing \"{key}\"")),
            Some(v) => v
                .as_u64()
                .filter(|&n| n > 0)
                .map(|n| n as usize)
                .ok_or(format!("\"{key}\" must be a positive integer, got {v}")),
        }
    }

    pub fn count(&self, key: &str, default: usize) -> Result<usize, String> {
        match self.0.get(key) {
            None | Some(Value::Null) => Ok(default),
            Some(v) => v
                .as_u64()
                .map(|n| n as usize)
                .ok_or(format!("\"{key}\" must be a non-negative integer, got {v}")),
        }
    }

    pub fn flag(&self, key: &str, default: bool) -> Result<bool, String> {
        match self.0.get(key) {
            None | Some(Value::Null) => Ok(default),
            Some(v) => v
                .as_bool()
                .ok_or(format!("\"{key}\" must be true or false, got {v}")),
        }
    }

    /// An integer or a [height, width] pair (image_size, patch_size).
    pub fn pair(&self, key: &str, default: usize) -> Result<(usize, usize), String> {
        match self.0.get(key) {
            None | Some(Value::Null) => Ok((default, default)),
            Some(Value::Array(a)) if a.len() == 2 => {
                let h = a[0].as_u64().filter(|&n| n > 0);
                let w = a[1].as_u64().filter(|&n| n > 0);
                match (h, w) {
                    (Some(h), Some(w)) => Ok((h as usize, w as usize)),
                    _ => Err(format!(
                        "\"{key}\" must hold positive integers, got {:?}",
                        a
                    )),
                }
            }
            Some(v) => v
                .as_u64()
                .filter(|&n| n > 0)
                .map(|n| (n as usize, n as usize))
                .ok_or(format!("\"{key}\" must be a positive integer, got {v}")),
        }
    }

    pub fn positive_number(&self, key: &str, default: f64) -> Result<f64, String> {
        match self.0.get(key) {
            None | Some(Value::Null) => Ok(default),
            Some(v) => v
                .as_f64()
                .filter(|e| *e > 0.0 && e.is_finite())
                .ok_or(format!("\"{key}\" must be a positive number, got {v}")),
        }
    }

    /// An activation by its name in transformers, and the name.
    pub fn activation(&self, key: &str, default: &str) -> Result<(Activation, String), String> {
        let name = match self.0.get(key) {
            None | Some(Value::Null) => default.to_string(),
            Some(Value::String(s)) => s.clone(),
            Some(v) => return Err(format!("\"{key}\" must be a string, got {v}")),
        };
        let act = parse_activation(&name).ok_or_else(|| {
            format!("unknown {key} \"{name}\" (supported: {SUPPORTED_ACTIVATIONS})")
        })?;
        Ok((act, name))
    }
}

/// The activations HF's ACT2FN maps for ViT-family configs; anything else is refused.
pub fn parse_activation(name: &str) -> Option<Activation> {
    Some(match name {
        "gelu" => Activation::Gelu,
        "gelu_new" | "gelu_fast" | "gelu_pytorch_tanh" => Activation::GeluTanh,
        "quick_gelu" => Activation::QuickGelu,
        "relu" => Activation::Relu,
        "silu" | "swish" => Activation::Silu,
        "tanh" => Activation::Tanh,
        _ => return None,
    })
}

/// The names [`parse_activation`] reads, for messages.
pub const SUPPORTED_ACTIVATIONS: &str =
    "gelu, gelu_new, gelu_fast, gelu_pytorch_tanh, quick_gelu, relu, silu, swish, tanh";
