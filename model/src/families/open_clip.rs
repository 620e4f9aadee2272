//! open_clip's own CLIP checkpoints, as open_clip publishes them on the hub (LAION's, DFN's,
//! MetaCLIP's ViT-B/L/H/bigG): `open_clip_config.json` (`model_cfg` with `embed_dim`,
//! `vision_cfg`, `text_cfg`, `quick_gelu`; `preprocess_cfg`, read by
//! `preprocess/open_clip.rs`) beside `open_clip_model.safetensors`, the state dict of
//! `open_clip.CLIP`. The computation is CLIP's: a CLS token stored as a bare vector, `ln_pre`
//! before the blocks, pre-norm blocks whose Q, K and V are torch's `MultiheadAttention`
//! in-projection, `ln_post`, the CLS token (or the patch mean) projected by `proj`, a bare
//! `[width, embed_dim]` matrix applied as `x @ proj`. The text tower is CLIP's too (causal
//! blocks, `ln_final`, `text_projection` as a matrix), pooled at the highest token id (open_clip's
//! `argmax` pool: the end-of-text token is the highest id of CLIP's vocabulary), its tokens
//! padded with 0 as open_clip's tokenizer pads them. The activation is `nn.GELU` unless
//! `quick_gelu` is true; layernorms have eps 1e-5 unless `norm_kwargs` says otherwise.
//!
//! What `open_clip.CLIP` builds otherwise is refused by the setting's name: timm or ResNet
//! image towers, Hugging Face text towers and tokenizers, the attentional pool (CoCa), the
//! `none` pool, SigLIP-style `init_logit_bias`, the custom blocks (`qk_norm`, `scale_*`, ...),
//! other text pools and projections. Unknown settings are refused as well: `CLIP(**model_cfg)`
//! would fail on them.

use crate::config::{Fields, GlobalPool, Mlp, ModelConfig, Norm, PositionSource, PrefixPositions};
use crate::family::{Family, TextFamily};
use crate::rules::{
    ClassifierInput, ClassifierRules, ConfigFormat, EmbeddingLayout, FamilyRules, ImageProjection,
    LayerPart, OwnConfig, PooledToken, PoolerKind, QkvLayout, ScoreKind, SpecialTokens,
    TensorRules, TextConfigFormat, TextProjection, TextTensorRules, TextTowerRules,
};
use crate::text::TextConfig;
use serde_json::{Map, Value};
use std::collections::BTreeMap;
use vitrt_runtime::Activation;

/// The file open_clip's `save_for_hf` writes the config to (`open_clip.constants.HF_CONFIG_NAME`).
pub(crate) const CONFIG_FILE: &str = "open_clip_config.json";

pub(crate) const OPEN_CLIP: FamilyRules = FamilyRules {
    name: "open_clip",
    config: ConfigFormat::Own(OwnConfig {
        file: CONFIG_FILE,
        key: "model_cfg",
        read: read_config,
    }),
    // `open_clip.transformer.VisionTransformer` under `visual.`. `ln_pre` is part of the model
    // unless `no_ln_pre`; `ln_post` normalises every token (the default) or, with
    // `final_ln_after_pool`, the pooled vector only: it is the config's `final_norm` or its
    // `fc_norm` (`ModelConfig::final_norm`, `ModelConfig::fc_norm`).
    tensors: TensorRules {
        prefixes: &["visual."],
        patch_weight: "conv1.weight",
        patch_bias: None,
        class_token: Some("class_embedding"),
        distillation_token: None,
        register_tokens: None,
        positions: Some("positional_embedding"),
        embedding_layout: EmbeddingLayout::Unbatched,
        pre_norm: Some("ln_pre"),
        final_norm: Some("ln_post"),
        layers: "transformer.resblocks.",
        layer_part,
        qkv: QkvLayout::InProjection,
    },
    // `VisionTransformer._pool`: the CLS token (`pool_type` "tok") or the patch mean ("avg"),
    // after `ln_post` on every token, or followed by it (`final_ln_after_pool`).
    pooler: Some(PoolerKind::GlobalPool {
        attention_pool: None,
        fc_norm: "ln_post",
    }),
    image_projection: Some(ImageProjection::Matrix("proj")),
    // open_clip's CLIP has no classifier: its checkpoints hold no tensor of this name, so
    // every one is read as the bare model.
    classifier: ClassifierRules {
        name: "classifier",
        input: ClassifierInput::PooledOutput,
        with_teacher: None,
    },
    position_resampling: crate::rules::bicubic,
};

