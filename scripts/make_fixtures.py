#!/usr/bin/env python3
"""Write the tiny random ViT checkpoints and PyTorch references under tests/fixtures/models/.

Each fixture is a folder holding what a user's checkpoint holds (`config.json`, safetensors
weights, sharded or not) and a `reference.safetensors` in the format of scripts/reference.py:
`pixel_values`, `logits` or `last_hidden_state` (+ `pooler_output`), and `hidden_states.{i}`.

The references are computed in float64 from the checkpoint as saved and reloaded (so a float16
checkpoint is evaluated with its rounded weights), with eager attention and TF32 off, and
stored as float32. The variants cover what a runtime can get wrong while still looking right
on one model: head dims that are not powers of two, no qkv bias, every activation ViT configs
use, layer-norm epsilons, one input channel, half-precision storage, sharded files, and the
bare ViTModel with its pooler.

Random init in transformers gives zero biases, unit layer-norm weights and 0.02-scale
weights; a runtime that dropped a bias or a layer-norm weight would pass against such a
model. So every parameter is redrawn here at a scale that keeps activations near 1.

Usage: python scripts/make_fixtures.py [--out tests/fixtures/models] [--only NAME ...]
"""

from __future__ import annotations

import argparse
import copy
import json
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
from reference import (  # the sibling script defines the one reference format
    disable_tf32,
    library_versions,
    load_model,
    random_pixel_values,
    reference_outputs,
    save_reference,
)

REPO_ROOT = Path(__file__).resolve().parent.parent


@dataclass
class Fixture:
    name: str
    summary: str
    config: dict
    classifier: bool = True
    batch: int = 2
    stored_dtype: torch.dtype = torch.float32
    max_shard_size: str | None = None
    labels: list[str] = field(default_factory=list)
    # Config misreadings a runtime could make, each as the overrides that reproduce it; the
    # README records how far each moves the outputs, i.e. how tight a test must be to catch it.
    misreadings: dict[str, dict] = field(default_factory=dict)


