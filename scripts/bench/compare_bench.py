#!/usr/bin/env python3
"""Ratios of vitrt to PyTorch from two vitrt-bench/1 documents taken in the same GPU session.

    python3 scripts/bench/compare_bench.py VITRT.json [VITRT_MODEL.json ...] --torch TORCH.json [--torch MORE.json ...]

Kernel rows are paired on (op, case, epilogue): vitrt's matmul against torch-cublas, its
attention against torch-sdpa, the rest against torch. Model rows are paired on batch size:
vitrt against every PyTorch provider. A ratio above 1 means vitrt is faster (rates divide,
so it is throughput over throughput). Prints aligned tables; exits 1 if a file is unreadable.

--torch may be given several times (bench_torch.py runs split over calls, such as the
torch.compile ones, scripts/gpu/gpu-bench.sh compile): their rows are put together.

Model rows that carry "memory" (benchmarks/SCHEMA.md) also get peak memory in MiB: vitrt's
account of its allocations ("allocated_peak_bytes": weights, arena, scratch, staging) beside
torch.cuda.max_memory_allocated of the same batch size, and "mem" = vitrt / PyTorch (below 1:
vitrt holds less); "vitrt dev" is the driver's figure for vitrt (used memory less before the
weights: also the kernels' code and the CUDA graph). A dash where a file has no such figure.
"""
import argparse
import json
import sys

TORCH_PROVIDER = {"matmul": "torch-cublas", "attention": "torch-sdpa"}


def load(path):
    try:
        with open(path) as f:
            doc = json.load(f)
    except (OSError, ValueError) as e:
        sys.exit(f"error: cannot read {path}: {e}")
    if doc.get("schema") != "vitrt-bench/1":
        sys.exit(f"error: {path} is not a vitrt-bench/1 document")
    return doc


def rate(row):
    return row["tflops"] if row.get("tflops") is not None else row.get("gbps")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("vitrt", nargs="+", help="vitrt bench kernels / bench model JSON")
    parser.add_argument("--torch", required=True, action="append",
                        help="scripts/bench/bench_torch.py JSON (repeat to put several runs together)")
    args = parser.parse_args()
    torch_docs = [load(p) for p in args.torch]
    torch_doc = {"kernels": [r for d in torch_docs for r in d.get("kernels", [])],
                 "models": [r for d in torch_docs for r in d.get("models", [])]}
    ours = [load(p) for p in args.vitrt]

    torch_kernels = {(r["op"], r["case"], r.get("epilogue"), r["provider"]): r for r in torch_doc["kernels"]}
    lines = []
    for doc in ours:
        for r in doc["kernels"]:
            if r["provider"] != "vitrt":
                continue
            provider = TORCH_PROVIDER.get(r["op"], "torch")
            t = torch_kernels.get((r["op"], r["case"], r.get("epilogue"), provider))
            if t is None or rate(t) is None or rate(r) is None:
                continue
            unit = "TFLOP/s" if r.get("tflops") is not None and r["op"] == "matmul" else "GB/s"
            if unit == "GB/s" and r.get("gbps") is None:
                continue
            ours_rate = r["tflops"] if unit == "TFLOP/s" else r["gbps"]
            theirs = t["tflops"] if unit == "TFLOP/s" else t["gbps"]
            epilogue = r.get("epilogue") or ""
            lines.append((r["op"], r["case"], epilogue, provider, ours_rate, theirs, unit))
    if lines:
        print(f"{'op':<10} {'case':<22} {'epilogue':<10} {'vs':<13} {'vitrt':>9} {'torch':>9} {'unit':<8} {'ratio':>6}")
        for op, case, epi, prov, a, b, unit in lines:
            print(f"{op:<10} {case:<22} {epi:<10} {prov:<13} {a:>9.1f} {b:>9.1f} {unit:<8} {a / b:>6.2f}")
    torch_models = torch_doc.get("models", [])
    model_lines = []
    for doc in ours:
        for r in doc.get("models", []):
            for t in torch_models:
                if t["batch"] == r["batch"]:
                    model_lines.append((r["batch"], t["provider"], r["images_per_s"], t["images_per_s"],
                                        r["median_ms"], t["median_ms"], peak(r), peak(t), device_peak(r)))
    if model_lines:
        print(f"\n{'batch':>5} {'vs':<16} {'vitrt img/s':>12} {'torch img/s':>12} {'vitrt ms':>9} {'torch ms':>9} {'ratio':>6}"
              f" {'vitrt MiB':>10} {'torch MiB':>10} {'mem':>5} {'vitrt dev':>10}")
        for batch, prov, a, b, ams, bms, am, bm, dev in sorted(model_lines):
            mem = f"{am / bm:>5.2f}" if am is not None and bm else f"{'-':>5}"
            print(f"{batch:>5} {prov:<16} {a:>12.1f} {b:>12.1f} {ams:>9.3f} {bms:>9.3f} {a / b:>6.2f}"
                  f" {mib(am):>10} {mib(bm):>10} {mem} {mib(dev):>10}")


def peak(row):
    """A model row's peak of allocated memory in bytes: vitrt's account, or PyTorch's
    max_memory_allocated; None where the row has none (older files, CPU runs)."""
    memory = row.get("memory") or {}
    return memory.get("allocated_peak_bytes")


def device_peak(row):
    """vitrt's driver-measured peak in bytes (used memory less before the weights), if any."""
    device = (row.get("memory") or {}).get("device") or {}
    return device.get("peak_bytes")


def mib(value):
    return "-" if value is None else f"{value / 2**20:.1f}"


if __name__ == "__main__":
    main()
