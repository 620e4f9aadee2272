#!/usr/bin/env bash
# Two builds of the attention kernels timed in one run on the GPU machine, in turns, so that
# the machine's drift falls on both (run from the repository root):
#
#   scripts/gpu/gpu-attention-ab.sh BEFORE AFTER LOGS [ROUNDS]
#
# BEFORE and AFTER are `gpu_attention` test executables (kernels/tests/gpu_attention.rs, built
# with `cargo test --release -p vitrt-kernels --test gpu_attention --no-run`). Runs AFTER's GPU
# tests, then ROUNDS (default 2) rounds of `bench_attention_programs_at_model_shapes` with both,
# the order alternating (before, after, after, before, ...), then prints
# scripts/bench/compare_attention.py's before/after table and PyTorch's SDPA beside AFTER's
# first run (scripts/bench/bench_attention.py). Logs land in LOGS.
set -uo pipefail
before=${1:?usage: gpu-attention-ab.sh BEFORE AFTER LOGS [ROUNDS]}
after=${2:?usage: gpu-attention-ab.sh BEFORE AFTER LOGS [ROUNDS]}
logs=${3:?usage: gpu-attention-ab.sh BEFORE AFTER LOGS [ROUNDS]}
rounds=${4:-2}
mkdir -p "$logs"
export VITRT_CACHE_DIR=${VITRT_CACHE_DIR:-/tmp/vitrt-cache} VITRT_REPO_ROOT=${VITRT_REPO_ROOT:-$PWD}

timeout 300 "$after" --ignored --skip bench_ --test-threads 1 >"$logs/tests.txt" 2>&1
echo "tests (after): exit $? $(grep 'test result' "$logs/tests.txt")"
grep -E "FAILED|panicked" "$logs/tests.txt" | head -5

bench() { # NAME BINARY RUN
    timeout 240 "$2" bench_attention_programs_at_model_shapes --ignored --exact --nocapture \
        --test-threads 1 >"$logs/bench-$1-$3.txt" 2>&1 || echo "bench $1, run $3: exit $?"
}
run=0
for round in $(seq 1 "$rounds"); do
    for side in before after; do
        [ $((round % 2)) -eq 0 ] && side=$([ "$side" = before ] && echo after || echo before)
        run=$((run + 1))
        if [ "$side" = before ]; then bench before "$before" $run; else bench after "$after" $run; fi
    done
done
python3 scripts/bench/compare_attention.py "$logs"/bench-before-*.txt --after "$logs"/bench-after-*.txt |
    tee "$logs/compare-attention.txt"
first_after=$(ls "$logs"/bench-after-*.txt | head -1)
timeout 300 python3 scripts/bench/bench_attention.py --ours "$first_after" --json "$logs/attention-torch.json" \
    >"$logs/attention-torch.txt" 2>&1 || echo "bench_attention.py: exit $?"
grep -E "^[a-z0-9-]+ +(64|256) " "$logs/attention-torch.txt" | cut -c1-80
