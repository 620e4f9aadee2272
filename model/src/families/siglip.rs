//! SigLIP, Google's image-text model trained with a sigmoid loss: the vision tower of
//! `SiglipVisionModel`, `SiglipModel` and `SiglipForImageClassification`
//! (`google/siglip-base-patch16-224`, `google/siglip-so400m-patch14-384` and their kin). No
//! CLS token; CLIP's encoder and tensor names, a layernorm on every token after it, an
//! attention-pooling head, a classifier on the mean of every token. Its text tower
//! (`SiglipTextModel`, and in `SiglipModel`) tokenizes with SentencePiece Unigram, attends
//! over the whole sequence padded to its context, pools the last token through a `head`; each
//! label's score is a sigmoid.

use crate::config::{Fields, ModelConfig};
use crate::family::Family;
use crate::rules::{
    AttentionPoolNames, AttentionPoolProjections, ClassifierInput, ClassifierRules, ConfigFormat,
    Defaults, EmbeddingLayout, FamilyRules, ModelType, PooledToken, PoolerKind, QkvLayout,
    ScoreKind, SpecialTokens, TensorRules, TextConfigFormat, TextDefaults, TextProjection,
    TextTensorRules, TextTowerRules, TransformersConfig, TransformersTextConfig,
};

pub(crate) const SIGLIP: FamilyRules = FamilyRules {
    name: "SigLIP",
    config: ConfigFormat::Transformers(TransformersConfig {
        model_types: &[
            ModelType {
                name: "siglip",
                vision_config: true,
            },
            ModelType {
                name: "siglip_vision_model",
                vision_config: false,
            },
        ],
        defaults: Defaults {
            patch_size: 16,
            hidden_act: "gelu_pytorch_tanh",
            layer_norm_eps: 1e-6,
        },
        has_qkv_bias: false,
        read_mlp: crate::rules::read_standard_mlp,
        read_own_fields,
    }),
    tensors: TensorRules {
        prefixes: &["vision_model.", ""],
        patch_weight: "embeddings.patch_embedding.weight",
        patch_bias: Some("embeddings.patch_embedding.bias"),
        class_token: None,
        distillation_token: None,
        register_tokens: None,
        positions: Some("embeddings.position_embedding.weight"),
        embedding_layout: EmbeddingLayout::Unbatched,
        pre_norm: None,
        final_norm: Some("post_layernorm"),
        layers: "encoder.layers.",
        layer_part: super::clip::layer_part,
        qkv: QkvLayout::Separate,
    },
    pooler: Some(PoolerKind::AttentionPool(AttentionPoolNames {
        base: "head",
        query_token: "probe",
        projections: AttentionPoolProjections::Stacked("attention.in_proj"),
        output: "attention.out_proj",
        norm: "layernorm",
        up: "mlp.fc1",
        down: "mlp.fc2",
    })),
    image_projection: None,
    classifier: ClassifierRules {
        name: "classifier",
        input: ClassifierInput::TokenMean,
        with_teacher: None,
    },
    position_resampling: crate::rules::bicubic,
};

pub(crate) const SIGLIP_TEXT: TextTowerRules = TextTowerRules {
    family: Family::Siglip,
    config: TextConfigFormat::Transformers(TransformersTextConfig {
        dual_model_type: "siglip",
        text_model_type: "siglip_text_model",
        defaults: TextDefaults {
            vocab_size: 32000,
            hidden_size: 768,
            num_attention_heads: 12,
            intermediate_size: 3072,
            hidden_act: "gelu_pytorch_tanh",
            layer_norm_eps: 1e-6,
            max_position_embeddings: 64,
        },
        read_projection_size: read_text_projection_size,
    }),
    // transformers' `CLIPTextEmbeddings` and `final_layer_norm`, under `text_model.`.
    tensors: TextTensorRules {
        prefixes: &["text_model."],
        token_embedding: "embeddings.token_embedding.weight",
        positions: "embeddings.position_embedding.weight",
        final_norm: "final_layer_norm",
    },
    causal: false,
    vocabularies: &[
        // SentencePiece's (SiglipTokenizer), in tokenizer.json or spiece.model.
        SpecialTokens {
            end: "</s>",
            default_pad: "</s>",
        },
        // Gemma's (GemmaTokenizer), which SigLIP 2's fixed-resolution checkpoints ship.
        SpecialTokens {
            end: "<eos>",
            default_pad: "<pad>",
        },
    ],
    pad_id: None,
    // Released SigLIP checkpoints ship SentencePiece's model file alone.
    reads_spiece_model: true,
    pooled_token: PooledToken::LastToken,
    projection: TextProjection::Head("head"),
    scores: ScoreKind::Sigmoid,
};

/// Whether the attention-pooling head is part of the model (`vision_use_head`, true by
/// default).
fn read_own_fields(
    _model_type: &str,
    fields: &Fields,
    config: &mut ModelConfig,
) -> Result<(), String> {
    config.vision_use_head = fields.flag("vision_use_head", true)?;
    Ok(())
}

/// The width of the text embeddings: the head's output, `projection_size` (the tower's
/// `hidden_size` by default).
fn read_text_projection_size(
    text: &Fields,
    _top: &Fields,
    _dual_tower: bool,
    hidden_size: usize,
) -> Result<usize, String> {
    text.int("projection_size", Some(hidden_size))
}
