#!/usr/bin/env python3
"""Write real-size CLIP and SigLIP dual towers with random weights for the GPU check's text
parity (the GPU machine has no network, so no hub checkpoint can be fetched).

  python scripts/make_random_dual_tower.py --out /tmp/dual clip-vit-base-patch32 siglip-base-patch16-224

Each preset becomes a folder under --out laid out as scripts/make_text_fixtures.py lays out the
tiny zero-shot fixtures (tests/fixtures/models/ZERO-SHOT.md): the checkpoint, a tokenizer
trained on the spot with the family's pipeline (so the text vocabulary is the small trained
one, not the real 49,408 or 32,000 ids: the token table is gathered, never multiplied, so
its size does not change what is checked), the image processor, `text-reference.safetensors`
and `reference.safetensors` in float64, and PyTorch's own bf16 errors beside them. Here the
bf16 errors come from PyTorch on the GPU when there is one (`torch-bf16-text.json`), the
figures a vitrt bf16 run is held to; the tiny fixtures' come from the CPU.

Then `VITRT_TEXT_MODELS=/tmp/dual/clip-vit-base-patch32:... model-text_parity_gpu --ignored`.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import make_text_fixtures as fixtures  # noqa: E402
from make_text_fixtures import TextFixture  # noqa: E402
from reference import disable_tf32  # noqa: E402


def text(hidden: int, heads: int, context: int) -> dict:
    return {
        "hidden_size": hidden,
        "intermediate_size": 4 * hidden,
        "num_hidden_layers": 12,
        "num_attention_heads": heads,
        "max_position_embeddings": context,
    }


def vision(hidden: int, heads: int, layers: int, patch: int, size: int = 224) -> dict:
    return {
        "hidden_size": hidden,
        "intermediate_size": 4 * hidden,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "image_size": size,
        "patch_size": patch,
    }


# The sizes of openai/clip-vit-base-patch32, openai/clip-vit-large-patch14 and
# google/siglip-base-patch16-224; logit_scale as trained CLIPs end (ln 100), SigLIP's bias
# kept small so that random embeddings give scores that are not all ~0.
PRESETS = {
    "clip-vit-base-patch32": TextFixture(
        name="clip-vit-base-patch32",
        summary="CLIP ViT-B/32 sizes, random weights",
        model_class="CLIPModel",
        config_class="CLIPConfig",
        text_config=text(512, 8, 77),
        vision_config=vision(768, 12, 12, 32),
        dual_config={"projection_dim": 512},
        logit_scale=4.6052,
        logit_bias=None,
    ),
    "clip-vit-large-patch14": TextFixture(
        name="clip-vit-large-patch14",
        summary="CLIP ViT-L/14 sizes, random weights",
        model_class="CLIPModel",
        config_class="CLIPConfig",
        text_config=text(768, 12, 77),
        vision_config=vision(1024, 16, 24, 14),
        dual_config={"projection_dim": 768},
        logit_scale=4.6052,
        logit_bias=None,
    ),
    "siglip-base-patch16-224": TextFixture(
        name="siglip-base-patch16-224",
        summary="SigLIP base/16 at 224 sizes, random weights",
        model_class="SiglipModel",
        config_class="SiglipConfig",
        text_config=text(768, 12, 64),
        vision_config=vision(768, 12, 12, 16),
        dual_config={},
        logit_scale=4.6052,
        logit_bias=-1.7,
    ),
    # google/siglip-so400m-patch14-384's widths (1152, 16 heads of 72, MLP 4304) in both towers,
    # 4 layers each and 224 pixels instead of 27 layers and 384, so that the float64 reference
    # stays quick: the head dim of 72, which the fused attention takes padded to 80, is what it
    # checks.
    "siglip-so400m-widths-4-layers": TextFixture(
        name="siglip-so400m-widths-4-layers",
        summary="SigLIP so400m/14 widths, 4 layers a tower, 224 pixels, random weights",
        model_class="SiglipModel",
        config_class="SiglipConfig",
        text_config={**text(1152, 16, 64), "intermediate_size": 4304, "num_hidden_layers": 4},
        vision_config={**vision(1152, 16, 4, 14), "intermediate_size": 4304},
        dual_config={},
        logit_scale=4.6052,
        logit_bias=-1.7,
    ),
}


def gpu_bf16_errors(fixture: TextFixture, model_dir: Path) -> None:
    """torch-bf16-text.json from PyTorch's bf16 on the GPU (the CPU's when there is none)."""
    import transformers
    from safetensors.torch import load_file

    device = "cuda" if torch.cuda.is_available() else "cpu"
    reference = load_file(model_dir / "text-reference.safetensors")
    model_class = getattr(transformers, fixture.model_class)
    model = model_class.from_pretrained(model_dir).to(device=device, dtype=torch.bfloat16).eval()
    inputs = {name: reference[name].to(device) for name in ("input_ids", "attention_mask")}
    pixel_values = reference["pixel_values"].to(device)
    ours = fixtures.reference_outputs(model, inputs, pixel_values)
    errors = {}
    for name, want in reference.items():
        if name in ("input_ids", "attention_mask", "pixel_values"):
            continue
        got = ours[name].cpu().double()
        scale = want.double().abs().max().clamp_min(1e-30)
        errors[name] = float((got - want.double()).abs().max() / scale)
    (model_dir / "torch-bf16-text.json").write_text(json.dumps(errors, indent=1, sort_keys=True) + "\n")
    print(f"{fixture.name}: PyTorch bf16 on {device}, worst {max(errors.values()):.3e}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("presets", nargs="+", choices=sorted(PRESETS))
    args = parser.parse_args()
    disable_tf32()
    args.out.mkdir(parents=True, exist_ok=True)
    for name in args.presets:
        fixture = PRESETS[name]
        # Each preset's own seed, whatever the order of the command line: the same model in
        # every run.
        result = fixtures.write_fixture(fixture, args.out, args.seed + list(PRESETS).index(name))
        print(f"{name}: vocab {result['vocab_size']}, context {result['context']}")
        gpu_bf16_errors(fixture, args.out / name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
