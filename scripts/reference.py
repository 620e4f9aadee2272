#!/usr/bin/env python3
"""Write a PyTorch reference for a Hugging Face ViT checkpoint, for `vitrt parity`.

The reference file is a safetensors file with these float32 tensors:

  pixel_values          [B, C, H, W]  the exact input that was fed to the model
  logits                [B, labels]   for *ForImageClassification checkpoints
  last_hidden_state     [B, T, D]     for bare ViTModel checkpoints (after the final layernorm)
  pooler_output         [B, D]        for bare ViTModel checkpoints that have a pooler
  hidden_states.{i}     [B, T, D]     i = 0..num_hidden_layers, indexed as transformers'
                                      output_hidden_states=True: 0 is the embeddings output,
                                      L is the last block's output, before the final layernorm

PyTorch runs with eager attention and TF32 off, in float32 or float64 (--dtype); the outputs
are stored as float32 either way. float64 is the better reference for checking a float32
implementation, since it leaves PyTorch's own rounding out of the comparison.

Examples:

  python scripts/reference.py --model examples/digits-vit --out ref.safetensors \\
      --images examples/digits/digit-0003-label-7.png
  python scripts/reference.py --model google/vit-base-patch16-224 --out ref.safetensors \\
      --random-batch 2 --seed 1 --dtype float64
  vitrt parity --model google/vit-base-patch16-224 --reference ref.safetensors
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import torch

DTYPES = {"float32": torch.float32, "float64": torch.float64, "bfloat16": torch.bfloat16}


def disable_tf32() -> None:
    """Make float32 matmuls and convolutions exact IEEE float32 on GPUs that have TF32.

    PyTorch may otherwise round matmul inputs to 10 mantissa bits on Ampere and newer,
    which would make the reference itself off by ~1e-3.
    """
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")


def is_classifier(config) -> bool:
    architectures = getattr(config, "architectures", None) or []
    return any(name.endswith("ForImageClassification") for name in architectures)


def load_model(model_id: str, dtype: torch.dtype, device: str):
    """Load a checkpoint with eager attention, as a classifier when the checkpoint is one.

    The weights are read at their stored precision and then widened to `dtype`, so a float16
    checkpoint is evaluated with exactly its rounded float16 values.
    """
    from transformers import AutoConfig, AutoModel, AutoModelForImageClassification

    config = AutoConfig.from_pretrained(model_id)
    model_class = AutoModelForImageClassification if is_classifier(config) else AutoModel
    model = model_class.from_pretrained(model_id, attn_implementation="eager")
    if model.config._attn_implementation != "eager":
        raise RuntimeError(f"expected eager attention, got {model.config._attn_implementation!r}")
    return model.to(device=device, dtype=dtype).eval()


@torch.no_grad()
def reference_outputs(model, pixel_values: torch.Tensor) -> dict[str, torch.Tensor]:
    """Run `model` on `pixel_values` and return the reference tensors, as float32 on the CPU."""
    parameter = next(model.parameters())
    outputs = model(
        pixel_values.to(device=parameter.device, dtype=parameter.dtype),
        output_hidden_states=True,
        return_dict=True,
    )
    num_layers = model.config.num_hidden_layers
    hidden_states = outputs.hidden_states
    if hidden_states is None or len(hidden_states) != num_layers + 1:
        found = None if hidden_states is None else len(hidden_states)
        raise RuntimeError(f"expected {num_layers + 1} hidden states, got {found}")

    tensors = {"pixel_values": pixel_values}
    if getattr(outputs, "logits", None) is not None:
        tensors["logits"] = outputs.logits
    else:
        tensors["last_hidden_state"] = outputs.last_hidden_state
        if getattr(outputs, "pooler_output", None) is not None:
            tensors["pooler_output"] = outputs.pooler_output
    for index, state in enumerate(hidden_states):
        tensors[f"hidden_states.{index}"] = state
    return {name: t.detach().to("cpu", torch.float32).contiguous() for name, t in tensors.items()}


def random_pixel_values(config, batch: int, seed: int) -> torch.Tensor:
    """Standard-normal pixels of the model's input shape: roughly what normalization yields."""
    size = config.image_size
    height, width = (size, size) if isinstance(size, int) else tuple(size)
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(batch, config.num_channels, height, width, generator=generator)


def load_image_processor(model_id: str):
    """The PIL/NumPy image processor (transformers' slow path) configured by the checkpoint.

    vitrt reimplements this path, so it, not the torchvision one, is the reference.
    """
    try:
        from transformers import ViTImageProcessorPil as ProcessorClass
    except ImportError:  # transformers 4.x: the slow processor is the plain class
        from transformers import ViTImageProcessor as ProcessorClass
    try:
        return ProcessorClass.from_pretrained(model_id)
    except OSError as error:
        raise SystemExit(
            f"reference.py: error: no image preprocessing config for {model_id} "
            f"(preprocessor_config.json); --images needs one, --random-batch does not.\n{error}"
        ) from error


