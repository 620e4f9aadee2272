#!/usr/bin/env python3
"""PyTorch's scaled_dot_product_attention on the model families' attention shapes, joined
with vitrt's programs on the same shapes (the `ATTN` lines that the ignored test
`bench_attention_programs_at_model_shapes` in kernels/tests/gpu_attention.rs prints).

Run on the GPU machine, after the test:

    python3 scripts/bench/bench_attention.py --ours LOG [--json OUT.json]

For each shape (the same table as the test's MODEL_SHAPES) and batch 1, 8, 64 and 256, f16 (and
bf16 for ViT-B/16), Q, K and V are read out of one fused QKV activation [B, T, 3, H, D] as
transformers' SDPA attention reads them (a transpose, no copy), and SDPA is timed with its
default backend choice and with each backend forced (cuDNN, FlashAttention-2, memory-efficient)
where that backend takes the case; CUDA events, 5 warm-up calls, the median of 7 samples of 20
calls, as the Rust test. PyTorch runs SigLIP so400m at its own head dim, 72; vitrt at 80 (its
runtime pads 72 to 80), so the row compares what each one runs for that model.

The table gives the time of the program vitrt's launcher picks, the best program's, each
program's, and the ratio of the best PyTorch backend's time to the launcher's pick (above 1:
vitrt faster).
"""

import argparse
import json
import statistics
import sys

# (name, heads, tokens, vitrt's head dim, PyTorch's head dim)
SHAPES = [
    ("vit-b16-224", 12, 197, 64, 64),
    ("dinov2-b14-224", 12, 257, 64, 64),
    ("dinov2-l14-224", 16, 257, 64, 64),
    ("clip-l14-336", 16, 577, 64, 64),
    ("vit-h14-224", 16, 257, 80, 80),
    ("so400m-14-384", 16, 729, 80, 72),
    ("siglip2-g16-256", 16, 256, 96, 96),
    ("d112-t577", 8, 577, 112, 112),
    ("d128-t577", 8, 577, 128, 128),
]
BATCHES = [1, 8, 64, 256]
# The launcher's own pick (`attention::gpu::attention`), which the test times last.
CHOSEN = "chosen"


def parse_ours(path):
    ours = {}
    with open(path) as f:
        for line in f:
            if not line.startswith("ATTN\t"):
                continue
            _, shape, batch, dtype, program, us, _tflops = line.rstrip("\n").split("\t")
            ours.setdefault((shape, int(batch), dtype), {})[program] = float(us)
    return ours


def time_us(torch, fn):
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    samples = []
    for _ in range(7):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(20):
            fn()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) * 1e3 / 20)
    return statistics.median(samples)


def bench_torch():
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    backends = {
        "cudnn": SDPBackend.CUDNN_ATTENTION,
        "flash": SDPBackend.FLASH_ATTENTION,
        "efficient": SDPBackend.EFFICIENT_ATTENTION,
    }
    results = {}
    torch.manual_seed(0)
    for shape, heads, tokens, _, head_dim in SHAPES:
        dtypes = ["f16", "bf16"] if shape == "vit-b16-224" else ["f16"]
        for dtype in dtypes:
            torch_dtype = torch.float16 if dtype == "f16" else torch.bfloat16
            for batch in BATCHES:
                qkv = torch.empty(batch, tokens, 3, heads, head_dim, device="cuda", dtype=torch_dtype)
                qkv.uniform_(-2.0, 2.0)
                q, k, v = (qkv[:, :, i].transpose(1, 2) for i in range(3))
                row = {}
                row["default"] = time_us(torch, lambda: F.scaled_dot_product_attention(q, k, v))
                for name, backend in backends.items():
                    try:
                        with sdpa_kernel(backend):
                            F.scaled_dot_product_attention(q, k, v)
                            row[name] = time_us(torch, lambda: F.scaled_dot_product_attention(q, k, v))
                    except RuntimeError as e:
                        row[name] = None
                        print(f"# {shape} b{batch} {dtype}: {name} refused: {str(e).splitlines()[0][:120]}",
                              file=sys.stderr)
                results[(shape, batch, dtype)] = row
                del qkv, q, k, v
                torch.cuda.empty_cache()
    return results, torch.cuda.get_device_name(), torch.__version__


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ours", required=True, help="log of bench_attention_programs_at_model_shapes")
    parser.add_argument("--json", help="write the joined figures here")
    args = parser.parse_args()

    ours = parse_ours(args.ours)
    if not ours:
        sys.exit(f"no ATTN lines in {args.ours}: run bench_attention_programs_at_model_shapes first")
    torch_results, device, version = bench_torch()

    rows = []
    print(f"# {device}, torch {version}; times in us (median); ratio = best PyTorch / vitrt's chosen program")
    print(f"{'shape':<16} {'batch':>5} {'dtype':<5} {'vitrt':>9} {'best prog':>9} {'cudnn':>9} {'flash':>9} "
          f"{'default':>9} {'ratio':>6}  programs")
    for key, programs in sorted(ours.items(), key=lambda kv: ([s[0] for s in SHAPES].index(kv[0][0]), kv[0][1], kv[0][2])):
        shape, batch, dtype = key
        theirs = torch_results.get(key, {})
        chosen = programs.pop(CHOSEN, None)
        best_prog = min(programs.values())
        torch_times = [t for t in theirs.values() if t is not None]
        best_torch = min(torch_times) if torch_times else None
        ratio = best_torch / chosen if (best_torch and chosen) else None

        def fmt(x):
            return f"{x:9.1f}" if x is not None else f"{'-':>9}"

        print(f"{shape:<16} {batch:>5} {dtype:<5} {fmt(chosen)} {fmt(best_prog)} {fmt(theirs.get('cudnn'))} "
              f"{fmt(theirs.get('flash'))} {fmt(theirs.get('default'))} "
              f"{(f'{ratio:6.2f}' if ratio else '     -')}  "
              + ", ".join(f"{p}: {t:.1f}" for p, t in sorted(programs.items(), key=lambda kv: kv[1])))
        rows.append({"shape": shape, "batch": batch, "dtype": dtype, "vitrt_us": chosen,
                     "vitrt_programs_us": programs, "torch_us": theirs, "best_torch_over_vitrt": ratio})
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": device, "torch": version, "chosen_program": CHOSEN, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