pub(crate) const OPEN_CLIP_TEXT: TextTowerRules = TextTowerRules {
    family: Family::OpenClip,
    config: TextConfigFormat::Own {
        key: "model_cfg",
        read: read_text_config,
    },
    // `open_clip.CLIP` keeps the text tower's modules at the top level; `CustomTextCLIP`
    // (`custom_text`) under `text.`.
    tensors: TextTensorRules {
        prefixes: &["", "text."],
        token_embedding: "token_embedding.weight",
        positions: "positional_embedding",
        final_norm: "ln_final",
    },
    causal: true,
    // The hub's open_clip repositories ship transformers' CLIP tokenizer files, which spell
    // the special tokens so (open_clip's own tokenizer says `<end_of_text>`, the same id).
    vocabularies: &[SpecialTokens {
        end: "<|endoftext|>",
        default_pad: "<|endoftext|>",
    }],
    // `open_clip.tokenizer.SimpleTokenizer` pads with zeros.
    pad_id: Some(0),
    reads_spiece_model: false,
    pooled_token: PooledToken::HighestId,
    projection: TextProjection::Matrix("text_projection"),
    scores: ScoreKind::Softmax,
};

/// The names of an open_clip block's weights (`ResidualAttentionBlock`), vision and text
/// towers alike.
fn layer_part(part: LayerPart) -> &'static [&'static str] {
    use LayerPart::*;
    match part {
        NormBefore => &["ln_1"],
        // Q, K and V are rows of `attn.in_proj_weight` (`TensorRules::qkv`).
        Query | Key | Value => &["attn.in_proj"],
        AttentionOutput => &["attn.out_proj"],
        // `LayerScale`, where `ls_init_value` is set.
        AttentionScale => &["ls_1.gamma"],
        NormAfter => &["ln_2"],
        Up => &["mlp.c_fc"],
        Down => &["mlp.c_proj"],
        MlpScale => &["ls_2.gamma"],
        SwiGluIn | SwiGluGate | SwiGluUp | SwiGluOut => &[],
    }
}

/// The block settings of `CLIPVisionCfg` and `CLIPTextCfg` that pick open_clip's
/// `CustomResidualAttentionBlock` or change its computation: accepted only off.
const CUSTOM_BLOCK_FLAGS: [&str; 6] = [
    "qk_norm",
    "scaled_cosine_attn",
    "scale_heads",
    "scale_attn_inner",
    "scale_attn",
    "scale_fc",
];

/// `model_cfg`, checked at its top level: the settings of `open_clip.CLIP` that vitrt runs.
fn model_cfg(top: &Map<String, Value>) -> Result<&Map<String, Value>, String> {
    let cfg = match top.get("model_cfg") {
        Some(Value::Object(cfg)) => cfg,
        other => {
            return Err(format!(
                "\"model_cfg\" must be an object, got {}",
                other.unwrap_or(&Value::Null)
            ))
        }
    };
    for (key, value) in cfg {
        match key.as_str() {
            "embed_dim" | "vision_cfg" | "text_cfg" | "quick_gelu" => {}
            // Where the parameters start, the training precision, the forward's return type,
            // and the text tower's place (`text.`, found by its tensor names).
            "init_logit_scale"
            | "nonscalar_logit_scale"
            | "cast_dtype"
            | "output_dict"
            | "custom_text" => {}
            "init_logit_bias" if value.is_null() => {}
            "init_logit_bias" => {
                return Err(unsupported(
                    "model_cfg.init_logit_bias",
                    value,
                    "a SigLIP-style model scored by a sigmoid with a bias",
                ))
            }
            "multimodal_cfg" if value.is_null() => {}
            "multimodal_cfg" => {
                return Err(unsupported(
                    "model_cfg.multimodal_cfg",
                    value,
                    "CoCa's captioning decoder",
                ))
            }
            _ => return Err(unsupported(&format!("model_cfg.{key}"), value, "unknown")),
        }
    }
    Ok(cfg)
}

