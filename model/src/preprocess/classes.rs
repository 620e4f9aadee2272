//! The image processor classes of transformers that vitrt emulates, with the defaults each
//! class gives a field that preprocessor_config.json leaves out, and the classes of other
//! families that it refuses.
//!
//! The defaults are the class attributes of transformers 5.24's PIL processors
//! (`models/<family>/image_processing_pil_<family>.py`; the torchvision-backed classes of the
//! same name without "Pil", and the "Fast" aliases of 4.x, have the same ones), with what
//! `BaseImageProcessor` supplies for the rest: `rescale_factor` 1/255, `default_to_square`
//! true, and no `do_convert_rgb` (off).

use super::config::PixelArithmetic;
use super::resampling::{Resample, ResizeTarget};

// The constants are Python floats (f64) in transformers and timm, which numpy and torch round
// to f32; they are kept as f64 here and rounded the same way, rather than parsed as f32
// literals (decimal to f32 directly can differ from decimal to f64 to f32).

/// transformers' `IMAGENET_STANDARD_MEAN` / `_STD`.
const STANDARD_MEAN: [f64; 3] = [0.5, 0.5, 0.5];
const STANDARD_STD: [f64; 3] = [0.5, 0.5, 0.5];
/// transformers' `IMAGENET_DEFAULT_MEAN` / `_STD`.
pub(super) const IMAGENET_MEAN: [f64; 3] = [0.485, 0.456, 0.406];
pub(super) const IMAGENET_STD: [f64; 3] = [0.229, 0.224, 0.225];
/// transformers' `OPENAI_CLIP_MEAN` / `_STD`.
const CLIP_MEAN: [f64; 3] = [0.48145466, 0.4578275, 0.40821073];
const CLIP_STD: [f64; 3] = [0.26862954, 0.26130258, 0.27577711];

/// An image processor class whose preprocessing vitrt reproduces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProcessorClass {
    /// `ViTImageProcessor`; also what an unknown or missing `image_processor_type` gets.
    Vit,
    /// `DeiTImageProcessor`.
    Deit,
    /// `BeitImageProcessor` (its label reduction applies to segmentation maps only).
    Beit,
    /// `CLIPImageProcessor`.
    Clip,
    /// `ChineseCLIPImageProcessor` (CLIP's defaults).
    ChineseClip,
    /// `BitImageProcessor`, which DINOv2 checkpoints name.
    Bit,
    /// `SiglipImageProcessor`.
    Siglip,
    /// `ConvNextImageProcessor`: a shortest edge of `size / crop_pct` and a square crop of
    /// `size`, below 384; a square of `size` from 384 on.
    ConvNext,
    /// `DINOv3ViTImageProcessor` (torch tensors only): rescales to floats before it resizes
    /// them with torchvision's antialiased resize.
    Dinov3Vit,
}

/// What a class gives the fields a config leaves out.
#[derive(Debug, Clone, PartialEq)]
pub struct ClassDefaults {
    pub size: ResizeTarget,
    pub do_center_crop: bool,
    /// (height, width); None where the class has no crop size (then `do_center_crop` needs one).
    pub crop_size: Option<(usize, usize)>,
    pub resample: Resample,
    pub rescale_factor: f64,
    pub image_mean: [f64; 3],
    pub image_std: [f64; 3],
    pub do_convert_rgb: bool,
    /// transformers' `default_to_square`, negated: an integer `size` is the shortest edge.
    pub int_size_is_shortest_edge: bool,
    /// `crop_pct`, for the classes that read it.
    pub crop_pct: Option<f64>,
    /// The arithmetic of the class's steps (it is no field of the config).
    pub arithmetic: PixelArithmetic,
}

