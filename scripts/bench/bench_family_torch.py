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
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import torch


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, type=Path)
    parser.add_argument("--size", required=True, type=int, help="input height and width")
    parser.add_argument("--batch-sizes", default="1,64,256")
    parser.add_argument("--dtype", choices=["f16", "bf16", "f32"], default="f16")
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--json", required=True, type=Path)
    args = parser.parse_args()
    import transformers

    dtype = {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32}[args.dtype]
    interpolate = {}
    raw = json.loads((args.model / "config.json").read_text())
    if "architecture" in raw:
        # timm's own checkpoint: timm builds it (its fused SDPA attention by default).
        import timm
        from safetensors.torch import load_file

        model_args = {"num_classes": raw.get("num_classes", 1000), **raw.get("model_args", {})}
        model = timm.create_model(raw["architecture"], pretrained=False, **model_args)
        model.load_state_dict(load_file(args.model / "model.safetensors"))
        provider = "timm"
        forward = model
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
    model = model.to(device="cuda", dtype=dtype).eval()
    rows = []
    for batch in [int(b) for b in args.batch_sizes.split(",")]:
        pixels = torch.randn(batch, 3, args.size, args.size, device="cuda", dtype=dtype)
        times = []
        with torch.inference_mode():
            for rep in range(args.warmup + args.reps):
                start = torch.cuda.Event(enable_timing=True)
                end = torch.cuda.Event(enable_timing=True)
                start.record()
                forward(pixels)
                end.record()
                end.synchronize()
                if rep >= args.warmup:
                    times.append(start.elapsed_time(end))
        median = statistics.median(times)
        rows.append({
            "batch": batch,
            "images_per_s": batch / median * 1e3,
            "max_ms": max(times),
            "median_ms": median,
            "min_ms": min(times),
            "model": str(args.model),
            "provider": provider,
            "reps": args.reps,
        })
        print(f"{provider} {args.model.name} b{batch}: {median:.3f} ms, {batch / median * 1e3:.0f} images/s")
        del pixels
        torch.cuda.empty_cache()
    doc = {
        "device": torch.cuda.get_device_name(),
        "dtype": args.dtype,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "models": rows,
    }
    args.json.write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
