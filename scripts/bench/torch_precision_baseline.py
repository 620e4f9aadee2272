#!/usr/bin/env python3
"""How far PyTorch itself lands from a float64 reference when it runs in float16 or bfloat16:
the yardstick for vitrt's half-precision parity figures.

  python scripts/bench/torch_precision_baseline.py --model DIR --reference DIR/reference.safetensors

Runs the checkpoint with eager attention on CUDA (CPU if none), casting the model and the
reference's pixel_values to each dtype, and prints per tensor the same relative error
`vitrt parity` prints: max |ours - ref| / max |ref|.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
from safetensors.torch import load_file
from transformers import AutoConfig, ViTForImageClassification, ViTModel


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, type=Path)
    parser.add_argument("--reference", required=True, type=Path)
    parser.add_argument("--dtypes", default="float16,bfloat16")
    args = parser.parse_args()

    device = "cuda" if torch.cuda.is_available() else "cpu"
    ref = load_file(str(args.reference))
    config = AutoConfig.from_pretrained(args.model)
    classifier = any(a.endswith("ForImageClassification") for a in (config.architectures or []))
    cls = ViTForImageClassification if classifier else ViTModel
    for name in args.dtypes.split(","):
        dtype = getattr(torch, name)
        model = cls.from_pretrained(args.model, attn_implementation="eager").to(device=device, dtype=dtype).eval()
        with torch.no_grad():
            out = model(pixel_values=ref["pixel_values"].to(device=device, dtype=dtype), output_hidden_states=True)
        ours = {f"hidden_states.{i}": h for i, h in enumerate(out.hidden_states)}
        ours["logits" if classifier else "last_hidden_state"] = out.logits if classifier else out.last_hidden_state
        worst = 0.0
        for key, want in ref.items():
            if key not in ours:
                continue
            got = ours[key].double().cpu()
            rel = ((got - want.double()).abs().max() / want.double().abs().max()).item()
            worst = max(worst, rel)
            print(f"{args.model.name:28} torch {name:9} {key:20} rel err {rel:.3e}")
        print(f"{args.model.name:28} torch {name:9} worst rel err {worst:.3e}")


if __name__ == "__main__":
    main()
