#!/usr/bin/env python3
"""The whole job, files on disk to top-5 results, vitrt against PyTorch on the same files.

  python3 scripts/bench/bench_pipeline.py --vitrt .carry/vitrt.bin --model /tmp/vitrt-vit-base \\
      --images /tmp/photos --batch-size 256 --json pipeline.json

Runs, in this order, on the same folder of JPEGs:
  vitrt      `vitrt classify --format jsonl --stats`, twice (the first run compiles the kernels
             into the kernel cache, as the first run on any machine does; the second is the
             figure, the first is kept as "vitrt_cold"): images/s from its own
             wall clock, the per-image host stages (read, decode, resize), the consumer's waits,
             images in flight and peak host memory (VmHWM), from the --stats file;
  forward    `vitrt bench model` at the same batch size: the forward pass alone, from which the
             GPU's busy fraction during the job is estimated (batches x forward time / wall);
  torch      the PyTorch peer: transformers' ViTImageProcessor (PIL) in a torch DataLoader with
             num_workers = cores and pin_memory=True, ViTForImageClassification with SDPA in
             float16 and random weights from the same checkpoint folder, top-5 on the GPU and
             copied to the host; timed from the loader's creation to the last batch's results.
With --repeat-large N the vitrt run is repeated on a folder of N images (made by repeating the
file list through --files-from), to check that peak memory does not grow with the file count.
Writes one JSON document and prints a table.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def run_vitrt(binary: str, model: str, files: list[Path], batch: int, workers: int | None, dtype: str,
              decode: str | None = None) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        listing = Path(tmp) / "files.txt"
        listing.write_text("".join(f"{p}\n" for p in files))
        stats = Path(tmp) / "stats.json"
        command = [binary, "classify", "--model", model, "--device", "cuda", "--dtype", dtype,
                   "--batch-size", str(batch), "--format", "jsonl", "--quiet", "--files-from", str(listing),
                   "--stats", str(stats)]
        if workers:
            command += ["--workers", str(workers)]
        if decode:
            command += ["--decode", decode]
        start = time.perf_counter()
        done = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        wall = time.perf_counter() - start
        if done.returncode != 0:
            raise SystemExit(f"vitrt classify failed ({done.returncode}): {done.stderr[-2000:]}")
        lines = [line for line in done.stdout.splitlines() if line.strip()]
        assert len(lines) == len(files), f"{len(lines)} results for {len(files)} files"
        doc = json.loads(stats.read_text())
        doc["process_wall_s"] = wall
        doc["process_images_per_s"] = len(files) / wall
        doc["first_result"] = json.loads(lines[0])
        doc["results_sha256"] = hashlib.sha256(done.stdout.encode()).hexdigest()
        doc["decode"] = decode or "default"
        return doc


def run_forward(binary: str, model: str, batch: int, dtype: str) -> float | None:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "model.json"
        done = subprocess.run([binary, "bench", "model", "--model", model, "--device", "cuda", "--dtype", dtype,
                               "--batch-sizes", str(batch), "--json", str(out)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        if done.returncode != 0:
            print(f"bench model failed: {done.stderr[-1000:]}", file=sys.stderr)
            return None
        doc = json.loads(out.read_text())
        rows = [r for r in doc.get("models", []) if "median_ms" in r]
        return rows[0]["median_ms"] if rows else None


class Photos:
    """A torch Dataset over image files, preprocessed as transformers' pipeline does."""

    def __init__(self, files: list[Path]):
        from transformers import ViTImageProcessor

        self.files = files
        self.processor = ViTImageProcessor()

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, index: int):
        from PIL import Image, ImageOps

        with Image.open(self.files[index]) as image:
            image = ImageOps.exif_transpose(image).convert("RGB")
            return self.processor(images=image, return_tensors="pt")["pixel_values"][0]


def run_torch(model_dir: str, files: list[Path], batch: int, workers: int) -> dict:
    import torch
    from transformers import ViTForImageClassification

    model = ViTForImageClassification.from_pretrained(model_dir, attn_implementation="sdpa",
                                                      dtype=torch.float16).cuda().eval()
    # Warm the model (cuDNN/cuBLAS heuristics) outside the timed job.
    with torch.inference_mode():
        model(pixel_values=torch.randn(batch, 3, 224, 224, device="cuda", dtype=torch.float16))
    torch.cuda.synchronize()
    start = time.perf_counter()
    loader = torch.utils.data.DataLoader(Photos(files), batch_size=batch, num_workers=workers,
                                         pin_memory=True, shuffle=False)
    results = 0
    with torch.inference_mode():
        for pixels in loader:
            logits = model(pixel_values=pixels.cuda(non_blocking=True).half()).logits
            top = torch.topk(logits.float().softmax(-1), 5)
            results += top.indices.cpu().shape[0]
    wall = time.perf_counter() - start
    assert results == len(files)
    return {"wall_s": wall, "images_per_s": len(files) / wall, "workers": workers}


