#!/usr/bin/env python3
"""Two builds of vitrt timed in one GPU run: the ratio of each kernel and model row.

    python3 scripts/bench/compare_builds.py BEFORE.json [BEFORE2.json ...] --after AFTER.json [AFTER2.json ...]

Every file is a vitrt-bench/1 document (`vitrt bench kernels --json`, `vitrt bench model
--json`). Rows are paired on (op, case, provider, epilogue) for kernels and (model, provider,
batch) for models; when a side has several documents (the builds run in turns, to spread the
machine's drift over both), each row's figure is the median of its medians. The ratio is
before / after of the median time: above 1 means the second build is faster. Prints one table,
then the geometric mean and the range of the ratios; exits 1 if a file is unreadable.
"""
import argparse
import json
import math
import statistics
import sys

from compare_bench import load  # reads and checks one vitrt-bench/1 document


def medians(paths):
    """Each row's key -> the median over the documents of its median_ms."""
    times = {}
    for path in paths:
        doc = load(path)
        for row in doc.get("kernels", []):
            key = ("kernel", row["op"], row["case"], row["provider"], row.get("epilogue") or "")
            times.setdefault(key, []).append(row["median_ms"])
        for row in doc.get("models", []):
            key = ("model", str(row["model"]), row["provider"], f"batch {row['batch']}", "")
            times.setdefault(key, []).append(row["median_ms"])
    return {key: statistics.median(values) for key, values in times.items()}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("before", nargs="+", help="the first build's JSON documents")
    parser.add_argument("--after", nargs="+", required=True, help="the second build's")
    args = parser.parse_args()
    before, after = medians(args.before), medians(args.after)
    rows = [(key, before[key], after[key]) for key in before if key in after]
    if not rows:
        sys.exit("error: the two builds have no row in common")
    width = max(len(" ".join(k for k in key[1:] if k)) for key, _, _ in rows)
    print(f"{'row':<{width}}  {'before ms':>10}  {'after ms':>10}  {'before/after':>12}")
    ratios = []
    for key, b, a in rows:
        name = " ".join(k for k in key[1:] if k)
        ratio = b / a if a > 0 else float("nan")
        ratios.append(ratio)
        print(f"{name:<{width}}  {b:>10.4f}  {a:>10.4f}  {ratio:>12.3f}")
    finite = [r for r in ratios if math.isfinite(r) and r > 0]
    geomean = math.exp(sum(math.log(r) for r in finite) / len(finite)) if finite else float("nan")
    print(f"\n{len(rows)} rows: geometric mean {geomean:.3f}, range {min(finite):.3f} to {max(finite):.3f}")
    only = sorted(set(before) ^ set(after))
    for key in only:
        print(f"only in {'before' if key in before else 'after'}: {' '.join(k for k in key[1:] if k)}")


if __name__ == "__main__":
    main()
