#!/usr/bin/env python3
"""Write tiny random checkpoints of every ViT family vitrt runs, with float64 references,
under tests/fixtures/models/ (next to the ViT fixtures of make_fixtures.py).

Families: DeiT (distilled classifier with teacher, bare model with pooler), DINOv2 (classifier
on the CLS token and patch mean; registers with SwiGLU at a non-square size), CLIP (vision
tower with projection, the vision half of a dual-tower CLIPModel, the classifier), SigLIP
(vision tower with its attention-pooling head at another size, the dual tower, the
classifier). Each folder holds `config.json`, `model.safetensors` as `save_pretrained` writes
them, and `reference.safetensors` in the format of scripts/reference.py: `pixel_values`, the
outputs the checkpoint has (`logits`; or `last_hidden_state`, `pooler_output`,
`image_embeds`), and `hidden_states.{i}` (indexed as transformers' `output_hidden_states`:
0 is what enters the first block, which for CLIP is after its pre-layernorm).

Inputs whose size differs from the config's run with `interpolate_pos_encoding=True` (DINOv2
always interpolates): the position tables are resampled as vitrt must resample them. Every
parameter is redrawn so that each one visibly changes the outputs, as make_fixtures.py does.

Usage: python scripts/make_family_fixtures.py [--out tests/fixtures/models] [--only NAME ...]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
from reference import disable_tf32, library_versions, save_reference  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parent.parent


@dataclass
class FamilyFixture:
    name: str
    summary: str
    # transformers class that is built and saved.
    model_class: str
    config_class: str
    config: dict
    # (height, width) of the input; None: the config's image size.
    input_size: tuple[int, int] | None = None
    labels: list[str] = field(default_factory=list)
    batch: int = 2
    # Dual-tower checkpoints: the text tower's config (kept tiny; vitrt reads the vision half)
    # and the top-level fields.
    text_config: dict | None = None
    dual_config: dict = field(default_factory=dict)


TINY_TEXT = {
    "vocab_size": 99,
    "hidden_size": 16,
    "intermediate_size": 32,
    "num_hidden_layers": 1,
    "num_attention_heads": 2,
    "max_position_embeddings": 16,
    "pad_token_id": 1,
    "bos_token_id": 0,
    "eos_token_id": 2,
}

FIXTURES = [
    FamilyFixture(
        name="deit-distilled",
        summary="DeiT with teacher: CLS and distillation heads averaged",
        model_class="DeiTForImageClassificationWithTeacher",
        config_class="DeiTConfig",
        config={
            "hidden_size": 48,
            "num_attention_heads": 3,
            "num_hidden_layers": 2,
            "intermediate_size": 96,
            "image_size": 32,
            "patch_size": 8,
        },
        labels=["ant", "bee", "cricket", "dragonfly", "earwig"],
    ),
    FamilyFixture(
        name="deit-model-pooler",
        summary="bare DeiTModel with its tanh pooler, run at 40x24 (positions resampled)",
        model_class="DeiTModel",
        config_class="DeiTConfig",
        config={
            "hidden_size": 32,
            "num_attention_heads": 2,
            "num_hidden_layers": 2,
            "intermediate_size": 64,
            "image_size": 32,
            "patch_size": 8,
            "layer_norm_eps": 1e-6,
        },
        input_size=(40, 24),
    ),
    FamilyFixture(
        name="dinov2-classifier",
        summary="DINOv2 classifier on CLS + patch mean, layer scale, table 5x5 run at 35x33 "
        "pixels (4x4 patches, the remainder dropped as Conv2d drops it)",
        model_class="Dinov2ForImageClassification",
        config_class="Dinov2Config",
        config={
            "hidden_size": 48,
            "num_attention_heads": 3,
            "num_hidden_layers": 2,
            "mlp_ratio": 2,
            "image_size": 40,
            "patch_size": 8,
        },
        input_size=(35, 33),
        labels=["granite", "basalt", "marble", "slate"],
    ),
    FamilyFixture(
        name="dinov2-registers-swiglu",
        summary="DINOv2 with 2 registers and SwiGLU, table 6x6 run at 5x3 (antialiased)",
        model_class="Dinov2WithRegistersModel",
        config_class="Dinov2WithRegistersConfig",
        config={
            "hidden_size": 32,
            "num_attention_heads": 2,
            "num_hidden_layers": 2,
            "mlp_ratio": 3,
            "use_swiglu_ffn": True,
            "num_register_tokens": 2,
            "image_size": 48,
            "patch_size": 8,
        },
        input_size=(40, 24),
    ),
    FamilyFixture(
        name="clip-vision-projection",
        summary="CLIPVisionModelWithProjection: pre-layernorm, quick_gelu, projection 24",
        model_class="CLIPVisionModelWithProjection",
        config_class="CLIPVisionConfig",
        config={
            "hidden_size": 32,
            "num_attention_heads": 2,
            "num_hidden_layers": 2,
            "intermediate_size": 64,
            "image_size": 32,
            "patch_size": 8,
            "projection_dim": 24,
        },
    ),
    FamilyFixture(
        name="clip-dual-tower",
        summary="the vision half of a CLIPModel (tiny text tower), run at 24x40",
        model_class="CLIPModel",
        config_class="CLIPConfig",
        config={
            "hidden_size": 48,
            "num_attention_heads": 4,
            "num_hidden_layers": 2,
            "intermediate_size": 80,
            "image_size": 32,
            "patch_size": 8,
        },
        text_config=TINY_TEXT,
        dual_config={"projection_dim": 24},
        input_size=(24, 40),
    ),
    FamilyFixture(
        name="clip-classifier",
        summary="CLIPForImageClassification: the mean of the patch tokens",
        model_class="CLIPForImageClassification",
        config_class="CLIPConfig",
        config={
            "hidden_size": 32,
            "num_attention_heads": 2,
            "num_hidden_layers": 1,
            "intermediate_size": 64,
            "image_size": 24,
            "patch_size": 6,
        },
        text_config=TINY_TEXT,
        labels=["day", "night", "dusk"],
    ),
    FamilyFixture(
        name="siglip-vision-head",
        summary="SiglipVisionModel: no CLS, attention-pooling head, head dim 12, at 24x40",
        model_class="SiglipVisionModel",
        config_class="SiglipVisionConfig",
        config={
            "hidden_size": 48,
            "num_attention_heads": 4,
            "num_hidden_layers": 2,
            "intermediate_size": 96,
            "image_size": 32,
            "patch_size": 8,
        },
        input_size=(24, 40),
        batch=3,
    ),
    FamilyFixture(
        name="siglip-dual-tower",
        summary="the vision half of a SiglipModel (tiny text tower)",
        model_class="SiglipModel",
        config_class="SiglipConfig",
        config={
            "hidden_size": 32,
            "num_attention_heads": 2,
            "num_hidden_layers": 2,
            "intermediate_size": 64,
            "image_size": 32,
            "patch_size": 8,
        },
        text_config=TINY_TEXT,
    ),
    FamilyFixture(
        name="siglip-classifier",
        summary="SiglipForImageClassification: the mean of every token",
        model_class="SiglipForImageClassification",
        config_class="SiglipConfig",
        config={
            "hidden_size": 32,
            "num_attention_heads": 2,
            "num_hidden_layers": 1,
            "intermediate_size": 64,
            "image_size": 16,
            "patch_size": 4,
        },
        text_config=TINY_TEXT,
        labels=["calm", "storm"],
    ),
]


def dual_tower(fixture: FamilyFixture) -> bool:
    return fixture.text_config is not None


def build_model(fixture: FamilyFixture, seed: int) -> nn.Module:
    import transformers

    config_class = getattr(transformers, fixture.config_class)
    extra = {}
    if fixture.labels:
        extra["id2label"] = dict(enumerate(fixture.labels))
        extra["label2id"] = {label: i for i, label in enumerate(fixture.labels)}
    if dual_tower(fixture):
        config = config_class(
            text_config=fixture.text_config,
            vision_config=fixture.config,
            attn_implementation="eager",
            **fixture.dual_config,
            **extra,
        )
    else:
        config = config_class(**fixture.config, attn_implementation="eager", **extra)
    torch.manual_seed(seed)
    model = getattr(transformers, fixture.model_class)(config)
    model.config.architectures = [fixture.model_class]
    randomize_parameters(model, torch.Generator().manual_seed(seed))
    return model.eval()


@torch.no_grad()
def randomize_parameters(model: nn.Module, generator: torch.Generator) -> None:
    """Redraw every parameter so that each one visibly changes the outputs (see
    make_fixtures.py): 1/sqrt(fan_in) weights, nonzero biases, layer-norm gains away from 1,
    unit-scale tokens and positions, layer scales between 0.5 and 1.5."""

    def normal(tensor: torch.Tensor, std: float, mean: float = 0.0) -> torch.Tensor:
        return torch.randn(tensor.shape, generator=generator) * std + mean

    covered = set()
    for module in model.modules():
        if isinstance(module, nn.LayerNorm):
            module.weight.copy_(normal(module.weight, 0.2, mean=1.0))
            module.bias.copy_(normal(module.bias, 0.2))
        elif isinstance(module, (nn.Linear, nn.Conv2d)):
            fan_in = module.weight[0].numel()
            module.weight.copy_(normal(module.weight, fan_in**-0.5))
            if module.bias is not None:
                module.bias.copy_(normal(module.bias, 0.2))
        elif isinstance(module, nn.MultiheadAttention):
            fan_in = module.in_proj_weight.shape[1]
            module.in_proj_weight.copy_(normal(module.in_proj_weight, fan_in**-0.5))
            module.in_proj_bias.copy_(normal(module.in_proj_bias, 0.2))
            covered.update({id(module.in_proj_weight), id(module.in_proj_bias)})
            continue
        else:
            continue
        covered.update(id(p) for p in module.parameters(recurse=False))
    for name, parameter in model.named_parameters():
        if id(parameter) in covered:
            continue
        if name.endswith("lambda1") or name.endswith("gamma"):
            parameter.copy_(torch.rand(parameter.shape, generator=generator) + 0.5)
        elif "position" in name:
            parameter.copy_(normal(parameter, 0.5))
        else:
            # CLS, distillation, register and mask tokens, the probe, embeddings, scales.
            parameter.copy_(normal(parameter, 1.0))


def input_size(fixture: FamilyFixture, model: nn.Module) -> tuple[int, int]:
    if fixture.input_size is not None:
        return fixture.input_size
    size = vision_config(model).image_size
    return (size, size) if isinstance(size, int) else tuple(size)


def vision_config(model: nn.Module):
    return getattr(model.config, "vision_config", model.config)


@torch.no_grad()
def reference_outputs(model: nn.Module, pixel_values: torch.Tensor, interpolate: bool):
    """The outputs vitrt computes for this checkpoint, in float64, as float32 tensors."""
    kwargs = {"output_hidden_states": True, "return_dict": True}
    family = vision_config(model).model_type
    if interpolate and not family.startswith("dinov2"):
        kwargs["interpolate_pos_encoding"] = True
    tensors = {"pixel_values": pixel_values}
    pixels = pixel_values.to(next(model.parameters()).dtype)
    name = type(model).__name__
    if name in ("CLIPModel", "SiglipModel"):
        vision = model.vision_model(pixels, **kwargs)
        tensors["last_hidden_state"] = vision.last_hidden_state
        tensors["pooler_output"] = vision.pooler_output
        if name == "CLIPModel":
            tensors["image_embeds"] = model.visual_projection(vision.pooler_output)
        else:
            tensors["image_embeds"] = vision.pooler_output
        hidden_states = vision.hidden_states
    else:
        outputs = model(pixels, **kwargs)
        if getattr(outputs, "logits", None) is not None:
            tensors["logits"] = outputs.logits
        else:
            tensors["last_hidden_state"] = outputs.last_hidden_state
            for key in ("pooler_output", "image_embeds"):
                if getattr(outputs, key, None) is not None:
                    tensors[key] = getattr(outputs, key)
            if name == "SiglipVisionModel":
                tensors["image_embeds"] = outputs.pooler_output
        hidden_states = outputs.hidden_states
    layers = vision_config(model).num_hidden_layers
    if hidden_states is None or len(hidden_states) != layers + 1:
        raise RuntimeError(f"{name}: expected {layers + 1} hidden states")
    for index, state in enumerate(hidden_states):
        tensors[f"hidden_states.{index}"] = state
    return {k: v.detach().to(torch.float32).contiguous() for k, v in tensors.items()}


def write_torch_bf16_errors(model_class, model_dir: Path, reference: dict, interpolate: bool):
    """PyTorch's own bf16 relative error per tensor on the same inputs (transformers' default
    attention), as `vitrt parity` measures errors: the figure a vitrt bf16 run must not exceed.
    Written as torch-bf16.json beside the reference."""
    model = model_class.from_pretrained(model_dir).to(torch.bfloat16).eval()
    pixels = reference["pixel_values"].to(torch.bfloat16)
    ours = reference_outputs(model, pixels, interpolate)
    errors = {}
    for name, want in reference.items():
        if name == "pixel_values":
            continue
        scale = want.abs().max().clamp_min(1e-30)
        errors[name] = float((ours[name].float() - want).abs().max() / scale)
    (model_dir / "torch-bf16.json").write_text(json.dumps(errors, indent=1, sort_keys=True) + "\n")


def write_fixture(fixture: FamilyFixture, out_root: Path, seed: int) -> dict:
    import transformers

    model_dir = out_root / fixture.name
    if model_dir.exists():
        shutil.rmtree(model_dir)
    build_model(fixture, seed).save_pretrained(model_dir)
    # The reference comes from the files as written, so anything lost on the way to disk
    # shows up here rather than in vitrt's parity test.
    model_class = getattr(transformers, fixture.model_class)
    reloaded = model_class.from_pretrained(model_dir, attn_implementation="eager")
    reloaded = reloaded.to(torch.float64).eval()
    height, width = input_size(fixture, reloaded)
    channels = vision_config(reloaded).num_channels
    generator = torch.Generator().manual_seed(seed)
    pixel_values = torch.randn(fixture.batch, channels, height, width, generator=generator)
    interpolate = fixture.input_size is not None
    tensors = reference_outputs(reloaded, pixel_values, interpolate)
    metadata = {
        "fixture": fixture.name,
        "class": fixture.model_class,
        "compute_dtype": "float64",
        "attention": "eager",
        "input": f"random normal, batch {fixture.batch}, {height}x{width}, seed {seed}",
        **{f"version.{name}": version for name, version in library_versions().items()},
    }
    save_reference(model_dir / "reference.safetensors", tensors, metadata)
    write_torch_bf16_errors(model_class, model_dir, tensors, interpolate)
    return {
        "fixture": fixture,
        "shapes": {name: list(t.shape) for name, t in tensors.items()},
        "bytes": sum(p.stat().st_size for p in model_dir.iterdir()),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "tests/fixtures/models")
    parser.add_argument("--only", nargs="*", default=None)
    parser.add_argument("--seed", type=int, default=20261124)
    args = parser.parse_args(argv)
    disable_tf32()
    known = {f.name for f in FIXTURES + [TIMM_FIXTURE]}
    for name in args.only or []:
        if name not in known:
            parser.error(f"unknown fixture {name!r} (known: {', '.join(sorted(known))})")
    results = []
    for index, fixture in enumerate(FIXTURES + [TIMM_FIXTURE]):
        if args.only and fixture.name not in args.only:
            continue
        if fixture is TIMM_FIXTURE:
            result = write_timm_fixture(fixture, args.out, args.seed + index)
        else:
            result = write_fixture(fixture, args.out, args.seed + index)
        results.append(result)
        shapes = ", ".join(
            f"{k} {v}" for k, v in result["shapes"].items() if not k.startswith("hidden_states.")
        )
        print(f"{fixture.name:26} {result['bytes'] / 1024:6.0f} KiB  {shapes}")
    if not args.only:
        (args.out / "FAMILIES.md").write_text(families_readme(results))
    return 0


# timm's own checkpoint format: a ViT-Base name with smaller sizes in model_args, fused QKV and
# layer scale (init_values), its preprocessing in pretrained_cfg.
TIMM_FIXTURE = FamilyFixture(
    name="timm-vit-layerscale",
    summary="timm vit_base_patch16_224 with model_args (48 wide, 2 blocks, 3 heads, patch 8 at "
    "32): fused qkv, layer scale, pretrained_cfg preprocessing",
    model_class="timm VisionTransformer",
    config_class="",
    config={"img_size": 32, "patch_size": 8, "embed_dim": 48, "depth": 2, "num_heads": 3,
            "init_values": 0.5},
    labels=["north", "east", "south", "west", "up"],
)


@torch.no_grad()
def timm_outputs(model: nn.Module, pixels: torch.Tensor) -> dict:
    """A timm ViT's logits and hidden states: hidden_states.0 is what enters the first block,
    hidden_states.i block i's output (as transformers indexes them)."""
    states = []
    hooks = [model.blocks[0].register_forward_pre_hook(lambda _, args: states.append(args[0]))]
    hooks += [b.register_forward_hook(lambda _, __, out: states.append(out)) for b in model.blocks]
    logits = model(pixels)
    for h in hooks:
        h.remove()
    tensors = {"pixel_values": pixels, "logits": logits}
    tensors.update({f"hidden_states.{i}": s for i, s in enumerate(states)})
    return {k: v.detach().to(torch.float32).contiguous() for k, v in tensors.items()}


