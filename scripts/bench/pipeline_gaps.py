#!/usr/bin/env python3
"""Where a `vitrt classify --stats` run's batches wait: reads the stats JSON and prints, as
medians over batches, the consumer's steps (submit, the wait for the outputs, handing the
results over, the time until the next submit) and the device's (the copy in, the gap on the
compute stream before each batch's first step, the decode, expansion and forward pass).

  python3 scripts/bench/pipeline_gaps.py stats.json
"""

import json
import statistics
import sys


def median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else float("nan")


def main() -> None:
    doc = json.load(open(sys.argv[1]))
    marks = [m for m in doc["consumer"].get("batch_marks_ms", []) if None not in m]
    if marks:
        submit = [m[1] - m[0] for m in marks]
        wait = [m[3] - m[2] for m in marks]
        hand = [m[4] - m[3] for m in marks]
        between = [b[0] - a[1] for a, b in zip(marks, marks[1:])]
        cycle = [b[0] - a[0] for a, b in zip(marks, marks[1:])]
        print(f"consumer, median a batch: cycle {median(cycle):.2f} ms: submit {median(submit):.2f}, "
              f"from submit's end to the next submit {median(between):.2f}; "
              f"waiting for outputs {median(wait):.2f}, handing results over {median(hand):.2f}")
    device = doc.get("device") or {}
    spans = device.get("timeline", [])
    by_stage = {}
    for stage, start, end in spans:
        by_stage.setdefault(stage, []).append((start, end))
    # The compute stream's stages; the copy stream copies and decodes (Entropy, Decode,
    # Resize) beside it.
    compute = sorted((s, e, st) for st, s, e in spans if st in ("Expand", "Forward", "CopyOut"))
    gaps = []
    previous_end = None
    for s, e, st in compute:
        if previous_end is not None and s - previous_end > 0.001:
            gaps.append((s - previous_end, st))
        previous_end = max(previous_end or e, e)
    idle = sum(g for g, _ in gaps)
    print(f"device: compute-stream idle {idle:.1f} ms over {len(gaps)} gaps (median "
          f"{median([g for g, _ in gaps]):.2f} ms), before: "
          + ", ".join(f"{st} {sum(g for g, s in gaps if s == st):.1f} ms" for st in sorted({s for _, s in gaps})))
    for stage, intervals in sorted(by_stage.items()):
        print(f"  {stage}: {len(intervals)} spans, median {median([e - s for s, e in intervals]):.2f} ms")
    copies = by_stage.get("CopyIn", [])
    firsts = sorted(s for s, e, st in compute if st == "Expand")
    lag = []
    for (cs, ce) in copies:
        after = [f for f in firsts if f >= ce - 1e-3]
        if after:
            lag.append(after[0] - ce)
    print(f"  from a copy's end to its batch's expansion: median {median(lag):.2f} ms")


if __name__ == "__main__":
    main()
