#!/usr/bin/env python3
"""Time a ViT-family checkpoint's forward pass in PyTorch (transformers, SDPA attention), the
yardstick of `vitrt bench model` on the same folder and GPU.

  python scripts/bench/bench_family_torch.py --model /tmp/so400m --size 384 --batch-sizes 1,64,256 \
      --json torch-so400m.json

Each batch: random pixels at --size (larger than the L2 cache from batch 64 on), --warmup
untimed passes, then --reps passes each timed alone by CUDA events under
torch.inference_mode; the median, minimum and maximum in milliseconds and images per second
from the median. The model runs as transformers loads it (`config.architectures`), in --dtype,
with attn_implementation="sdpa"; the vision towers' forward is what is timed (the projection
too, for CLIP with projection).

A SigLIP 2 NaFlex checkpoint (Siglip2VisionModel) is timed on the batches `vitrt bench model`
times for it: images of a fixed mix of aspect ratios (MIXED_ASPECT_SIZES, the same list in the
same order as vitrt_model::naflex::synthetic), each at the patch grid transformers'
get_image_size_for_max_num_patches gives it under the processor's max_num_patches, random patch
rows padded with zero rows to max_num_patches, with pixel_attention_mask and spatial_shapes;
--size is not used. Its rows also give the time per image.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch


# (height, width) of the photos the NaFlex mix stands for; image i of a batch takes the
# (i % 9)-th. At patch 16 and 256 patches: 12x21, 21x12, 16x16, 14x18, 18x14, 11x22, 22x11,
# 8x32, 32x8.
MIXED_ASPECT_SIZES = [(576, 1024), (1024, 576), (512, 512), (768, 1024), (1024, 768),
                      (512, 1024), (1024, 512), (256, 1024), (1024, 256)]


def naflex_grids(batch: int, patch_size: int, max_patches: int) -> list[tuple[int, int]]:
    """The (rows, cols) patch grid of each of `batch` images of the mix, as Siglip2ImageProcessor
    would resize them."""
    from transformers.models.siglip2.image_processing_siglip2 import (
        get_image_size_for_max_num_patches,
    )

    grids = []
    for item in range(batch):
        height, width = MIXED_ASPECT_SIZES[item % len(MIXED_ASPECT_SIZES)]
        h, w = get_image_size_for_max_num_patches(height, width, patch_size, max_patches)
        grids.append((h // patch_size, w // patch_size))
    return grids


def naflex_batch(batch: int, patch_size: int, max_patches: int, dtype, device="cuda"):
    """Model inputs for `batch` images of the mix on `device`, and their grids."""
    grids = naflex_grids(batch, patch_size, max_patches)
    pixels = torch.zeros(batch, max_patches, 3 * patch_size * patch_size, device=device, dtype=dtype)
    mask = torch.zeros(batch, max_patches, device=device, dtype=torch.long)
    for item, (rows, cols) in enumerate(grids):
        pixels[item, : rows * cols].uniform_(-1.0, 1.0)
        mask[item, : rows * cols] = 1
    shapes = torch.tensor(grids, device=device, dtype=torch.long)
    return {"pixel_values": pixels, "pixel_attention_mask": mask, "spatial_shapes": shapes}, grids


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, type=Path)
    parser.add_argument("--size", type=int, help="input height and width (not for NaFlex)")
    parser.add_argument("--batch-sizes", default="1,64,256")
    parser.add_argument("--dtype", choices=["f16", "bf16", "f32"], default="f16")
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--warmup-ms", type=float, default=1000.0)
    parser.add_argument("--json", required=True, type=Path)
    parser.add_argument("--device", default="cuda",
                        help="cuda, or cpu to check the script (host clock times)")
    args = parser.parse_args()
    import transformers

    dtype = {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32}[args.dtype]
    interpolate = {}
    raw = json.loads((args.model / "config.json").read_text())
    naflex = None
    if raw.get("model_type") in ("siglip2", "siglip2_vision_model"):
        config = transformers.AutoConfig.from_pretrained(args.model)
        model_class = getattr(transformers, config.architectures[0])
        model = model_class.from_pretrained(args.model, attn_implementation="sdpa")
        provider = "hf-sdpa"
        processor_path = args.model / "preprocessor_config.json"
        processor = json.loads(processor_path.read_text()) if processor_path.exists() else {}
        vision = getattr(config, "vision_config", config)
        naflex = (processor.get("patch_size", vision.patch_size),
                  processor.get("max_num_patches", vision.num_patches))
        # Siglip2Model's forward needs text too: its vision tower alone is timed.
        forward = model.vision_model if hasattr(model, "text_model") else model
    elif args.size is None:
        parser.error("--size is needed for a fixed-resolution model")
    elif "architecture" in raw:
        # timm's own checkpoint: timm builds it (its fused SDPA attention by default).
        import timm
        from safetensors.torch import load_file

        model_args = {"num_classes": raw.get("num_classes", 1000), **raw.get("model_args", {})}
        model = timm.create_model(raw["architecture"], pretrained=False, **model_args)
        model.load_state_dict(load_file(args.model / "model.safetensors"))
        provider = "timm"

        def forward(pixel_values):
            return model(pixel_values)
    else:
        config = transformers.AutoConfig.from_pretrained(args.model)
        model_class = getattr(transformers, config.architectures[0])
        model = model_class.from_pretrained(args.model, attn_implementation="sdpa")
        provider = "hf-sdpa"
        vision = getattr(config, "vision_config", config)
        if args.size != vision.image_size and not vision.model_type.startswith("dinov2"):
            interpolate["interpolate_pos_encoding"] = True

        def forward(pixel_values):
            return model(pixel_values=pixel_values, **interpolate)
    model = model.to(device=args.device, dtype=dtype).eval()
    on_gpu = args.device.startswith("cuda")
    rows = []
    for batch in [int(b) for b in args.batch_sizes.split(",")]:
        if naflex is None:
            inputs = {"pixel_values": torch.randn(batch, 3, args.size, args.size,
                                                  device=args.device, dtype=dtype)}
        else:
            inputs, grids = naflex_batch(batch, *naflex, dtype, args.device)
        times = []
        with torch.inference_mode():
            if on_gpu:
                # Untimed passes for --warmup-ms first: a GPU's first tens of ms after idling
                # run faster than it then sustains (benchmarks/NOTES.md, 2026-11-28 "The first
                # passes after idle run fast"); then --warmup more, as before.
                started = time.perf_counter()
                while (time.perf_counter() - started) * 1e3 < args.warmup_ms:
                    forward(**inputs)
                    torch.cuda.synchronize()
            for rep in range(args.warmup + args.reps):
                if not on_gpu:
                    began = time.perf_counter()
                    forward(**inputs)
                    if rep >= args.warmup:
                        times.append((time.perf_counter() - began) * 1e3)
                    continue
                start = torch.cuda.Event(enable_timing=True)
                end = torch.cuda.Event(enable_timing=True)
                start.record()
                forward(**inputs)
                end.record()
                end.synchronize()
                if rep >= args.warmup:
                    times.append(start.elapsed_time(end))
        median = statistics.median(times)
        if naflex is not None:
            rows.append({
                "per_image_ms": median / batch,
                "naflex": {"max_num_patches": naflex[1],
                           "mean_patches": sum(r * c for r, c in grids) / batch,
                           "grids": [list(g) for g in grids[: len(MIXED_ASPECT_SIZES)]]},
            })
        else:
            rows.append({})
        rows[-1].update({
            "batch": batch,
            "images_per_s": batch / median * 1e3,
            "max_ms": max(times),
            "median_ms": median,
            "min_ms": min(times),
            "model": str(args.model),
            "provider": provider,
            "reps": args.reps,
        })
        print(f"{provider} {args.model.name} b{batch}: {median:.3f} ms, {batch / median * 1e3:.0f} images/s, "
              f"{median / batch:.4f} ms per image")
        del inputs
        if on_gpu:
            torch.cuda.empty_cache()
    doc = {
        "device": torch.cuda.get_device_name() if on_gpu else "cpu",
        "dtype": args.dtype,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "models": rows,
    }
    args.json.write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
