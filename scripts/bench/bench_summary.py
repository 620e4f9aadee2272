#!/usr/bin/env python3
"""Writes (or adds to) a dated run's summary.json (schema "vitrt-run/1", benchmarks/SCHEMA.md).

    python3 scripts/bench/bench_summary.py RUN_DIR [--logs LOGS] [--label LABEL] [--commit COMMIT]
        [--what TEXT] [--topic TEXT] [--add FIELD=PATH ...] [--run-extra NAME=PATH ...]
        [--compare]

RUN_DIR is the run's folder in benchmarks/ (e.g. benchmarks/2026-11-24-h200-gelu-attention);
LOGS is what scripts/gpu/gpu-bench.sh, gpu-check.sh or gpu-pipeline.sh wrote (benchmarks/raw/...,
git-ignored). One call adds one set of figures (one commit's benchmark set) to the run, read
from LOGS: vitrt-kernels-*.json, vitrt-model-*.json, torch-*.json, profile-b*-*.json,
pipeline*.json, and the GPU check's summary.txt (LOGS/summary.txt or LOGS/check/summary.txt);
cold-start-*.json (scripts/bench/cold_start.py) and torch_compile-*.json (gpu-bench.sh compile) go
into the set's "extra" under their file names without ".json".
A set with the same label is replaced. --add FIELD=PATH puts a file into the set by hand
(FIELD: vitrt_kernels, vitrt_model, torch, pipeline, gpu_check, profile.NAME or extra.NAME);
--run-extra NAME=PATH puts one into the run's own "extra". A JSON file goes in as its
document, any other file as its list of lines. --compare copies LOGS/compare-*.txt into
RUN_DIR (the run's compare table). Standard library only.
"""
import argparse
import glob
import json
import os
import re
import shutil
import sys

SET_FIELDS = ("vitrt_kernels", "vitrt_model", "torch", "pipeline", "gpu_check")


def read(path):
    """A JSON file's document, or any other file's lines."""
    try:
        with open(path) as f:
            text = f.read()
    except OSError as e:
        sys.exit(f"error: cannot read {path}: {e}")
    if path.endswith(".json"):
        try:
            return json.loads(text)
        except ValueError as e:
            sys.exit(f"error: {path} is not JSON: {e}")
    return text.rstrip("\n").split("\n")


def nested(value):
    """An object holding objects or lists of objects or lines: worth more than one line."""
    return isinstance(value, dict) and any(
        isinstance(v, dict) and v or isinstance(v, list) and any(isinstance(x, (dict, str)) for x in v)
        for v in value.values())


def dumps(value, level=0):
    """JSON with objects indented and each list element (a row, a line) on one line of its own."""
    pad = "  " * (level + 1)
    if isinstance(value, dict) and value:
        items = [f"{pad}{json.dumps(k)}: {dumps(v, level + 1)}" for k, v in value.items()]
        return "{\n" + ",\n".join(items) + "\n" + "  " * level + "}"
    if isinstance(value, list) and value:
        items = [pad + (dumps(v, level + 1) if nested(v) else json.dumps(v, ensure_ascii=False))
                 for v in value]
        return "[\n" + ",\n".join(items) + "\n" + "  " * level + "]"
    return json.dumps(value, ensure_ascii=False)


def first(logs, pattern):
    paths = sorted(glob.glob(os.path.join(logs, pattern)))
    return paths[0] if paths else None


def set_from_logs(logs):
    found = {}
    for field, pattern in (
        ("vitrt_kernels", "vitrt-kernels-*.json"),
        ("vitrt_model", "vitrt-model-*.json"),
        ("torch", "torch-*.json"),
        ("pipeline", "pipeline*.json"),
    ):
        path = first(logs, pattern) or first(logs, os.path.join("bench", pattern))
        if path:
            found[field] = read(path)
    for candidate in ("summary.txt", os.path.join("check", "summary.txt")):
        if os.path.exists(os.path.join(logs, candidate)):
            found["gpu_check"] = read(os.path.join(logs, candidate))
            break
    profiles = {}
    for sub in ("", "bench"):
        for path in sorted(glob.glob(os.path.join(logs, sub, "profile-b*-*.json"))):
            name = re.sub(r"^profile-|\.json$", "", os.path.basename(path))
            profiles[name] = read(path)
    if profiles:
        found["profiles"] = profiles
    extra = {}
    for sub in ("", "bench"):
        for pattern in ("cold-start-*.json", "torch_compile-*.json"):
            for path in sorted(glob.glob(os.path.join(logs, sub, pattern))):
                extra[os.path.basename(path)[:-len(".json")]] = read(path)
    if extra:
        found["extra"] = extra
    return found


