//! The rule types a family's file in `families/` is written in: what sets one family's
//! checkpoints apart ([`FamilyRules`]: how its config is read, its tensor names, pooler,
//! projection and classifier) and its text tower's ([`TextTowerRules`]); the rules several
//! families share ([`bicubic`], [`read_standard_mlp`], [`no_own_fields`]); and the kinds the
//! rules name that the graph builder also speaks of ([`ClassifierInput`], [`LayerPart`]).
//! Nothing here consults the registry.

use crate::config::{Fields, Mlp, ModelConfig};
use crate::family::Family;
use crate::positions::Resampling;
use crate::text::TextConfig;
use serde_json::{Map, Value};

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
    /// timm: the pooler's output (its `global_pool`, then `fc_norm`): what timm calls the
    /// pre-logits features.
    PooledOutput,
}

/// One weight of an encoder block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LayerPart {
    NormBefore,
    Query,
    Key,
    Value,
    AttentionOutput,
    /// DINOv2's `layer_scale1.lambda1`.
    AttentionScale,
    NormAfter,
    /// fc1 (Standard MLP).
    Up,
    /// fc2 (Standard MLP).
    Down,
    /// SwiGLU: the gate and up projections stored as one `weights_in` tensor (the Hub's
    /// spelling) ...
    SwiGluIn,
    /// ... or as two (transformers 5's).
    SwiGluGate,
    SwiGluUp,
    /// SwiGLU's down projection.
    SwiGluOut,
    /// DINOv2's `layer_scale2.lambda1`.
    MlpScale,
}

/// What sets one family's checkpoints apart from the others'.
pub(crate) struct FamilyRules {
    /// The family's name in messages.
    pub name: &'static str,
    /// How its `config.json` is recognised and read.
    pub config: ConfigFormat,
    /// Where its encoder's tensors live and what they are called.
    pub tensors: TensorRules,
    /// The pooler (`pooler_output`), if the family has one.
    pub pooler: Option<PoolerKind>,
    /// The projection of the pooled output into the embedding space shared with the text
    /// tower, used where the checkpoint holds it.
    pub image_projection: Option<ImageProjection>,
    /// The classifier of its `*ForImageClassification` checkpoints.
    pub classifier: ClassifierRules,
    /// How the position table is resampled for another image size.
    pub position_resampling: fn(&ModelConfig) -> Resampling,
}

