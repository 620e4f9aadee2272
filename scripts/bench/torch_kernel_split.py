#!/usr/bin/env python3
"""Where PyTorch's forward pass of ViT-B/16 spends its GPU time, by kind of kernel.

    python3 scripts/bench/torch_kernel_split.py --json OUT.json [--providers hf-sdpa,timm]
        [--batch-sizes 64,256] [--dtype f16] [--passes 10]

Each provider's model (built as scripts/bench/bench_torch.py builds it, random weights) runs
its warm-up passes, then `--passes` passes under torch.profiler. Every CUDA kernel's device
time is put in one bucket by its name: attention, matmul, convolution, layernorm, softmax, or
elementwise and the rest. The wall time of a pass without the profiler (CUDA events, median)
stands beside the buckets, so the launch gaps show too.

What it answers: how much of a PyTorch pass is matrix products and attention, the work that
vitrt cannot fuse away, and so how far a fused runtime can get ahead of it with kernels only
level with cuBLAS and cuDNN (benchmarks/NOTES.md, 2026-11-29 "How far fusion alone reaches").
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_torch import DTYPES, VIT_B16, build_model, import_timm  # noqa: E402
from bench_torch_fp8 import time_forward  # noqa: E402

# The first rule that matches a kernel's lower-cased name gives its bucket.
BUCKETS = (
    ("attention", ("flash", "fmha", "sdpa", "attention", "attn")),
    # cuDNN's patch-embedding convolution: its fprop kernel and the layout changes around it.
    ("convolution", ("conv", "fprop", "nchwtonhwc", "nhwctonchw", "im2col")),
    ("matmul", ("gemm", "nvjet", "cutlass", "xmma", "cublas", "matmul")),
    ("layernorm", ("layer_norm", "layernorm")),
    ("softmax", ("softmax",)),
)
OTHER = "elementwise and the rest"


def bucket_of(name: str) -> str:
    lowered = name.lower()
    for bucket, needles in BUCKETS:
        if any(needle in lowered for needle in needles):
            return bucket
    return OTHER


def device_us(event) -> float:
    for attribute in ("device_time", "cuda_time"):
        value = getattr(event, attribute, None)
        if value is not None:
            return float(value)
    raise RuntimeError("this torch's profiler events carry no device time")


def split(model, pixels, passes: int) -> tuple[dict[str, float], dict[str, float]]:
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(passes):
            model(pixels)
        torch.cuda.synchronize()
    buckets: dict[str, float] = {}
    kernels: dict[str, float] = {}
    for event in prof.events():
        if event.device_type != torch.autograd.DeviceType.CUDA:
            continue
        ms = device_us(event) / 1000.0 / passes
        buckets[bucket_of(event.name)] = buckets.get(bucket_of(event.name), 0.0) + ms
        kernels[event.name] = kernels.get(event.name, 0.0) + ms
    return buckets, kernels


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", required=True, type=Path)
    parser.add_argument("--providers", default="hf-sdpa,timm")
    parser.add_argument("--batch-sizes", default="64,256")
    parser.add_argument("--dtype", choices=list(DTYPES), default="f16")
    parser.add_argument("--passes", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=5)
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("torch_kernel_split: no CUDA GPU", file=sys.stderr)
        return 2
    device = torch.device("cuda")
    dtype = DTYPES[args.dtype]
    timm_module = None
    rows = []
    for provider in args.providers.split(","):
        if provider == "timm":
            timm_module, problem = import_timm()
            if timm_module is None:
                print(f"timm: skipped ({problem})")
                continue
        model = build_model(provider, VIT_B16, dtype, device, timm_module)
        for batch in (int(b) for b in args.batch_sizes.split(",")):
            pixels = torch.randn(batch, 3, VIT_B16.image, VIT_B16.image, device=device, dtype=dtype)
            # Warm-up, then the median wall time of CUDA-event-timed passes.
            wall = time_forward(model, pixels, args.warmup, max(args.passes, 10))
            with torch.inference_mode():
                buckets, kernels = split(model, pixels, args.passes)
            total = sum(buckets.values())
            rows.append({
                "provider": provider, "batch": batch, "dtype": args.dtype, "wall_ms": wall,
                "kernel_ms": total, "buckets_ms": dict(sorted(buckets.items(), key=lambda kv: -kv[1])),
                "top_kernels_ms": dict(sorted(kernels.items(), key=lambda kv: -kv[1])[:12]),
            })
            print(f"{provider} batch {batch}: wall {wall:.3f} ms a pass, kernels {total:.3f} ms")
            for name, ms in rows[-1]["buckets_ms"].items():
                print(f"    {name:26s} {ms:8.3f} ms  {100 * ms / total:5.1f}%")
        del model
        torch.cuda.empty_cache()
    props = torch.cuda.get_device_properties(device)
    doc = {"gpu": props.name, "torch": torch.__version__, "passes": args.passes, "rows": rows}
    args.json.write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