/// Processor classes (without "ImageProcessor"/"FeatureExtractor" and "Pil"/"Fast") of
/// families whose preprocessing is more than a resize, a center crop, a rescale and a
/// normalisation (or is not PIL's), with what they do besides: refused rather than run with
/// the wrong steps.
#[rustfmt::skip]
const UNSUPPORTED_CLASSES: &[(&str, &str)] = &[
    ("BridgeTower", "resizes with a longest-edge cap and pads"),
    ("ConditionalDetr", "is for object detection: an aspect-preserving resize with a cap, and padding"),
    ("DeformableDetr", "is for object detection: an aspect-preserving resize with a cap, and padding"),
    ("Detr", "is for object detection: an aspect-preserving resize with a cap, and padding"),
    ("Donut", "aligns the long axis, resizes with a cap and pads"),
    ("DPT", "is for depth estimation: it can keep the aspect ratio, round to a multiple and pad"),
    ("EfficientNet", "can rescale with an offset to [-1, 1] and normalise twice"),
    ("GLPN", "is for depth estimation: it rounds the size down to a multiple of 32"),
    ("Idefics", "is vision-language: it splits images into tiles"),
    ("Idefics2", "is vision-language: it splits images into tiles"),
    ("Idefics3", "is vision-language: it splits images into tiles"),
    ("ImageGPT", "maps pixels to colour clusters"),
    ("LayoutLMv2", "is for document understanding: it runs OCR and flips channels"),
    ("LayoutLMv3", "is for document understanding: it runs OCR"),
    ("Levit", "resizes the shortest edge to size * 256 / 224 in its own way"),
    ("LlavaNext", "is vision-language: it splits images into tiles"),
    ("LlavaOnevision", "is vision-language: it splits images into tiles"),
    ("Mask2Former", "is for segmentation: it pads and builds masks"),
    ("MaskFormer", "is for segmentation: it pads and builds masks"),
    ("MobileViT", "flips channels to BGR and crops its own way"),
    ("Nougat", "crops margins, aligns the long axis and pads"),
    ("OneFormer", "is for segmentation: it pads and builds masks"),
    ("Owlv2", "pads to a square before resizing"),
    ("Perceiver", "center-crops by the ratio of crop_size to size before resizing"),
    ("Pix2Struct", "extracts variable-size patches"),
    ("PoolFormer", "scales its crop size by crop_pct in its own way"),
    ("Qwen2VL", "is vision-language: it resizes to a multiple of the patch size"),
    ("RTDetr", "is for object detection: a resize and padding of its own"),
    ("Sam", "is for segmentation: it resizes the longest edge and pads"),
    ("Segformer", "is for semantic segmentation"),
    ("Siglip2", "is NaFlex: it resizes to a variable number of patches"),
    ("VideoMAE", "takes video frame sequences"),
    ("Vilt", "resizes to a multiple of 32 with a cap and pads"),
    ("Vivit", "takes video frame sequences and can rescale with an offset"),
    ("Yolos", "is for object detection: an aspect-preserving resize with a cap, and padding"),
    ("ZoeDepth", "is for depth estimation: it keeps the aspect ratio to a multiple and pads"),
];

