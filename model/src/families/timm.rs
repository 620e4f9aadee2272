//! timm's own ViT checkpoints: the `vit_*` models of `timm` built as its `VisionTransformer`,
//! with timm's `config.json` (`architecture`, `model_args`, `pretrained_cfg`;
//! `timm/vit_base_patch16_224.augreg_in21k`, `timm/vit_base_patch16_siglip_224.webli`,
//! `timm/vit_base_patch16_reg4_gap_256.sbb_in12k_ft_in1k`, `timm/vit_base_patch16_clip_224.openai`
//! and their kin). The architecture's name stands for the arguments timm's registry builds it
//! with (`timm_architectures.rs`), the checkpoint's `model_args` go over them, as
//! `timm.create_model(architecture, **model_args)` does. Q, K and V are one tensor; what is
//! read from the arguments: the sizes, layer scale, the CLS token (`class_token`), register
//! tokens (`reg_tokens`), which prefix tokens have positions (`no_embed_class`), the layernorm
//! before the blocks (`pre_norm`, CLIP's; its patch projection then has no bias), the pool
//! (`global_pool`: `token`, `avg`, `map`) and where the final layernorm goes (`norm` on every
//! token, or `fc_norm` on the pooled vector). Any argument that changes the model otherwise is
//! refused by name.

use super::timm_architectures::{Architecture, ARCHITECTURES};
use crate::config::{GlobalPool, Mlp, ModelConfig, Norm, PositionSource, PrefixPositions};
use crate::family::Family;
use crate::rules::{
    AttentionPoolNames, AttentionPoolProjections, ClassifierInput, ClassifierRules, ConfigFormat,
    EmbeddingLayout, FamilyRules, LayerPart, OwnConfig, PoolerKind, QkvLayout, TensorRules,
};
use serde_json::{Map, Value};
use std::collections::BTreeMap;
use vitrt_runtime::Activation;

pub(crate) const TIMM: FamilyRules = FamilyRules {
    name: "timm ViT",
    // timm's checkpoints name an architecture instead of a model_type.
    config: ConfigFormat::Own(OwnConfig {
        file: "config.json",
        key: "architecture",
        read: read_config,
    }),
    // Each of these is part of a model where its arguments say (`ModelConfig::class_token`,
    // `patch_bias`, `pre_norm`, `final_norm`, `num_register_tokens`).
    tensors: TensorRules {
        prefixes: &[""],
        patch_weight: "patch_embed.proj.weight",
        patch_bias: Some("patch_embed.proj.bias"),
        class_token: Some("cls_token"),
        distillation_token: None,
        register_tokens: Some("reg_token"),
        positions: Some("pos_embed"),
        embedding_layout: EmbeddingLayout::Batched,
        pre_norm: Some("norm_pre"),
        final_norm: Some("norm"),
        layers: "blocks.",
        layer_part,
        qkv: QkvLayout::Stacked,
    },
    // timm's `forward_head(pre_logits=True)`: the pool, then `fc_norm`.
    pooler: Some(PoolerKind::GlobalPool {
        // timm's `AttentionPoolLatent`.
        attention_pool: Some(AttentionPoolNames {
            base: "attn_pool",
            query_token: "latent",
            projections: AttentionPoolProjections::QueryAndKeyValue {
                query: "q",
                key_value: "kv",
            },
            output: "proj",
            norm: "norm",
            up: "mlp.fc1",
            down: "mlp.fc2",
        }),
        fc_norm: "fc_norm",
    }),
    image_projection: None,
    classifier: ClassifierRules {
        name: "head",
        input: ClassifierInput::PooledOutput,
        with_teacher: None,
    },
    position_resampling: crate::rules::bicubic,
};

/// The names of a timm block's weights.
fn layer_part(part: LayerPart) -> &'static [&'static str] {
    use LayerPart::*;
    match part {
        NormBefore => &["norm1"],
        // Q, K and V are rows of one tensor (`TensorRules::qkv`).
        Query | Key | Value => &["attn.qkv"],
        AttentionOutput => &["attn.proj"],
        AttentionScale => &["ls1.gamma"],
        NormAfter => &["norm2"],
        Up => &["mlp.fc1"],
        Down => &["mlp.fc2"],
        MlpScale => &["ls2.gamma"],
        SwiGluIn | SwiGluGate | SwiGluUp | SwiGluOut => &[],
    }
}