def pixel_values_from_images(model_id: str, config, paths: list[Path]) -> torch.Tensor:
    from PIL import Image

    processor = load_image_processor(model_id)
    # As transformers' image-classification pipeline does: decode, then convert to the
    # model's channel layout before preprocessing.
    mode = {1: "L", 3: "RGB"}.get(config.num_channels)
    if mode is None:
        raise ValueError(f"images with {config.num_channels} channels are not supported")
    images = []
    for path in paths:
        with Image.open(path) as image:
            images.append(image.convert(mode))
    pixel_values = processor(images=images, return_tensors="np")["pixel_values"]
    return torch.from_numpy(np.ascontiguousarray(pixel_values, dtype=np.float32))


def library_versions() -> dict[str, str]:
    import safetensors
    import transformers

    return {
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "safetensors": safetensors.__version__,
        "numpy": np.__version__,
    }


def save_reference(path: Path, tensors: dict[str, torch.Tensor], metadata: dict[str, str]) -> None:
    """Write a safetensors file whose bytes depend only on its contents.

    safetensors writes the metadata map in hash order, which differs between runs; the header
    is re-serialized with sorted keys (padded with spaces to 8 bytes, as the format allows) so
    remaking an unchanged reference leaves an unchanged file.
    """
    import json

    from safetensors.torch import save

    serialized = save(tensors, metadata=metadata)
    header_len = int.from_bytes(serialized[:8], "little")
    header = json.loads(serialized[8 : 8 + header_len])
    data = serialized[8 + header_len :]
    header_bytes = json.dumps(header, sort_keys=True, separators=(",", ":")).encode()
    header_bytes += b" " * (-len(header_bytes) % 8)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(len(header_bytes).to_bytes(8, "little") + header_bytes + data)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=(
            "Write a PyTorch reference (pixel_values, logits or last_hidden_state, and every "
            "hidden_states.{i}, all float32) for a Hugging Face ViT checkpoint, to be checked "
            "with `vitrt parity --model M --reference REF.safetensors`."
        ),
        epilog=(
            "Attention is eager and TF32 is off. hidden_states.0 is the embeddings output and "
            "hidden_states.L the last block's output before the final layernorm, as "
            "transformers' output_hidden_states=True returns them."
        ),
    )
    parser.add_argument(
        "--model", required=True, help="checkpoint folder (config.json + safetensors) or hub id"
    )
    parser.add_argument("--out", required=True, type=Path, help="reference .safetensors to write")
    source = parser.add_mutually_exclusive_group()
    source.add_argument(
        "--images",
        nargs="+",
        type=Path,
        metavar="IMAGE",
        help="image files, preprocessed by the checkpoint's preprocessor_config.json "
        "with transformers' PIL image processor",
    )
    source.add_argument(
        "--random-batch",
        type=int,
        metavar="N",
        help="N standard-normal inputs of the model's shape (the default, with N=2)",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed for --random-batch (default: 0)")
    parser.add_argument(
        "--dtype",
        choices=sorted(DTYPES),
        default="float32",
        help="precision PyTorch computes in; outputs are stored as float32 either way "
        "(default: float32)",
    )
    parser.add_argument(
        "--device", default="cpu", help="torch device to compute on, e.g. cuda (default: cpu)"
    )
    args = parser.parse_args(argv)
    if args.random_batch is not None and args.random_batch < 1:
        parser.error("--random-batch must be at least 1")
    if args.images:
        missing = [str(p) for p in args.images if not p.is_file()]
        if missing:
            parser.error(f"no such image file: {', '.join(missing)}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    disable_tf32()
    dtype = DTYPES[args.dtype]
    model = load_model(args.model, dtype, args.device)
    config = model.config

    if args.images:
        pixel_values = pixel_values_from_images(args.model, config, args.images)
        source = "images: " + " ".join(p.name for p in args.images)
    else:
        batch = args.random_batch or 2
        pixel_values = random_pixel_values(config, batch, args.seed)
        source = f"random normal, batch {batch}, seed {args.seed}"

    tensors = reference_outputs(model, pixel_values)
    metadata = {
        "model": str(args.model),
        "compute_dtype": args.dtype,
        "attention": "eager",
        "tf32": "off",
        "input": source,
        **{f"version.{name}": version for name, version in library_versions().items()},
    }
    save_reference(args.out, tensors, metadata)

    print(f"wrote {args.out}")
    for name, tensor in tensors.items():
        print(f"  {name:<20} {list(tensor.shape)}")
    if "logits" in tensors:
        id2label = config.id2label or {}
        for row, logits in enumerate(tensors["logits"]):
            top = int(logits.argmax())
            print(f"  input {row}: top-1 {top} ({id2label.get(top, top)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