/// The other classes of transformers 5.24 whose processor overrides the steps of its backend
/// (found by listing the classes that redefine a method of `PilBackend`, or of
/// `TorchvisionBackend` for those with no PIL variant): refused too, as vision-language,
/// detection, segmentation, depth, OCR and other families whose steps vitrt does not take.
const OTHER_UNSUPPORTED_CLASSES: &[&str] = &[
    "Apertus1p5",
    "Aria",
    "CHMv2",
    "Cohere2Vision",
    "CohereCompass",
    "Cosmos3Edge",
    "DeepseekOcr2",
    "DeepseekVL",
    "DeepseekVLHybrid",
    "DepthPro",
    "EfficientLoFTR",
    "Emu3",
    "Eomt",
    "Ernie4_5_VL_Moe",
    "Ernie4_5_VLMoe",
    "Flava",
    "Fuyu",
    "Gemma3",
    "Gemma4",
    "Gemma4Unified",
    "Glm",
    "Glm46V",
    "Glm4v",
    "Glm5Next",
    "Glmga",
    "GlmImage",
    "GotOcr2",
    "GraniteDocling",
    "GroundingDino",
    "HunYuanVL",
    "HYV4VL",
    "Inkling",
    "Inkling2",
    "Janus",
    "Kimi_K25",
    "Kosmos2_5",
    "Lfm2Vl",
    "LightGlue",
    "Llama4",
    "Llava",
    "MiniCPMOcr",
    "MiniCPMV4_6",
    "MiniMaxM3VL",
    "Mllama",
    "MobileNetV2",
    "Molmo2",
    "MuseGlimmer",
    "NemotronH_Omni_Reasoning_V3",
    "NeoMME",
    "Ovis2",
    "PaddleOCRVL",
    "PerceptionLM",
    "Phi4Multimodal",
    "Pixtral",
    "PPDocLayoutV2",
    "PPDocLayoutV3",
    "PPDocLayoutV4",
    "PPFormulaNet",
    "PPLCNet",
    "PPOCRV5ServerDet",
    "PPOCRV5ServerRec",
    "PPOCRV6SmallRec",
    "PromptDepthAnything",
    "RfDetr",
    "Sam2",
    "Sam3",
    "Sapiens2",
    "SegGpt",
    "SLANeXt",
    "SmolVLM",
    "Step3p7",
    "SuperGlue",
    "SuperPoint",
    "Swin2SR",
    "TextNet",
    "Tvp",
    "UltraVBert",
    "UnlimitedOcr",
    "UVDoc",
    "VideoLlama3",
    "VideoLlava",
    "VitMatte",
    "VitPose",
];

impl ProcessorClass {
    /// The class `image_processor_type` (or `feature_extractor_type`) names: `Ok(None)` for a
    /// class vitrt does not know (it gets ViT's defaults), an error for one of a family whose
    /// preprocessing vitrt does not reproduce. The "Pil" and "Fast" variants and the
    /// "FeatureExtractor" names of 4.x are the same class. The classes of transformers 5.24
    /// that take only the plain steps but are not in this table (BLIP's, OWL-ViT's, PVT's,
    /// MobileNetV1's, Chameleon's, PI0's, PPChart2Table's, TIPSv2's) are unknown here: their
    /// steps are reproduced, but a field their config leaves out gets ViT's default.
    pub fn from_type_name(name: &str) -> Result<Option<Self>, String> {
        let family = name
            .strip_suffix("Fast")
            .or_else(|| name.strip_suffix("Pil"))
            .unwrap_or(name);
        let family = family
            .strip_suffix("ImageProcessor")
            .or_else(|| family.strip_suffix("FeatureExtractor"))
            .unwrap_or(family);
        let class = match family {
            "ViT" => Self::Vit,
            "DeiT" => Self::Deit,
            "Beit" => Self::Beit,
            "CLIP" => Self::Clip,
            "ChineseCLIP" => Self::ChineseClip,
            "Bit" => Self::Bit,
            "Siglip" => Self::Siglip,
            "ConvNext" => Self::ConvNext,
            "DINOv3ViT" => Self::Dinov3Vit,
            "TimmWrapper" => {
                return Err(format!(
                    "{name} runs timm's transforms from config.json's pretrained_cfg: read it \
                     with PreprocessConfig::from_timm_pretrained_cfg"
                ))
            }
            _ => {
                let what = match UNSUPPORTED_CLASSES.iter().find(|(n, _)| *n == family) {
                    Some((_, what)) => *what,
                    None if OTHER_UNSUPPORTED_CLASSES.contains(&family) => {
                        "takes steps of its own besides a resize, a center crop, a rescale and \
                         a normalisation"
                    }
                    None => return Ok(None),
                };
                return Err(format!(
                    "image_processor_type {name} {what}, which vitrt's preprocessing does not \
                     reproduce (it reproduces the ViT, DeiT, BEiT, CLIP, Chinese-CLIP, BiT \
                     (DINOv2), SigLIP, ConvNeXT and DINOv3 image processors, and timm's eval transform)"
                ));
            }
        };
        Ok(Some(class))
    }

