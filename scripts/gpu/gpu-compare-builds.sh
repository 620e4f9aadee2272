#!/usr/bin/env bash
# Two builds of vitrt timed in one run on the GPU machine, in turns, so that the machine's
# drift falls on both (run from the repository root, after scripts/gpu/gpu-check.sh stage):
#
#   scripts/gpu/gpu-compare-builds.sh BEFORE.bin AFTER.bin LOGS [ROUNDS] [DTYPE]
#
# Each round runs `vitrt bench kernels` and `vitrt bench model` (ViT-B/16 with random weights,
# batches 1, 8, 64, 256) with both binaries, the order of the two alternating from round to
# round (ABBA...). Then scripts/bench/compare_builds.py prints each row's before/after ratio of the
# median time over the rounds. JSON documents land in LOGS; ROUNDS defaults to 2.
set -uo pipefail
before=${1:?usage: gpu-compare-builds.sh BEFORE.bin AFTER.bin LOGS [ROUNDS] [DTYPE]}
after=${2:?usage: gpu-compare-builds.sh BEFORE.bin AFTER.bin LOGS [ROUNDS] [DTYPE]}
logs=${3:?usage: gpu-compare-builds.sh BEFORE.bin AFTER.bin LOGS [ROUNDS] [DTYPE]}
rounds=${4:-2}
dtype=${5:-f16}
mkdir -p "$logs"
vitb=/tmp/vitrt-vit-base
export VITRT_CACHE_DIR=${VITRT_CACHE_DIR:-/tmp/vitrt-cache}
[ -f "$vitb/config.json" ] || python3 scripts/fixtures/make_random_vit.py --out "$vitb" --preset base >"$logs/make-vit.log" 2>&1

bench() { # bench NAME BINARY ROUND
    "$2" bench kernels --dtype "$dtype" --json "$logs/$1-kernels-$3.json" >"$logs/$1-kernels-$3.txt" 2>&1 ||
        echo "$1 bench kernels, round $3: exit $?"
    "$2" bench model --model "$vitb" --device cuda --dtype "$dtype" --batch-sizes 1,8,64,256 \
        --json "$logs/$1-model-$3.json" >"$logs/$1-model-$3.txt" 2>&1 ||
        echo "$1 bench model, round $3: exit $?"
}

for round in $(seq 1 "$rounds"); do
    if [ $((round % 2)) -eq 1 ]; then
        bench before "$before" "$round"
        bench after "$after" "$round"
    else
        bench after "$after" "$round"
        bench before "$before" "$round"
    fi
done
python3 scripts/bench/compare_builds.py "$logs"/before-*.json --after "$logs"/after-*.json | tee "$logs/compare-builds.txt"
