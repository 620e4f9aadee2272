#!/usr/bin/env python3
"""Write a real-size checkpoint of a ViT family with random weights, its float64 reference and
PyTorch's own bf16 error on the same inputs, for the GPU check (the GPU machine has no
network, so no hub checkpoint can be fetched).

  python scripts/make_random_family.py --preset siglip-so400m-14-384 --out /tmp/so400m

Writes into --out: the checkpoint (float32 safetensors, as save_pretrained writes it), a
preprocessor_config.json of the family's processor, `reference.safetensors` (pixel_values of
--batch random images at the preset's input size, and every output and hidden state computed in
float64 with eager attention, as scripts/make_family_fixtures.py computes them), and
`torch-bf16.json`: for each tensor of the reference, the relative error (largest absolute error
over the largest absolute reference value, as `vitrt parity` reports it) of the same model run
by PyTorch in bfloat16 (transformers' default attention), the figure vitrt's bf16 must not be
worse than.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_family_fixtures import randomize_parameters, reference_outputs, timm_outputs  # noqa: E402
from reference import disable_tf32, save_reference  # noqa: E402

# name: (model class, config class, config, input size, preprocessor_config)
CLIP_PROCESSOR = {
    "image_processor_type": "CLIPImageProcessor",
}
PRESETS = {
    "deit-base-distilled-16-224": (
        "DeiTForImageClassificationWithTeacher",
        "DeiTConfig",
        {"hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12,
         "intermediate_size": 3072, "image_size": 224, "patch_size": 16, "num_labels": 1000},
        224,
        {"image_processor_type": "DeiTImageProcessor"},
    ),
    "dinov2-base-registers-14": (
        "Dinov2WithRegistersModel",
        "Dinov2WithRegistersConfig",
        {"hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12,
         "mlp_ratio": 4, "image_size": 518, "patch_size": 14, "num_register_tokens": 4},
        224,
        {"image_processor_type": "BitImageProcessor",
         "size": {"shortest_edge": 256}, "crop_size": {"height": 224, "width": 224},
         "image_mean": [0.485, 0.456, 0.406], "image_std": [0.229, 0.224, 0.225]},
    ),
    "dinov2-large-14": (
        "Dinov2Model",
        "Dinov2Config",
        {"hidden_size": 1024, "num_hidden_layers": 24, "num_attention_heads": 16,
         "mlp_ratio": 4, "image_size": 518, "patch_size": 14},
        224,
        {"image_processor_type": "BitImageProcessor",
         "size": {"shortest_edge": 256}, "crop_size": {"height": 224, "width": 224},
         "image_mean": [0.485, 0.456, 0.406], "image_std": [0.229, 0.224, 0.225]},
    ),
    "clip-vit-base-16": (
        "CLIPVisionModelWithProjection",
        "CLIPVisionConfig",
        {"hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12,
         "intermediate_size": 3072, "image_size": 224, "patch_size": 16, "projection_dim": 512},
        224,
        CLIP_PROCESSOR,
    ),
    "clip-vit-large-14-336": (
        "CLIPVisionModelWithProjection",
        "CLIPVisionConfig",
        {"hidden_size": 1024, "num_hidden_layers": 24, "num_attention_heads": 16,
         "intermediate_size": 4096, "image_size": 336, "patch_size": 14, "projection_dim": 768},
        336,
        {**CLIP_PROCESSOR, "size": {"shortest_edge": 336},
         "crop_size": {"height": 336, "width": 336}},
    ),
    "siglip-base-16-224": (
        "SiglipVisionModel",
        "SiglipVisionConfig",
        {"hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12,
         "intermediate_size": 3072, "image_size": 224, "patch_size": 16},
        224,
        {"image_processor_type": "SiglipImageProcessor"},
    ),
    # timm's own format (config.json with architecture and pretrained_cfg), made by timm.
    "timm-vit-base-16-224": (
        "timm",
        "vit_base_patch16_224",
        {"num_classes": 1000},
        224,
        None,
    ),
    "siglip-so400m-14-384": (
        "SiglipVisionModel",
        "SiglipVisionConfig",
        {"hidden_size": 1152, "num_hidden_layers": 27, "num_attention_heads": 16,
         "intermediate_size": 4304, "image_size": 384, "patch_size": 14},
        384,
        {"image_processor_type": "SiglipImageProcessor", "size": {"height": 384, "width": 384}},
    ),
}


def relative_error(ours: torch.Tensor, want: torch.Tensor) -> float:
    scale = want.abs().max().clamp_min(1e-30)
    return float((ours.float() - want).abs().max() / scale)


def make_timm(args, architecture: str, fields: dict, size: int) -> int:
    """The timm preset: `save_for_hf`'s files, the float64 reference and PyTorch's bf16 error."""
    import timm
    from safetensors.torch import load_file
    from timm.models._hub import save_for_hf

    torch.manual_seed(args.seed)
    model = timm.create_model(architecture, pretrained=False, **fields)
    randomize_parameters(model, torch.Generator().manual_seed(args.seed))
    save_for_hf(model.eval(), args.out, safe_serialization=True)
    device = torch.device(args.device)
    reloaded = timm.create_model(architecture, pretrained=False, **fields)
    reloaded.load_state_dict(load_file(args.out / "model.safetensors"))
    reloaded = reloaded.to(device=device, dtype=torch.float64).eval()
    generator = torch.Generator().manual_seed(args.seed)
    pixels = torch.randn(args.batch, 3, size, size, generator=generator)
    reference = {k: v.cpu() for k, v in timm_outputs(reloaded, pixels.to(device, torch.float64)).items()}
    reference["pixel_values"] = pixels
    save_reference(args.out / "reference.safetensors", reference,
                   {"preset": args.preset, "compute_dtype": "float64", "timm": timm.__version__})
    bf16 = timm_outputs(reloaded.to(torch.bfloat16), pixels.to(device, torch.bfloat16))
    errors = {name: relative_error(bf16[name].cpu(), want)
              for name, want in reference.items() if name != "pixel_values"}
    (args.out / "torch-bf16.json").write_text(json.dumps(errors, indent=1, sort_keys=True) + "\n")
    params = sum(p.numel() for p in model.parameters()) / 1e6
    print(f"{args.preset}: {params:.0f} M parameters, input {size}, torch bf16 worst {max(errors.values()):.3e}")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", required=True, choices=sorted(PRESETS))
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args()
    disable_tf32()
    import transformers

    model_class, config_class, fields, size, processor = PRESETS[args.preset]
    if model_class == "timm":
        return make_timm(args, config_class, fields, size)
    config = getattr(transformers, config_class)(**fields, attn_implementation="eager")
    torch.manual_seed(args.seed)
    model = getattr(transformers, model_class)(config)
    model.config.architectures = [model_class]
    randomize_parameters(model, torch.Generator().manual_seed(args.seed))
    model.eval().save_pretrained(args.out)
    if processor is not None:
        (args.out / "preprocessor_config.json").write_text(json.dumps(processor, indent=2) + "\n")

    device = torch.device(args.device)
    reloaded = getattr(transformers, model_class).from_pretrained(args.out, attn_implementation="eager")
    reloaded = reloaded.to(device=device, dtype=torch.float64).eval()
    generator = torch.Generator().manual_seed(args.seed)
    pixels = torch.randn(args.batch, 3, size, size, generator=generator)
    interpolate = size != fields["image_size"]
    reference = reference_outputs(reloaded, pixels.to(device), interpolate)
    reference = {k: v.cpu() for k, v in reference.items()}
    reference["pixel_values"] = pixels
    save_reference(args.out / "reference.safetensors", reference,
                   {"preset": args.preset, "compute_dtype": "float64", "attention": "eager"})
    del reloaded

    # PyTorch's own bf16, with transformers' default attention, on the same inputs.
    bf16 = getattr(transformers, model_class).from_pretrained(args.out)
    bf16 = bf16.to(device=device, dtype=torch.bfloat16).eval()
    ours = reference_outputs(bf16, pixels.to(device=device, dtype=torch.bfloat16), interpolate)
    errors = {name: relative_error(ours[name].cpu(), want)
              for name, want in reference.items() if name != "pixel_values"}
    (args.out / "torch-bf16.json").write_text(json.dumps(errors, indent=1, sort_keys=True) + "\n")
    params = sum(p.numel() for p in model.parameters()) / 1e6
    worst = max(errors.values())
    print(f"{args.preset}: {params:.0f} M parameters, input {size}, torch bf16 worst {worst:.3e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
