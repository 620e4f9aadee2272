#!/usr/bin/env bash
# The benchmarks on the GPU machine, after scripts/gpu-check.sh stage DIR (run from the
# repository root):
#
#   scripts/gpu-bench.sh DIR LOGS [vitrt|torch|all] [DTYPE]
#
# vitrt: `vitrt bench kernels` (against cuBLAS and the copy; JSON and SVG plot), `vitrt bench
# model` and `vitrt profile` on a ViT-B/16 with random weights (made by transformers on the
# spot unless /tmp/vitrt-vit-base exists). torch: scripts/bench_torch.py on the same cases,
# then scripts/compare_bench.py prints vitrt/PyTorch ratios last. Everything lands in LOGS ($OUT
# on the GPU machine, or a folder under benchmarks/raw/, git-ignored); nothing is written into
# benchmarks/ itself: scripts/bench_summary.py RUN_DIR --logs LOGS --compare then writes the
# dated run folder's summary.json and compare table (benchmarks/SCHEMA.md).
set -uo pipefail
dir=${1:?usage: gpu-bench.sh DIR LOGS [vitrt|torch|all] [DTYPE]}
logs=${2:?usage: gpu-bench.sh DIR LOGS [vitrt|torch|all] [DTYPE]}
what=${3:-all}
dtype=${4:-f16}
mkdir -p "$logs"
vitb=/tmp/vitrt-vit-base
export VITRT_CACHE_DIR=${VITRT_CACHE_DIR:-/tmp/vitrt-cache}

if [ "$what" = vitrt ] || [ "$what" = all ]; then
    [ -f "$vitb/config.json" ] || python3 scripts/make_random_vit.py --out "$vitb" --preset base >"$logs/make-vit.log" 2>&1
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
    cat "$logs/vitrt-model-$dtype.txt"
    head -14 "$logs/profile-b64-$dtype.txt"
fi
if [ "$what" = torch ] || [ "$what" = all ]; then
    python3 scripts/bench_torch.py --dtype "$dtype" --json "$logs/torch-$dtype.json" >"$logs/torch-$dtype.log" 2>&1
    echo "bench_torch: exit $?"
    tail -3 "$logs/torch-$dtype.log"
fi
if [ -f "$logs/torch-$dtype.json" ] && [ -f "$logs/vitrt-kernels-$dtype.json" ]; then
    python3 scripts/compare_bench.py "$logs/vitrt-kernels-$dtype.json" "$logs/vitrt-model-$dtype.json" \
        --torch "$logs/torch-$dtype.json" | tee "$logs/compare-$dtype.txt"
fi
