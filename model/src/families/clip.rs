//! CLIP, OpenAI's contrastive image-text model: the vision tower of `CLIPVisionModel`,
//! `CLIPVisionModelWithProjection`, `CLIPModel` and `CLIPForImageClassification`
//! (`openai/clip-vit-base-patch32` and its kin). A CLS token stored as a bare vector, a
//! layernorm before the encoder and one on the pooled CLS token only, a bias-free projection
//! into the embedding space, a classifier on the patch mean. Its text tower (`CLIPTextModel`,
//! `CLIPTextModelWithProjection`, and in `CLIPModel`) tokenizes with byte-level BPE, attends
//! causally, pools the end-of-text token; its scores are a softmax over the labels.

use crate::config::Fields;
use crate::family::Family;
use crate::rules::{
    ClassifierInput, ClassifierRules, ConfigFormat, Defaults, EmbeddingLayout, FamilyRules,
    ImageProjection, LayerPart, ModelType, PooledToken, PoolerKind, QkvLayout, ScoreKind,
    SpecialTokens, TensorRules, TextConfigFormat, TextDefaults, TextProjection, TextTensorRules,
    TextTowerRules, TransformersConfig, TransformersTextConfig,
};

pub(crate) const CLIP: FamilyRules = FamilyRules {
    name: "CLIP",
    config: ConfigFormat::Transformers(TransformersConfig {
        model_types: &[
            ModelType {
                name: "clip",
                vision_config: true,
            },
            ModelType {
                name: "clip_vision_model",
                vision_config: false,
            },
        ],
        defaults: Defaults {
            patch_size: 32,
            hidden_act: "quick_gelu",
            layer_norm_eps: 1e-5,
        },
        has_qkv_bias: false,
        read_mlp: crate::rules::read_standard_mlp,
        read_own_fields: crate::rules::no_own_fields,
    }),
    tensors: TensorRules {
        prefixes: &["vision_model.", ""],
        patch_weight: "embeddings.patch_embedding.weight",
        patch_bias: None,
        class_token: Some("embeddings.class_embedding"),
        distillation_token: None,
        register_tokens: None,
        positions: Some("embeddings.position_embedding.weight"),
        embedding_layout: EmbeddingLayout::Unbatched,
        // Spelt so in CLIP's checkpoints.
        pre_norm: Some("pre_layrnorm"),
        // CLIP's post_layernorm normalises the pooled token only.
        final_norm: None,
        layers: "encoder.layers.",
        layer_part,
        qkv: QkvLayout::Separate,
    },
    pooler: Some(PoolerKind::NormedClassToken("post_layernorm")),
    image_projection: Some(ImageProjection::Linear("visual_projection")),
    classifier: ClassifierRules {
        name: "classifier",
        input: ClassifierInput::PatchMean,
        with_teacher: None,
    },
    position_resampling: crate::rules::bicubic,
};

pub(crate) const CLIP_TEXT: TextTowerRules = TextTowerRules {
    family: Family::Clip,
    config: TextConfigFormat::Transformers(TransformersTextConfig {
        dual_model_type: "clip",
        text_model_type: "clip_text_model",
        defaults: TextDefaults {
            vocab_size: 49408,
            hidden_size: 512,
            num_attention_heads: 8,
            intermediate_size: 2048,
            hidden_act: "quick_gelu",
            layer_norm_eps: 1e-5,
            max_position_embeddings: 77,
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
    causal: true,
    vocabularies: &[SpecialTokens {
        end: "<|endoftext|>",
        default_pad: "<|endoftext|>",
    }],
    pad_id: None,
    reads_spiece_model: false,
    pooled_token: PooledToken::EndToken,
    projection: TextProjection::AfterPooler("text_projection"),
    scores: ScoreKind::Softmax,
};

/// The names of a CLIP block's weights: CLIP's and SigLIP's, vision and text towers alike.
pub(super) fn layer_part(part: LayerPart) -> &'static [&'static str] {
    use LayerPart::*;
    match part {
        NormBefore => &["layer_norm1"],
        Query => &["self_attn.q_proj"],
        Key => &["self_attn.k_proj"],
        Value => &["self_attn.v_proj"],
        AttentionOutput => &["self_attn.out_proj"],
        NormAfter => &["layer_norm2"],
        Up => &["mlp.fc1"],
        Down => &["mlp.fc2"],
        AttentionScale | MlpScale | SwiGluIn | SwiGluGate | SwiGluUp | SwiGluOut => &[],
    }
}

/// The width of the text projection: the dual config's `projection_dim` (512 by default); a
/// text model with projection keeps its own.
fn read_text_projection_size(
    text: &Fields,
    top: &Fields,
    dual_tower: bool,
    _hidden_size: usize,
) -> Result<usize, String> {
    let own = text.int("projection_dim", Some(512))?;
    if dual_tower {
        top.int("projection_dim", Some(512))
    } else {
        Ok(own)
    }
}
