#!/usr/bin/env python3
"""Time PyTorch on the cases `vitrt bench kernels` and `vitrt bench model` time, and write the
same JSON document (schema "vitrt-bench/1", described in benchmarks/SCHEMA.md).

  python3 scripts/bench/bench_torch.py --json torch-f16.json
  python3 scripts/bench/bench_torch.py --json torch-f32.json --dtype f32 --what kernels
  python3 scripts/bench/bench_torch.py --json torch-compile.json --what models --compile --batch-sizes 64
  python3 scripts/bench/bench_torch.py --json torch-compile.json --what models --compile timm,hf-sdpa
  python3 scripts/bench/bench_torch.py --json torch_compile.json --what models --compile --compile-only
  python3 scripts/bench/bench_torch.py --self-test --json /tmp/bench-self-test.json   # no GPU needed

Kernel cases are ViT-B/16 at 224 (197 tokens, hidden 768, 12 heads of 64, MLP 3072) at each
batch size b, plus square matmuls and a 256 MiB device-to-device copy (the bandwidth ceiling):

  matmul     torch-cublas  F.linear(A [M,K], W [N,K]) with M = b*197, for qkv, proj, fc1 and fc2,
                           epilogue "none", and "bias+gelu" (F.linear with bias, then exact
                           erf F.gelu, the two kernels a torch user gets); square/{s}, "none"
  layernorm  torch         F.layer_norm on [b*197, 768], weight and bias, eps 1e-12
  softmax    torch         torch.softmax over the last axis of [b*12*197, 197]
  add        torch         a + b, out of place, b*197*768 elements
  patch      torch         transformers' ViTEmbeddings (conv 16x16 stride 16, flatten, CLS,
                           position embeddings), pixels and weights in the bench dtype
  attention  torch-sdpa    F.scaled_dot_product_attention on q, k, v viewed out of one QKV
                           tensor [b, 197, 3*768]
             torch-eager   the same views through matmul, softmax (in float32, as
                           transformers' eager attention does), matmul
  copy       copy          dst.copy_(src) of 256 MiB

Model cases are a ViT-B/16 224 classifier (1000 labels) with random weights in the bench dtype,
under torch.inference_mode: "hf-eager" and "hf-sdpa" (transformers' ViTForImageClassification
with that attention implementation), "timm" (timm's vit_base_patch16_224), and with --compile
"timm-compile" (the timm model through torch.compile with mode="max-autotune"), or with
--compile timm,hf-sdpa that and "hf-sdpa-compile": compiled afresh for each batch size, static
shapes; the compile time is printed and kept in the row's "compile_s"; expect minutes per batch
size. A compile that fails is recorded under "skipped" with its reason. timm is the default
because Inductor keeps its attention as the fused SDPA kernel, while it computes HF's as bmm,
softmax and bmm, at eager-attention speed (benchmarks/NOTES.md, 2026-11-25).

Memory of model cases: each row's "memory" holds "weights_bytes" (the model's parameters and
buffers as they sit on the device) and, on a GPU, "allocated_peak_bytes"
(torch.cuda.max_memory_allocated: the most the caching allocator had handed out at once, from
torch.cuda.reset_peak_memory_stats just before the batch size's input is made, so weights,
input and activations, to the end of its timed repetitions; for compiled models reset after
the compile, which autotunes in memory of its own) and "reserved_peak_bytes"
(max_memory_reserved: what the allocator held from the driver). `vitrt bench model` writes the
same two keys from its own account, which scripts/bench/compare_bench.py divides.

Method. Inputs are random (torch.randn). Every repetition is timed on its own by two CUDA
events, after --warmup untimed repetitions; the JSON keeps the median, min and max in ms.
Kernel inputs rotate: the script allocates enough distinct copies of a case's inputs (weights
included) that together they exceed twice the L2 cache, and repetition i reads copy
i % copies, so every repetition reads its inputs from memory rather than from L2. float32 runs
turn TF32 off. Out-of-memory (and any other failure) of one case is recorded under "skipped"
with its reason, and the run goes on.

Kernel repetitions are preceded by a short spin kernel (torch.cuda._sleep) queued before the
start event, long enough that the host has queued the op and the end event before the GPU
reaches them: the events then time the op itself, not Python's launch latency, which would
otherwise dominate microsecond kernels at batch 1. --no-queue-ahead turns that off. Model
repetitions get no spin kernel: a model's host overhead is part of what its user waits for.

--self-test runs every case on the CPU at tiny sizes (2 reps, time.perf_counter, a pretend
256 KiB cache so that rotation is exercised), then checks the written JSON against the schema
rules, so the logic can be checked on a machine without a GPU. timm missing is recorded as
skipped ("timm not installed") in any mode.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import platform
import re
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

import torch
import torch.nn.functional as F

SCHEMA = "vitrt-bench/1"
DTYPES = {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32}
WHATS = ("kernels", "models")
MODEL_PROVIDERS = ("hf-eager", "hf-sdpa", "timm")
# --compile's choices: the provider each compiles, and the row's provider name.
COMPILED_PROVIDERS = {"hf-sdpa": "hf-sdpa-compile", "timm": "timm-compile"}
COMPILE_SUFFIX = "-compile"
TIMM_MISSING = "timm not installed"

# Which figures each op reports: (tflops, gbps). The other one is null.
OP_FIGURES = {
    "matmul": (True, False),
    "layernorm": (False, True),
    "softmax": (False, True),
    "add": (False, True),
    "patch": (True, True),
    "attention": (True, True),
    "copy": (False, True),
}
EPILOGUES = ("none", "bias+gelu")


@dataclass(frozen=True)
class Geometry:
    """The ViT whose layer shapes the cases take, and the sizes of the extra cases."""

    name: str  # case-name prefix: "vit-b16/qkv/b64"
    image: int
    patch: int
    channels: int
    hidden: int
    heads: int
    mlp: int
    layers: int
    squares: tuple[int, ...]
    copy_bytes: int

    @property
    def tokens(self) -> int:
        return (self.image // self.patch) ** 2 + 1

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    @property
    def model_name(self) -> str:
        return f"{self.name}-{self.image}"


VIT_B16 = Geometry("vit-b16", 224, 16, 3, 768, 12, 3072, 12, (256, 512, 1024, 2048, 4096, 8192), 256 << 20)
# Self-test: the same cases, small enough for a CPU in seconds (5 tokens, 2 heads of 32).
TINY = Geometry("tiny", 32, 16, 3, 64, 2, 128, 2, (16, 32), 1 << 20)
TINY_BATCHES = (1, 2)
TINY_L2_BYTES = 256 << 10


class BenchError(Exception):
    """A problem with the arguments or the machine: printed as one line, exit code 1."""


class SchemaError(BenchError):
    """A document that breaks benchmarks/SCHEMA.md."""


# ---------------------------------------------------------------------------------------------
# Cases. A kernel case knows how to make one set of its inputs and how to run the op on a set;
# the harness decides how many sets to make (rotation) and times the runs.


@dataclass
class KernelCase:
    op: str
    case: str
    provider: str
    epilogue: str | None  # matmul only
    shape: list[int]
    flops: float | None  # per repetition, for tflops
    bytes: float | None  # per repetition, for gbps
    make_inputs: Callable[[], tuple]
    run: Callable[..., object]

    @property
    def what(self) -> str:
        parts = [self.op, self.case, self.provider] + ([self.epilogue] if self.epilogue else [])
        return " ".join(parts)


def kernel_cases(g: Geometry, batches: list[int], dtype: torch.dtype, device: torch.device) -> list[KernelCase]:
    es = torch.empty((), dtype=dtype).element_size()
    T, D, H, hd = g.tokens, g.hidden, g.heads, g.head_dim

    def randn(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, dtype=dtype, device=device)

    cases: list[KernelCase] = []

    # The bandwidth ceiling first, so the memory-bound figures below can be read against it.
    n = g.copy_bytes // es
    cases.append(KernelCase(
        "copy", f"{g.copy_bytes >> 20}MiB", "copy", None, [g.copy_bytes], None, 2 * g.copy_bytes,
        lambda n=n: (randn(n), torch.empty(n, dtype=dtype, device=device)),
        lambda src, dst: dst.copy_(src),
    ))

    def linear(a, w):
        return F.linear(a, w)

    def linear_bias_gelu(a, w, bias):
        # What a torch user's MLP runs: the GEMM with its bias, then a separate exact GELU.
        return F.gelu(F.linear(a, w, bias))

    layers = {"qkv": (3 * D, D), "proj": (D, D), "fc1": (g.mlp, D), "fc2": (D, g.mlp)}
    for b in batches:
        m = b * T
        for layer, (nn_, k) in layers.items():
            for epilogue in EPILOGUES:
                if epilogue == "none":
                    make, run = (lambda m=m, nn_=nn_, k=k: (randn(m, k), randn(nn_, k))), linear
                else:
                    make, run = (lambda m=m, nn_=nn_, k=k: (randn(m, k), randn(nn_, k), randn(nn_))), linear_bias_gelu
                cases.append(KernelCase(
                    "matmul", f"{g.name}/{layer}/b{b}", "torch-cublas", epilogue, [m, nn_, k],
                    2.0 * m * nn_ * k, None, make, run,
                ))
    for s in g.squares:
        cases.append(KernelCase(
            "matmul", f"square/{s}", "torch-cublas", "none", [s, s, s], 2.0 * s**3, None,
            lambda s=s: (randn(s, s), randn(s, s)), linear,
        ))

    for b in batches:
        rows = b * T
        cases.append(KernelCase(
            "layernorm", f"{g.name}/b{b}", "torch", None, [rows, D], None, 2 * rows * D * es,
            lambda rows=rows: (randn(rows, D), randn(D), randn(D)),
            # eps as transformers' ViTConfig has it
            lambda x, w, bias: F.layer_norm(x, (D,), w, bias, 1e-12),
        ))
    for b in batches:
        rows = b * H * T
        cases.append(KernelCase(
            "softmax", f"{g.name}/b{b}", "torch", None, [rows, T], None, 2 * rows * T * es,
            lambda rows=rows: (randn(rows, T),),
            lambda x: torch.softmax(x, dim=-1),
        ))
    for b in batches:
        n = b * T * D
        cases.append(KernelCase(
            "add", f"{g.name}/b{b}", "torch", None, [n], None, 3 * n * es,
            lambda n=n: (randn(n), randn(n)),
            lambda x, y: x + y,
        ))

    patches = (g.image // g.patch) ** 2
    for b in batches:
        cases.append(KernelCase(
            "patch", f"{g.name}/b{b}", "torch", None, [b, g.channels, g.image, g.image, g.patch],
            2.0 * b * patches * D * (g.channels * g.patch * g.patch),
            (b * g.channels * g.image * g.image + b * T * D) * es,
            lambda b=b: (vit_embeddings(g, dtype, device), randn(b, g.channels, g.image, g.image)),
            lambda emb, pixels: emb(pixels),
        ))

    def qkv_views(qkv: torch.Tensor):
        # One fused QKV activation [b, T, 3*D] viewed as q, k, v [b, heads, T, head_dim]:
        # reshape and permute only, no copy, as the attention layer of a ViT sees them.
        b = qkv.shape[0]
        return qkv.view(b, T, 3, H, hd).permute(2, 0, 3, 1, 4).unbind(0)

    def sdpa(qkv):
        q, k, v = qkv_views(qkv)
        return F.scaled_dot_product_attention(q, k, v)

    def eager(qkv):
        # transformers' eager_attention_forward: scaled scores, float32 softmax cast back, PV.
        q, k, v = qkv_views(qkv)
        scores = torch.matmul(q, k.transpose(-2, -1)) * hd**-0.5
        probs = torch.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)
        return torch.matmul(probs, v)

    for b in batches:
        for provider, run in (("torch-sdpa", sdpa), ("torch-eager", eager)):
            cases.append(KernelCase(
                "attention", f"{g.name}/b{b}", provider, None, [b, H, T, hd],
                4.0 * b * H * T * T * hd, 4 * b * T * D * es,
                lambda b=b: (randn(b, T, 3 * D),), run,
            ))
    return cases


def vit_config(g: Geometry, attn_implementation: str | None = None):
    from transformers import ViTConfig

    extra = {"attn_implementation": attn_implementation} if attn_implementation else {}
    return ViTConfig(
        hidden_size=g.hidden, num_hidden_layers=g.layers, num_attention_heads=g.heads,
        intermediate_size=g.mlp, image_size=g.image, patch_size=g.patch, num_channels=g.channels,
        num_labels=1000, **extra,
    )


def vit_embeddings(g: Geometry, dtype: torch.dtype, device: torch.device):
    from transformers.models.vit.modeling_vit import ViTEmbeddings

    return ViTEmbeddings(vit_config(g)).to(device=device, dtype=dtype).eval()


# ---------------------------------------------------------------------------------------------
# Timing.


class Clock:
    """Times `reps` repetitions of fn(i), i counting on from the warm-up's, one at a time."""

    def __init__(self, device: torch.device, queue_ahead: bool, warmup_ms: float = 0.0):
        self.cuda = device.type == "cuda"
        # After the warm-up's repetitions, more (reusing their inputs) until this long has
        # passed: a GPU's first tens of ms after idling run faster than it then sustains
        # (benchmarks/NOTES.md, 2026-11-28 "The first passes after idle run fast").
        self.warmup_ms = warmup_ms
        self.cycles_per_ms = None
        if self.cuda and queue_ahead:
            if hasattr(torch.cuda, "_sleep"):
                self.cycles_per_ms = self._calibrate_spin()
            else:
                print("note: torch.cuda._sleep is missing; kernels are timed without queue-ahead", file=sys.stderr)

    @staticmethod
    def _calibrate_spin() -> float:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        cycles = 2_000_000
        for _ in range(3):  # the first round pays for waking the GPU
            start.record()
            torch.cuda._sleep(cycles)
            end.record()
            torch.cuda.synchronize()
        return cycles / start.elapsed_time(end)

    def measure(self, fn: Callable[[int], object], reps: int, warmup: int, spin: bool) -> list[float]:
        if not self.cuda:
            for i in range(warmup):
                fn(i)
            times = []
            for i in range(warmup, warmup + reps):
                t = time.perf_counter()
                fn(i)
                times.append((time.perf_counter() - t) * 1e3)
            return times

        # How long the host takes to queue one repetition, seen during warm-up (the first one
        # pays for lazy initialisation, so it counts only when it is the only one): the spin
        # kernel must outlast it, with margin, so that the GPU never waits for the host between
        # the events.
        enqueue_ms = []
        for i in range(warmup):
            t = time.perf_counter()
            fn(i)
            enqueue_ms.append((time.perf_counter() - t) * 1e3)
        torch.cuda.synchronize()
        started, i = time.perf_counter(), 0
        while (time.perf_counter() - started) * 1e3 < self.warmup_ms:
            fn(i % max(1, warmup))
            torch.cuda.synchronize()
            i += 1
        spin_cycles = 0
        if spin and self.cycles_per_ms:
            host_ms = max(enqueue_ms[1:] or enqueue_ms or [0.1])
            spin_cycles = int(self.cycles_per_ms * min(10.0, max(0.05, 3 * host_ms)))
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
        gc_was_enabled = gc.isenabled()
        gc.disable()  # a collection inside the loop would land in the timed window
        try:
            for r in range(reps):
                if spin_cycles:
                    torch.cuda._sleep(spin_cycles)
                starts[r].record()
                fn(warmup + r)
                ends[r].record()
            torch.cuda.synchronize()
        finally:
            if gc_was_enabled:
                gc.enable()
        return [s.elapsed_time(e) for s, e in zip(starts, ends)]