fn unsupported(setting: &str, value: &Value, what: &str) -> String {
    format!(
        "open_clip setting {setting} = {value} is not supported by vitrt ({what}; supported: \
         open_clip's CLIP with its ViT image tower and transformer text tower)"
    )
}

/// An object of `cfg` (`vision_cfg`, `text_cfg`); missing or null: empty (every default).
fn sub_config<'a>(
    cfg: &'a Map<String, Value>,
    key: &str,
    empty: &'a Map<String, Value>,
) -> Result<&'a Map<String, Value>, String> {
    match cfg.get(key) {
        None | Some(Value::Null) => Ok(empty),
        Some(Value::Object(map)) => Ok(map),
        Some(v) => Err(format!("model_cfg.{key} must be an object, got {v}")),
    }
}

/// The settings shared by both towers' configs: the activation (`quick_gelu`, `act_kwargs`),
/// the layernorms' eps (`norm_kwargs`), layer scale (`ls_init_value`) and the block type.
/// `tower` names the config in messages; returns the activation, its name, eps and whether
/// the blocks have layer scale.
fn block_settings(
    tower: &str,
    fields: &Map<String, Value>,
    quick_gelu: bool,
) -> Result<(Activation, String, f32, bool), String> {
    let setting = |key: &str| format!("{tower}.{key}");
    let empty = |v: &Value| v.is_null() || v.as_object().is_some_and(Map::is_empty);
    if let Some(v) = fields.get("act_kwargs").filter(|v| !empty(v)) {
        return Err(unsupported(
            &setting("act_kwargs"),
            v,
            "a changed activation",
        ));
    }
    let mut eps = 1e-5;
    if let Some(v) = fields.get("norm_kwargs").filter(|v| !empty(v)) {
        let Some(kwargs) = v.as_object() else {
            return Err(format!(
                "{} must be an object, got {v}",
                setting("norm_kwargs")
            ));
        };
        for (key, value) in kwargs {
            match (key.as_str(), value.as_f64()) {
                ("eps", Some(e)) if e > 0.0 && e.is_finite() => eps = e,
                _ => {
                    return Err(unsupported(
                        &setting(&format!("norm_kwargs.{key}")),
                        value,
                        "a changed layernorm",
                    ))
                }
            }
        }
    }
    match fields.get("block_type") {
        None | Some(Value::Null) => {}
        Some(Value::String(kind)) if kind == "default" => {}
        Some(v) => return Err(unsupported(&setting("block_type"), v, "another block")),
    }
    for flag in CUSTOM_BLOCK_FLAGS {
        match fields.get(flag) {
            None | Some(Value::Null) | Some(Value::Bool(false)) => {}
            Some(v) => return Err(unsupported(&setting(flag), v, "another block")),
        }
    }
    let layer_scale = match fields.get("ls_init_value") {
        None | Some(Value::Null) => false,
        Some(v) if v.is_number() => true,
        Some(v) => {
            return Err(format!(
                "{} must be a number, got {v}",
                setting("ls_init_value")
            ))
        }
    };
    let (activation, name) = match quick_gelu {
        true => (Activation::QuickGelu, "quick_gelu"),
        // nn.GELU(): the exact (erf) GELU.
        false => (Activation::Gelu, "gelu"),
    };
    Ok((activation, name.to_string(), eps as f32, layer_scale))
}

/// `int(width * mlp_ratio)`, open_clip's MLP width.
fn mlp_width(tower: &str, fields: &Fields, width: usize) -> Result<usize, String> {
    let ratio = fields
        .positive_number("mlp_ratio", 4.0)
        .map_err(|e| format!("{tower}.{e}"))?;
    match (width as f64 * ratio) as usize {
        0 => Err(format!(
            "{tower}: the MLP has no hidden units (mlp_ratio too small)"
        )),
        hidden => Ok(hidden),
    }
}

