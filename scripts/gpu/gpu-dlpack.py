#!/usr/bin/env python3
"""`Model.forward` on CUDA torch tensors (DLPack) on the GPU machine: the same outputs as from
the numpy array, the producer's stream respected, clear errors for what it cannot take, and
the time of both paths.

  pip install --target /tmp/pyv WHEEL   # maturin build --release in python/, carried in .carry/
  PYTHONPATH=/tmp/pyv python3 scripts/gpu/gpu-dlpack.py MODEL_DIR

MODEL_DIR holds a classifier with reference.safetensors (scripts/fixtures/make_random_vit.py, then
scripts/fixtures/reference.py --random-batch 2 --dtype float64). Prints one `DLPACK` line a check and
exits 1 if one fails.
"""
import statistics, sys, time
import numpy as np
import torch
import vitrt
from safetensors.numpy import load_file

model_dir = sys.argv[1]
failed = 0


def check(name, ok, detail=""):
    global failed
    failed += not ok
    print(f"DLPACK {'ok  ' if ok else 'FAIL'} {name} {detail}")


def refuses(name, call, needle):
    try:
        call()
    except ValueError as e:
        check(name, needle in str(e), f"({e})")
        return
    check(name, False, "(no error)")


ref = load_file(f"{model_dir}/reference.safetensors")
pixels = np.ascontiguousarray(ref["pixel_values"].astype(np.float32))
for dtype in ["f32", "f16"]:
    m = vitrt.Model(model_dir, device="cuda", dtype=dtype)
    want = m.forward(pixels)
    got = m.forward(torch.from_numpy(pixels).cuda())
    same = all(np.array_equal(got[k], want[k]) for k in want)
    check(f"{dtype}: a CUDA tensor gives the numpy array's outputs", same and sorted(got) == sorted(want))

m = vitrt.Model(model_dir, device="cuda", dtype="f16")
want = m.forward(pixels + 1.0)["logits"]
# Written on a side stream behind a two-second spin: the model must wait for the write.
base = torch.from_numpy(pixels).cuda()
torch.cuda.synchronize()
side = torch.cuda.Stream()
with torch.cuda.stream(side):
    torch.cuda._sleep(2_000_000_000)
    x = base + 1.0
    got = m.forward(x)["logits"]
check("a tensor still being written on the producer's stream is read after the write",
      np.array_equal(got, want))
t = torch.from_numpy(pixels).cuda()
refuses("float16 refused", lambda: m.forward(t.half()), "float32")
refuses("non-contiguous refused", lambda: m.forward(t.transpose(2, 3)), "contiguous")
refuses("wrong shape refused", lambda: m.forward(t[:, :2].contiguous()), "this model takes")
cpu = vitrt.Model(model_dir, device="cpu")
refuses("a CPU model refuses a CUDA tensor", lambda: cpu.forward(t), "runs on the CPU")
check("a CPU torch tensor is read through DLPack", np.allclose(cpu.forward(t.cpu())["logits"],
                                                               cpu.forward(pixels)["logits"]))

# Time: batch 64 of 224x224 images, host array against CUDA tensor (median of 20).
batch = np.ascontiguousarray(np.random.default_rng(0).standard_normal((64, 3, 224, 224)).astype(np.float32))
on_gpu = torch.from_numpy(batch).cuda()
for name, x in [("numpy", batch), ("cuda tensor", on_gpu)]:
    m.forward(x)
    times = []
    for _ in range(20):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        m.forward(x)
        times.append(time.perf_counter() - t0)
    print(f"DLPACK time forward b64 from {name}: {statistics.median(times) * 1e3:.2f} ms")
sys.exit(1 if failed else 0)