FIXTURES = [
    Fixture(
        name="tiny-gelu",
        summary="classifier, head dim 16, exact gelu, qkv bias, named labels",
        config={
            "hidden_size": 64,
            "num_attention_heads": 4,
            "num_hidden_layers": 2,
            "intermediate_size": 128,
            "image_size": 32,
            "patch_size": 8,
            "hidden_act": "gelu",
            "qkv_bias": True,
        },
        labels=[
            "airplane",
            "automobile",
            "bird",
            "cat",
            "deer",
            "dog",
            "frog",
            "horse",
            "ship",
            "truck",
        ],
        misreadings={
            "tanh GELU for exact": {"hidden_act": "gelu_pytorch_tanh"},
            "qkv bias dropped": {"qkv_bias": False},
        },
    ),
    Fixture(
        name="headdim18-nobias-gelunew",
        summary="classifier, odd sizes (hidden 54, head dim 18, mlp 100), no qkv bias, gelu_new",
        config={
            "hidden_size": 54,
            "num_attention_heads": 3,
            "num_hidden_layers": 2,
            "intermediate_size": 100,
            "image_size": 30,
            "patch_size": 6,
            "hidden_act": "gelu_new",
            "qkv_bias": False,
            "layer_norm_eps": 1e-6,
        },
        batch=3,
        labels=["red", "orange", "yellow", "green", "blue", "indigo", "violet"],
        misreadings={
            "exact GELU for tanh": {"hidden_act": "gelu"},
            "layer_norm_eps 1e-12": {"layer_norm_eps": 1e-12},
        },
    ),
    Fixture(
        name="f16-stored-quickgelu",
        summary="classifier stored in float16, head dim 32, quick_gelu",
        config={
            "hidden_size": 64,
            "num_attention_heads": 2,
            "num_hidden_layers": 2,
            "intermediate_size": 128,
            "image_size": 32,
            "patch_size": 8,
            "hidden_act": "quick_gelu",
        },
        stored_dtype=torch.float16,
        labels=["north", "east", "south", "west", "up"],
        misreadings={"exact GELU for quick_gelu": {"hidden_act": "gelu"}},
    ),
    Fixture(
        name="vitmodel-relu",
        summary="bare ViTModel with pooler, head dim 24, relu, layer_norm_eps 1e-3",
        config={
            "hidden_size": 48,
            "num_attention_heads": 2,
            "num_hidden_layers": 2,
            "intermediate_size": 96,
            "image_size": 32,
            "patch_size": 8,
            "hidden_act": "relu",
            # Large enough to move the outputs by more than the f32 tolerance, so a runtime
            # that ignores the configured epsilon fails here.
            "layer_norm_eps": 1e-3,
        },
        classifier=False,
        batch=3,
        misreadings={"layer_norm_eps 1e-12": {"layer_norm_eps": 1e-12}},
    ),
    Fixture(
        name="headdim80-silu-1ch",
        summary="classifier, head dim 80 (hidden 160, 2 heads), silu, 1 input channel, patch 4",
        config={
            "hidden_size": 160,
            "num_attention_heads": 2,
            "num_hidden_layers": 1,
            "intermediate_size": 64,
            "image_size": 24,
            "patch_size": 4,
            "num_channels": 1,
            "hidden_act": "silu",
        },
        labels=["zero", "one", "two", "three"],
        misreadings={"exact GELU for silu": {"hidden_act": "gelu"}},
    ),
    Fixture(
        name="gelu-pytorch-tanh",
        summary="classifier, gelu_pytorch_tanh, layer_norm_eps 1e-6, patch 4",
        config={
            "hidden_size": 32,
            "num_attention_heads": 2,
            "num_hidden_layers": 2,
            "intermediate_size": 64,
            "image_size": 16,
            "patch_size": 4,
            "hidden_act": "gelu_pytorch_tanh",
            "layer_norm_eps": 1e-6,
        },
        batch=3,
        labels=["left", "right", "neither"],
        misreadings={
            "exact GELU for tanh": {"hidden_act": "gelu"},
            "layer_norm_eps 1e-12": {"layer_norm_eps": 1e-12},
        },
    ),
    Fixture(
        name="gelu-fast",
        summary="classifier, 3 layers, gelu_fast, layer_norm_eps 1e-12 (the HF default), patch 4",
        config={
            "hidden_size": 32,
            "num_attention_heads": 2,
            "num_hidden_layers": 3,
            "intermediate_size": 64,
            "image_size": 16,
            "patch_size": 4,
            "hidden_act": "gelu_fast",
            "layer_norm_eps": 1e-12,
        },
        labels=["yes", "no"],
        misreadings={"exact GELU for tanh": {"hidden_act": "gelu"}},
    ),
    Fixture(
        name="sharded",
        summary="classifier stored in bfloat16 across several shards with an index",
        config={
            "hidden_size": 64,
            "num_attention_heads": 4,
            "num_hidden_layers": 2,
            "intermediate_size": 128,
            "image_size": 32,
            "patch_size": 8,
            "hidden_act": "gelu",
        },
        stored_dtype=torch.bfloat16,
        max_shard_size="64KB",
        labels=["spring", "summer", "autumn", "winter"],
    ),
]


def build_model(fixture: Fixture, seed: int) -> nn.Module:
    from transformers import ViTConfig, ViTForImageClassification, ViTModel

    config = dict(fixture.config)
    if fixture.classifier:
        config["id2label"] = dict(enumerate(fixture.labels))
        config["label2id"] = {label: i for i, label in enumerate(fixture.labels)}
    vit_config = ViTConfig(**config, attn_implementation="eager")
    torch.manual_seed(seed)
    if fixture.classifier:
        model = ViTForImageClassification(vit_config)
        model.config.architectures = ["ViTForImageClassification"]
    else:
        model = ViTModel(vit_config, add_pooling_layer=True)
        model.config.architectures = ["ViTModel"]
    randomize_parameters(model, torch.Generator().manual_seed(seed))
    return model.eval()