def set_bytes(inputs: tuple) -> int:
    total = 0
    for x in inputs:
        if isinstance(x, torch.Tensor):
            total += x.numel() * x.element_size()
        elif isinstance(x, torch.nn.Module):
            total += sum(t.numel() * t.element_size() for t in list(x.parameters()) + list(x.buffers()))
    return total


def rotated_inputs(make: Callable[[], tuple], l2_bytes: int | None) -> list[tuple]:
    """Enough copies of a case's inputs that together they exceed twice the L2 cache."""
    first = make()
    copies = 1 if not l2_bytes else 2 * l2_bytes // max(1, set_bytes(first)) + 1
    return [first] + [make() for _ in range(copies - 1)]


def sig(x: float, digits: int = 6) -> float:
    return float(f"{x:.{digits}g}")


def summary(times: list[float]) -> tuple[float, float, float]:
    ordered = sorted(times)
    n = len(ordered)
    median = ordered[n // 2] if n % 2 else (ordered[n // 2 - 1] + ordered[n // 2]) / 2
    return median, ordered[0], ordered[-1]


# ---------------------------------------------------------------------------------------------
# Runner: each case alone, failures recorded rather than fatal.


class Runner:
    def __init__(self, args, device: torch.device, dtype: torch.dtype, geometry: Geometry,
                 batches: list[int], l2_bytes: int | None, total: int):
        self.args, self.device, self.dtype, self.g, self.batches = args, device, dtype, geometry, batches
        self.l2_bytes = l2_bytes
        self.clock = Clock(device, queue_ahead=not args.no_queue_ahead, warmup_ms=args.warmup_ms)
        self.kernels: list[dict] = []
        self.models: list[dict] = []
        self.skipped: list[dict] = []
        self.done, self.total = 0, total

    def progress(self, text: str) -> None:
        self.done += 1
        print(f"[{self.done}/{self.total}] {text}", file=sys.stderr, flush=True)

    def skip(self, what: str, reason: str) -> None:
        self.skipped.append({"what": what, "reason": reason})
        self.progress(f"{what} skipped: {reason}")

    def attempt(self, what: str, body: Callable[[], None]) -> bool:
        """Runs body; an exception becomes a "skipped" row. Memory is freed after the handler,
        when the traceback (which keeps the case's tensors alive) is gone."""
        failed = None
        try:
            body()
        except torch.OutOfMemoryError as e:
            failed = f"out of memory: {first_line(e)}"
        except Exception as e:  # noqa: BLE001 - one broken case must not cost the whole run
            traceback.print_exc(file=sys.stderr)
            failed = f"{type(e).__name__}: {first_line(e)}"
        if failed is not None:
            self.free_memory()
            self.skip(what, failed)
        return failed is None

    def kernel(self, c: KernelCase) -> None:
        def body():
            with torch.inference_mode():
                sets = rotated_inputs(c.make_inputs, self.l2_bytes)
                times = self.clock.measure(lambda i: c.run(*sets[i % len(sets)]), self.args.reps,
                                           self.args.warmup, spin=True)
            median, lo, hi = summary(times)
            seconds = median * 1e-3
            tflops = sig(c.flops / seconds / 1e12) if c.flops is not None else None
            gbps = sig(c.bytes / seconds / 1e9) if c.bytes is not None else None
            self.kernels.append({
                "op": c.op, "case": c.case, "provider": c.provider, "epilogue": c.epilogue,
                "shape": [int(s) for s in c.shape], "reps": len(times),
                "median_ms": sig(median), "min_ms": sig(lo), "max_ms": sig(hi),
                "tflops": tflops, "gbps": gbps,
            })
            figure = f"{tflops:.1f} TFLOP/s" if tflops is not None else f"{gbps:.0f} GB/s"
            self.progress(f"{c.what} {median:.4f} ms {figure} ({len(sets)} input copies)")

        self.attempt(c.what, body)

    def model_provider(self, provider: str, timm_module, timm_problem: str | None) -> None:
        what = lambda b: f"model {provider} b{b}"  # noqa: E731
        if provider.startswith("timm") and timm_problem:
            for b in self.batches:
                self.skip(what(b), timm_problem)
            return
        reason = None
        try:
            # Built outside inference mode, so that the parameters are ordinary tensors, which
            # torch.compile and its CUDA graphs expect; only the forward passes run in it.
            with torch.no_grad():
                base = provider.removesuffix(COMPILE_SUFFIX)
                model = build_model(base, self.g, self.dtype, self.device, timm_module)
        except torch.OutOfMemoryError as e:
            reason = f"out of memory: {first_line(e)}"
        except Exception as e:  # noqa: BLE001 - reported once per batch size below
            traceback.print_exc(file=sys.stderr)
            reason = f"{type(e).__name__}: {first_line(e)}"
        if reason is not None:
            self.free_memory()
            for b in self.batches:
                self.skip(what(b), reason)
            return
        for b in self.batches:
            with torch.inference_mode():
                self.attempt(what(b), lambda b=b: self.model_batch(provider, model, b))
        del model
        self.free_memory()

    def free_memory(self) -> None:
        gc.collect()
        if self.device.type == "cuda":
            torch.cuda.empty_cache()

    def model_batch(self, provider: str, model, b: int) -> None:
        g = self.g
        cuda = self.device.type == "cuda"
        if cuda:
            # The peak from here on: the weights (and anything else still held) as they are now,
            # then this batch size's input and activations.
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats(self.device)
        pixels = torch.randn(b, g.channels, g.image, g.image, dtype=self.dtype, device=self.device)
        warmup = self.args.warmup
        compile_s = None
        call = (lambda m: m(pixel_values=pixels)) if provider.startswith("hf") else (lambda m: m(pixels))
        if provider.endswith(COMPILE_SUFFIX):
            # Compiled afresh per batch size, static shapes: each size gets its own tuned graph,
            # and dynamo's recompilation limit can never send a size back to eager.
            torch._dynamo.reset()
            compiled = torch.compile(model, mode="max-autotune", dynamic=False)
            t = time.perf_counter()
            call(compiled)
            if cuda:
                torch.cuda.synchronize()
            compile_s = time.perf_counter() - t
            print(f"  compiled {provider} b{b} in {compile_s:.0f} s", file=sys.stderr, flush=True)
            if cuda:
                # Autotuning benchmarks candidate kernels on buffers of its own: the peak that
                # compares with a plain run starts after it (the CUDA graphs recorded during
                # the warm-up below still count).
                self.free_memory()
                torch.cuda.reset_peak_memory_stats(self.device)
            forward = lambda i: call(compiled)  # noqa: E731
            warmup = max(warmup, 3)  # CUDA graphs are recorded on the first calls after compiling
        else:
            forward = lambda i: call(model)  # noqa: E731
        times = self.clock.measure(forward, self.args.reps, warmup, spin=False)
        median, lo, hi = summary(times)
        memory = {
            "weights_bytes": set_bytes((model,)),
            "allocated_peak_bytes": int(torch.cuda.max_memory_allocated(self.device)) if cuda else None,
            "reserved_peak_bytes": int(torch.cuda.max_memory_reserved(self.device)) if cuda else None,
        }
        row = {
            "model": g.model_name, "provider": provider, "batch": b, "reps": len(times),
            "median_ms": sig(median), "min_ms": sig(lo), "max_ms": sig(hi),
            "images_per_s": sig(b / (median * 1e-3)),
            "memory": memory,
        }
        if compile_s is not None:
            row["compile_s"] = sig(compile_s, 4)
        self.models.append(row)
        peak = memory["allocated_peak_bytes"]
        peak_text = f", peak {peak / 2**20:.0f} MiB allocated" if peak is not None else ""
        self.progress(f"model {provider} b{b} {median:.3f} ms {b / (median * 1e-3):.0f} images/s{peak_text}")


def first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def build_model(provider: str, g: Geometry, dtype: torch.dtype, device: torch.device, timm_module):
    if provider.startswith("hf"):
        from transformers import ViTForImageClassification

        implementation = provider.removeprefix("hf-")
        model = ViTForImageClassification(vit_config(g, implementation))
        # transformers falls back silently in some versions; a mislabelled row would be worse
        # than none.
        got = getattr(model.config, "_attn_implementation", None)
        if got != implementation:
            raise BenchError(f"asked transformers for attention {implementation!r}, got {got!r}")
    else:
        overrides = {}
        if g != VIT_B16:  # self-test: the same architecture at the tiny geometry
            overrides = dict(img_size=g.image, patch_size=g.patch, embed_dim=g.hidden, depth=g.layers,
                             num_heads=g.heads, mlp_ratio=g.mlp / g.hidden)
        model = timm_module.create_model("vit_base_patch16_224", pretrained=False, num_classes=1000, **overrides)
    return model.to(device=device, dtype=dtype).eval()


# ---------------------------------------------------------------------------------------------
# The document.


def device_info(device: torch.device) -> dict:
    if device.type != "cuda":
        return {"name": platform.processor() or platform.machine() or "cpu", "driver": None,
                "compute_capability": None, "l2_bytes": None}
    props = torch.cuda.get_device_properties(device)
    return {
        "name": props.name,
        "driver": driver_version(device.index or 0),
        "compute_capability": f"{props.major}.{props.minor}",
        "l2_bytes": int(props.L2_cache_size),
    }


def driver_version(index: int) -> str | None:
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader", "-i", str(index)],
            capture_output=True, text=True, timeout=30, check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return out.splitlines()[0].strip() if out else None


def tool_versions(timm_module, timm_problem: str | None) -> str:
    import transformers

    if timm_module is not None:
        timm_text = f"timm {timm_module.__version__}"
    else:
        timm_text = timm_problem if timm_problem == TIMM_MISSING else f"timm ({timm_problem})"
    return f"pytorch {torch.__version__} / transformers {transformers.__version__} / {timm_text}"


def import_timm():
    """(module, None) or (None, why not)."""
    try:
        import timm
    except ModuleNotFoundError as e:
        if e.name == "timm":
            return None, TIMM_MISSING
        return None, f"timm failed to import: {first_line(e)}"
    except Exception as e:  # noqa: BLE001 - e.g. a torchvision that does not match torch
        return None, f"timm failed to import: {type(e).__name__}: {first_line(e)}"
    return timm, None


TOP_KEYS = ["schema", "tool", "date", "device", "dtype", "kernels", "models", "skipped"]
DEVICE_KEYS = ["name", "driver", "compute_capability", "l2_bytes"]
KERNEL_KEYS = ["op", "case", "provider", "epilogue", "shape", "reps", "median_ms", "min_ms", "max_ms", "tflops", "gbps"]
MODEL_KEYS = ["model", "provider", "batch", "reps", "median_ms", "min_ms", "max_ms", "images_per_s", "memory"]
# A compiled model's row ends with its compile time.
COMPILED_MODEL_KEYS = MODEL_KEYS + ["compile_s"]
MEMORY_KEYS = ["weights_bytes", "allocated_peak_bytes", "reserved_peak_bytes"]
SKIPPED_KEYS = ["what", "reason"]


def check_report(doc) -> None:
    """Raises SchemaError listing every way `doc` breaks benchmarks/SCHEMA.md."""
    errors: list[str] = []

    def keys(obj, want: list[str], where: str) -> bool:
        if not isinstance(obj, dict):
            errors.append(f"{where}: not an object")
            return False
        if list(obj) != want:
            errors.append(f"{where}: keys {list(obj)}, want {want} in that order")
            return False
        return True

    def is_int(x) -> bool:
        return isinstance(x, int) and not isinstance(x, bool)

    def is_num(x) -> bool:
        return (is_int(x) or isinstance(x, float)) and math.isfinite(x)

    def text(x) -> bool:
        return isinstance(x, str) and x != ""

    def timing(row: dict, where: str) -> None:
        if not (is_int(row["reps"]) and row["reps"] >= 1):
            errors.append(f"{where}: reps must be a positive integer")
        ms = [row["min_ms"], row["median_ms"], row["max_ms"]]
        if not all(is_num(x) and x > 0 for x in ms):
            errors.append(f"{where}: min_ms, median_ms, max_ms must be positive numbers")
        elif not ms[0] <= ms[1] <= ms[2]:
            errors.append(f"{where}: want min_ms <= median_ms <= max_ms, got {ms}")

    if not keys(doc, TOP_KEYS, "document"):
        raise SchemaError("; ".join(errors))
    if doc["schema"] != SCHEMA:
        errors.append(f"schema: {doc['schema']!r}, want {SCHEMA!r}")
    if not text(doc["tool"]):
        errors.append("tool: must be a non-empty string")
    if not (isinstance(doc["date"], str) and re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", doc["date"])):
        errors.append(f"date: {doc['date']!r} is not UTC ISO 8601 like 2026-11-22T12:34:56Z")
    dev = doc["device"]
    if keys(dev, DEVICE_KEYS, "device"):
        if not text(dev["name"]):
            errors.append("device.name: must be a non-empty string")
        if dev["driver"] is not None and not text(dev["driver"]):
            errors.append("device.driver: must be a string or null")
        cc = dev["compute_capability"]
        if cc is not None and not (isinstance(cc, str) and re.fullmatch(r"\d+\.\d+", cc)):
            errors.append(f"device.compute_capability: {cc!r}, want like \"9.0\" or null")
        if dev["l2_bytes"] is not None and not (is_int(dev["l2_bytes"]) and dev["l2_bytes"] > 0):
            errors.append("device.l2_bytes: must be a positive integer or null")
    if doc["dtype"] not in DTYPES:
        errors.append(f"dtype: {doc['dtype']!r}, want one of {sorted(DTYPES)}")

    for name in ("kernels", "models", "skipped"):
        if not isinstance(doc[name], list):
            errors.append(f"{name}: must be a list")
    if errors:
        raise SchemaError("; ".join(errors))

    seen = set()
    for i, row in enumerate(doc["kernels"]):
        where = f"kernels[{i}]"
        if not keys(row, KERNEL_KEYS, where):
            continue
        op = row["op"]
        if op not in OP_FIGURES:
            errors.append(f"{where}: op {op!r} unknown, want one of {sorted(OP_FIGURES)}")
            continue
        if not (text(row["case"]) and text(row["provider"])):
            errors.append(f"{where}: case and provider must be non-empty strings")
        if op == "matmul":
            if row["epilogue"] not in EPILOGUES:
                errors.append(f"{where}: matmul epilogue {row['epilogue']!r}, want one of {list(EPILOGUES)}")
        elif row["epilogue"] is not None:
            errors.append(f"{where}: epilogue must be null for op {op!r}")
        shape = row["shape"]
        if not (isinstance(shape, list) and shape and all(is_int(s) and s > 0 for s in shape)):
            errors.append(f"{where}: shape must be a non-empty list of positive integers")
        timing(row, where)
        for figure, wanted in zip(("tflops", "gbps"), OP_FIGURES[op]):
            value = row[figure]
            if wanted and not (is_num(value) and value > 0):
                errors.append(f"{where}: {figure} must be a positive number for op {op!r}")
            if not wanted and value is not None:
                errors.append(f"{where}: {figure} must be null for op {op!r}")
        key = (op, row["case"], row["provider"], row["epilogue"])
        if key in seen:
            errors.append(f"{where}: duplicate row {key}")
        seen.add(key)

    seen = set()
    for i, row in enumerate(doc["models"]):
        where = f"models[{i}]"
        compiled = isinstance(row, dict) and str(row.get("provider", "")).endswith(COMPILE_SUFFIX)
        if not keys(row, COMPILED_MODEL_KEYS if compiled else MODEL_KEYS, where):
            continue
        if compiled and not (is_num(row["compile_s"]) and row["compile_s"] > 0):
            errors.append(f"{where}: compile_s must be a positive number")
        if keys(row["memory"], MEMORY_KEYS, f"{where}.memory"):
            mem = row["memory"]
            if not (is_int(mem["weights_bytes"]) and mem["weights_bytes"] > 0):
                errors.append(f"{where}.memory: weights_bytes must be a positive integer")
            for name in ("allocated_peak_bytes", "reserved_peak_bytes"):
                if mem[name] is not None and not (is_int(mem[name]) and mem[name] > 0):
                    errors.append(f"{where}.memory: {name} must be a positive integer or null")
            if is_int(mem["allocated_peak_bytes"]) and is_int(mem["weights_bytes"]) \
                    and mem["allocated_peak_bytes"] < mem["weights_bytes"]:
                errors.append(f"{where}.memory: the peak is less than the weights it held")
        if not (text(row["model"]) and text(row["provider"])):
            errors.append(f"{where}: model and provider must be non-empty strings")
        if not (is_int(row["batch"]) and row["batch"] >= 1):
            errors.append(f"{where}: batch must be a positive integer")
        timing(row, where)
        ips = row["images_per_s"]
        if not (is_num(ips) and ips > 0):
            errors.append(f"{where}: images_per_s must be a positive number")
        elif is_int(row["batch"]) and is_num(row["median_ms"]) and row["median_ms"] > 0:
            want = row["batch"] / (row["median_ms"] / 1e3)
            if abs(ips - want) > 1e-4 * want:
                errors.append(f"{where}: images_per_s {ips} is not batch / median ({want:.6g})")
        key = (row["model"], row["provider"], row["batch"])
        if key in seen:
            errors.append(f"{where}: duplicate row {key}")
        seen.add(key)

    for i, row in enumerate(doc["skipped"]):
        if keys(row, SKIPPED_KEYS, f"skipped[{i}]") and not (text(row["what"]) and text(row["reason"])):
            errors.append(f"skipped[{i}]: what and reason must be non-empty strings")

    if errors:
        raise SchemaError("; ".join(errors))


def write_json(path: Path, doc: dict) -> None:
    # Whole or not at all: a run cut short must not leave a truncated file that parses as
    # something else later.
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(dumps(doc))
    os.replace(tmp, path)


def dumps(doc: dict) -> str:
    """The document with one row per line: readable, and diffs between runs stay small."""
    lines = []
    for i, (key, value) in enumerate(doc.items()):
        comma = "," if i < len(doc) - 1 else ""
        if isinstance(value, list) and value:
            rows = ",\n".join("    " + json.dumps(row, allow_nan=False) for row in value)
            lines.append(f"  {json.dumps(key)}: [\n{rows}\n  ]{comma}")
        else:
            lines.append(f"  {json.dumps(key)}: {json.dumps(value, allow_nan=False)}{comma}")
    text = "{\n" + "\n".join(lines) + "\n}\n"
    assert json.loads(text) == doc
    return text


# ---------------------------------------------------------------------------------------------
# Command line.


def parse_list(text: str, what: str, convert):
    try:
        items = [convert(x.strip()) for x in text.split(",") if x.strip()]
    except ValueError:
        raise BenchError(f"--{what}: cannot read {text!r}") from None
    if not items:
        raise BenchError(f"--{what}: empty list")
    return items


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", required=True, type=Path, help="where to write the results")
    parser.add_argument("--dtype", choices=list(DTYPES), default="f16")
    parser.add_argument("--what", default="kernels,models", help="comma-separated: kernels, models")
    parser.add_argument("--batch-sizes", default="1,8,64,256", help="comma-separated (default 1,8,64,256)")
    parser.add_argument("--reps", type=int, default=50, help="timed repetitions per case")
    parser.add_argument("--warmup", type=int, default=10, help="untimed repetitions before them")
    parser.add_argument("--warmup-ms", type=float, default=1000.0,
                        help="and more untimed repetitions until this long has passed (GPU only)")
    parser.add_argument("--compile", nargs="?", const="timm", default=None, metavar="MODELS",
                        help="also time torch.compile(mode='max-autotune') of these models, comma-separated "
                             f"from {sorted(COMPILED_PROVIDERS)} (default timm); minutes per batch size")
    parser.add_argument("--compile-only", action="store_true",
                        help="time only the --compile models, not the eager ones beside them")
    parser.add_argument("--device", default=None, help="cuda or cuda:N (default cuda)")
    parser.add_argument("--no-queue-ahead", action="store_true",
                        help="no spin kernel before kernel repetitions (host launch latency then counts)")
    parser.add_argument("--self-test", action="store_true",
                        help="every case on the CPU at tiny sizes, 2 reps, then check the JSON")
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    whats = parse_list(args.what, "what", str)
    unknown = sorted(set(whats) - set(WHATS))
    if unknown:
        raise BenchError(f"--what: unknown {unknown}, want some of {list(WHATS)}")
    batches = parse_list(args.batch_sizes, "batch-sizes", int)
    if any(b < 1 for b in batches):
        raise BenchError("--batch-sizes: every batch size must be at least 1")
    if args.reps < 1 or args.warmup < 0:
        raise BenchError("--reps must be at least 1 and --warmup at least 0")
    if not args.json.parent.is_dir():
        raise BenchError(f"--json: folder {args.json.parent} does not exist")

    if args.self_test:
        if args.device not in (None, "cpu"):
            raise BenchError("--self-test always runs on the CPU; leave out --device")
        device, geometry, l2_bytes = torch.device("cpu"), TINY, TINY_L2_BYTES
        batches, args.reps, args.warmup = list(TINY_BATCHES), 2, 1
    else:
        device = torch.device(args.device or "cuda")
        geometry = VIT_B16
        if device.type == "cuda":
            if not torch.cuda.is_available():
                raise BenchError(
                    f"CUDA is not available to torch {torch.__version__} (CUDA {torch.version.cuda}); "
                    "run --self-test to check the script without a GPU")
            if device.index is not None and device.index >= torch.cuda.device_count():
                raise BenchError(f"--device {args.device}: only {torch.cuda.device_count()} GPU(s)")
            device = torch.device("cuda", device.index or 0)
            torch.cuda.set_device(device)
            l2_bytes = int(torch.cuda.get_device_properties(device).L2_cache_size)
        elif device.type == "cpu":
            l2_bytes = None  # no reliable cache size to rotate against
        else:
            raise BenchError(f"--device {args.device}: want cuda, cuda:N or cpu")

    dtype = DTYPES[args.dtype]
    if dtype == torch.float32:
        # Exact float32 GEMMs and convolutions, as vitrt's f32 kernels compute them.
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        torch.set_float32_matmul_precision("highest")
    torch.manual_seed(0)

    timm_module, timm_problem = import_timm()
    cases = kernel_cases(geometry, batches, dtype, device) if "kernels" in whats else []
    compiled = parse_list(args.compile, "compile", str) if args.compile is not None else []
    unknown = sorted(set(compiled) - set(COMPILED_PROVIDERS))
    if unknown:
        raise BenchError(f"--compile: unknown {unknown}, want some of {sorted(COMPILED_PROVIDERS)}")
    if args.compile_only and not compiled:
        raise BenchError("--compile-only needs --compile")
    eager = [] if args.compile_only else list(MODEL_PROVIDERS)
    providers = eager + [COMPILED_PROVIDERS[c] for c in dict.fromkeys(compiled)]
    if "models" not in whats:
        providers = []
    total = len(cases) + len(providers) * len(batches)

    info = device_info(device)
    print(f"{info['name']}, {args.dtype}, L2 {l2_bytes} bytes, {total} cases, "
          f"{args.reps} reps after {args.warmup} warm-up", file=sys.stderr, flush=True)
    runner = Runner(args, device, dtype, geometry, batches, l2_bytes, total)
    for c in cases:
        runner.kernel(c)
    for provider in providers:
        runner.model_provider(provider, timm_module, timm_problem)

    doc = {
        "schema": SCHEMA,
        "tool": tool_versions(timm_module, timm_problem),
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "device": info,
        "dtype": args.dtype,
        "kernels": runner.kernels,
        "models": runner.models,
        "skipped": runner.skipped,
    }
    check_report(doc)
    write_json(args.json, doc)
    print(f"wrote {args.json}: {len(doc['kernels'])} kernel rows, {len(doc['models'])} model rows, "
          f"{len(doc['skipped'])} skipped", file=sys.stderr)

    if args.self_test:
        self_test_checks(args.json, total, kernels_planned=bool(cases))
        print("self-test passed", file=sys.stderr)
    return 0


def self_test_checks(path: Path, planned: int, kernels_planned: bool) -> None:
    """The written file parses, follows the schema, and accounts for every planned case; the
    only acceptable reason to skip on a CPU is a missing timm."""
    doc = json.loads(path.read_text())
    check_report(doc)
    rows = len(doc["kernels"]) + len(doc["models"]) + len(doc["skipped"])
    if rows != planned:
        raise BenchError(f"self-test: {rows} rows for {planned} planned cases")
    bad = [s for s in doc["skipped"] if s["reason"] != TIMM_MISSING]
    if bad:
        raise BenchError(f"self-test: unexpected skips {bad}")
    ops = {row["op"] for row in doc["kernels"]}
    if kernels_planned and ops != set(OP_FIGURES):
        raise BenchError(f"self-test: ops {sorted(ops)} ran, want {sorted(OP_FIGURES)}")


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BenchError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(1)
