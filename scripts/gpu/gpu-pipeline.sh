#!/usr/bin/env bash
# The whole-job benchmark on the GPU machine, with the GPU tests of the overlapped input path.
#
#   scripts/gpu/gpu-pipeline.sh DIR [LOGS] [COUNT]
#
# DIR holds what `scripts/gpu/gpu-check.sh stage DIR` built. Runs the byte-path GPU tests
# (model-pixel_bytes_gpu) and the graph-replay ones, makes a random ViT-B/16 and COUNT (default
# 4096) 500x375 JPEG photos, then scripts/bench/bench_pipeline.py: vitrt classify on them at batch
# 256 in f16, again on four times as many files (peak memory must stay flat), the forward pass
# alone, and the PyTorch DataLoader peer. Logs and pipeline.json go to LOGS (default $OUT, else
# benchmarks/raw/gpu-pipeline, git-ignored); scripts/bench/bench_summary.py puts pipeline.json into a
# dated run folder's summary.json.
set -uo pipefail
dir=${1:?usage: scripts/gpu/gpu-pipeline.sh DIR [LOGS] [COUNT]}
logs=${2:-${OUT:-benchmarks/raw/gpu-pipeline}}
count=${3:-4096}
mkdir -p "$logs"
export VITRT_REPO_ROOT=$PWD
export VITRT_CACHE_DIR=${VITRT_CACHE_DIR:-$(mktemp -d)}
nproc >"$logs/machine.txt"
lscpu >>"$logs/machine.txt" 2>&1
nvidia-smi --query-gpu=name,driver_version --format=csv >>"$logs/machine.txt" 2>&1
for test in model-pixel_bytes_gpu model-graph_replay_gpu; do
    timeout 300 "$dir/$test" --ignored --test-threads=1 >"$logs/$test.log" 2>&1
    echo "$test: exit $? $(grep -E '^test result' "$logs/$test.log" | tail -1)"
done
model=/tmp/vitrt-vit-base
photos=/tmp/vitrt-photos
python3 scripts/fixtures/make_random_vit.py --out "$model" --preset base >"$logs/make.log" 2>&1 || echo "make_random_vit failed"
python3 scripts/fixtures/make_photos.py --out "$photos" --count "$count" --size 500x375 >>"$logs/make.log" 2>&1 || echo "make_photos failed"
tail -1 "$logs/make.log"
python3 scripts/bench/bench_pipeline.py --vitrt "$dir/vitrt.bin" --model "$model" --images "$photos" \
    --batch-size 256 --repeat-large $((count * 4)) --workers-sweep 4,8,12 --json "$logs/pipeline.json" 2>&1 | tee "$logs/bench-pipeline.log"