@torch.no_grad()
def randomize_parameters(model: nn.Module, generator: torch.Generator) -> None:
    """Redraw every parameter so that each one visibly changes the outputs.

    Weights get a 1/sqrt(fan_in) scale so activations stay near unit size through every
    layer (and the activations' curved regions are exercised); biases, layer-norm shifts and
    layer-norm gains away from 1 are all clearly nonzero.
    """

    def normal_like(tensor: torch.Tensor, std: float, mean: float = 0.0) -> torch.Tensor:
        return torch.randn(tensor.shape, generator=generator) * std + mean

    covered = set()
    for module in model.modules():
        if isinstance(module, nn.LayerNorm):
            module.weight.copy_(normal_like(module.weight, 0.2, mean=1.0))
            module.bias.copy_(normal_like(module.bias, 0.2))
        elif isinstance(module, (nn.Linear, nn.Conv2d)):
            fan_in = module.weight[0].numel()
            module.weight.copy_(normal_like(module.weight, fan_in**-0.5))
            if module.bias is not None:
                module.bias.copy_(normal_like(module.bias, 0.2))
        else:
            continue
        covered.update(id(p) for p in module.parameters(recurse=False))

    embeddings = model.vit.embeddings if hasattr(model, "vit") else model.embeddings
    embeddings.cls_token.copy_(normal_like(embeddings.cls_token, 1.0))
    embeddings.position_embeddings.copy_(normal_like(embeddings.position_embeddings, 0.5))
    covered.update({id(embeddings.cls_token), id(embeddings.position_embeddings)})

    missed = [name for name, p in model.named_parameters() if id(p) not in covered]
    if missed:
        raise RuntimeError(f"parameters left at their init values: {missed}")


def check_hidden_state_indexing(model: nn.Module, tensors: dict[str, torch.Tensor]) -> None:
    """Check the documented meaning of hidden_states.0 and hidden_states.L on this model."""
    base = model.vit if hasattr(model, "vit") else model
    parameter = next(model.parameters())
    pixel_values = tensors["pixel_values"].to(parameter.dtype)
    with torch.no_grad():
        embeddings = base.embeddings(pixel_values).float()
        last = tensors[f"hidden_states.{model.config.num_hidden_layers}"].to(parameter.dtype)
        final_norm = base.layernorm(last)
    torch.testing.assert_close(tensors["hidden_states.0"], embeddings, rtol=1e-6, atol=1e-6)
    if "last_hidden_state" in tensors:
        torch.testing.assert_close(
            tensors["last_hidden_state"], final_norm.float(), rtol=1e-5, atol=1e-5
        )


def float32_error(model_dir: Path, tensors: dict[str, torch.Tensor]) -> float:
    """How far PyTorch's own float32 run is from the float64 reference, for the README."""
    model32 = load_model(str(model_dir), torch.float32, "cpu")
    return relative_error(reference_outputs(model32, tensors["pixel_values"]), tensors)


def misreading_effects(model_dir: Path, fixture: Fixture, tensors) -> dict[str, float]:
    """Relative change of the outputs when the checkpoint is run under a misread config."""
    correct = load_model(str(model_dir), torch.float64, "cpu")
    effects = {}
    for label, overrides in fixture.misreadings.items():
        config = copy.deepcopy(correct.config)
        for key, value in overrides.items():
            setattr(config, key, value)
        wrong = type(correct)(config).to(torch.float64).eval()
        # A misreading may drop parameters (qkv_bias false), never add any.
        loaded = wrong.load_state_dict(correct.state_dict(), strict=False)
        if loaded.missing_keys:
            raise RuntimeError(f"{fixture.name} / {label}: missing {loaded.missing_keys}")
        outputs = reference_outputs(wrong, tensors["pixel_values"])
        effects[label] = relative_error(outputs, tensors)
    return effects


def relative_error(actual: dict[str, torch.Tensor], expected: dict[str, torch.Tensor]) -> float:
    """Largest |actual - expected| over all output tensors, each relative to its largest |expected|."""
    worst = 0.0
    for name, want in expected.items():
        if name == "pixel_values":
            continue
        scale = want.abs().max().clamp_min(1e-12)
        worst = max(worst, float((actual[name] - want).abs().max() / scale))
    return worst


