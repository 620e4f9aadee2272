#!/usr/bin/env python3
"""Write a ViT checkpoint with random weights in Hugging Face format, for timing and parity
runs that must not depend on the hub (the GPU machine has no network).

  python scripts/make_random_vit.py --out /tmp/vit-base --preset base   # ViT-B/16 at 224
  python scripts/make_random_vit.py --out /tmp/vit-large --preset large

Weights follow transformers' own initialisation with a fixed seed, then biases and layer-norm
parameters are redrawn away from their 0/1 defaults, so a runtime that dropped one of them
would not match the reference. Saved as float32 safetensors with 1000 labels.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
from transformers import ViTConfig, ViTForImageClassification

PRESETS = {
    # hidden, layers, heads, mlp
    "base": (768, 12, 12, 3072),
    "large": (1024, 24, 16, 4096),
    "small": (384, 12, 6, 1536),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, type=Path, help="folder to write the checkpoint into")
    parser.add_argument("--preset", choices=sorted(PRESETS), default="base")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    hidden, layers, heads, mlp = PRESETS[args.preset]
    torch.manual_seed(args.seed)
    config = ViTConfig(
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        intermediate_size=mlp,
        image_size=224,
        patch_size=16,
        num_labels=1000,
        id2label={i: f"class_{i}" for i in range(1000)},
        label2id={f"class_{i}": i for i in range(1000)},
        attn_implementation="eager",
    )
    model = ViTForImageClassification(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias"):
                p.normal_(0.0, 0.02)
            elif "layernorm" in name and name.endswith("weight"):
                p.uniform_(0.8, 1.2)
            elif "cls_token" in name or "position_embeddings" in name:
                p.normal_(0.0, 0.02)
    model.save_pretrained(args.out)
    print(f"wrote {args.out} ({sum(p.numel() for p in model.parameters()) / 1e6:.1f} M parameters)")


if __name__ == "__main__":
    main()
