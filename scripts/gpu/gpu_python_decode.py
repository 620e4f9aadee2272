#!/usr/bin/env python3
"""`vitrt.Model(decode=...)` on the GPU machine: the same photos classified with decode="gpu",
"gpu-idct" and "cpu" must give identical predictions (the device decodes JPEG files with the
host's exact pixels), and each takes the time printed.

  PYTHONPATH=DIR python3 scripts/gpu/gpu_python_decode.py --model MODEL --images DIR [--count N]

DIR holds the built module (vitrt.abi3.so); MODEL a checkpoint folder; the images are the
first N .jpg files of the folder, classified by path and, for decode="gpu", also as bytes.
"""

import argparse
import json
import time
from pathlib import Path

import vitrt


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", required=True)
    parser.add_argument("--images", required=True, type=Path)
    parser.add_argument("--count", type=int, default=2048)
    parser.add_argument("--batch-size", type=int, default=256)
    args = parser.parse_args()
    files = sorted(str(p) for p in args.images.glob("*.jpg"))[: args.count]
    # Files the host refuses would stop a call (Python raises for the first bad image).
    host = vitrt.Model(args.model, device="cuda", dtype="f16", batch_size=args.batch_size, decode="cpu")

    def accepted(path: str) -> bool:
        try:
            host.classify([path], top_k=1)
            return True
        except ValueError:
            return False

    refused = [f for f in files if not Path(f).name.startswith("photo-") and not accepted(f)]
    files = [f for f in files if f not in refused]
    print(f"{len(files)} files ({len(refused)} the host refuses left out)")
    results = {}
    for decode in ["gpu", "gpu-idct", "cpu"]:
        model = vitrt.Model(args.model, device="cuda", dtype="f16", batch_size=args.batch_size, decode=decode)
        model.classify(files[: args.batch_size], top_k=5)  # warm: kernels, graphs
        start = time.perf_counter()
        results[decode] = model.classify(files, top_k=5)
        seconds = time.perf_counter() - start
        print(f"decode={decode}: {len(files) / seconds:.0f} images/s", flush=True)
    as_bytes = vitrt.Model(args.model, device="cuda", dtype="f16", batch_size=args.batch_size, decode="gpu")
    results["gpu-bytes"] = as_bytes.classify([Path(f).read_bytes() for f in files], top_k=5)
    same = {k: json.dumps(v) == json.dumps(results["cpu"]) for k, v in results.items()}
    print("identical to decode=\"cpu\":", same)


if __name__ == "__main__":
    main()
