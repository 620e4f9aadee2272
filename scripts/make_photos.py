#!/usr/bin/env python3
"""Make N photo-like JPEG files of one size for the whole-job benchmark (scripts/bench_pipeline.py).

  python3 scripts/make_photos.py --out /tmp/photos --count 4096 --size 500x375

Each file is a random crop of one of scikit-image's bundled photographs (astronaut, coffee,
chelsea, rocket, ... whichever are installed), randomly flipped, shifted in brightness and
resized to the size asked, then saved as a baseline JPEG at quality 90 with 4:2:0 chroma
subsampling, as a camera or a web page would: real photographic content, so that the decoder
works as hard as on real photos. Without scikit-image the sources are smooth random fields
with noise. The same --seed gives the same files.
"""

from __future__ import annotations

import argparse
import os
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
from PIL import Image


def sources() -> list[np.ndarray]:
    found = []
    try:
        from skimage import data

        for name in ["astronaut", "coffee", "chelsea", "rocket", "immunohistochemistry", "retina", "colorwheel"]:
            try:
                image = getattr(data, name)()
            except Exception:  # noqa: BLE001 - a missing or undownloadable sample is skipped
                continue
            if image.ndim == 3 and image.shape[2] >= 3 and min(image.shape[:2]) >= 256:
                found.append(np.ascontiguousarray(image[..., :3]).astype(np.uint8))
    except ImportError:
        pass
    if not found:
        rng = np.random.default_rng(0)
        for _ in range(4):
            low = rng.random((12, 16, 3))
            field = np.array(Image.fromarray((low * 255).astype(np.uint8)).resize((800, 600), Image.BICUBIC))
            noise = rng.normal(0, 12, field.shape)
            found.append(np.clip(field + noise, 0, 255).astype(np.uint8))
    return found


def make(job) -> None:
    index, out, width, height, seed, images = job
    rng = np.random.default_rng(seed * 1_000_003 + index)
    source = images[index % len(images)]
    h, w = source.shape[:2]
    scale = rng.uniform(0.5, 1.0)
    ch, cw = max(16, int(h * scale)), max(16, int(w * scale))
    y, x = rng.integers(0, h - ch + 1), rng.integers(0, w - cw + 1)
    crop = source[y : y + ch, x : x + cw].astype(np.float32)
    if rng.random() < 0.5:
        crop = crop[:, ::-1]
    crop = np.clip(crop * rng.uniform(0.8, 1.2) + rng.uniform(-20, 20), 0, 255).astype(np.uint8)
    image = Image.fromarray(np.ascontiguousarray(crop)).resize((width, height), Image.BICUBIC)
    image.save(out / f"photo-{index:06d}.jpg", quality=90, subsampling=2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--count", type=int, default=4096)
    parser.add_argument("--size", default="500x375", help="WIDTHxHEIGHT")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    width, height = (int(v) for v in args.size.lower().split("x"))
    args.out.mkdir(parents=True, exist_ok=True)
    images = sources()
    jobs = [(i, args.out, width, height, args.seed, images) for i in range(args.count)]
    with ProcessPoolExecutor(max_workers=os.cpu_count()) as pool:
        list(pool.map(make, jobs, chunksize=64))
    print(f"wrote {args.count} JPEGs of {width}x{height} to {args.out} from {len(images)} source photos")


if __name__ == "__main__":
    main()