@torch.no_grad()
def write_timm_fixture(fixture: FamilyFixture, out_root: Path, seed: int) -> dict:
    """A timm checkpoint as `save_for_hf` writes it (config.json with architecture,
    model_args, pretrained_cfg and label_names; model.safetensors), its float64 reference
    (hidden_states.0 is what enters the first block, hidden_states.i block i's output) and
    PyTorch's own bf16 errors."""
    import timm
    from timm.models._hub import save_for_hf

    model_dir = out_root / fixture.name
    if model_dir.exists():
        shutil.rmtree(model_dir)
    torch.manual_seed(seed)
    model = timm.create_model("vit_base_patch16_224", pretrained=False,
                              num_classes=len(fixture.labels), **fixture.config)
    randomize_parameters(model, torch.Generator().manual_seed(seed))
    model.pretrained_cfg = {
        **model.pretrained_cfg, "input_size": (3, 32, 32), "interpolation": "bicubic",
        "crop_pct": 0.9, "crop_mode": "center", "mean": (0.5, 0.5, 0.5), "std": (0.5, 0.5, 0.5),
    }
    save_for_hf(model.eval(), model_dir, model_config={"label_names": fixture.labels},
                model_args=fixture.config, safe_serialization=True)

    reloaded = timm.create_model("vit_base_patch16_224", pretrained=False,
                                 num_classes=len(fixture.labels), **fixture.config)
    from safetensors.torch import load_file
    reloaded.load_state_dict(load_file(model_dir / "model.safetensors"))
    reloaded = reloaded.to(torch.float64).eval()
    generator = torch.Generator().manual_seed(seed)
    pixels = torch.randn(fixture.batch, 3, 32, 32, generator=generator)
    reference = timm_outputs(reloaded, pixels.to(torch.float64))
    reference["pixel_values"] = pixels
    metadata = {"fixture": fixture.name, "class": "timm VisionTransformer",
                "compute_dtype": "float64", "input": f"random normal, batch {fixture.batch}, seed {seed}",
                **{f"version.{name}": version for name, version in library_versions().items()},
                "version.timm": timm.__version__}
    save_reference(model_dir / "reference.safetensors", reference, metadata)
    bf16 = timm_outputs(reloaded.to(torch.bfloat16), pixels.to(torch.bfloat16))
    errors = {}
    for name, want in reference.items():
        if name != "pixel_values":
            scale = want.abs().max().clamp_min(1e-30)
            errors[name] = float((bf16[name] - want).abs().max() / scale)
    (model_dir / "torch-bf16.json").write_text(json.dumps(errors, indent=1, sort_keys=True) + "\n")
    return {
        "fixture": fixture,
        "shapes": {name: list(t.shape) for name, t in reference.items()},
        "bytes": sum(p.stat().st_size for p in model_dir.iterdir()),
    }


