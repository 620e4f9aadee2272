#!/usr/bin/env python3
"""The `vitrt` Python module on the GPU machine: `Model.classify` over a folder against the
CLI's `vitrt classify` on the same files (top-1 agreement, wall time), and `Model.forward`
against a float64 PyTorch reference in f32, f16 and bf16.

  pip install --target /tmp/pyv WHEEL   # maturin build --release in python/, carried in .carry/
  PYTHONPATH=/tmp/pyv python3 scripts/gpu/gpu-python.py MODEL_DIR PHOTOS_DIR

MODEL_DIR holds a classifier and reference.safetensors (scripts/fixtures/make_random_vit.py, then
scripts/fixtures/reference.py --random-batch 2 --dtype float64); .carry/vitrt.bin is the CLI.
"""
import json, subprocess, sys, time, glob
import numpy as np
import vitrt
from safetensors.numpy import load_file

model_dir, photos = sys.argv[1], sys.argv[2]
paths = sorted(glob.glob(f"{photos}/*.jpg"))
m = vitrt.Model(model_dir, device="cuda", dtype="f16", batch_size=256)
print("device", m.device, m.dtype, m.batch_size)
m.classify(paths[:256], top_k=5)  # warm: kernels compiled, graphs captured
t = time.perf_counter(); ours = m.classify(paths, top_k=5); dt = time.perf_counter() - t
print(f"python classify {len(paths)} photos: {dt:.2f} s, {len(paths)/dt:.0f} img/s")
t = time.perf_counter()
cli = subprocess.run([".carry/vitrt.bin", "classify", "--model", model_dir, "--device", "cuda", "--dtype", "f16",
                      "--batch-size", "256", "--format", "jsonl", "--quiet", photos], capture_output=True, text=True, check=True)
dc = time.perf_counter() - t
print(f"CLI classify (process, incl. load): {dc:.2f} s, {len(paths)/dc:.0f} img/s")
rows = [json.loads(l) for l in cli.stdout.splitlines()]
same = sum(r["predictions"][0]["index"] == o[0]["index"] for r, o in zip(rows, ours))
worst = max(abs(r["predictions"][0]["probability"] - o[0]["probability"]) for r, o in zip(rows, ours))
print(f"top-1 agreement {same}/{len(rows)}, worst top-1 probability difference {worst:.2e}")
ref = load_file(f"{model_dir}/reference.safetensors")
for dtype in ["f32", "f16", "bf16"]:
    mm = vitrt.Model(model_dir, device="cuda", dtype=dtype)
    outs = mm.forward(ref["pixel_values"].astype(np.float32))
    worst = 0.0
    for name, got in outs.items():
        if name in ref:
            want = ref[name].astype(np.float64)
            worst = max(worst, float(np.abs(got - want).max() / np.abs(want).max()))
    print(f"forward {dtype} vs float64 PyTorch: worst relative error {worst:.2e} over {sorted(outs)}")
