"""PyTorch's own FP8 path beside ours, on the GPU: timm's ViT-B/16 (random weights) in f16,
and the same model with every transformer block's Linear on torch._scaled_mm (e4m3 operands
with dynamic per-tensor scales: the activation's amax over 448 computed at every call, the
weight's once; f16 output; bias added after), the way a PyTorch user gets FP8 without
torchao. Times forward passes with CUDA events (warm-up, then the median of --reps), and
measures each variant's error against the f32 model on the same random images (relative
error of the pre-logits features and of the logits; top-1 agreement).

  python3 scripts/bench/bench_torch_fp8.py --batch-sizes 64,256 --json OUT.json
"""

import argparse
import json
import statistics

import torch
import torch.nn as nn

E4M3_MAX = 448.0


class Fp8Linear(nn.Module):
    """A Linear whose product runs in e4m3 on torch._scaled_mm, per-tensor dynamic scales."""

    def __init__(self, linear: nn.Linear):
        super().__init__()
        w = linear.weight.detach().float()
        self.w_scale = (w.abs().amax() / E4M3_MAX).clamp(min=1e-12).reshape(())
        # _scaled_mm takes B column-major: the transpose of a row-major [N, K] weight.
        self.w_t = (w / self.w_scale).to(torch.float8_e4m3fn).t()
        self.bias = None if linear.bias is None else linear.bias.detach().half()
        self.out_features = linear.out_features

    def forward(self, x):
        shape = x.shape
        x2 = x.reshape(-1, shape[-1])
        x_scale = (x2.abs().amax().float() / E4M3_MAX).clamp(min=1e-12).reshape(())
        x8 = (x2 / x_scale.half()).to(torch.float8_e4m3fn)
        y = torch._scaled_mm(
            x8, self.w_t, scale_a=x_scale, scale_b=self.w_scale, out_dtype=torch.float16
        )
        if self.bias is not None:
            y = y + self.bias
        return y.reshape(*shape[:-1], self.out_features)


def fp8_blocks(model):
    for block in model.blocks:
        for parent in (block.attn, block.mlp):
            for name, child in list(parent.named_children()):
                if isinstance(child, nn.Linear):
                    setattr(parent, name, Fp8Linear(child))
    return model


def time_forward(model, x, warmup, reps):
    with torch.inference_mode():
        for _ in range(warmup):
            model(x)
        torch.cuda.synchronize()
        times = []
        for _ in range(reps):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            model(x)
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
    return statistics.median(times)


def errors(model, reference, x):
    with torch.inference_mode():
        feats = model.forward_head(model.forward_features(x), pre_logits=True).float()
        logits = model.forward_head(model.forward_features(x)).float()
    ref_feats, ref_logits = reference
    rel = lambda a, b: ((a - b).norm() / b.norm()).item()
    return {
        "features_relative_error": rel(feats, ref_feats),
        "logits_relative_error": rel(logits, ref_logits),
        "top1_agreement": (logits.argmax(-1) == ref_logits.argmax(-1)).float().mean().item(),
        "features_mean_cosine": torch.nn.functional.cosine_similarity(feats, ref_feats).mean().item(),
    }


def main():
    import timm

    parser = argparse.ArgumentParser()
    parser.add_argument("--batch-sizes", default="64,256")
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--reps", type=int, default=30)
    parser.add_argument("--json")
    args = parser.parse_args()
    torch.manual_seed(0)
    base = timm.create_model("vit_base_patch16_224", pretrained=False).cuda().eval()
    f32 = base.float()
    probe = torch.randn(32, 3, 224, 224, device="cuda")
    with torch.inference_mode():
        reference = (
            f32.forward_head(f32.forward_features(probe), pre_logits=True).float(),
            f32.forward_head(f32.forward_features(probe)).float(),
        )
    import copy

    f16 = copy.deepcopy(f32).half()
    fp8 = fp8_blocks(copy.deepcopy(f32).half())
    results = {
        "gpu": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "model": "timm vit_base_patch16_224, random weights",
        "accuracy_against_f32": {
            "f16": errors(f16, reference, probe.half()),
            "fp8_scaled_mm_per_tensor": errors(fp8, reference, probe.half()),
        },
        "batches": {},
    }
    for batch in [int(b) for b in args.batch_sizes.split(",")]:
        x = torch.randn(batch, 3, 224, 224, device="cuda", dtype=torch.float16)
        row = {}
        for name, model in (("f16", f16), ("fp8_scaled_mm_per_tensor", fp8)):
            ms = time_forward(model, x, args.warmup, args.reps)
            row[name] = {"ms": ms, "images_per_s": batch / ms * 1e3}
        row["fp8_over_f16"] = row["f16"]["ms"] / row["fp8_scaled_mm_per_tensor"]["ms"]
        results["batches"][str(batch)] = row
        print(f"batch {batch}: {json.dumps(row)}", flush=True)
    print(json.dumps(results["accuracy_against_f32"], indent=1))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
