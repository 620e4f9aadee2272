#!/usr/bin/env python3
"""The `vitrt` Python module on every GPU of the host: `Model(device="cuda:all")` against
`Model(device="cuda:0")` on the same photos (the same predictions, images/s of each call, the
model warm), `forward` cutting a batch over the devices, and a torch CUDA tensor on the last
device run there.

  pip install --target /tmp/pyv WHEEL   # maturin build --release in python/
  PYTHONPATH=/tmp/pyv python3 scripts/gpu/gpu_python_devices.py MODEL_DIR PHOTOS_DIR

Prints one line per check; exits non-zero when one fails.
"""
import glob
import sys
import time

import numpy as np
import vitrt

model_dir, photos = sys.argv[1], sys.argv[2]
# The photos four times over: 64 batches of 256, 16 a device on four.
paths = sorted(glob.glob(f"{photos}/*.jpg")) * 4
failed = False


def check(ok: bool, what: str) -> None:
    global failed
    failed |= not ok
    print(("ok    " if ok else "FAILED ") + what)


def timed(model, images):
    # Every device warm: kernels loaded, graphs captured (two batches each).
    model.classify(images[: 2 * model.batch_size * len(model.devices)], top_k=5)
    start = time.perf_counter()
    out = model.classify(images, top_k=5)
    return out, time.perf_counter() - start


one = vitrt.Model(model_dir, device="cuda:0", dtype="f16", batch_size=256)
every = vitrt.Model(model_dir, device="cuda:all", dtype="f16", batch_size=256)
print(f"devices: {every.devices}, {len(paths)} photos, batch 256, f16")
a, ta = timed(one, paths)
b, tb = timed(every, paths)
print(f"classify: cuda:0 {len(paths) / ta:.0f} images/s, cuda:all {len(paths) / tb:.0f} images/s "
      f"({ta / tb:.2f}x)")
check(len(a) == len(b) == len(paths), "one result per photo")
same_top1 = sum(x[0]["index"] == y[0]["index"] for x, y in zip(a, b))
worst = max(abs(p["probability"] - q["probability"]) for x, y in zip(a, b) for p, q in zip(x, y))
check(same_top1 == len(paths) and worst == 0.0,
      f"cuda:all gives cuda:0's predictions: top-1 {same_top1}/{len(paths)}, largest probability difference {worst:.2e}")

rng = np.random.default_rng(0)
pixels = rng.standard_normal((4 * len(every.devices) + 3, 3, 224, 224), dtype=np.float32)
# Each device runs its run of rows, as one device runs the same rows alone (the tiles chosen
# depend on the rows a pass has, so a whole batch of 19 on one device is not the reference).
per_device = -(-len(pixels) // len(every.devices))
parts = [one.forward(pixels[i:i + per_device]) for i in range(0, len(pixels), per_device)]
want = {k: np.concatenate([part[k] for part in parts]) for k in parts[0]}
got = every.forward(pixels)
worst = max(float(np.max(np.abs(got[k] - want[k]))) for k in want)
check(sorted(got) == sorted(want) and all(got[k].shape == want[k].shape for k in want) and worst == 0.0,
      f"forward of {len(pixels)} rows cut over {len(every.devices)} devices: largest difference {worst:.2e}")

try:
    import torch

    last = len(every.devices) - 1
    tensor = torch.from_numpy(pixels[:8]).to(f"cuda:{last}")
    on_device = every.forward(tensor)
    alone = one.forward(pixels[:8])
    worst = max(float(np.max(np.abs(on_device[k] - alone[k]))) for k in alone)
    check(worst == 0.0, f"a torch tensor on cuda:{last} runs there: largest difference {worst:.2e}")
except ImportError:
    print("no torch: the CUDA tensor check is skipped")
sys.exit(1 if failed else 0)
