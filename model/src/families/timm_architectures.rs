//! timm's registry of `vit_*` architectures built as a plain `VisionTransformer`: the
//! model_args each name stands for (`norm_layer`'s eps apart), as timm 1.0.31 registers them.
//! Written by `scripts/fixtures/make_timm_architectures.py`; do not edit by hand.

/// An architecture's registered model_args (a JSON object with timm's keys) and the eps of
/// its layernorms.
pub(super) struct Architecture {
    pub name: &'static str,
    pub model_args: &'static str,
    pub norm_eps: f64,
}

pub(super) const ARCHITECTURES: &[Architecture] = &[
    Architecture {
        name: "vit_base_patch8_224",
        model_args: r#"{"patch_size":8,"embed_dim":768,"depth":12,"num_heads":12,"img_size":[224,224]}"#,
        norm_eps: 1e-06,
    },
    Architecture {
        name: "vit_base_patch14_dinov2",
        model_args: r#"{"patch_size":14,"embed_dim":768,"depth":12,"num_heads":12,"init_values":1e-05,"img_size":[518,518]}"#,
        norm_eps: 1e-06,
    },
    Architecture {
        name: "vit_base_patch14_reg1_tipsv2",
        model_args: r#"{"patch_size":14,"embed_dim":768,"depth":12,"num_heads":12,"init_values":1.0,"reg_tokens":1,"no_embed_class":true,"img_size":[448,448]}"#,
        norm_eps: 1e-06,
    },
    Architecture {
        name: "vit_base_patch14_reg4_dinov2",
        model_args: r#"{"patch_size":14,"embed_dim":768,"depth":12,"num_heads":12,"init_values":1e-05,"reg_tokens":4,"no_embed_class":true,"img_size":[518,518]}"#,
        norm_eps: 1e-06,
    },
    Architecture {
        name: "vit_base_patch16_18x2_224",
        model_args: r#"{"patch_size":16,"embed_dim":768,"depth":18,"num_heads":12,"init_values":1e-05,"block_fn":"ParallelThingsBlock","img_size":[224,224]}"#,
        norm_eps: 1e-06,
    },
    Architecture {
        name: "vit_base_patch16_224",
        model_args: r#"{"patch_size":16,"embed_dim":768,"depth":12,"num_heads":12,"img_size":[224,224]}"#,
        norm_eps: 1e-06,
    },
    Architecture {
        name: "vit_base_patch16_224_miil",
        model_args: r#"{"patch_size":16,"embed_dim":768,"depth":12,"num_heads":12,"qkv_bias":false,"img_size":[224,224]}"#,
        norm_eps: 1e-06,
    },
    Architecture {
        name: "vit_base_patch16_384",
        model_args: r#"{"patch_size":16,"embed_dim":768,"depth":12,"num_heads":12,"img_size":[384,384]}"#,
        norm_eps: 1e-06,
    },
    Architecture {
        name: "vit_base_patch16_clip_224",
        model_args: r#"{"patch_size":16,"embed_dim":768,"depth":12,"num_heads":12,"pre_norm":true,"img_size":[224,224]}"#,
        norm_eps: 1e-05,
    },
    Architecture {
        name: "vit_base_patch16_clip_384",
        model_args: r#"{"patch_size":16,"embed_dim":768,"depth":12,"num_heads":12,"pre_norm":true,"img_size":[384,384]}"#,
        norm_eps: 1e-05,
    },
    Architecture {
        name: "vit_base_patch16_clip_quickgelu_224",
        model_args: r#"{"patch_size":16,"embed_dim":768,"depth":12,"num_heads":12,"pre_norm":true,"act_layer":"quick_gelu","img_size":[224,224]}"#,
        norm_eps: 1e-05,
    },
    Architecture {
        name: "vit_base_patch16_gap_224",
        model_args: r#"{"patch_size":16,"embed_dim":768,"depth":12,"num_heads":16,"class_token":false,"global_pool":"avg","fc_norm":false,"img_size":[224,224]}"#,
        norm_eps: 1e-06,
    },
    Architecture {
        name: "vit_base_patch16_plus_240",
        model_args: r#"{"patch_size":16,"embed_dim":896,"depth":12,"num_heads":14,"init_values":1e-05,"img_size":[240,240]}"#,
        norm_eps: 1e-06,
    },
    Architecture {
        name: "vit_base_patch16_plus_clip_240",
        model_args: r#"{"patch_size":16,"embed_dim":896,"depth":12,"num_heads":14,"pre_norm":true,"img_size":[240,240]}"#,
        norm_eps: 1e-05,
    },
    Architecture {
        name: "vit_base_patch16_radio_v3",
        model_args: r#"{"img_size":512,"patch_size":16,"embed_dim":768,"depth":12,"num_heads":12,"init_values":1e-05,"reg_tokens":7,"no_embed_class":true,"final_norm":false}"#,
        norm_eps: 1e-06,
    },
    Architecture {
        name: "vit_base_patch16_reg4_gap_256",
        model_args: r#"{"patch_size":16,"embed_dim":768,"depth":12,"num_heads":12,"class_token":false,"no_embed_class":true,"global_pool":"avg","reg_tokens":4,"img_size":[256,256]}"#,
        norm_eps: 1e-06,
    },
    Architecture {
        name: "vit_base_patch16_rpn_224",
        model_args: r#"{"patch_size":16,"embed_dim":768,"depth":12,"num_heads":12,"qkv_bias":false,"init_values":1e-05,"class_token":false,"block_fn":"ResPostBlock","global_pool":"avg","img_size":[224,224]}"#,
        norm_eps: 1e-06,
    },
    Architecture {
        name: "vit_base_patch16_siglip_224",
        model_args: r#"{"patch_size":16,"embed_dim":768,"depth":12,"num_heads":12,"class_token":false,"global_pool":"map","img_size":[224,224]}"#,
        norm_eps: 1e-06,
    },
    Architecture {
        name: "vit_base_patch16_siglip_256",
        model_args: r#"{"patch_size":16,"embed_dim":768,"depth":12,"num_heads":12,"class_token":false,"global_pool":"map","img_size":[256,256]}"#,
        norm_eps: 1e-06,
    },
    Architecture {
        name: "vit_base_patch16_siglip_384",
        model_args: r#"{"patch_size":16,"embed_dim":768,"depth":12,"num_heads":12,"class_token":false,"global_pool":"map","img_size":[384,384]}"#,
        norm_eps: 1e-06,
    },
    Architecture {
        name: "vit_base_patch16_siglip_512",
        model_args: r#"{"patch_size":16,"embed_dim":768,"depth":12,"num_heads":12,"class_token":false,"global_pool":"map","img_size":[512,512]}"#,
        norm_eps: 1e-06,
    },
    Architecture {
        name: "vit_base_patch16_siglip_gap_224",
        model_args: r#"{"patch_size":16,"embed_dim":768,"depth":12,"num_heads":12,"class_token":false,"global_pool":"avg","fc_norm":false,"img_size":[224,224]}"#,
        norm_eps: 1e-06,
    },
    Architecture {
        name: "vit_base_patch16_siglip_gap_256",
        model_args: r#"{"patch_size":16,"embed_dim":768,"depth":12,"num_heads":12,"class_token":false,"global_pool":"avg","fc_norm":false,"img_size":[256,256]}"#,
        norm_eps: 1e-06,
    },
    Architecture {
        name: "vit_base_patch16_siglip_gap_384",
        model_args: r#"{"patch_size":16,"embed_dim":768,"depth":12,"num_heads":12,"class_token":false,"global_pool":"avg","fc_norm":false,"img_size":[384,384]}"#,
        norm_eps: 1e-06,
    },
    Architecture {
        name: "vit_base_patch16_siglip_gap_512",
        model_args: r#"{"patch_size":16,"embed_dim":768,"depth":12,"num_heads":12,"class_token":false,"global_pool":"avg","fc_norm":false,"img_size":[512,512]}"#,
        norm_eps: 1e-06,
    },
    Architecture {
        name: "vit_base_patch16_xp_224",
        model_args: r#"{"patch_size":16,"embed_dim":768,"depth":12,"num_heads":12,"pre_norm":true,"no_embed_class":true,"norm_layer":"RmsNorm","block_fn":"ParallelScalingBlock","qkv_bias":false,"qk_norm":true,"img_size":[224,224]}"#,
        norm_eps: 1e-06,
    },
    Architecture {
        name: "vit_base_patch32_224",
        model_args: r#"{"patch_size":32,"embed_dim":768,"depth":12,"num_heads":12,"img_size":[224,224]}"#,
        norm_eps: 1e-06,
    },
    Architecture {
        name: "vit_base_patch32_384",
        model_args: r#"{"patch_size":32,"embed_dim":768,"depth":12,"num_heads":12,"img_size":[384,384]}"#,
        norm_eps: 1e-06,
    },
    Architecture {
        name: "vit_base_patch32_clip_224",
        model_args: r#"{"patch_size":32,"embed_dim":768,"depth":12,"num_heads":12,"pre_norm":true,"img_size":[224,224]}"#,
        norm_eps: 1e-05,
    },
    Architecture {
        name: "vit_base_patch32_clip_256",
        model_args: r#"{"patch_size":32,"embed_dim":768,"depth":12,"num_heads":12,"pre_norm":true,"img_size":[256,256]}"#,
        norm_eps: 1e-05,
    },
    Architecture {
        name: "vit_base_patch32_clip_384",
        model_args: r#"{"patch_size":32,"embed_dim":768,"depth":12,"num_heads":12,"pre_norm":true,"img_size":[384,384]}"#,
        norm_eps: 1e-05,
    },
    Architecture {
        name: "vit_base_patch32_clip_448",
        model_args: r#"{"patch_size":32,"embed_dim":768,"depth":12,"num_heads":12,"pre_norm":true,"img_size":[448,448]}"#,
        norm_eps: 1e-05,
    },
    Architecture {
        name: "vit_base_patch32_clip_quickgelu_224",
        model_args: r#"{"patch_size":32,"embed_dim":768,"depth":12,"num_heads":12,"pre_norm":true,"act_layer":"quick_gelu","img_size":[224,224]}"#,
        norm_eps: 1e-05,
    },
    Architecture {
        name: "vit_base_patch32_plus_256",
        model_args: r#"{"patch_size":32,"embed_dim":896,"depth":12,"num_heads":14,"init_values":1e-05,"img_size":[256,256]}"#,
        norm_eps: 1e-06,
    },
    Architecture {
        name: "vit_base_patch32_siglip_256",
        model_args: r#"{"patch_size":32,"embed_dim":768,"depth":12,"num_heads":12,"class_token":false,"global_pool":"map","act_layer":"gelu_tanh","img_size":[256,256]}"#,
        norm_eps: 1e-06,
    },
    Architecture {
        name: "vit_base_patch32_siglip_gap_256",
        model_args: r#"{"patch_size":32,"embed_dim":768,"depth":12,"num_heads":12,"class_token":false,"global_pool":"avg","fc_norm":false,"act_layer":"gelu_tanh","img_size":[256,256]}"#,
        norm_eps: 1e-06,
    },
    Architecture {
        name: "vit_betwixt_patch16_gap_256",
        model_args: r#"{"patch_size":16,"embed_dim":640,"depth":12,"num_heads":10,"class_token":false,"global_pool":"avg","qkv_bias":false,"init_values":1e-06,"fc_norm":false,"img_size":[256,256]}"#,
        norm_eps: 1e-06,
    },
    Architecture {
        name: "vit_betwixt_patch16_reg1_gap_256",
        model_args: r#"{"patch_size":16,"embed_dim":640,"depth":12,"num_heads":10,"init_values":1e-05,"class_token":false,"no_embed_class":true,"reg_tokens":1,"global_pool":"avg","img_size":[256,256]}"#,
        norm_eps: 1e-06,
    },
    Architecture {
        name: "vit_betwixt_patch16_reg4_gap_256",
        model_args: r#"{"patch_size":16,"embed_dim":640,"depth":12,"num_heads":10,"init_values":1e-05,"class_token":false,"no_embed_class":true,"reg_tokens":4,"global_pool":"avg","img_size":[256,256]}"#,
        norm_eps: 1e-06,
    },
    Architecture {
        name: "vit_betwixt_patch16_reg4_gap_384",
        model_args: r#"{"patch_size":16,"embed_dim":640,"depth":12,"num_heads":10,"init_values":1e-05,"class_token":false,"no_embed_class":true,"reg_tokens":4,"global_pool":"avg","img_size":[384,384]}"#,
        norm_eps: 1e-06,
    },
    Architecture {
        name: "vit_betwixt_patch32_clip_224",
        model_args: r#"{"patch_size":32,"embed_dim":640,"depth":12,"num_heads":10,"pre_norm":true,"img_size":[224,224]}"#,
        norm_eps: 1e-05,
    },
    Architecture {
        name: "vit_dlittle_patch16_reg1_gap_256",
        model_args: r#"{"patch_size":16,"embed_dim":320,"depth":14,"num_heads":5,"init_values":1e-05,"mlp_ratio":5.6,"class_token":false,"no_embed_class":true,"reg_tokens":1,"global_pool":"avg","attn_layer":"diff","img_size":[256,256]}"#,
        norm_eps: 1e-06,
    },
    Architecture {
        name: "vit_dpwee_patch16_reg1_gap_256",
        model_args: r#"{"patch_size":16,"embed_dim":256,"depth":16,"num_heads":4,"init_values":1e-05,"mlp_ratio":5,"class_token":false,"no_embed_class":true,"reg_tokens":1,"global_pool":"avg","block_fn":"DiffParallelScalingBlock","img_size":[256,256]}"#,
        norm_eps: 1e-06,
    },
    Architecture {
        name: "vit_dwee_patch16_reg1_gap_256",
        model_args: r#"{"patch_size":16,"embed_dim":256,"depth":14,"num_heads":4,"init_values":1e-05,"mlp_ratio":5,"class_token":false,"no_embed_class":true,"reg_tokens":1,"global_pool":"avg","attn_layer":"diff","img_size":[256,256]}"#,
        norm_eps: 1e-06,
    },
    Architecture {
        name: "vit_giant_patch14_224",
        model_args: r#"{"patch_size":14,"embed_dim":1408,"mlp_ratio":4.363636363636363,"depth":40,"num_heads":16,"img_size":[224,224]}"#,
        norm_eps: 1e-06,
    },
    Architecture {
        name: "vit_giant_patch14_clip_224",
        model_args: r#"{"patch_size":14,"embed_dim":1408,"mlp_ratio":4.363636363636363,"depth":40,"num_heads":16,"pre_norm":true,"img_size":[224,224]}"#,
        norm_eps: 1e-05,
    },
    Architecture {
        name: "vit_giant_patch14_dinov2",
        model_args: r#"{"patch_size":14,"embed_dim":1536,"depth":40,"num_heads":24,"init_values":1e-05,"mlp_ratio":5.33334,"mlp_layer":"GluMlp","act_layer":"SiLU","img_size":[518,518]}"#,
        norm_eps: 1e-06,
    },
    Architecture {
        name: "vit_giant_patch14_reg1_tipsv2",
        model_args: r#"{"patch_size":14,"embed_dim":1536,"depth":40,"num_heads":24,"init_values":1.0,"mlp_ratio":5.33334,"mlp_layer":"GluMlp","act_layer":"SiLU","reg_tokens":1,"no_embed_class":true,"img_size":[448,448]}"#,
        norm_eps: 1e-06,
    },
    Architecture {
        name: "vit_giant_patch14_reg4_dinov2",
        model_args: r#"{"patch_size":14,"embed_dim":1536,"depth":40,"num_heads":24,"init_values":1e-05,"mlp_ratio":5.33334,"mlp_layer":"GluMlp","act_layer":"SiLU","reg_tokens":4,"no_embed_class":true,"img_size":[518,518]}"#,
        norm_eps: 1e-06,
    },
    Architecture {
        name: "vit_giant_patch16_gap_224",
        model_args: r#"{"patch_size":16,"embed_dim":1408,"depth":40,"num_heads":16,"mlp_ratio":4.363636363636363,"class_token":false,"global_pool":"avg","fc_norm":false,"img_size":[224,224]}"#,
        norm_eps: 1e-06,
    },
    Architecture {
        name: "vit_giant_patch16_radio_v3",
        model_args: r#"{"img_size":512,"patch_size":16,"embed_dim":1536,"depth":40,"num_heads":24,"reg_tokens":7,"no_embed_class":true,"final_norm":false}"#,
        norm_eps: 1e-06,
    },
    Architecture {
        name: "vit_giantopt_patch16_siglip_256",
        model_args: r#"{"patch_size":16,"embed_dim":1536,"depth":40,"num_heads":16,"class_token":false,"global_pool":"map","act_layer":"gelu_tanh","img_size":[256,256]}"#,
        norm_eps: 1e-06,
    },
    Architecture {
        name: "vit_giantopt_patch16_siglip_384",
        model_args: r#"{"patch_size":16,"embed_dim":1536,"depth":40,"num_heads":16,"class_token":false,"global_pool":"map","act_layer":"gelu_tanh","img_size":[384,384]}"#,
        norm_eps: 1e-06,
    },
    Architecture {
        name: "vit_giantopt_patch16_siglip_gap_256",
        model_args: r#"{"patch_size":16,"embed_dim":1536,"depth":40,"num_heads":16,"class_token":false,"global_pool":"avg","fc_norm":false,"act_layer":"gelu_tanh","img_size":[256,256]}"#,
        norm_eps: 1e-06,
    },
    Architecture {
        name: "vit_giantopt_patch16_siglip_gap_384",
        model_args: r#"{"patch_size":16,"embed_dim":1536,"depth":40,"num_heads":16,"class_token":false,"global_pool":"avg","fc_norm":false,"act_layer":"gelu_tanh","img_size":[384,384]}"#,
        norm_eps: 1e-06,
    },
    Architecture {
        name: "vit_gigantic_patch14_224",
        model_args: r#"{"patch_size":14,"embed_dim":1664,"mlp_ratio":4.923076923076923,"depth":48,"num_heads":16,"img_size":[224,224]}"#,
        norm_eps: 1e-06,
    },
    Architecture {
        name: "vit_gigantic_patch14_clip_224",
        model_args: r#"{"patch_size":14,"embed_dim":1664,"mlp_ratio":4.923076923076923,"depth":48,"num_heads":16,"pre_norm":true,"img_size":[224,224]}"#,
        norm_eps: 1e-05,
    },
    Architecture {
        name: "vit_gigantic_patch14_clip_378",
        model_args: r#"{"patch_size":14,"embed_dim":1664,"mlp_ratio":4.923076923076923,"depth":48,"num_heads":16,"pre_norm":true,"img_size":[378,378]}"#,
        norm_eps: 1e-05,
    },
    Architecture {
        name: "vit_gigantic_patch14_clip_quickgelu_224",
        model_args: r#"{"patch_size":14,"embed_dim":1664,"mlp_ratio":4.923076923076923,"depth":48,"num_heads":16,"pre_norm":true,"act_layer":"quick_gelu","img_size":[224,224]}"#,
        norm_eps: 1e-05,
    },
    Architecture {
        name: "vit_huge_patch14_224",
        model_args: r#"{"patch_size":14,"embed_dim":1280,"depth":32,"num_heads":16,"img_size":[224,224]}"#,
        norm_eps: 1e-06,
    },
    Architecture {
        name: "vit_huge_patch14_clip_224",
        model_args: r#"{"patch_size":14,"embed_dim":1280,"depth":32,"num_heads":16,"pre_norm":true,"img_size":[224,224]}"#,
        norm_eps: 1e-05,
    },
    Architecture {
        name: "vit_huge_patch14_clip_336",
        model_args: r#"{"patch_size":14,"embed_dim":1280,"depth":32,"num_heads":16,"pre_norm":true,"img_size":[336,336]}"#,
        norm_eps: 1e-05,
    },
    Architecture {
        name: "vit_huge_patch14_clip_378",
        model_args: r#"{"patch_size":14,"embed_dim":1280,"depth":32,"num_heads":16,"pre_norm":true,"img_size":[378,378]}"#,
        norm_eps: 1e-05,
    },
    Architecture {
        name: "vit_huge_patch14_clip_quickgelu_224",
        model_args: r#"{"patch_size":14,"embed_dim":1280,"depth":32,"num_heads":16,"pre_norm":true,"act_layer":"quick_gelu","img_size":[224,224]}"#,
        norm_eps: 1e-05,
    },
    Architecture {
        name: "vit_huge_patch14_clip_quickgelu_378",
        model_args: r#"{"patch_size":14,"embed_dim":1280,"depth":32,"num_heads":16,"pre_norm":true,"act_layer":"quick_gelu","img_size":[378,378]}"#,
        norm_eps: 1e-05,
    },
    Architecture {
        name: "vit_huge_patch14_gap_224",
        model_args: r#"{"patch_size":14,"embed_dim":1280,"depth":32,"num_heads":16,"class_token":false,"global_pool":"avg","fc_norm":false,"img_size":[224,224]}"#,
        norm_eps: 1e-06,
    },
    Architecture {
        name: "vit_huge_patch14_xp_224",
        model_args: r#"{"patch_size":14,"embed_dim":1280,"depth":32,"num_heads":16,"pre_norm":true,"no_embed_class":true,"norm_layer":"RmsNorm","block_fn":"ParallelScalingBlock","qkv_bias":false,"qk_norm":true,"img_size":[224,224]}"#,
        norm_eps: 1e-06,
    },
    Architecture {
        name: "vit_huge_patch16_gap_448",
        model_args: r#"{"patch_size":16,"embed_dim":1280,"depth":32,"num_heads":16,"class_token":false,"global_pool":"avg","fc_norm":false,"img_size":[448,448]}"#,
        norm_eps: 1e-06,
    },
    Architecture {
        name: "vit_huge_patch16_radio_v3",
        model_args: r#"{"img_size":512,"patch_size":16,"embed_dim":1280,"depth":32,"num_heads":16,"reg_tokens":7,"no_embed_class":true,"final_norm":false}"#,
        norm_eps: 1e-06,
    },
    Architecture {
        name: "vit_huge_patch16_radio_v4",
        model_args: r#"{"img_size":512,"patch_size":16,"embed_dim":1280,"depth":32,"num_heads":16,"reg_tokens":9,"no_embed_class":true,"final_norm":false}"#,
        norm_eps: 1e-06,
    },
    Architecture {
        name: "vit_intern300m_patch14_448",
        model_args: r#"{"patch_size":14,"embed_dim":1024,"depth":24,"num_heads":16,"init_values":0.1,"final_norm":false,"dynamic_img_size":true,"img_size":[448,448]}"#,
        norm_eps: 1e-06,
    },
    Architecture {
        name: "vit_large_patch14_224",
        model_args: r#"{"patch_size":14,"embed_dim":1024,"depth":24,"num_heads":16,"img_size":[224,224]}"#,
        norm_eps: 1e-06,
    },
    Architecture {
        name: "vit_large_patch14_clip_224",
        model_args: r#"{"patch_size":14,"embed_dim":1024,"depth":24,"num_heads":16,"pre_norm":true,"img_size":[224,224]}"#,
        norm_eps: 1e-05,
    },
    Architecture {
        name: "vit_large_patch14_clip_336",
        model_args: r#"{"patch_size":14,"embed_dim":1024,"depth":24,"num_heads":16,"pre_norm":true,"img_size":[336,336]}"#,
        norm_eps: 1e-05,
    },
    Architecture {
        name: "vit_large_patch14_clip_quickgelu_224",
        model_args: r#"{"patch_size":14,"embed_dim":1024,"depth":24,"num_heads":16,"pre_norm":true,"act_layer":"quick_gelu","img_size":[224,224]}"#,
        norm_eps: 1e-05,
    },
    Architecture {
        name: "vit_large_patch14_clip_quickgelu_336",
        model_args: r#"{"patch_size":14,"embed_dim":1024,"depth":24,"num_heads":16,"pre_norm":true,"act_layer":"quick_gelu","img_size":[336,336]}"#,
        norm_eps: 1e-05,
    },
    Architecture {
        name: "vit_large_patch14_dinov2",
        model_args: r#"{"patch_size":14,"embed_dim":1024,"depth":24,"num_heads":16,"init_values":1e-05,"img_size":[518,518]}"#,
        norm_eps: 1e-06,
    },
    Architecture {
        name: "vit_large_patch14_reg1_tipsv2",
        model_args: r#"{"patch_size":14,"embed_dim":1024,"depth":24,"num_heads":16,"init_values":1.0,"reg_tokens":1,"no_embed_class":true,"img_size":[448,448]}"#,
        norm_eps: 1e-06,
    },
    Architecture {
        name: "vit_large_patch14_reg4_dinov2",
        model_args: r#"{"patch_size":14,"embed_dim":1024,"depth":24,"num_heads":16,"init_values":1e-05,"reg_tokens":4,"no_embed_class":true,"img_size":[518,518]}"#,
        norm_eps: 1e-06,
    },
    Architecture {
        name: "vit_large_patch14_xp_224",
        model_args: r#"{"patch_size":14,"embed_dim":1024,"depth":24,"num_heads":16,"pre_norm":true,"no_embed_class":true,"norm_layer":"RmsNorm","block_fn":"ParallelScalingBlock","qkv_bias":false,"qk_norm":true,"img_size":[224,224]}"#,
        norm_eps: 1e-06,
    },
    Architecture {
        name: "vit_large_patch16_224",
        model_args: r#"{"patch_size":16,"embed_dim":1024,"depth":24,"num_heads":16,"img_size":[224,224]}"#,
        norm_eps: 1e-06,
    },
    Architecture {
        name: "vit_large_patch16_384",
        model_args: r#"{"patch_size":16,"embed_dim":1024,"depth":24,"num_heads":16,"img_size":[384,384]}"#,
        norm_eps: 1e-06,
    },
    Architecture {
        name: "vit_large_patch16_radio_v3",
        model_args: r#"{"img_size":512,"patch_size":16,"embed_dim":1024,"depth":24,"num_heads":16,"init_values":1e-05,"reg_tokens":7,"no_embed_class":true,"final_norm":false}"#,
        norm_eps: 1e-06,
    },
    Architecture {
        name: "vit_large_patch16_siglip_256",
        model_args: r#"{"patch_size":16,"embed_dim":1024,"depth":24,"num_heads":16,"class_token":false,"global_pool":"map","img_size":[256,256]}"#,
        norm_eps: 1e-06,
    },
    Architecture {
        name: "vit_large_patch16_siglip_384",
        model_args: r#"{"patch_size":16,"embed_dim":1024,"depth":24,"num_heads":16,"class_token":false,"global_pool":"map","img_size":[384,384]}"#,
        norm_eps: 1e-06,
    },
    Architecture {
        name: "vit_large_patch16_siglip_512",
        model_args: r#"{"patch_size":16,"embed_dim":1024,"depth":24,"num_heads":16,"class_token":false,"global_pool":"map","act_layer":"gelu_tanh","img_size":[512,512]}"#,
        norm_eps: 1e-06,
    },
    Architecture {
        name: "vit_large_patch16_siglip_gap_256",
        model_args: r#"{"patch_size":16,"embed_dim":1024,"depth":24,"num_heads":16,"class_token":false,"global_pool":"avg","fc_norm":false,"img_size":[256,256]}"#,
        norm_eps: 1e-06,
    },
    Architecture {
        name: "vit_large_patch16_siglip_gap_384",
        model_args: r#"{"patch_size":16,"embed_dim":1024,"depth":24,"num_heads":16,"class_token":false,"global_pool":"avg","fc_norm":false,"img_size":[384,384]}"#,
        norm_eps: 1e-06,
    },
    Architecture {
        name: "vit_large_patch16_siglip_gap_512",
        model_args: r#"{"patch_size":16,"embed_dim":1024,"depth":24,"num_heads":16,"class_token":false,"global_pool":"avg","fc_norm":false,"act_layer":"gelu_tanh","img_size":[512,512]}"#,
        norm_eps: 1e-06,
    },
    Architecture {
        name: "vit_large_patch32_224",
        model_args: r#"{"patch_size":32,"embed_dim":1024,"depth":24,"num_heads":16,"img_size":[224,224]}"#,
        norm_eps: 1e-06,
    },
    Architecture {
        name: "vit_large_patch32_384",
        model_args: r#"{"patch_size":32,"embed_dim":1024,"depth":24,"num_heads":16,"img_size":[384,384]}"#,
        norm_eps: 1e-06,
    },
    Architecture {
        name: "vit_little_patch16_reg1_gap_256",
        model_args: r#"{"patch_size":16,"embed_dim":320,"depth":14,"num_heads":5,"init_values":1e-05,"mlp_ratio":5.6,"class_token":false,"no_embed_class":true,"reg_tokens":1,"global_pool":"avg","img_size":[256,256]}"#,
        norm_eps: 1e-06,
    },
    Architecture {
        name: "vit_little_patch16_reg4_gap_256",
        model_args: r#"{"patch_size":16,"embed_dim":320,"depth":14,"num_heads":5,"init_values":1e-05,"mlp_ratio":5.6,"class_token":false,"no_embed_class":true,"reg_tokens":4,"global_pool":"avg","img_size":[256,256]}"#,
        norm_eps: 1e-06,
    },
    Architecture {
        name: "vit_medium_patch16_clip_224",
        model_args: r#"{"embed_dim":512,"depth":12,"num_heads":8,"pre_norm":true,"img_size":[224,224]}"#,
        norm_eps: 1e-05,
    },
    Architecture {
        name: "vit_medium_patch16_gap_240",
        model_args: r#"{"patch_size":16,"embed_dim":512,"depth":12,"num_heads":8,"class_token":false,"global_pool":"avg","qkv_bias":false,"init_values":1e-06,"fc_norm":false,"img_size":[240,240]}"#,
        norm_eps: 1e-06,
    },
    Architecture {
        name: "vit_medium_patch16_gap_256",
        model_args: r#"{"patch_size":16,"embed_dim":512,"depth":12,"num_heads":8,"class_token":false,"global_pool":"avg","qkv_bias":false,"init_values":1e-06,"fc_norm":false,"img_size":[256,256]}"#,
        norm_eps: 1e-06,
    },
    Architecture {
        name: "vit_medium_patch16_gap_384",
        model_args: r#"{"patch_size":16,"embed_dim":512,"depth":12,"num_heads":8,"class_token":false,"global_pool":"avg","qkv_bias":false,"init_values":1e-06,"fc_norm":false,"img_size":[384,384]}"#,
        norm_eps: 1e-06,
    },
    Architecture {
        name: "vit_medium_patch16_reg1_gap_256",
        model_args: r#"{"patch_size":16,"embed_dim":512,"depth":12,"num_heads":8,"init_values":1e-05,"class_token":false,"no_embed_class":true,"reg_tokens":1,"global_pool":"avg","img_size":[256,256]}"#,
        norm_eps: 1e-06,
    },
    Architecture {
        name: "vit_medium_patch16_reg4_gap_256",
        model_args: r#"{"patch_size":16,"embed_dim":512,"depth":12,"num_heads":8,"init_values":1e-05,"class_token":false,"no_embed_class":true,"reg_tokens":4,"global_pool":"avg","img_size":[256,256]}"#,
        norm_eps: 1e-06,
    },
    Architecture {
        name: "vit_medium_patch32_clip_224",
        model_args: r#"{"patch_size":32,"embed_dim":512,"depth":12,"num_heads":8,"pre_norm":true,"img_size":[224,224]}"#,
        norm_eps: 1e-05,
    },
    Architecture {
        name: "vit_mediumd_patch16_reg4_gap_256",
        model_args: r#"{"patch_size":16,"embed_dim":512,"depth":20,"num_heads":8,"init_values":1e-05,"class_token":false,"no_embed_class":true,"reg_tokens":4,"global_pool":"avg","img_size":[256,256]}"#,
        norm_eps: 1e-06,
    },
    Architecture {
        name: "vit_mediumd_patch16_reg4_gap_384",
        model_args: r#"{"patch_size":16,"embed_dim":512,"depth":20,"num_heads":8,"init_values":1e-05,"class_token":false,"no_embed_class":true,"reg_tokens":4,"global_pool":"avg","img_size":[384,384]}"#,
        norm_eps: 1e-06,
    },
    Architecture {
        name: "vit_pwee_patch16_reg1_gap_256",
        model_args: r#"{"patch_size":16,"embed_dim":256,"depth":16,"num_heads":4,"init_values":1e-05,"mlp_ratio":5,"class_token":false,"no_embed_class":true,"reg_tokens":1,"global_pool":"avg","block_fn":"ParallelScalingBlock","img_size":[256,256]}"#,
        norm_eps: 1e-06,
    },
    Architecture {
        name: "vit_small_patch8_224",
        model_args: r#"{"patch_size":8,"embed_dim":384,"depth":12,"num_heads":6,"img_size":[224,224]}"#,
        norm_eps: 1e-06,
    },
    Architecture {
        name: "vit_small_patch14_dinov2",
        model_args: r#"{"patch_size":14,"embed_dim":384,"depth":12,"num_heads":6,"init_values":1e-05,"img_size":[518,518]}"#,
        norm_eps: 1e-06,
    },
    Architecture {
        name: "vit_small_patch14_reg4_dinov2",
        model_args: r#"{"patch_size":14,"embed_dim":384,"depth":12,"num_heads":6,"init_values":1e-05,"reg_tokens":4,"no_embed_class":true,"img_size":[518,518]}"#,
        norm_eps: 1e-06,
    },
    Architecture {
        name: "vit_small_patch16_18x2_224",
        model_args: r#"{"patch_size":16,"embed_dim":384,"depth":18,"num_heads":6,"init_values":1e-05,"block_fn":"ParallelThingsBlock","img_size":[224,224]}"#,
        norm_eps: 1e-06,
    },
    Architecture {
        name: "vit_small_patch16_36x1_224",
        model_args: r#"{"patch_size":16,"embed_dim":384,"depth":36,"num_heads":6,"init_values":1e-05,"img_size":[224,224]}"#,
        norm_eps: 1e-06,
    },
    Architecture {
        name: "vit_small_patch16_224",
        model_args: r#"{"patch_size":16,"embed_dim":384,"depth":12,"num_heads":6,"img_size":[224,224]}"#,
        norm_eps: 1e-06,
    },
    Architecture {
        name: "vit_small_patch16_384",
        model_args: r#"{"patch_size":16,"embed_dim":384,"depth":12,"num_heads":6,"img_size":[384,384]}"#,
        norm_eps: 1e-06,
    },
    Architecture {
        name: "vit_small_patch32_224",
        model_args: r#"{"patch_size":32,"embed_dim":384,"depth":12,"num_heads":6,"img_size":[224,224]}"#,
        norm_eps: 1e-06,
    },
    Architecture {
        name: "vit_small_patch32_384",
        model_args: r#"{"patch_size":32,"embed_dim":384,"depth":12,"num_heads":6,"img_size":[384,384]}"#,
        norm_eps: 1e-06,
    },
    Architecture {
        name: "vit_so150m2_patch16_reg1_gap_256",
        model_args: r#"{"patch_size":16,"embed_dim":832,"depth":21,"num_heads":13,"mlp_ratio":2.6153846153846154,"init_values":1e-05,"qkv_bias":false,"class_token":false,"reg_tokens":1,"global_pool":"avg","img_size":[256,256]}"#,
        norm_eps: 1e-06,
    },
    Architecture {
        name: "vit_so150m2_patch16_reg1_gap_384",
        model_args: r#"{"patch_size":16,"embed_dim":832,"depth":21,"num_heads":13,"mlp_ratio":2.6153846153846154,"init_values":1e-05,"qkv_bias":false,"class_token":false,"reg_tokens":1,"global_pool":"avg","img_size":[384,384]}"#,
        norm_eps: 1e-06,
    },
    Architecture {
        name: "vit_so150m2_patch16_reg1_gap_448",
        model_args: r#"{"patch_size":16,"embed_dim":832,"depth":21,"num_heads":13,"mlp_ratio":2.6153846153846154,"init_values":1e-05,"qkv_bias":false,"class_token":false,"reg_tokens":1,"global_pool":"avg","img_size":[448,448]}"#,
        norm_eps: 1e-06,
    },
    Architecture {
        name: "vit_so150m_patch16_reg4_gap_256",
        model_args: r#"{"patch_size":16,"embed_dim":896,"depth":18,"num_heads":14,"mlp_ratio":2.572,"class_token":false,"reg_tokens":4,"global_pool":"avg","fc_norm":false,"img_size":[256,256]}"#,
        norm_eps: 1e-06,
    },
    Architecture {
        name: "vit_so150m_patch16_reg4_gap_384",
        model_args: r#"{"patch_size":16,"embed_dim":896,"depth":18,"num_heads":14,"mlp_ratio":2.572,"class_token":false,"reg_tokens":4,"global_pool":"avg","fc_norm":false,"img_size":[384,384]}"#,
        norm_eps: 1e-06,
    },
    Architecture {
        name: "vit_so150m_patch16_reg4_map_256",
        model_args: r#"{"patch_size":16,"embed_dim":896,"depth":18,"num_heads":14,"mlp_ratio":2.572,"class_token":false,"reg_tokens":4,"global_pool":"map","img_size":[256,256]}"#,
        norm_eps: 1e-06,
    },
    Architecture {
        name: "vit_so400m_patch14_reg1_tipsv2",
        model_args: r#"{"patch_size":14,"embed_dim":1152,"depth":27,"num_heads":16,"init_values":1.0,"mlp_ratio":3.736111111111111,"reg_tokens":1,"no_embed_class":true,"img_size":[448,448]}"#,
        norm_eps: 1e-06,
    },
    Architecture {
        name: "vit_so400m_patch14_siglip_224",
        model_args: r#"{"patch_size":14,"embed_dim":1152,"depth":27,"num_heads":16,"mlp_ratio":3.7362,"class_token":false,"global_pool":"map","img_size":[224,224]}"#,
        norm_eps: 1e-06,
    },
    Architecture {
        name: "vit_so400m_patch14_siglip_378",
        model_args: r#"{"patch_size":14,"embed_dim":1152,"depth":27,"num_heads":16,"mlp_ratio":3.7362,"class_token":false,"global_pool":"map","img_size":[378,378]}"#,
        norm_eps: 1e-06,
    },
    Architecture {
        name: "vit_so400m_patch14_siglip_384",
        model_args: r#"{"patch_size":14,"embed_dim":1152,"depth":27,"num_heads":16,"mlp_ratio":3.7362,"class_token":false,"global_pool":"map","img_size":[384,384]}"#,
        norm_eps: 1e-06,
    },
    Architecture {
        name: "vit_so400m_patch14_siglip_gap_224",
        model_args: r#"{"patch_size":14,"embed_dim":1152,"depth":27,"num_heads":16,"mlp_ratio":3.7362,"class_token":false,"global_pool":"avg","fc_norm":false,"img_size":[224,224]}"#,
        norm_eps: 1e-06,
    },
    Architecture {
        name: "vit_so400m_patch14_siglip_gap_378",
        model_args: r#"{"patch_size":14,"embed_dim":1152,"depth":27,"num_heads":16,"mlp_ratio":3.7362,"class_token":false,"global_pool":"avg","fc_norm":false,"img_size":[378,378]}"#,
        norm_eps: 1e-06,
    },
    Architecture {
        name: "vit_so400m_patch14_siglip_gap_384",
        model_args: r#"{"patch_size":14,"embed_dim":1152,"depth":27,"num_heads":16,"mlp_ratio":3.7362,"class_token":false,"global_pool":"avg","fc_norm":false,"img_size":[384,384]}"#,
        norm_eps: 1e-06,
    },
    Architecture {
        name: "vit_so400m_patch14_siglip_gap_448",
        model_args: r#"{"patch_size":14,"embed_dim":1152,"depth":27,"num_heads":16,"mlp_ratio":3.7362,"class_token":false,"global_pool":"avg","fc_norm":false,"img_size":[448,448]}"#,
        norm_eps: 1e-06,
    },
    Architecture {
        name: "vit_so400m_patch14_siglip_gap_896",
        model_args: r#"{"patch_size":14,"embed_dim":1152,"depth":27,"num_heads":16,"mlp_ratio":3.7362,"class_token":false,"global_pool":"avg","fc_norm":false,"img_size":[896,896]}"#,
        norm_eps: 1e-06,
    },
    Architecture {
        name: "vit_so400m_patch16_radio_v4",
        model_args: r#"{"img_size":512,"patch_size":16,"embed_dim":1152,"depth":27,"num_heads":16,"mlp_ratio":3.736111111111111,"reg_tokens":9,"no_embed_class":true,"final_norm":false}"#,
        norm_eps: 1e-06,
    },
    Architecture {
        name: "vit_so400m_patch16_siglip_256",
        model_args: r#"{"patch_size":16,"embed_dim":1152,"depth":27,"num_heads":16,"mlp_ratio":3.7362,"class_token":false,"global_pool":"map","act_layer":"gelu_tanh","img_size":[256,256]}"#,
        norm_eps: 1e-06,
    },
    Architecture {
        name: "vit_so400m_patch16_siglip_384",
        model_args: r#"{"patch_size":16,"embed_dim":1152,"depth":27,"num_heads":16,"mlp_ratio":3.7362,"class_token":false,"global_pool":"map","act_layer":"gelu_tanh","img_size":[384,384]}"#,
        norm_eps: 1e-06,
    },
    Architecture {
        name: "vit_so400m_patch16_siglip_512",
        model_args: r#"{"patch_size":16,"embed_dim":1152,"depth":27,"num_heads":16,"mlp_ratio":3.7362,"class_token":false,"global_pool":"map","act_layer":"gelu_tanh","img_size":[512,512]}"#,
        norm_eps: 1e-06,
    },
    Architecture {
        name: "vit_so400m_patch16_siglip_gap_256",
        model_args: r#"{"patch_size":16,"embed_dim":1152,"depth":27,"num_heads":16,"mlp_ratio":3.7362,"class_token":false,"global_pool":"avg","fc_norm":false,"act_layer":"gelu_tanh","img_size":[256,256]}"#,
        norm_eps: 1e-06,
    },
    Architecture {
        name: "vit_so400m_patch16_siglip_gap_384",
        model_args: r#"{"patch_size":16,"embed_dim":1152,"depth":27,"num_heads":16,"mlp_ratio":3.7362,"class_token":false,"global_pool":"avg","fc_norm":false,"act_layer":"gelu_tanh","img_size":[384,384]}"#,
        norm_eps: 1e-06,
    },
    Architecture {
        name: "vit_so400m_patch16_siglip_gap_512",
        model_args: r#"{"patch_size":16,"embed_dim":1152,"depth":27,"num_heads":16,"mlp_ratio":3.7362,"class_token":false,"global_pool":"avg","fc_norm":false,"act_layer":"gelu_tanh","img_size":[512,512]}"#,
        norm_eps: 1e-06,
    },
    Architecture {
        name: "vit_tiny_patch16_224",
        model_args: r#"{"patch_size":16,"embed_dim":192,"depth":12,"num_heads":3,"img_size":[224,224]}"#,
        norm_eps: 1e-06,
    },
    Architecture {
        name: "vit_tiny_patch16_384",
        model_args: r#"{"patch_size":16,"embed_dim":192,"depth":12,"num_heads":3,"img_size":[384,384]}"#,
        norm_eps: 1e-06,
    },
    Architecture {
        name: "vit_wee_patch16_reg1_gap_256",
        model_args: r#"{"patch_size":16,"embed_dim":256,"depth":14,"num_heads":4,"init_values":1e-05,"mlp_ratio":5,"class_token":false,"no_embed_class":true,"reg_tokens":1,"global_pool":"avg","img_size":[256,256]}"#,
        norm_eps: 1e-06,
    },
    Architecture {
        name: "vit_xsmall_patch16_clip_224",
        model_args: r#"{"embed_dim":256,"depth":10,"num_heads":4,"pre_norm":true,"img_size":[224,224]}"#,
        norm_eps: 1e-05,
    },
];