/// The bias-free projection of a vision tower's pooled output into the embedding space it
/// shares with the text tower.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ImageProjection {
    /// An `nn.Linear` beside the towers' tensors, `{name}.weight` `[embed, hidden]` (CLIP's
    /// `visual_projection`).
    Linear(&'static str),
    /// A bare `[hidden, embed]` matrix under the encoder's prefix, applied as `x @ W`
    /// (open_clip's `visual.proj`): the transpose of a linear layer's weight.
    Matrix(&'static str),
}

/// How a family's `config.json` is recognised and read.
pub(crate) enum ConfigFormat {
    /// transformers' `config.json`, read by the shared reader (`ModelConfig::from_json_str`).
    Transformers(TransformersConfig),
    /// A format of the family's own (timm's, open_clip's).
    Own(OwnConfig),
}

/// How the shared reader reads a family's transformers config.
pub(crate) struct TransformersConfig {
    /// The `model_type`s the family answers to, in the order messages list them.
    pub model_types: &'static [ModelType],
    /// The values of the fields a config may leave out (transformers' configuration classes).
    pub defaults: Defaults,
    /// Whether the configs have `qkv_bias` (CLIP's and SigLIP's always have the biases and no
    /// such field).
    pub has_qkv_bias: bool,
    pub read_mlp: ReadMlp,
    /// Reads the fields only this family's configs have into the config read so far, given
    /// its `model_type`; they are read after every shared field.
    pub read_own_fields: fn(&str, &Fields, &mut ModelConfig) -> Result<(), String>,
}

/// Reads the MLP's width and kind from a config's fields, given `hidden_size`.
pub(crate) type ReadMlp = fn(&Fields, usize) -> Result<(usize, Mlp), String>;

/// A `model_type` a family answers to.
pub(crate) struct ModelType {
    pub name: &'static str,
    /// The config is a dual tower's: the vision tower's fields are under `vision_config`.
    pub vision_config: bool,
}

/// A family's defaults for the fields its config may leave out.
pub(crate) struct Defaults {
    pub patch_size: usize,
    pub hidden_act: &'static str,
    pub layer_norm_eps: f64,
}

/// A family's own config format: a JSON file named `file` in the checkpoint's folder
/// (`config.json` for timm, `open_clip_config.json` for open_clip), without `model_type`,
/// that has `key`, read whole by `read`.
pub(crate) struct OwnConfig {
    pub file: &'static str,
    pub key: &'static str,
    pub read: fn(&Map<String, Value>) -> Result<ModelConfig, String>,
}

/// The names of a family's encoder tensors, each after the prefix the checkpoint's class puts
/// in front of them.
pub(crate) struct TensorRules {
    /// The prefixes its checkpoints' classes put in front of every encoder tensor, tried in
    /// order ("" for the bare models).
    pub prefixes: &'static [&'static str],
    /// The patch projection (a Conv2d's weight) and its bias, if it has one.
    pub patch_weight: &'static str,
    pub patch_bias: Option<&'static str>,
    /// The tokens ahead of the patches, in this order: the CLS token, DeiT's distillation
    /// token, DINOv2's register tokens (as many as the config says).
    pub class_token: Option<&'static str>,
    pub distillation_token: Option<&'static str>,
    pub register_tokens: Option<&'static str>,
    /// The position table; none where positions enter otherwise (DINOv3's rotary
    /// embeddings).
    pub positions: Option<&'static str>,
    /// How the CLS token and the position table are stored.
    pub embedding_layout: EmbeddingLayout,
    /// The layernorm between the embeddings and the encoder.
    pub pre_norm: Option<&'static str>,
    /// The layernorm after the encoder, applied to every token.
    pub final_norm: Option<&'static str>,
    /// What every encoder block's tensor names start with, before the block's index.
    pub layers: &'static str,
    /// The candidate names of a block's weight after `{layers}{index}.` (`.weight`, `.bias`
    /// or a bare parameter is up to the caller), most common first; none for a part the
    /// family's blocks lack.
    pub layer_part: fn(LayerPart) -> &'static [&'static str],
    /// How Q, K and V are stored.
    pub qkv: QkvLayout,
}

/// How a family's blocks store their Q, K and V projections (the name is the layer part's
/// `Query`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum QkvLayout {
    /// Three linear layers, `{name}.weight` and `{name}.bias` each.
    Separate,
    /// One linear layer of 3·hidden rows, Q, K and V in that order: `{name}.weight` and
    /// `{name}.bias` (timm's `attn.qkv`).
    Stacked,
    /// torch's `nn.MultiheadAttention`: the same rows as `{name}_weight` and `{name}_bias`
    /// (open_clip's `attn.in_proj`).
    InProjection,
}

/// How the CLS token and the position table are stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum EmbeddingLayout {
    /// `[1, 1, hidden]` and `[1, T, hidden]`.
    Batched,
    /// `[hidden]` and `[T, hidden]`: a bare vector and an embedding table.
    Unbatched,
}

