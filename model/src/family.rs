//! The families vitrt runs, by name: the vocabulary that configs, rules and messages speak
//! of. What sets each family apart (its rules), and the registry that finds them, are in
//! `families/`.

/// The model families vitrt builds graphs for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Family {
    /// `ViTModel`, `ViTForImageClassification`.
    Vit,
    /// `DeiTModel`, `DeiTForImageClassification`, `DeiTForImageClassificationWithTeacher`.
    Deit,
    /// `Dinov2Model`, `Dinov2ForImageClassification`, and the same with registers.
    Dinov2,
    /// `DINOv3ViTModel` (and `DINOv3ViTBackbone`'s tensors): rotary position embeddings.
    Dinov3,
    /// The vision tower of CLIP: `CLIPVisionModel(WithProjection)`, `CLIPModel`,
    /// `CLIPForImageClassification`.
    Clip,
    /// The vision tower of SigLIP: `SiglipVisionModel`, `SiglipModel`,
    /// `SiglipForImageClassification`.
    Siglip,
    /// `Aimv2VisionModel`: RMSNorms, a SwiGLU MLP, no CLS token, positions added after the
    /// patch embedding's norm, an attention-pooling head on the learned query token.
    Aimv2,
    /// timm's own `vit_*` checkpoints (`config.json` with `architecture` and
    /// `pretrained_cfg`) built as its `VisionTransformer`: Q, K and V in one tensor; the CLS
    /// token, registers, `norm_pre`, the pool (`token`, `avg`, `map`) and `fc_norm` as the
    /// architecture's registered arguments and the checkpoint's `model_args` say.
    Timm,
    /// open_clip's own CLIP checkpoints (`open_clip_config.json` beside
    /// `open_clip_model.safetensors`: LAION's, DFN's, MetaCLIP's ViT-B/L/H/bigG): the vision
    /// transformer of `open_clip.CLIP`, Q, K and V in torch's `MultiheadAttention` in-projection,
    /// the projection stored as the matrix of `x @ W`.
    OpenClip,
}

/// The families with a text tower.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TextFamily {
    /// Byte-level BPE, `<|startoftext|>` text `<|endoftext|>`; causal attention, pooled at
    /// the end-of-text token, a bias-free `text_projection`; scores are a softmax over the
    /// labels.
    Clip,
    /// SentencePiece Unigram, text `</s>`, no start token; full attention over a sequence
    /// padded to its length, pooled at the last token, a `head` with a bias; each label's
    /// score is a sigmoid.
    Siglip,
    /// open_clip's CLIP text tower: CLIP's byte-level BPE and causal blocks, pooled at the
    /// highest token id (the end-of-text token), `text_projection` as the matrix of `x @ W`;
    /// scores are a softmax over the labels.
    OpenClip,
}