/// The arguments of timm's `VisionTransformer` that vitrt reads, at their defaults until an
/// argument sets them.
struct VitArgs {
    image_size: (usize, usize),
    patch_size: usize,
    channels: usize,
    width: usize,
    depth: usize,
    heads: usize,
    mlp_ratio: f64,
    qkv_bias: bool,
    layer_scale: bool,
    class_token: bool,
    register_tokens: usize,
    no_embed_class: bool,
    pre_norm: bool,
    final_norm: bool,
    /// None: on where the pool is a mean or max (timm's `fc_norm=None`).
    fc_norm: Option<bool>,
    global_pool: String,
    pool_include_prefix: bool,
    activation: (Activation, String),
}

impl Default for VitArgs {
    /// `VisionTransformer.__init__`'s defaults.
    fn default() -> Self {
        VitArgs {
            image_size: (224, 224),
            patch_size: 16,
            channels: 3,
            width: 768,
            depth: 12,
            heads: 12,
            mlp_ratio: 4.0,
            qkv_bias: true,
            layer_scale: false,
            class_token: true,
            register_tokens: 0,
            no_embed_class: false,
            pre_norm: false,
            final_norm: true,
            fc_norm: None,
            global_pool: "token".into(),
            pool_include_prefix: false,
            activation: (Activation::Gelu, "gelu".into()),
        }
    }
}

/// timm's activation names (`timm.layers.get_act_layer`) that vitrt runs; `nn.GELU` is
/// timm's default.
fn timm_activation(name: &str) -> Option<Activation> {
    Some(match name {
        "gelu" => Activation::Gelu,
        "gelu_tanh" => Activation::GeluTanh,
        "quick_gelu" => Activation::QuickGelu,
        _ => return None,
    })
}

impl VitArgs {
    /// Reads one argument; an argument vitrt cannot run is an error naming it and its value.
    fn set(&mut self, key: &str, v: &Value) -> Result<(), String> {
        let positive = |v: &Value| {
            v.as_u64()
                .filter(|&n| n > 0)
                .map(|n| n as usize)
                .ok_or(format!("{key} must be a positive integer, got {v}"))
        };
        let flag = |v: &Value| {
            v.as_bool()
                .ok_or(format!("{key} must be true or false, got {v}"))
        };
        let cannot = || Err(format!("{key} = {v} is not supported by vitrt"));
        match key {
            "embed_dim" => self.width = positive(v)?,
            "depth" => self.depth = positive(v)?,
            "num_heads" => self.heads = positive(v)?,
            "in_chans" => self.channels = positive(v)?,
            "patch_size" => {
                self.patch_size = match v {
                    Value::Array(a) if a.len() == 2 && a[0] == a[1] => positive(&a[0])?,
                    Value::Array(_) => return cannot(),
                    _ => positive(v)?,
                }
            }
            "img_size" => {
                self.image_size = match v {
                    Value::Array(a) if a.len() == 2 => (positive(&a[0])?, positive(&a[1])?),
                    _ => {
                        let n = positive(v)?;
                        (n, n)
                    }
                }
            }
            "mlp_ratio" => {
                self.mlp_ratio = v
                    .as_f64()
                    .filter(|r| *r > 0.0 && r.is_finite())
                    .ok_or(format!("{key} must be a positive number, got {v}"))?
            }
            "qkv_bias" => self.qkv_bias = flag(v)?,
            "init_values" => self.layer_scale = !v.is_null(),
            "class_token" => self.class_token = flag(v)?,
            "reg_tokens" => {
                self.register_tokens = v
                    .as_u64()
                    .map(|n| n as usize)
                    .ok_or(format!("{key} must be a non-negative integer, got {v}"))?
            }
            "no_embed_class" => self.no_embed_class = flag(v)?,
            "pre_norm" => self.pre_norm = flag(v)?,
            "final_norm" => self.final_norm = flag(v)?,
            "fc_norm" => self.fc_norm = if v.is_null() { None } else { Some(flag(v)?) },
            "pool_include_prefix" => self.pool_include_prefix = flag(v)?,
            "global_pool" => match v.as_str() {
                // `avgmax` and `max` need a max over tokens, which vitrt has no op for; `prr`
                // and `''` (no pool: the head on every token) are other heads.
                Some(pool @ ("token" | "avg" | "map")) => self.global_pool = pool.into(),
                _ => return cannot(),
            },
            "act_layer" => match v {
                Value::Null => {}
                Value::String(name) => match timm_activation(name) {
                    Some(act) => self.activation = (act, name.clone()),
                    None => return cannot(),
                },
                _ => return cannot(),
            },
            // Dropout, stochastic depth and initialisation: nothing at inference.
            "num_classes" | "drop_rate" | "pos_drop_rate" | "patch_drop_rate"
            | "proj_drop_rate" | "attn_drop_rate" | "drop_path_rate" | "weight_init"
            | "fix_init" => {}
            // Settings that change the model, accepted at the value that leaves it plain.
            "qk_norm" | "scale_attn_norm" | "scale_mlp_norm" | "dynamic_img_size"
            | "dynamic_img_pad"
                if v.as_bool() == Some(false) => {}
            "proj_bias" if v.as_bool() == Some(true) => {}
            "pos_embed" if v.as_str() == Some("learn") => {}
            "norm_layer" | "embed_layer" | "embed_norm_layer" | "block_fn" | "mlp_layer"
            | "attn_layer"
                if v.is_null() => {}
            _ => return cannot(),
        }
        Ok(())
    }
}