/// What a family's pooler computes; the tensor names are under the encoder's prefix.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PoolerKind {
    /// activation(dense(CLS token)), where the checkpoint holds the dense layer.
    Dense(&'static str),
    /// The CLS token of the final hidden states.
    ClassToken,
    /// The CLS token through a layernorm of its own.
    NormedClassToken(&'static str),
    /// An attention-pooling head (a learned query attends over the tokens, then a residual
    /// MLP), where the config uses it (`vision_use_head`) and the checkpoint holds it.
    AttentionPool(AttentionPoolNames),
    /// AIMv2's attention-pooling head, where the config uses it (`use_head`, read into
    /// `ModelConfig::vision_use_head`): a learned query token, as it is (no projection),
    /// attends over every token through key and value projections, then an output
    /// projection; no norm or MLP after it.
    QueryTokenAttention(QueryTokenAttentionNames),
    /// The pool the config names (`ModelConfig::global_pool`: the CLS token, a mean of tokens
    /// or an attention-pooling head of these names), then a layernorm of this name where the
    /// config has one (`ModelConfig::fc_norm`): timm's `global_pool` and `fc_norm`.
    GlobalPool {
        /// None: the family has no attention-pooling head (open_clip's pools are the CLS
        /// token and the patch mean).
        attention_pool: Option<AttentionPoolNames>,
        fc_norm: &'static str,
    },
}

/// The tensor names of an attention-pooling head, each after `base.` (itself under the
/// encoder's prefix).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct AttentionPoolNames {
    pub base: &'static str,
    /// The learned query, `[1, 1, hidden]`.
    pub query_token: &'static str,
    pub projections: AttentionPoolProjections,
    /// The attention's output projection.
    pub output: &'static str,
    /// The layernorm before the MLP.
    pub norm: &'static str,
    /// The MLP's two linear layers (`intermediate_size` wide, the encoder's activation).
    pub up: &'static str,
    pub down: &'static str,
}

/// The tensor names of AIMv2's attention-pooling head, each after `base.` (itself under the
/// encoder's prefix).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct QueryTokenAttentionNames {
    pub base: &'static str,
    /// The learned query, `[1, 1, hidden]`.
    pub query_token: &'static str,
    /// The key and value projections (biases with `qkv_bias`).
    pub key: &'static str,
    pub value: &'static str,
    /// The output projection, always with a bias.
    pub output: &'static str,
}

/// How an attention-pooling head stores its Q, K and V projections.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum AttentionPoolProjections {
    /// torch's `MultiheadAttention`: Q, K and V stacked in that order in one in-projection,
    /// `{name}_weight` and `{name}_bias` (SigLIP's `attention.in_proj`).
    Stacked(&'static str),
    /// The query's own projection, then K and V stacked in one (timm's `q` and `kv`).
    QueryAndKeyValue {
        query: &'static str,
        key_value: &'static str,
    },
}

/// A family's classifier.
pub(crate) struct ClassifierRules {
    /// The base name of its tensors, beside the towers' tensors.
    pub name: &'static str,
    /// What it reads.
    pub input: ClassifierInput,
    /// Two heads, on the CLS token and on the distillation token, whose mean is the logits:
    /// their base names, looked for before `name`.
    pub with_teacher: Option<[&'static str; 2]>,
}

/// The plain resampling of the position table: bicubic, as `interpolate_pos_encoding`.
pub(crate) fn bicubic(_: &ModelConfig) -> Resampling {
    Resampling::Bicubic
}

/// The plain MLP: `intermediate_size` wide (3072 when the config leaves it out).
pub(crate) fn read_standard_mlp(
    fields: &Fields,
    _hidden_size: usize,
) -> Result<(usize, Mlp), String> {
    Ok((fields.int("intermediate_size", Some(3072))?, Mlp::Standard))
}

/// For a family whose configs have no fields of their own.
pub(crate) fn no_own_fields(_: &str, _: &Fields, _: &mut ModelConfig) -> Result<(), String> {
    Ok(())
}

/// What sets one family's text tower apart from the others'.
pub(crate) struct TextTowerRules {
    /// The family whose vision tower it pairs with: its name, and its blocks' tensor names.
    pub family: Family,
    /// How the text tower's config is recognised and read.
    pub config: TextConfigFormat,
    /// Where its tensors live besides the blocks.
    pub tensors: TextTensorRules,
    /// Each token attends only to itself and the tokens before it.
    pub causal: bool,
    /// The tokenizers the family's checkpoints ship, told apart by the token that ends every
    /// sequence: the first whose end token is in a checkpoint's vocabulary is its tokenizer.
    pub vocabularies: &'static [SpecialTokens],
    /// The id every sequence is padded with whatever the tokenizer files name as the pad
    /// token (open_clip's tokenizer pads with 0); None: the tokenizer files' pad token.
    pub pad_id: Option<u32>,
    /// A checkpoint without `tokenizer.json` may ship SentencePiece's `spiece.model` instead,
    /// tokenized as transformers' slow tokenizer class does.
    pub reads_spiece_model: bool,
    /// The token whose final hidden state is pooled.
    pub pooled_token: PooledToken,
    pub projection: TextProjection,
    /// How image-text similarities become scores.
    pub scores: ScoreKind,
}

/// The special tokens of one kind of tokenizer a text tower's checkpoints ship.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SpecialTokens {
    /// The token that ends every sequence.
    pub end: &'static str,
    /// The pad token of transformers' tokenizer class for it, used when the checkpoint's
    /// tokenizer files name none.
    pub default_pad: &'static str,
}

