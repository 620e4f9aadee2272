#!/usr/bin/env bash
# Several GPUs in one process, on a machine of 2 or 4 (the dataset issue's scaling targets).
#
#   scripts/gpu/gpu-devices.sh DIR [LOGS] [PHOTOS] [REPEAT]
#
# DIR holds what `scripts/gpu/gpu-check.sh stage DIR` built (vitrt.bin, release). Makes a random
# ViT-B/16 (scripts/fixtures/make_random_vit.py) and PHOTOS (default 8192) 500x375 JPEG photos
# (scripts/fixtures/make_photos.py), listed REPEAT times (default 4: the files stay in the page cache,
# which is what a warm dataset read looks like), then, in f16, batch 256, with the default GPU
# decoding and workers:
#   1. `vitrt classify --stats` on cuda:0, then on 2 devices, then on every device
#      (classify-N.json): images/s of the pipeline and of the whole process, each device's
#      share. Targets: 1.9x one GPU on 2, 3.6x on 4.
#   2. `vitrt embed -o out.npy` the same way (whole-process time): the job the issue names.
#   3. The outputs of 1 on every device are identical to those on cuda:0 (same JSON Lines).
# Logs and JSON go to LOGS (default $OUT, else benchmarks/raw/gpu-devices, git-ignored).
set -uo pipefail
dir=${1:?usage: scripts/gpu/gpu-devices.sh DIR [LOGS] [PHOTOS] [REPEAT]}
logs=${2:-${OUT:-benchmarks/raw/gpu-devices}}
count=${3:-8192}
repeat=${4:-4}
mkdir -p "$logs"
export VITRT_CACHE_DIR=${VITRT_CACHE_DIR:-$(mktemp -d)}
vitrt="$dir/vitrt.bin"
nproc >"$logs/machine.txt"
nvidia-smi --query-gpu=name,driver_version --format=csv >>"$logs/machine.txt" 2>&1
gpus=$(nvidia-smi --query-gpu=name --format=csv,noheader | wc -l)

model=/tmp/vitrt-vit-base
photos=/tmp/vitrt-photos
python3 scripts/fixtures/make_random_vit.py --out "$model" --preset base >"$logs/make.log" 2>&1 || echo "make_random_vit failed"
python3 scripts/fixtures/make_photos.py --out "$photos" --count "$count" --size 500x375 >>"$logs/make.log" 2>&1 || echo "make_photos failed"
list=/tmp/vitrt-photos.txt
: >"$list"
for _ in $(seq "$repeat"); do ls "$photos"/*.jpg >>"$list"; done
images=$(wc -l <"$list")

# Kernels compiled and cached once, on every device.
"$vitrt" classify --model "$model" --dtype f16 --device cuda:all --batch-size 256 --quiet \
    --format jsonl "$photos" >/dev/null 2>"$logs/warm.log" || { echo "warm-up failed:"; tail -5 "$logs/warm.log"; }

devices_for() { # N -> the --device value
    case $1 in
    1) echo cuda:0 ;;
    "$gpus") echo cuda:all ;;
    *) seq -s, 0 $(($1 - 1)) | sed 's/^/cuda:/' ;;
    esac
}
counts=(1)
[ "$gpus" -ge 2 ] && counts+=(2)
[ "$gpus" -gt 2 ] && counts+=("$gpus")
for n in "${counts[@]}"; do
    device=$(devices_for "$n")
    start=$(date +%s.%N)
    "$vitrt" classify --model "$model" --dtype f16 --device "$device" --batch-size 256 --quiet \
        --format jsonl --stats "$logs/classify-$n.json" --files-from "$list" \
        >"$logs/classify-$n.jsonl" 2>"$logs/classify-$n.log"
    rc=$?
    end=$(date +%s.%N)
    python3 - "$logs/classify-$n.json" "$n" "$rc" "$start" "$end" "$images" <<'PY'
import json, sys
path, n, rc, start, end, images = sys.argv[1:]
wall = float(end) - float(start)
try:
    s = json.load(open(path))
except OSError:
    print(f"classify on {n} device(s): exit {rc}, no stats"); sys.exit()
shares = ", ".join(f"{d['device']} {d['images']}" for d in s.get("devices", []))
print(f"classify on {n} device(s): exit {rc}; pipeline {s['images_per_s']:.0f} images/s; whole process "
      f"{int(images) / wall:.0f} images/s ({wall:.2f} s); workers busy {s['worker_busy_fraction']:.2f}"
      + (f"; images by device: {shares}" if shares else ""))
PY
done
for n in "${counts[@]}"; do
    [ "$n" = 1 ] && continue
    if cmp -s "$logs/classify-1.jsonl" "$logs/classify-$n.jsonl"; then
        echo "classify on $n devices: results identical to one device's"
    else
        echo "classify on $n devices: RESULTS DIFFER from one device's"
    fi
done
for n in "${counts[@]}"; do
    device=$(devices_for "$n")
    start=$(date +%s.%N)
    "$vitrt" embed --model "$model" --dtype f16 --device "$device" --batch-size 256 --quiet \
        -o "/tmp/embed-$n.npy" --files-from "$list" 2>"$logs/embed-$n.log"
    rc=$?
    end=$(date +%s.%N)
    python3 -c "import sys; n, rc, s, e, i = sys.argv[1:]; print(f'embed on {n} device(s): exit {rc}; whole process {int(i) / (float(e) - float(s)):.0f} images/s ({float(e) - float(s):.2f} s)')" \
        "$n" "$rc" "$start" "$end" "$images"
done
for n in "${counts[@]}"; do
    [ "$n" = 1 ] && continue
    cmp -s /tmp/embed-1.npy "/tmp/embed-$n.npy" && echo "embed on $n devices: identical .npy" || echo "embed on $n devices: .npy DIFFERS"
done
rm -f "$logs"/classify-*.jsonl