/// The image tower of `open_clip_config.json`: `model_cfg.vision_cfg` read as
/// `open_clip.model.CLIPVisionCfg`, with `quick_gelu` from `model_cfg`.
fn read_config(top: &Map<String, Value>) -> Result<ModelConfig, String> {
    let cfg = model_cfg(top)?;
    let empty = Map::new();
    let vision = sub_config(cfg, "vision_cfg", &empty)?;
    let quick_gelu = Fields(cfg).flag("quick_gelu", false)?;
    let tower = "vision_cfg";
    let setting = |key: &str| format!("{tower}.{key}");
    for (key, value) in vision {
        match key.as_str() {
            "image_size"
            | "layers"
            | "width"
            | "head_width"
            | "mlp_ratio"
            | "patch_size"
            | "ls_init_value"
            | "no_ln_pre"
            | "pool_type"
            | "final_ln_after_pool"
            | "act_kwargs"
            | "norm_kwargs"
            | "block_type" => {}
            flag if CUSTOM_BLOCK_FLAGS.contains(&flag) => {}
            // Training only (dropout), or what the forward returns beside the pooled vector.
            "patch_dropout" | "output_tokens" => {}
            // The attentional pool's sizes, unused without it.
            "attn_pooler_queries" | "attn_pooler_heads" => {}
            // The position table is stored in the checkpoint whichever way it was made.
            "pos_embed_type" if matches!(value.as_str(), Some("learnable" | "sin_cos_2d")) => {}
            "attentional_pool" if matches!(value, Value::Null | Value::Bool(false)) => {}
            "attentional_pool" => {
                return Err(unsupported(&setting(key), value, "CoCa's attentional pool"))
            }
            "timm_model_name" if value.is_null() => {}
            "timm_model_name" => {
                return Err(unsupported(&setting(key), value, "a timm image tower"))
            }
            // The timm tower's settings, unused without it.
            k if k.starts_with("timm_") => {}
            _ => return Err(unsupported(&setting(key), value, "unknown")),
        }
    }
    if let Some(layers @ Value::Array(_)) = vision.get("layers") {
        return Err(unsupported(
            &setting("layers"),
            layers,
            "a ModifiedResNet image tower (RN50 and kin)",
        ));
    }
    let fields = Fields(vision);
    let err = |e: String| format!("{tower}.{e}");
    let width = fields.int("width", Some(768)).map_err(err)?;
    let head_width = fields.int("head_width", Some(64)).map_err(err)?;
    if !width.is_multiple_of(head_width) {
        return Err(format!(
            "{tower}: width {width} is not a multiple of head_width {head_width}"
        ));
    }
    let layers = fields.int("layers", Some(12)).map_err(err)?;
    let image_size = fields.pair("image_size", 224).map_err(err)?;
    let (patch_h, patch_w) = fields.pair("patch_size", 16).map_err(err)?;
    if patch_h != patch_w {
        return Err(format!(
            "{tower}: non-square patches {patch_h}x{patch_w} are not supported"
        ));
    }
    let (hidden_act, hidden_act_name, layer_norm_eps, layer_scale) =
        block_settings(tower, vision, quick_gelu)?;
    let global_pool = match vision.get("pool_type") {
        None | Some(Value::Null) => GlobalPool::ClassToken,
        Some(Value::String(pool)) if pool == "tok" => GlobalPool::ClassToken,
        // `x[:, 1:].mean(dim=1)`: the patch tokens, after the CLS token.
        Some(Value::String(pool)) if pool == "avg" => GlobalPool::PatchMean,
        Some(v) => {
            return Err(unsupported(
                &setting("pool_type"),
                v,
                "pools other than \"tok\" and \"avg\"",
            ))
        }
    };
    let ln_after_pool = fields.flag("final_ln_after_pool", false).map_err(err)?;
    Ok(ModelConfig {
        family: Family::OpenClip,
        model_type: "open_clip".into(),
        hidden_size: width,
        num_hidden_layers: layers,
        num_attention_heads: width / head_width,
        intermediate_size: mlp_width(tower, &fields, width)?,
        hidden_act,
        hidden_act_name,
        layer_norm_eps,
        norm: Norm::Layer,
        image_size,
        patch_size: patch_h,
        // `VisionTransformer.conv1` takes three channels.
        num_channels: 3,
        qkv_bias: true,
        key_bias: true,
        attention_output_bias: true,
        mlp_bias: true,
        positions: PositionSource::Checkpoint,
        positions_after_pre_norm: false,
        rope_theta: None,
        num_register_tokens: 0,
        layer_scale,
        mlp: Mlp::Standard,
        vision_use_head: false,
        class_token: true,
        prefix_positions: PrefixPositions::All,
        patch_bias: false,
        pre_norm: !fields.flag("no_ln_pre", false).map_err(err)?,
        final_norm: !ln_after_pool,
        global_pool,
        fc_norm: ln_after_pool,
        pooler_act: Activation::Tanh,
        id2label: BTreeMap::new(),
    })
}