def write_fixture(fixture: Fixture, out_root: Path, seed: int) -> dict:
    model_dir = out_root / fixture.name
    if model_dir.exists():
        shutil.rmtree(model_dir)
    model = build_model(fixture, seed).to(fixture.stored_dtype)
    save_kwargs = {}
    if fixture.max_shard_size is not None:
        save_kwargs["max_shard_size"] = fixture.max_shard_size
    model.save_pretrained(model_dir, **save_kwargs)

    # The reference comes from the files as written, not from the in-memory model, so
    # anything lost on the way to disk shows up here rather than in vitrt's parity test.
    reloaded = load_model(str(model_dir), torch.float64, "cpu")
    pixel_values = random_pixel_values(reloaded.config, fixture.batch, seed)
    tensors = reference_outputs(reloaded, pixel_values)
    check_hidden_state_indexing(reloaded, tensors)
    if fixture.max_shard_size is not None:
        shards = sorted(model_dir.glob("model-*.safetensors"))
        if not (model_dir / "model.safetensors.index.json").is_file() or len(shards) < 2:
            raise RuntimeError(f"{fixture.name}: expected an index and >= 2 shards")

    metadata = {
        "fixture": fixture.name,
        "compute_dtype": "float64",
        "stored_dtype": str(fixture.stored_dtype).removeprefix("torch."),
        "attention": "eager",
        "tf32": "off",
        "input": f"random normal, batch {fixture.batch}, seed {seed}",
        **{f"version.{name}": version for name, version in library_versions().items()},
    }
    save_reference(model_dir / "reference.safetensors", tensors, metadata)
    return {
        "fixture": fixture,
        "shapes": {name: list(t.shape) for name, t in tensors.items()},
        "files": sorted(p.name for p in model_dir.iterdir()),
        "bytes": sum(p.stat().st_size for p in model_dir.iterdir()),
        "float32_error": float32_error(model_dir, tensors),
        "misreadings": misreading_effects(model_dir, fixture, tensors),
    }


