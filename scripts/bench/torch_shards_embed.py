"""The PyTorch peer of `vitrt embed --output-dir` over webdataset tars, one process per GPU as
clip-retrieval's `inference` runs (its own package pins numpy<2 and pyarrow<16 beside torch
and cannot be installed on the GPU machine; the dataset issue names this pipeline instead).

Each process takes the shards whose index is its rank modulo the world size, reads each tar's
JPEG members in order (a thread reads the next shard meanwhile), decodes them in batches with
torchvision's nvJPEG decoder on its GPU, resizes to the model's size (bilinear, antialiased),
normalises as the processor does, runs transformers' ViTModel with SDPA in float16, and writes
the L2-normalised pooler outputs of each shard to OUT/<shard stem>.npy. Its pixels are not
PIL's (nvJPEG's IDCT and upsampling differ): a throughput peer, not a parity one.

    python3 scripts/bench/torch_shards_embed.py --model DIR --out DIR --world N SHARD.tar...

launches N processes (CUDA_VISIBLE_DEVICES=rank each) and prints one JSON line: images, wall
seconds from the launch to the last process's end (start-up included, as vitrt's figure is),
images/s.
"""

import argparse
import json
import os
import pathlib
import subprocess
import sys
import tarfile
import threading
import time


def jpegs_of(tar_path: pathlib.Path) -> list[bytes]:
    """The tar's JPEG members' bytes, in the tar's order."""
    out = []
    with tarfile.open(tar_path) as tar:
        for member in tar:
            if member.isfile() and member.name.lower().endswith((".jpg", ".jpeg")):
                out.append(tar.extractfile(member).read())
    return out


def worker(args: argparse.Namespace) -> None:
    import numpy as np
    import torch
    from torchvision.io import decode_jpeg
    from transformers import ViTModel

    torch.backends.cuda.matmul.allow_tf32 = True
    model = ViTModel.from_pretrained(args.model, attn_implementation="sdpa", torch_dtype=torch.float16)
    model = model.cuda().eval()
    size = model.config.image_size
    mean = torch.tensor([0.5, 0.5, 0.5], device="cuda").view(1, 3, 1, 1)
    std = torch.tensor([0.5, 0.5, 0.5], device="cuda").view(1, 3, 1, 1)
    shards = [pathlib.Path(s) for i, s in enumerate(args.shards) if i % args.world == args.rank]
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    # The next shard is read while this one runs.
    loaded: dict[int, list[bytes]] = {}

    def load(i: int) -> None:
        loaded[i] = jpegs_of(shards[i])

    reader = threading.Thread(target=load, args=(0,)) if shards else None
    if reader:
        reader.start()
    with torch.inference_mode():
        for i, shard in enumerate(shards):
            reader.join()
            blobs = loaded.pop(i)
            if i + 1 < len(shards):
                reader = threading.Thread(target=load, args=(i + 1,))
                reader.start()
            rows = []
            for start in range(0, len(blobs), args.batch_size):
                data = [torch.frombuffer(b, dtype=torch.uint8) for b in blobs[start:start + args.batch_size]]
                images = decode_jpeg(data, device="cuda")
                x = torch.cat([
                    torch.nn.functional.interpolate(im.unsqueeze(0).float(), size=(size, size),
                                                    mode="bilinear", antialias=True)
                    for im in images
                ])
                x = ((x / 255.0 - mean) / std).half()
                pooled = model(pixel_values=x).pooler_output.float()
                rows.append(torch.nn.functional.normalize(pooled, dim=-1).cpu())
            np.save(out / f"{shard.stem}.npy", torch.cat(rows).numpy() if rows else np.zeros((0, 0), np.float32))
    torch.cuda.synchronize()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--world", type=int, default=1)
    parser.add_argument("--rank", type=int, default=None, help="(set by the launcher)")
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("shards", nargs="+")
    args = parser.parse_args()
    if args.rank is not None:
        worker(args)
        return
    started = time.perf_counter()
    processes = []
    for rank in range(args.world):
        env = dict(os.environ, CUDA_VISIBLE_DEVICES=str(rank))
        command = [sys.executable, __file__, "--model", args.model, "--out", args.out, "--world",
                   str(args.world), "--rank", str(rank), "--batch-size", str(args.batch_size), *args.shards]
        processes.append(subprocess.Popen(command, env=env))
    codes = [p.wait() for p in processes]
    wall = time.perf_counter() - started
    images = sum(len(jpegs_of(pathlib.Path(s))) for s in args.shards)
    print(json.dumps({"world": args.world, "exit_codes": codes, "images": images, "wall_s": round(wall, 3),
                      "images_per_s": round(images / wall, 1)}))


if __name__ == "__main__":
    main()
