#!/usr/bin/env bash
# The benchmarks on the GPU machine, after scripts/gpu/gpu-check.sh stage DIR (run from the
# repository root):
#
#   scripts/gpu/gpu-bench.sh DIR LOGS [vitrt|torch|all|compile] [DTYPE]
#
# vitrt: `vitrt bench kernels` (against cuBLAS and the copy; JSON and SVG plot), `vitrt bench
# model` (times and memory per batch size) and `vitrt profile` on a ViT-B/16 with random
# weights (made by transformers on the spot unless /tmp/vitrt-vit-base exists), then
# scripts/bench/cold_start.py: `vitrt classify` of one image with an empty kernel cache and a filled
# one, whole-process wall time (cold-start-DTYPE.json). torch: scripts/bench/bench_torch.py on the
# same cases (with each model's peak memory), then scripts/bench/compare_bench.py prints vitrt/PyTorch
# ratios last (speed and memory). compile: bench_torch.py's torch.compile(mode="max-autotune")
# of timm's ViT-B/16 alone (HF's model through Inductor computes attention as bmm, softmax and
# bmm: benchmarks/NOTES.md, 2026-11-25 "Why the torch.compile baseline ran at half the eager
# speed"; timm's keeps the fused SDPA kernel), at the batch sizes in TORCH_COMPILE_BATCHES (default 1,8,64,256;
# each takes minutes to compile, so split them over calls under a time limit, e.g. 1,8 then
# 64,256), into torch_compile-DTYPE-bBATCHES.json, which compare_bench.py reads beside
# torch-DTYPE.json. Everything lands in LOGS ($OUT
# on the GPU machine, or a folder under benchmarks/raw/, git-ignored); nothing is written into
# benchmarks/ itself: scripts/bench/bench_summary.py RUN_DIR --logs LOGS --compare then writes the
# dated run folder's summary.json and compare table (benchmarks/SCHEMA.md).
set -uo pipefail
dir=${1:?usage: gpu-bench.sh DIR LOGS [vitrt|torch|all|compile] [DTYPE]}
logs=${2:?usage: gpu-bench.sh DIR LOGS [vitrt|torch|all|compile] [DTYPE]}
what=${3:-all}
dtype=${4:-f16}
mkdir -p "$logs"
vitb=/tmp/vitrt-vit-base
export VITRT_CACHE_DIR=${VITRT_CACHE_DIR:-/tmp/vitrt-cache}

if [ "$what" = vitrt ] || [ "$what" = all ]; then
    [ -f "$vitb/config.json" ] || python3 scripts/fixtures/make_random_vit.py --out "$vitb" --preset base >"$logs/make-vit.log" 2>&1
    "$dir/vitrt.bin" bench kernels --dtype "$dtype" --json "$logs/vitrt-kernels-$dtype.json" \
        --plot "$logs/vitrt-kernels-$dtype.svg" >"$logs/vitrt-kernels-$dtype.txt" 2>"$logs/vitrt-kernels-$dtype.err"
    echo "bench kernels: exit $?"
    "$dir/vitrt.bin" bench model --model "$vitb" --device cuda --dtype "$dtype" --batch-sizes 1,8,64,256 \
        --json "$logs/vitrt-model-$dtype.json" >"$logs/vitrt-model-$dtype.txt" 2>"$logs/vitrt-model-$dtype.err"
    echo "bench model: exit $?"
    for batch in 1 64; do
        "$dir/vitrt.bin" profile --model "$vitb" --device cuda --dtype "$dtype" --batch-size $batch \
            --json "$logs/profile-b$batch-$dtype.json" --trace "$logs/trace-b$batch-$dtype.json" \
            >"$logs/profile-b$batch-$dtype.txt" 2>"$logs/profile-b$batch-$dtype.err"
        echo "profile b$batch: exit $?"
    done
    # The kernel cache of the runs above stays as it is: cold_start.py gives every run a
    # cache folder of its own.
    python3 scripts/bench/cold_start.py --vitrt "$dir/vitrt.bin" --model "$vitb" --dtype "$dtype" \
        --json "$logs/cold-start-$dtype.json" >"$logs/cold-start-$dtype.txt" 2>"$logs/cold-start-$dtype.err"
    echo "cold start: exit $?"
    cat "$logs/vitrt-model-$dtype.txt"
    head -14 "$logs/profile-b64-$dtype.txt"
    head -2 "$logs/cold-start-$dtype.txt"
    grep -A12 '^warm' "$logs/cold-start-$dtype.txt" | head -1
fi
if [ "$what" = torch ] || [ "$what" = all ]; then
    python3 scripts/bench/bench_torch.py --dtype "$dtype" --json "$logs/torch-$dtype.json" >"$logs/torch-$dtype.log" 2>&1
    echo "bench_torch: exit $?"
    tail -3 "$logs/torch-$dtype.log"
fi
if [ "$what" = compile ]; then
    batches=${TORCH_COMPILE_BATCHES:-1,8,64,256}
    out="$logs/torch_compile-$dtype-b${batches//,/_}"
    python3 scripts/bench/bench_torch.py --dtype "$dtype" --what models --compile timm --compile-only --batch-sizes "$batches" \
        --json "$out.json" >"$out.log" 2>&1
    echo "bench_torch --compile timm b$batches: exit $?"
    grep -E "compiled|compile b|skipped" "$out.log" | tail -12
fi
if [ -f "$logs/torch-$dtype.json" ] && [ -f "$logs/vitrt-kernels-$dtype.json" ]; then
    # Every PyTorch document of this dtype: the main run and any compile runs beside it.
    torch_docs=()
    for doc in "$logs/torch-$dtype.json" "$logs"/torch_compile-"$dtype"-b*.json; do
        [ -f "$doc" ] && torch_docs+=(--torch "$doc")
    done
    python3 scripts/bench/compare_bench.py "$logs/vitrt-kernels-$dtype.json" "$logs/vitrt-model-$dtype.json" \
        "${torch_docs[@]}" | tee "$logs/compare-$dtype.txt"
fi