def readme(results: list[dict], command: str) -> str:
    from transformers import ViTConfig

    versions = library_versions()
    lines = [
        "# Parity fixtures: tiny random ViT checkpoints with PyTorch references",
        "",
        "Made by `scripts/make_fixtures.py`; do not edit by hand. To remake them:",
        "",
        "```",
        command,
        "```",
        "",
        "Versions: "
        + ", ".join(f"{name} {version}" for name, version in versions.items())
        + f", Python {sys.version.split()[0]} (CPU).",
        "",
        "Each folder is a checkpoint as `save_pretrained` writes it (`config.json` and",
        "`model.safetensors`, or shards plus `model.safetensors.index.json`) and a",
        "`reference.safetensors` with float32 tensors:",
        "",
        "- `pixel_values` [B, C, H, W]: standard-normal input (seeded, never zeros);",
        "- `logits` [B, num_labels] for ViTForImageClassification, or `last_hidden_state`",
        "  [B, T, hidden] (after the final layernorm) and `pooler_output` [B, hidden] for ViTModel;",
        "- `hidden_states.{i}` [B, T, hidden] for i = 0..num_hidden_layers, indexed as",
        "  transformers' `output_hidden_states=True`: `hidden_states.0` is the embeddings output",
        "  (CLS + patches + positions), `hidden_states.L` the last block's output, before the",
        "  final layernorm.",
        "",
        "The references are computed in float64 (eager attention, TF32 off) from the checkpoint",
        "as reloaded from disk, so float16/bfloat16 checkpoints are evaluated with their",
        "rounded weights. All parameters are redrawn after init (biases and layer-norm shifts",
        "nonzero, layer-norm gains away from 1, weights at 1/sqrt(fan_in)), so dropping any of",
        "them changes the outputs. The safetensors metadata of each reference records the",
        "seed, dtypes and library versions.",
        "",
        "transformers 5 always writes safetensors (the old `safe_serialization` flag is gone)",
        "and writes the classic hub tensor names (`vit.encoder.layer.0.attention.attention.query.weight`,",
        "...), the same names published ViT checkpoints use.",
        "",
        "| fixture | what it covers | class | hidden / heads x head dim / layers / mlp | image / patch / channels | act | qkv bias | ln eps | stored | B | T | files | size |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for result in results:
        fixture = result["fixture"]
        config = ViTConfig(**fixture.config)
        head_dim = config.hidden_size // config.num_attention_heads
        shape = result["shapes"]["hidden_states.0"]
        kind = "ViTForImageClassification" if fixture.classifier else "ViTModel (+pooler)"
        if fixture.classifier:
            kind += f", {len(fixture.labels)} labels"
        lines.append(
            f"| `{fixture.name}` | {fixture.summary} | {kind} "
            f"| {config.hidden_size} / {config.num_attention_heads} x {head_dim} "
            f"/ {config.num_hidden_layers} / {config.intermediate_size} "
            f"| {config.image_size} / {config.patch_size} / {config.num_channels} "
            f"| `{config.hidden_act}` | {config.qkv_bias} | {config.layer_norm_eps:g} "
            f"| {str(fixture.stored_dtype).removeprefix('torch.')} | {shape[0]} | {shape[1]} "
            f"| {len(result['files'])} | {result['bytes'] / 1024:.0f} KiB |"
        )
    total = sum(r["bytes"] for r in results)
    lines += [
        "",
        f"Total: {total / 1024:.0f} KiB.",
        "",
        "## Reference tensors",
        "",
        "| fixture | tensors (shape) |",
        "| --- | --- |",
    ]
    for result in results:
        shapes = result["shapes"]
        hidden = [n for n in shapes if n.startswith("hidden_states.")]
        others = [n for n in shapes if not n.startswith("hidden_states.")]
        text = ", ".join(f"`{n}` {shapes[n]}" for n in others)
        text += f", `hidden_states.0..{len(hidden) - 1}` {shapes[hidden[0]]}"
        lines.append(f"| `{result['fixture'].name}` | {text} |")
    lines += [
        "",
        "## Tolerances: what float32 reaches, what a misread config costs",
        "",
        "Errors are the largest absolute difference over all output tensors (logits or",
        "last_hidden_state/pooler_output, and every hidden state), each relative to that",
        "tensor's largest magnitude. *float32*: PyTorch's own float32 run of the same",
        "checkpoint on the same input against the float64 reference, the yardstick for a float32",
        "runtime. The other columns: the same checkpoint run in float64 under a misread config,",
        "so a parity test catches that mistake only with a tolerance below the figure (exact",
        "and tanh GELU differ by ~1e-4 here: 1e-5 separates them from float32 rounding).",
        "",
        "| fixture | float32 | misreadings |",
        "| --- | --- | --- |",
    ]
    for result in results:
        effects = "; ".join(
            f"{label}: {value:.1e}" for label, value in result["misreadings"].items()
        )
        lines.append(
            f"| `{result['fixture'].name}` | {result['float32_error']:.1e} | {effects or '-'} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--out",
        type=Path,
        default=REPO_ROOT / "tests" / "fixtures" / "models",
        help="folder to write one sub-folder per fixture into (default: %(default)s)",
    )
    parser.add_argument(
        "--only", nargs="+", metavar="NAME", help="write only these fixtures (no README)"
    )
    parser.add_argument(
        "--seed", type=int, default=20261122, help="base seed (default: %(default)s)"
    )
    args = parser.parse_args(argv)

    disable_tf32()
    torch.use_deterministic_algorithms(True)
    known = {f.name for f in FIXTURES}
    unknown = set(args.only or []) - known
    if unknown:
        parser.error(f"unknown fixture(s) {sorted(unknown)}; known: {sorted(known)}")

    results = []
    for index, fixture in enumerate(FIXTURES):
        if args.only and fixture.name not in args.only:
            continue
        result = write_fixture(fixture, args.out, args.seed + index)
        results.append(result)
        print(f"{fixture.name}: {result['bytes'] / 1024:.0f} KiB, {result['files']}")
        print("  " + json.dumps(result["shapes"]))

    if not args.only:
        command = "python scripts/make_fixtures.py"
        if args.seed != parser.get_default("seed"):
            command += f" --seed {args.seed}"
        (args.out / "README.md").write_text(readme(results, command))
    return 0


if __name__ == "__main__":
    sys.exit(main())