    /// The class transformers' `AutoImageProcessor` takes for a checkpoint whose processor
    /// config names none: the one its `IMAGE_PROCESSOR_MAPPING_NAMES` (transformers 5) gives
    /// config.json's `model_type`. None for a model type mapped to no class of this table.
    pub fn for_model_type(model_type: &str) -> Option<Self> {
        Some(match model_type {
            "vit" | "vit_mae" | "vit_msn" | "ijepa" | "dinat" | "swin" | "swinv2" => Self::Vit,
            "deit" => Self::Deit,
            "beit" | "data2vec-vision" => Self::Beit,
            "clip" | "aimv2" | "aimv2_vision_model" | "metaclip_2" | "mlcd" | "xclip"
            | "groupvit" | "git" => Self::Clip,
            "chinese_clip" => Self::ChineseClip,
            "bit" | "dinov2" | "hiera" | "focalnet" => Self::Bit,
            "siglip" | "paligemma" | "gemma3n" => Self::Siglip,
            "convnext" | "convnextv2" | "cvt" | "regnet" | "resnet" | "van" => Self::ConvNext,
            "dinov3_vit" => Self::Dinov3Vit,
            _ => return None,
        })
    }

    /// transformers' name of the class (its PIL variant ends in "Pil").
    pub fn name(self) -> &'static str {
        match self {
            Self::Vit => "ViTImageProcessor",
            Self::Deit => "DeiTImageProcessor",
            Self::Beit => "BeitImageProcessor",
            Self::Clip => "CLIPImageProcessor",
            Self::ChineseClip => "ChineseCLIPImageProcessor",
            Self::Bit => "BitImageProcessor",
            Self::Siglip => "SiglipImageProcessor",
            Self::ConvNext => "ConvNextImageProcessor",
            Self::Dinov3Vit => "DINOv3ViTImageProcessor",
        }
    }

    /// The class's defaults for the fields a config leaves out.
    pub fn defaults(self) -> ClassDefaults {
        let square = |side| ResizeTarget::Fixed {
            height: side,
            width: side,
        };
        let vit = ClassDefaults {
            size: square(224),
            do_center_crop: false,
            crop_size: None,
            resample: Resample::Bilinear,
            rescale_factor: 1.0 / 255.0,
            image_mean: STANDARD_MEAN,
            image_std: STANDARD_STD,
            do_convert_rgb: false,
            int_size_is_shortest_edge: false,
            crop_pct: None,
            arithmetic: PixelArithmetic::Pil8Bit,
        };
        // CLIP's, Chinese-CLIP's and BiT's class attributes are the same.
        let clip = ClassDefaults {
            size: ResizeTarget::ShortestEdge(224),
            do_center_crop: true,
            crop_size: Some((224, 224)),
            resample: Resample::Bicubic,
            image_mean: CLIP_MEAN,
            image_std: CLIP_STD,
            do_convert_rgb: true,
            int_size_is_shortest_edge: true,
            ..vit.clone()
        };
        match self {
            Self::Vit => vit,
            Self::Deit => ClassDefaults {
                size: square(256),
                do_center_crop: true,
                crop_size: Some((224, 224)),
                resample: Resample::Bicubic,
                ..vit
            },
            Self::Beit => ClassDefaults {
                crop_size: Some((224, 224)),
                resample: Resample::Bicubic,
                ..vit
            },
            Self::Clip | Self::ChineseClip | Self::Bit => clip,
            Self::Siglip => ClassDefaults {
                resample: Resample::Bicubic,
                do_convert_rgb: true,
                int_size_is_shortest_edge: true,
                ..vit
            },
            Self::ConvNext => ClassDefaults {
                size: ResizeTarget::ShortestEdge(384),
                resample: Resample::Bicubic,
                int_size_is_shortest_edge: true,
                crop_pct: Some(224.0 / 256.0),
                ..vit
            },
            // transformers' DINOv3ViTImageProcessor class attributes.
            Self::Dinov3Vit => ClassDefaults {
                image_mean: IMAGENET_MEAN,
                image_std: IMAGENET_STD,
                arithmetic: PixelArithmetic::TorchvisionFloat,
                ..vit
            },
        }
    }
}
