#!/usr/bin/env python3
"""Before/after ratios of two builds of the attention programs' benchmark, timed in one run.

    python3 scripts/bench/compare_attention.py BEFORE.txt [BEFORE.txt ...] --after AFTER.txt [...]

Each file is the output of `bench_attention_programs_at_model_shapes` (kernels/tests/
gpu_attention.rs): tab-separated `ATTN shape batch dtype program us tflops` lines. Runs of the
two builds should alternate (before, after, after, before) in one call. For every case of the
launcher's pick (`chosen`; `--program NAME` for another) present in both builds, prints the
median time of each build's runs and before/after (above 1: the after build is faster), then
the geometric mean over the rows from batch 8 up (batch 1's few microseconds move by 10-25%
between runs).
"""

import argparse
import math
import statistics
import sys

from bench_attention import parse_ours


def parse(path, program):
    """`program`'s time (us) by (shape, batch, dtype) in one benchmark log."""
    return {key: programs[program] for key, programs in parse_ours(path).items() if program in programs}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("before", nargs="+", help="the first build's benchmark logs")
    parser.add_argument("--after", nargs="+", required=True, help="the second build's")
    parser.add_argument("--program", default="chosen", help="the program column to compare (default: chosen)")
    args = parser.parse_args()
    before = [parse(p, args.program) for p in args.before]
    after = [parse(p, args.program) for p in args.after]
    keys = sorted(set.intersection(*(set(run) for run in before + after)))
    if not keys:
        sys.exit(f"no case of program {args.program!r} is in every log")
    print(f"{'shape':<18}{'batch':>6} {'dtype':<6}{'before us':>11}{'after us':>10}{'before/after':>14}")
    ratios = []
    for key in keys:
        b = statistics.median(run[key] for run in before)
        a = statistics.median(run[key] for run in after)
        print(f"{key[0]:<18}{key[1]:>6} {key[2]:<6}{b:>11.1f}{a:>10.1f}{b / a:>14.3f}")
        if key[1] >= 8:
            ratios.append(b / a)
    if ratios:
        mean = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
        print(f"geometric mean over {len(ratios)} rows from batch 8: {mean:.3f}")


if __name__ == "__main__":
    main()