def run_torch_nvjpeg(model_dir: str, files: list[Path], batch: int, threads: int) -> dict | None:
    """PyTorch decoding on the GPU: file bytes read on `threads` threads, torchvision's batched
    nvJPEG decode on the GPU, a bilinear antialiased resize to 224x224 on the GPU, the
    processor's rescale and normalise, then ViTForImageClassification with SDPA in float16 and
    top-5 copied to the host. Its pixels are not PIL's (nvJPEG's IDCT and upsampling differ)."""
    try:
        import torch
        import torchvision
        from torchvision.io import decode_jpeg
        from transformers import ViTForImageClassification
    except ImportError as e:
        print(f"no nvJPEG peer: {e}", file=sys.stderr)
        return None
    from concurrent.futures import ThreadPoolExecutor

    model = ViTForImageClassification.from_pretrained(model_dir, attn_implementation="sdpa",
                                                      torch_dtype=torch.float16).cuda().eval()
    mean = torch.tensor([0.5, 0.5, 0.5], device="cuda").view(1, 3, 1, 1)
    std = torch.tensor([0.5, 0.5, 0.5], device="cuda").view(1, 3, 1, 1)

    def read(path: Path):
        return torchvision.io.read_file(str(path))

    def run(paths: list[Path]) -> float:
        start = time.perf_counter()
        with ThreadPoolExecutor(threads) as pool, torch.inference_mode():
            chunks = [paths[i:i + batch] for i in range(0, len(paths), batch)]
            pending = pool.map(lambda chunk: list(map(read, chunk)), chunks)
            for data in pending:
                images = decode_jpeg(data, device="cuda")
                x = torch.stack([torch.nn.functional.interpolate(im.unsqueeze(0).float(), size=(224, 224),
                                                                 mode="bilinear", antialias=True)[0]
                                 for im in images])
                x = ((x / 255.0 - mean) / std).half()
                logits = model(pixel_values=x).logits
                logits.float().softmax(-1).topk(5).indices.cpu()
        torch.cuda.synchronize()
        return time.perf_counter() - start

    run(files[: min(len(files), 2 * batch)])  # warm-up: nvJPEG handles, kernels, allocator
    wall = run(files)
    return {"wall_s": wall, "images_per_s": len(files) / wall, "threads": threads}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--vitrt", required=True)
    parser.add_argument("--model", required=True, help="checkpoint folder (random ViT-B/16)")
    parser.add_argument("--images", required=True, type=Path)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--dtype", default="f16")
    parser.add_argument("--workers", type=int, default=None, help="vitrt --workers (default: its own)")
    parser.add_argument("--repeat-large", type=int, default=0)
    parser.add_argument("--workers-sweep", default="", help="comma-separated --workers values to run as well")
    parser.add_argument("--no-torch", action="store_true")
    parser.add_argument("--no-host-decode", action="store_true", help="skip the --decode cpu run")
    parser.add_argument("--json", type=Path, required=True)
    args = parser.parse_args()
    files = sorted(p for p in args.images.iterdir() if p.suffix.lower() in {".jpg", ".jpeg"})
    cores = os.cpu_count() or 1
    doc = {"schema": "vitrt-pipeline/1", "images": len(files), "batch_size": args.batch_size, "cores": cores,
           "date": time.strftime("%Y-%m-%d")}
    # The first run on a machine compiles the kernels (NVRTC) into the kernel cache; every later
    # run loads them from there. The cold run is kept, the warm one is the figure.
    doc["vitrt_cold"] = run_vitrt(args.vitrt, args.model, files, args.batch_size, args.workers, args.dtype)
    doc["vitrt"] = run_vitrt(args.vitrt, args.model, files, args.batch_size, args.workers, args.dtype)
    if not args.no_host_decode:
        # The same job decoding every image on the host: the figure --decode gpu is measured
        # against, and its results must be byte for byte the same.
        doc["vitrt_host_decode"] = run_vitrt(args.vitrt, args.model, files, args.batch_size, args.workers,
                                             args.dtype, decode="cpu")
        doc["decode_results_identical"] = doc["vitrt_host_decode"]["results_sha256"] == doc["vitrt"]["results_sha256"]
        # Huffman decoding left on the host, the rest on the GPU: what GPU entropy decoding gains.
        doc["vitrt_gpu_idct"] = run_vitrt(args.vitrt, args.model, files, args.batch_size, args.workers,
                                          args.dtype, decode="gpu-idct")
        doc["decode_results_identical"] &= doc["vitrt_gpu_idct"]["results_sha256"] == doc["vitrt"]["results_sha256"]
    if args.workers_sweep:
        doc["vitrt_workers"] = {}
        for w in args.workers_sweep.split(","):
            run = run_vitrt(args.vitrt, args.model, files, args.batch_size, int(w), args.dtype)
            doc["vitrt_workers"][w] = run
            print(f"vitrt --workers {w}: {run['images_per_s']:.0f} images/s", flush=True)
    if args.repeat_large:
        many = (files * (args.repeat_large // len(files) + 1))[: args.repeat_large]
        doc["vitrt_large"] = run_vitrt(args.vitrt, args.model, many, args.batch_size, args.workers, args.dtype)
    forward_ms = run_forward(args.vitrt, args.model, args.batch_size, args.dtype)
    doc["forward_ms"] = forward_ms
    if forward_ms:
        v = doc["vitrt"]
        doc["gpu_busy_fraction"] = v["batches"] * forward_ms / 1e3 / v["wall_s"]
    if not args.no_torch:
        nvjpeg = run_torch_nvjpeg(args.model, files, args.batch_size, cores)
        if nvjpeg:
            doc["torch_nvjpeg"] = nvjpeg
        doc["torch"] = run_torch(args.model, files, args.batch_size, cores)
    args.json.write_text(json.dumps(doc, indent=2) + "\n")
    v = doc["vitrt"]
    print(f"{len(files)} JPEGs, batch {args.batch_size}, {cores} cores")
    print(f"vitrt, first run (compiles kernels into the cache): {doc['vitrt_cold']['images_per_s']:.0f} images/s")
    print(f"vitrt classify     {v['images_per_s']:8.0f} images/s  (process: {v['process_images_per_s']:.0f})  "
          f"peak RSS {v['peak_rss_bytes'] / 2**20 if v['peak_rss_bytes'] else float('nan'):.0f} MiB")
    stages = v["per_image_ms"]
    print(f"  per image, one core: read {stages['read']:.3f} ms, decode {stages['decode']:.3f} ms, "
          f"resize {stages['resize']:.3f} ms; workers busy {v['worker_busy_fraction']:.0%}")
    print(f"  consumer: waiting for batches {v['consumer']['waiting_for_batches_s']:.2f} s, "
          f"submitting {v['consumer']['submitting_s']:.2f} s, collecting {v['consumer']['collecting_results_s']:.2f} s")
    device = v.get("device")
    if device:
        stage = lambda name: f"{name.replace('_', ' ')} {device[name]['median_ms']:.2f} ms"
        decode_stage = "".join(f"{stage(name)}, " for name in ["entropy", "decode", "resize"]
                               if (device.get(name) or {}).get("median_ms") is not None)
        print(f"  device, median a batch: {stage('copy_in')}, {decode_stage}{stage('expand')}, {stage('forward')}, "
              f"{stage('copy_out')}; compute stream busy {device['busy_fraction_of_wall']:.0%} of the wall time")
    memory = v.get("backend_memory")
    if memory:
        print(f"  device memory after the run: decoding {memory['decode_bytes'] / 2**20:.0f} MiB, arena "
              f"{memory['arena_bytes'] / 2**20:.0f} MiB, parameters {memory['params_bytes'] / 2**20:.0f} MiB, "
              f"peak {memory['peak_bytes'] / 2**20 if memory['peak_bytes'] else float('nan'):.0f} MiB")
    if forward_ms:
        print(f"  forward pass alone (bench model) {forward_ms:.2f} ms a batch")
    if "vitrt_large" in doc:
        large = doc["vitrt_large"]
        print(f"vitrt on {large['images']} images: {large['images_per_s']:.0f} images/s, peak RSS "
              f"{large['peak_rss_bytes'] / 2**20:.0f} MiB")
    if "vitrt_host_decode" in doc:
        h = doc["vitrt_host_decode"]
        print(f"vitrt --decode cpu {h['images_per_s']:8.0f} images/s  -> --decode gpu / cpu "
              f"{v['images_per_s'] / h['images_per_s']:.2f}x; results identical: {doc['decode_results_identical']}")
    if "vitrt_gpu_idct" in doc:
        g = doc["vitrt_gpu_idct"]
        print(f"vitrt --decode gpu-idct {g['images_per_s']:8.0f} images/s (process {g['process_images_per_s']:.0f}), "
              f"host decode {g['per_image_ms']['decode']:.3f} ms/image -> --decode gpu / gpu-idct "
              f"{v['images_per_s'] / g['images_per_s']:.2f}x")
    print(f"  decoded on the device: {v.get('decoded_on_device')} (Huffman too: {v.get('entropy_decoded_on_device')}, "
          f"redone on the host: {v.get('redone_on_host')}), on the host: {v.get('decoded_on_host')}")
    if "torch_nvjpeg" in doc:
        t = doc["torch_nvjpeg"]
        print(f"torch nvJPEG       {t['images_per_s']:8.0f} images/s  -> vitrt/nvJPEG {v['images_per_s'] / t['images_per_s']:.2f}x")
    if "torch" in doc:
        t = doc["torch"]
        print(f"torch DataLoader   {t['images_per_s']:8.0f} images/s  -> vitrt/torch {v['images_per_s'] / t['images_per_s']:.2f}x")


if __name__ == "__main__":
    main()