def pair(text):
    if "=" not in text:
        sys.exit(f"error: expected NAME=PATH, got {text!r}")
    return text.split("=", 1)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("run_dir")
    p.add_argument("--logs", help="folder the GPU scripts wrote")
    p.add_argument("--label", default="final", help="the set's name (default: final)")
    p.add_argument("--commit", help="the commit measured")
    p.add_argument("--what", help="one line: what the set measured")
    p.add_argument("--topic", help="one line: what the run measured (the run's own field)")
    p.add_argument("--date", help="YYYY-MM-DD (default: from the first vitrt-bench document)")
    p.add_argument("--gpu", help="GPU name (default: from the first vitrt-bench document)")
    p.add_argument("--driver", help="driver version (default: likewise)")
    p.add_argument("--add", action="append", default=[], metavar="FIELD=PATH")
    p.add_argument("--run-extra", action="append", default=[], metavar="NAME=PATH")
    p.add_argument("--compare", action="store_true", help="copy LOGS/compare-*.txt into RUN_DIR")
    args = p.parse_args()

    os.makedirs(args.run_dir, exist_ok=True)
    out = os.path.join(args.run_dir, "summary.json")
    if os.path.exists(out):
        run = read(out)
        if run.get("schema") != "vitrt-run/1":
            sys.exit(f"error: {out} is not a vitrt-run/1 document")
    else:
        run = {"schema": "vitrt-run/1", "date": None, "gpu": None, "driver": None,
               "topic": None, "sets": [], "extra": {}}

    if args.logs or args.add or args.commit or args.what:
        found = set_from_logs(args.logs) if args.logs else {}
        for item in args.add:
            field, path = pair(item)
            if field in SET_FIELDS:
                found[field] = read(path)
            elif field.startswith("profile."):
                found.setdefault("profiles", {})[field[len("profile."):]] = read(path)
            elif field.startswith("extra."):
                found.setdefault("extra", {})[field[len("extra."):]] = read(path)
            else:
                sys.exit(f"error: unknown field {field!r}")
        entry = {"label": args.label, "commit": args.commit, "what": args.what}
        for field in SET_FIELDS:
            entry[field] = found.get(field)
        entry["profiles"] = found.get("profiles", {})
        entry["extra"] = found.get("extra", {})
        run["sets"] = [s for s in run["sets"] if s["label"] != args.label] + [entry]
    for item in args.run_extra:
        name, path = pair(item)
        run["extra"][name] = read(path)

    # The run's date, GPU and driver: given, else from the first vitrt-bench document.
    for s in run["sets"]:
        for field in ("vitrt_kernels", "vitrt_model", "torch"):
            doc = s.get(field)
            if isinstance(doc, dict) and doc.get("schema") == "vitrt-bench/1":
                run["date"] = run["date"] or doc["date"][:10]
                run["gpu"] = run["gpu"] or doc["device"]["name"]
                run["driver"] = run["driver"] or doc["device"].get("driver")
    for field in ("date", "gpu", "driver", "topic"):
        if getattr(args, field):
            run[field] = getattr(args, field)

    with open(out, "w") as f:
        f.write(dumps(run) + "\n")
    print(f"wrote {out}: {len(run['sets'])} set(s)")
    if args.compare:
        if not args.logs:
            sys.exit("error: --compare needs --logs")
        tables = glob.glob(os.path.join(args.logs, "compare-*.txt")) + glob.glob(
            os.path.join(args.logs, "bench", "compare-*.txt"))
        for path in tables:
            shutil.copy(path, os.path.join(args.run_dir, os.path.basename(path)))
            print(f"copied {path} to {args.run_dir}")


if __name__ == "__main__":
    main()