/// How a text tower's config is recognised and read.
pub(crate) enum TextConfigFormat {
    /// transformers' `config.json`, read by the shared reader (`TextConfig::from_json_str`).
    Transformers(TransformersTextConfig),
    /// A format of the family's own (open_clip's `model_cfg.text_cfg`), recognised by `key`
    /// and read whole by `read`.
    Own {
        key: &'static str,
        read: ReadTextConfig,
    },
}

/// Reads a text tower's config from a family's own config file, whole.
pub(crate) type ReadTextConfig = fn(&Map<String, Value>) -> Result<TextConfig, String>;

/// How the shared reader reads a family's transformers text config.
pub(crate) struct TransformersTextConfig {
    /// The dual tower's `model_type` (the text tower's fields under `text_config`), and the
    /// text model's own.
    pub dual_model_type: &'static str,
    pub text_model_type: &'static str,
    /// The values of the fields a config may leave out.
    pub defaults: TextDefaults,
    pub read_projection_size: ReadProjectionSize,
}

/// The names of a text tower's tensors besides its blocks (whose names are its family's
/// `TensorRules::layers` and `layer_part`), each after the tower's prefix.
pub(crate) struct TextTensorRules {
    /// The prefixes the tower's tensors may be under, tried in order: the first under which
    /// the token embedding is found is the checkpoint's.
    pub prefixes: &'static [&'static str],
    /// The token embedding table, `[vocab, hidden]`.
    pub token_embedding: &'static str,
    /// The position table, `[context, hidden]`.
    pub positions: &'static str,
    /// The layernorm after the blocks.
    pub final_norm: &'static str,
}

/// A text tower's defaults for the fields its config may leave out.
pub(crate) struct TextDefaults {
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub num_attention_heads: usize,
    pub intermediate_size: usize,
    pub hidden_act: &'static str,
    pub layer_norm_eps: f64,
    pub max_position_embeddings: usize,
}

/// Reads the width of the text embeddings from the text tower's fields and the whole config's,
/// given whether the config is a dual tower's and the tower's `hidden_size`.
pub(crate) type ReadProjectionSize = fn(&Fields, &Fields, bool, usize) -> Result<usize, String>;

/// The token a text tower pools.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PooledToken {
    /// The end-of-text token (`TextConfig::eos_token_id`).
    EndToken,
    /// The first position of the highest id (open_clip's `argmax` pool: the end-of-text
    /// token is the highest id of CLIP's vocabulary).
    HighestId,
    /// The last token of the padded sequence.
    LastToken,
}

/// The linear layer that takes a text tower's pooled token into the embedding space.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TextProjection {
    /// A bias-free layer beside the towers' tensors, after the pooler (`pooler_output` is the
    /// pooled token), used where the checkpoint holds it.
    AfterPooler(&'static str),
    /// A layer with a bias under the text tower's prefix, the pooler's last step
    /// (`pooler_output` is its output).
    Head(&'static str),
    /// A bare `[hidden, embed]` matrix under the text tower's prefix, applied as `x @ W`
    /// after the pooler (open_clip's `text_projection`), used where the checkpoint holds it.
    Matrix(&'static str),
}

/// How a dual tower turns the image-text cosine similarities into scores.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ScoreKind {
    /// A softmax over the labels of `exp(logit_scale) · cos`.
    Softmax,
    /// Each label's own sigmoid of `exp(logit_scale) · cos + logit_bias`.
    Sigmoid,
}