def families_readme(results: list[dict]) -> str:
    versions = ", ".join(f"{k} {v}" for k, v in library_versions().items())
    lines = [
        "# Parity fixtures of the other families: DeiT, DINOv2, CLIP, SigLIP and timm",
        "",
        "Made by `scripts/make_family_fixtures.py`; do not edit by hand. To remake them:",
        "",
        "```",
        "python scripts/make_family_fixtures.py",
        "```",
        "",
        f"Versions: {versions}.",
        "",
        "Each folder is a checkpoint as `save_pretrained` writes it, a `reference.safetensors`",
        "(float64 PyTorch with eager attention, stored as float32: `pixel_values`, the outputs",
        "the checkpoint has, `hidden_states.{i}`) and `torch-bf16.json`, PyTorch's own bf16",
        "relative error per tensor on the same inputs (what a vitrt bf16 run must not exceed).",
        "Inputs of another size than the config's were run with `interpolate_pos_encoding=True`",
        "(DINOv2 always interpolates). Every parameter is redrawn so that each one visibly",
        "changes the outputs.",
        "",
        "| fixture | what it covers | class | input | outputs | size |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for r in results:
        f = r["fixture"]
        shape = r["shapes"]["pixel_values"]
        outputs = ", ".join(f"`{k}` {v}" for k, v in r["shapes"].items()
                            if k != "pixel_values" and not k.startswith("hidden_states."))
        lines.append(f"| `{f.name}` | {f.summary} | {f.model_class} | {shape} | {outputs} | "
                     f"{r['bytes'] / 1024:.0f} KiB |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