/// A timm `config.json`: the architecture's registered arguments, the checkpoint's
/// `model_args` over them, then `pretrained_cfg.input_size` for the image size. The top
/// level's `global_pool` and `num_features` are informational (timm builds nothing from
/// them) and are not read.
fn read_config(top: &Map<String, Value>) -> Result<ModelConfig, String> {
    let architecture = top
        .get("architecture")
        .and_then(Value::as_str)
        .ok_or("\"architecture\" must be a string")?;
    let unsupported = |why: &str| {
        format!(
            "timm architecture \"{architecture}\" is not one vitrt runs ({why}; supported: \
             timm's VisionTransformer with its plain blocks, the pools token, avg and map, \
             class and register tokens, pre_norm, fc_norm)"
        )
    };
    let Architecture {
        model_args: registered,
        norm_eps,
        ..
    } = ARCHITECTURES
        .iter()
        .find(|a| a.name == architecture)
        .ok_or_else(|| {
            unsupported("not one of timm's vit_* architectures built as a plain VisionTransformer")
        })?;
    let registered: Map<String, Value> = serde_json::from_str(registered)
        .map_err(|e| format!("the registered model_args of {architecture}: {e}"))?;
    let empty = Map::new();
    let checkpoint_args = match top.get("model_args") {
        None | Some(Value::Null) => &empty,
        Some(Value::Object(map)) => map,
        Some(v) => return Err(format!("\"model_args\" must be an object, got {v}")),
    };
    let mut args = VitArgs::default();
    for (key, v) in &registered {
        if !checkpoint_args.contains_key(key) {
            args.set(key, v)
                .map_err(|e| unsupported(&format!("registered with {e}")))?;
        }
    }
    for (key, v) in checkpoint_args {
        args.set(key, v)
            .map_err(|e| unsupported(&format!("model_args.{e}")))?;
    }
    let cfg = top.get("pretrained_cfg").and_then(Value::as_object);
    if let Some(input) = cfg
        .and_then(|c| c.get("input_size"))
        .and_then(Value::as_array)
    {
        if let [c, h, w] = &input[..] {
            let n = |v: &Value| {
                v.as_u64()
                    .filter(|&n| n > 0)
                    .map(|n| n as usize)
                    .ok_or(format!(
                        "pretrained_cfg.input_size must hold positive integers, got {v}"
                    ))
            };
            args.channels = n(c)?;
            args.image_size = (n(h)?, n(w)?);
        }
    }

    // The pool and the layernorms around it, as VisionTransformer.__init__ decides them.
    let prefix_tokens = usize::from(args.class_token) + args.register_tokens;
    let global_pool = match (args.global_pool.as_str(), args.pool_include_prefix) {
        ("token", _) if !args.class_token => {
            return Err(unsupported(
                "global_pool \"token\" needs the class token, and class_token is false",
            ))
        }
        ("token", _) => GlobalPool::ClassToken,
        ("avg", false) => GlobalPool::PatchMean,
        ("avg", true) => GlobalPool::TokenMean,
        ("map", false) if prefix_tokens > 0 => {
            return Err(unsupported(&format!(
                "global_pool \"map\" attends over the patch tokens after {prefix_tokens} \
                 prefix tokens, which vitrt's attention pool cannot leave out"
            )))
        }
        _ => GlobalPool::AttentionPool,
    };
    let use_fc_norm = args.fc_norm.unwrap_or(args.global_pool == "avg");
    let mut id2label = BTreeMap::new();
    if let Some(names) = top.get("label_names").and_then(Value::as_array) {
        for (i, name) in names.iter().enumerate() {
            if let Some(name) = name.as_str() {
                id2label.insert(i, name.to_string());
            }
        }
    }
    let intermediate_size = (args.width as f64 * args.mlp_ratio) as usize;
    if intermediate_size == 0 {
        return Err(unsupported(
            "the MLP has no hidden units (mlp_ratio too small)",
        ));
    }
    let (hidden_act, hidden_act_name) = args.activation;
    Ok(ModelConfig {
        family: Family::Timm,
        model_type: architecture.to_string(),
        hidden_size: args.width,
        num_hidden_layers: args.depth,
        num_attention_heads: args.heads,
        intermediate_size,
        hidden_act,
        hidden_act_name,
        layer_norm_eps: *norm_eps as f32,
        norm: Norm::Layer,
        image_size: args.image_size,
        patch_size: args.patch_size,
        num_channels: args.channels,
        qkv_bias: args.qkv_bias,
        key_bias: true,
        attention_output_bias: true,
        mlp_bias: true,
        positions: PositionSource::Checkpoint,
        positions_after_pre_norm: false,
        rope_theta: None,
        num_register_tokens: args.register_tokens,
        layer_scale: args.layer_scale,
        mlp: Mlp::Standard,
        vision_use_head: false,
        class_token: args.class_token,
        prefix_positions: match args.no_embed_class {
            true => PrefixPositions::None,
            false => PrefixPositions::All,
        },
        // CLIP's patch projection has no bias: timm drops it with pre_norm.
        patch_bias: !args.pre_norm,
        pre_norm: args.pre_norm,
        final_norm: args.final_norm && !use_fc_norm,
        global_pool,
        fc_norm: args.final_norm && use_fc_norm,
        pooler_act: Activation::Tanh,
        id2label,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(json: &str) -> Result<ModelConfig, String> {
        ModelConfig::from_json_str(json)
    }

    #[test]
    fn timm_configs_take_their_sizes_from_the_name_and_model_args() {
        let base = read(
            r#"{"architecture": "vit_base_patch16_384", "num_classes": 1000,
                "pretrained_cfg": {"input_size": [3, 384, 384]}}"#,
        )
        .unwrap();
        assert_eq!(base.family, Family::Timm);
        assert_eq!(
            (
                base.hidden_size,
                base.num_hidden_layers,
                base.num_attention_heads
            ),
            (768, 12, 12)
        );
        assert_eq!(
            (base.image_size, base.patch_size, base.tokens()),
            ((384, 384), 16, 577)
        );
        assert_eq!((base.layer_norm_eps, base.intermediate_size), (1e-6, 3072));
        assert_eq!(base.global_pool, GlobalPool::ClassToken);
        assert!(base.final_norm && !base.fc_norm && !base.pre_norm && base.patch_bias);
        let small = read(
            r#"{"architecture": "vit_base_patch16_224", "label_names": ["a", "b"],
                "model_args": {"embed_dim": 48, "depth": 2, "num_heads": 3, "patch_size": 8,
                               "img_size": [32, 32], "init_values": 0.5}}"#,
        )
        .unwrap();
        assert_eq!(
            (small.hidden_size, small.head_dim(), small.tokens()),
            (48, 16, 17)
        );
        assert!(small.layer_scale);
        assert_eq!(small.label(1), "b");
    }

    #[test]
    fn registered_variants_are_read_from_the_architecture_name() {
        // SigLIP: no CLS token, the attention pool after the final norm.
        let siglip = read(r#"{"architecture": "vit_base_patch16_siglip_224"}"#).unwrap();
        assert!(!siglip.has_class_token());
        assert_eq!((siglip.prefix_tokens(), siglip.tokens()), (0, 196));
        assert_eq!(siglip.global_pool, GlobalPool::AttentionPool);
        assert!(siglip.final_norm && !siglip.fc_norm);
        // Registers without positions, the mean of the patches through fc_norm, no norm.
        let registers = read(r#"{"architecture": "vit_base_patch16_reg4_gap_256"}"#).unwrap();
        assert_eq!(
            (
                registers.prefix_tokens(),
                registers.positioned_prefix_tokens()
            ),
            (4, 0)
        );
        assert_eq!(registers.global_pool, GlobalPool::PatchMean);
        assert!(!registers.final_norm && registers.fc_norm);
        // CLIP: the norm before the blocks, no patch bias, eps 1e-5, QuickGELU.
        let clip = read(r#"{"architecture": "vit_base_patch16_clip_quickgelu_224"}"#).unwrap();
        assert!(clip.pre_norm && !clip.patch_bias);
        assert_eq!(
            (clip.layer_norm_eps, clip.hidden_act),
            (1e-5, Activation::QuickGelu)
        );
        // The checkpoint's model_args go over the registered ones.
        let averaged = read(
            r#"{"architecture": "vit_base_patch16_224",
                "model_args": {"global_pool": "avg", "reg_tokens": 2, "class_token": true}}"#,
        )
        .unwrap();
        assert_eq!(
            (
                averaged.prefix_tokens(),
                averaged.positioned_prefix_tokens()
            ),
            (3, 3)
        );
        assert!(!averaged.final_norm && averaged.fc_norm);
        let no_fc_norm = read(
            r#"{"architecture": "vit_base_patch16_reg4_gap_256",
                "model_args": {"fc_norm": false, "pool_include_prefix": true}}"#,
        )
        .unwrap();
        assert!(no_fc_norm.final_norm && !no_fc_norm.fc_norm);
        assert_eq!(no_fc_norm.global_pool, GlobalPool::TokenMean);
        // The top level's global_pool is informational, as in timm.
        let informational =
            read(r#"{"architecture": "vit_base_patch16_224", "global_pool": "avg"}"#).unwrap();
        assert_eq!(informational.global_pool, GlobalPool::ClassToken);
    }

    #[test]
    fn timm_settings_vitrt_cannot_run_are_refused_by_name() {
        let args = |args: &str| {
            format!(r#"{{"architecture": "vit_base_patch16_224", "model_args": {args}}}"#)
        };
        for (json, want) in [
            (
                r#"{"architecture": "vit_base_r50_s16_224"}"#.to_string(),
                "not one of timm's vit_* architectures",
            ),
            (
                r#"{"architecture": "vit_relpos_base_patch16_224"}"#.to_string(),
                "not one of timm's vit_* architectures",
            ),
            (
                r#"{"architecture": "vit_base_patch16_xp_224"}"#.to_string(),
                "registered with block_fn = \"ParallelScalingBlock\"",
            ),
            (
                r#"{"architecture": "vit_intern300m_patch14_448"}"#.to_string(),
                "registered with dynamic_img_size = true",
            ),
            (
                r#"{"architecture": "vit_so150m_patch16_reg4_map_256"}"#.to_string(),
                "global_pool \"map\" attends over the patch tokens after 4 prefix tokens",
            ),
            (
                args(r#"{"global_pool": "avgmax"}"#),
                "model_args.global_pool = \"avgmax\"",
            ),
            (
                args(r#"{"global_pool": "max"}"#),
                "model_args.global_pool = \"max\"",
            ),
            (
                args(r#"{"global_pool": ""}"#),
                "model_args.global_pool = \"\"",
            ),
            (
                args(r#"{"class_token": false}"#),
                "global_pool \"token\" needs the class token",
            ),
            (args(r#"{"qk_norm": true}"#), "model_args.qk_norm = true"),
            (args(r#"{"pos_embed": "none"}"#), "model_args.pos_embed"),
            (args(r#"{"act_layer": "silu"}"#), "model_args.act_layer"),
            (
                args(r#"{"norm_layer": "rmsnorm"}"#),
                "model_args.norm_layer",
            ),
            (args(r#"{"unknown": 1}"#), "model_args.unknown = 1"),
            (
                args(r#"{"embed_dim": 0}"#),
                "model_args.embed_dim must be a positive integer",
            ),
        ] {
            let err = read(&json).unwrap_err();
            assert!(err.contains(want), "{err} should mention {want}");
            assert!(err.contains("is not one vitrt runs"), "{err}");
        }
    }

    /// What timm 1.0.31 builds from each registered architecture
    /// (`scripts/fixtures/make_timm_architectures.py`).
    fn built_architectures() -> Map<String, Value> {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../tests/fixtures/timm/architectures.json"
        );
        let text = std::fs::read_to_string(path).unwrap();
        let mut all: Map<String, Value> = serde_json::from_str(&text).unwrap();
        match all.remove("architectures") {
            Some(Value::Object(map)) => map,
            other => panic!("architectures.json holds no architectures: {other:?}"),
        }
    }

    #[test]
    fn every_registered_architecture_is_read_as_timm_builds_it_or_refused() {
        let built = built_architectures();
        assert_eq!(built.len(), ARCHITECTURES.len());
        let mut read_count = 0;
        for (name, facts) in &built {
            let fact = |key: &str| &facts[key];
            let flag = |key: &str| fact(key).as_bool().unwrap();
            let count = |key: &str| fact(key).as_u64().unwrap() as usize;
            let result = read(&format!(r#"{{"architecture": "{name}"}}"#));
            // What vitrt runs: timm's plain blocks with the pools token, avg and map (map
            // only where no prefix token is left out).
            let runnable = flag("plain") && {
                let pool = fact("global_pool").as_str().unwrap();
                let prefix = usize::from(flag("class_token")) + count("reg_tokens");
                pool == "token"
                    || pool == "avg"
                    || (pool == "map" && (prefix == 0 || flag("pool_include_prefix")))
            };
            if !runnable {
                let err = result.expect_err(name);
                assert!(err.contains("is not one vitrt runs"), "{name}: {err}");
                continue;
            }
            let c = result.unwrap_or_else(|e| panic!("{name}: {e}"));
            read_count += 1;
            let pool = match fact("global_pool").as_str().unwrap() {
                "token" => GlobalPool::ClassToken,
                "avg" if flag("pool_include_prefix") => GlobalPool::TokenMean,
                "avg" => GlobalPool::PatchMean,
                _ => GlobalPool::AttentionPool,
            };
            let act = match fact("act").as_str().unwrap() {
                "GELU" => Activation::Gelu,
                "GELUTanh" => Activation::GeluTanh,
                "QuickGELU" => Activation::QuickGelu,
                other => panic!("{name}: activation {other}"),
            };
            let image = fact("img_size").as_array().unwrap();
            let image = (
                image[0].as_u64().unwrap() as usize,
                image[1].as_u64().unwrap() as usize,
            );
            let positions = match flag("no_embed_class") {
                true => PrefixPositions::None,
                false => PrefixPositions::All,
            };
            assert_eq!(
                (
                    c.hidden_size,
                    c.num_hidden_layers,
                    c.num_attention_heads,
                    c.intermediate_size,
                    c.patch_size,
                    c.image_size,
                    c.num_channels,
                ),
                (
                    count("embed_dim"),
                    count("depth"),
                    count("num_heads"),
                    count("mlp_hidden"),
                    count("patch_size"),
                    image,
                    count("in_chans"),
                ),
                "{name}: sizes"
            );
            assert_eq!(
                (
                    c.qkv_bias,
                    c.layer_scale,
                    c.has_class_token(),
                    c.num_register_tokens,
                    c.prefix_positions,
                ),
                (
                    flag("qkv_bias"),
                    flag("layer_scale"),
                    flag("class_token"),
                    count("reg_tokens"),
                    positions,
                ),
                "{name}: tokens"
            );
            assert_eq!(
                (c.pre_norm, c.final_norm, c.fc_norm, c.patch_bias),
                (
                    flag("pre_norm"),
                    flag("norm"),
                    flag("fc_norm"),
                    flag("patch_bias")
                ),
                "{name}: norms"
            );
            assert_eq!((c.global_pool, c.hidden_act), (pool, act), "{name}: pool");
            assert_eq!(
                c.layer_norm_eps,
                fact("eps").as_f64().unwrap() as f32,
                "{name}: eps"
            );
        }
        // 124 of timm 1.0.31's 138 are plain; one of those pools with `map` over registers.
        assert_eq!(read_count, 123);
    }
}