/// The text tower of `open_clip_config.json`: `model_cfg.text_cfg` read as
/// `open_clip.model.CLIPTextCfg`, with `embed_dim` and `quick_gelu` from `model_cfg`.
fn read_text_config(top: &Map<String, Value>) -> Result<TextConfig, String> {
    let cfg = model_cfg(top)?;
    let empty = Map::new();
    let text = sub_config(cfg, "text_cfg", &empty)?;
    let quick_gelu = Fields(cfg).flag("quick_gelu", false)?;
    let tower = "text_cfg";
    let setting = |key: &str| format!("{tower}.{key}");
    let mut projection = true;
    for (key, value) in text {
        let off = matches!(value, Value::Null | Value::Bool(false));
        match key.as_str() {
            "context_length" | "vocab_size" | "width" | "heads" | "layers" | "mlp_ratio"
            | "ls_init_value" | "act_kwargs" | "norm_kwargs" | "block_type" => {}
            flag if CUSTOM_BLOCK_FLAGS.contains(&flag) => {}
            // What the forward returns beside the pooled vector; the ids that matter only with
            // a CLS embedding or the `eos` pool, both refused below.
            "output_tokens" | "pad_id" | "eos_id" => {}
            // Where the layernorm goes changes only the unpooled states: the pooled token
            // is normalised on its own either way.
            "final_ln_after_pool" => {}
            "pool_type" if value.as_str() == Some("argmax") => {}
            "pool_type" => {
                return Err(unsupported(
                    &setting(key),
                    value,
                    "text pools other than \"argmax\"",
                ))
            }
            "proj_type" if value.as_str() == Some("linear") => {}
            "proj_type" if value.as_str() == Some("none") => projection = false,
            "proj_type" => return Err(unsupported(&setting(key), value, "another projection")),
            "proj_bias" if off => {}
            "proj_bias" => {
                return Err(unsupported(
                    &setting(key),
                    value,
                    "a text projection with a bias",
                ))
            }
            "embed_cls" if off => {}
            "embed_cls" => return Err(unsupported(&setting(key), value, "CoCa's CLS embedding")),
            "no_causal_mask" if off => {}
            "no_causal_mask" => {
                return Err(unsupported(
                    &setting(key),
                    value,
                    "a text tower without its causal mask",
                ))
            }
            // open_clip tokenizes with a Hugging Face tokenizer, or its own with other text
            // cleaning, where these are set: not the CLIP tokenizer.json vitrt reads.
            "hf_tokenizer_name" | "tokenizer_mode" if value.is_null() => {}
            "tokenizer_kwargs"
                if value.is_null() || value.as_object().is_some_and(Map::is_empty) => {}
            "hf_tokenizer_name" | "tokenizer_mode" | "tokenizer_kwargs" => {
                return Err(unsupported(
                    &setting(key),
                    value,
                    "a tokenizer other than CLIP's",
                ))
            }
            "hf_model_name" if value.is_null() => {}
            "hf_model_name" => {
                return Err(unsupported(
                    &setting(key),
                    value,
                    "a Hugging Face text tower",
                ))
            }
            // The Hugging Face tower's settings, unused without it.
            "hf_model_pretrained" | "hf_proj_type" | "hf_pooler_type" => {}
            _ => return Err(unsupported(&setting(key), value, "unknown")),
        }
    }
    let fields = Fields(text);
    let err = |e: String| format!("{tower}.{e}");
    let width = fields.int("width", Some(512)).map_err(err)?;
    let (hidden_act, _, layer_norm_eps, layer_scale) = block_settings(tower, text, quick_gelu)?;
    let embed_dim = Fields(cfg).int("embed_dim", None)?;
    let config = TextConfig {
        family: TextFamily::OpenClip,
        dual_tower: true,
        vocab_size: fields.int("vocab_size", Some(49408)).map_err(err)?,
        hidden_size: width,
        num_hidden_layers: fields.int("layers", Some(12)).map_err(err)?,
        num_attention_heads: fields.int("heads", Some(8)).map_err(err)?,
        intermediate_size: mlp_width(tower, &fields, width)?,
        hidden_act,
        layer_norm_eps,
        max_position_embeddings: fields.int("context_length", Some(77)).map_err(err)?,
        // Not read: the tower pools at the highest id (`PooledToken::HighestId`).
        eos_token_id: 49407,
        projection_size: if projection { embed_dim } else { width },
        layer_scale,
    };
    config.check()?;
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// open_clip's `ViT-B-32.json` as `save_for_hf` writes it.
    const VIT_B_32: &str = r#"{"model_cfg": {"embed_dim": 512,
        "vision_cfg": {"image_size": 224, "layers": 12, "width": 768, "patch_size": 32},
        "text_cfg": {"context_length": 77, "vocab_size": 49408, "width": 512, "heads": 8,
                     "layers": 12}},
        "preprocess_cfg": {"mean": [0.48145466, 0.4578275, 0.40821073],
                           "std": [0.26862954, 0.26130258, 0.27577711]}}"#;

    fn with(path: &[&str], value: &str) -> String {
        let mut json: Value = serde_json::from_str(VIT_B_32).unwrap();
        let mut place = &mut json;
        for key in &path[..path.len() - 1] {
            place = &mut place[*key];
        }
        place[path[path.len() - 1]] = serde_json::from_str(value).unwrap();
        json.to_string()
    }

    #[test]
    fn open_clip_configs_are_read_as_open_clip_builds_them() {
        let vision = ModelConfig::from_json_str(VIT_B_32).unwrap();
        assert_eq!(vision.family, Family::OpenClip);
        assert_eq!(
            (
                vision.hidden_size,
                vision.num_hidden_layers,
                vision.num_attention_heads,
                vision.intermediate_size,
                vision.tokens(),
            ),
            (768, 12, 12, 3072, 50)
        );
        assert_eq!(
            (vision.hidden_act, vision.layer_norm_eps),
            (Activation::Gelu, 1e-5)
        );
        assert!(vision.pre_norm && vision.final_norm && !vision.fc_norm && !vision.layer_scale);
        assert_eq!(vision.global_pool, GlobalPool::ClassToken);
        let text = TextConfig::from_json_str(VIT_B_32).unwrap();
        assert_eq!(text.family, TextFamily::OpenClip);
        assert_eq!(
            (
                text.hidden_size,
                text.num_attention_heads,
                text.intermediate_size,
                text.max_position_embeddings,
                text.projection_size,
            ),
            (512, 8, 2048, 77, 512)
        );
        assert!(text.encoder().causal);

        // ViT-bigG-14: head_width 104, mlp_ratio 4.9231 (int(1664 * 4.9231) = 8192).
        let big = with(
            &["model_cfg", "vision_cfg"],
            r#"{"width": 1664, "head_width": 104,
            "mlp_ratio": 4.9231, "patch_size": 14, "layers": 48}"#,
        );
        let big = ModelConfig::from_json_str(&big).unwrap();
        assert_eq!((big.num_attention_heads, big.intermediate_size), (16, 8192));
        let quick = with(&["model_cfg", "quick_gelu"], "true");
        assert_eq!(
            ModelConfig::from_json_str(&quick).unwrap().hidden_act,
            Activation::QuickGelu
        );
        assert_eq!(
            TextConfig::from_json_str(&quick).unwrap().hidden_act,
            Activation::QuickGelu
        );
        let after_pool = with(&["model_cfg", "vision_cfg", "final_ln_after_pool"], "true");
        let after_pool = ModelConfig::from_json_str(&after_pool).unwrap();
        assert!(!after_pool.final_norm && after_pool.fc_norm);
        let avg = with(&["model_cfg", "vision_cfg", "pool_type"], "\"avg\"");
        assert_eq!(
            ModelConfig::from_json_str(&avg).unwrap().global_pool,
            GlobalPool::PatchMean
        );
        let eps = with(
            &["model_cfg", "vision_cfg", "norm_kwargs"],
            r#"{"eps": 1e-6}"#,
        );
        assert_eq!(
            ModelConfig::from_json_str(&eps).unwrap().layer_norm_eps,
            1e-6
        );
        let scaled = with(&["model_cfg", "vision_cfg", "ls_init_value"], "1e-4");
        assert!(ModelConfig::from_json_str(&scaled).unwrap().layer_scale);
        let no_projection = with(&["model_cfg", "text_cfg", "proj_type"], "\"none\"");
        assert_eq!(
            TextConfig::from_json_str(&no_projection)
                .unwrap()
                .projection_size,
            512
        );
    }

    #[test]
    fn open_clip_settings_vitrt_cannot_run_are_refused_by_name() {
        let vision = |path: &[&str], value: &str| ModelConfig::from_json_str(&with(path, value));
        let text = |path: &[&str], value: &str| TextConfig::from_json_str(&with(path, value));
        for (result, want) in [
            (
                vision(&["model_cfg", "vision_cfg", "pool_type"], "\"none\""),
                "vision_cfg.pool_type = \"none\"",
            ),
            (
                vision(&["model_cfg", "vision_cfg", "attentional_pool"], "true"),
                "vision_cfg.attentional_pool = true",
            ),
            (
                vision(&["model_cfg", "vision_cfg", "layers"], "[3, 4, 6, 3]"),
                "ModifiedResNet",
            ),
            (
                vision(
                    &["model_cfg", "vision_cfg", "timm_model_name"],
                    "\"vit_base_patch16_siglip_224\"",
                ),
                "vision_cfg.timm_model_name",
            ),
            (
                vision(&["model_cfg", "vision_cfg", "qk_norm"], "true"),
                "vision_cfg.qk_norm = true",
            ),
            (
                vision(&["model_cfg", "init_logit_bias"], "-10"),
                "model_cfg.init_logit_bias = -10",
            ),
            (
                vision(&["model_cfg", "multimodal_cfg"], "{}"),
                "model_cfg.multimodal_cfg",
            ),
            (
                vision(
                    &["model_cfg", "vision_cfg", "act_kwargs"],
                    r#"{"approximate": "tanh"}"#,
                ),
                "vision_cfg.act_kwargs",
            ),
            (
                vision(&["model_cfg", "vision_cfg", "unknown"], "1"),
                "vision_cfg.unknown = 1",
            ),
        ] {
            let err = result.unwrap_err();
            assert!(err.contains(want), "{err} should mention {want}");
        }
        for (result, want) in [
            (
                text(&["model_cfg", "text_cfg", "pool_type"], "\"last\""),
                "text_cfg.pool_type = \"last\"",
            ),
            (
                text(&["model_cfg", "text_cfg", "no_causal_mask"], "true"),
                "text_cfg.no_causal_mask = true",
            ),
            (
                text(
                    &["model_cfg", "text_cfg", "hf_tokenizer_name"],
                    "\"bert-base-uncased\"",
                ),
                "text_cfg.hf_tokenizer_name",
            ),
            (
                text(&["model_cfg", "text_cfg", "proj_bias"], "true"),
                "text_cfg.proj_bias = true",
            ),
            (
                text(&["model_cfg", "text_cfg", "embed_cls"], "true"),
                "text_cfg.embed_cls = true",
            ),
            (
                text(&["model_cfg", "init_logit_bias"], "-10"),
                "model_cfg.init_logit_bias = -10",
            ),
        ] {
            let err = result.unwrap_err();
            assert!(err.contains(want), "{err} should mention {want}");
        }
    }
}
