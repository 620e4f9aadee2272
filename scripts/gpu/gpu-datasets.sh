#!/usr/bin/env bash
# Embedding a webdataset on every GPU of the host, resumably (the dataset issue's targets).
#
#   scripts/gpu/gpu-datasets.sh DIR [LOGS] [SHARDS] [PER_SHARD] [REPEAT]
#
# DIR holds what `scripts/gpu/gpu-check.sh stage DIR` built (vitrt.bin, release), and the Python
# module's wheel if one is staged there (`maturin build --release`). Makes a random ViT-B/16
# (scripts/fixtures/make_random_vit.py) and SHARDS (default 32) webdataset tars of PER_SHARD (default
# 2048) 500x375 JPEG photos with a .json sidecar each (scripts/fixtures/make_photos.py makes the
# photos; the tars hold each photo 1 to 4 times under different keys), the dataset being
# those tars REPEAT times over (default 4; links under other names, so that a dataset of
# 262,144 images costs no disk), then, in f16, batch 256, `vitrt embed --normalize
# --output-dir` (which runs batch-invariant):
#   1. on cuda:0, on 2 devices, on every device: images/s of the whole process, start-up
#      included. Targets: 1.9x one GPU on 2, 3.6x on 4. Beside it the PyTorch peer
#      (scripts/bench/torch_shards_embed.py: nvJPEG, ViTModel with SDPA, one process per GPU as
#      clip-retrieval runs) on the same shards.
#   2. the shards of 1 are byte-identical in every run (the manifests differ by --device).
#   3. the run on every device killed (-9) once about half of its shards are written, then the
#      same command again: the shards it wrote, and the final directory byte-identical to the
#      uninterrupted run's.
# Logs go to LOGS (default $OUT, else benchmarks/raw/gpu-datasets, git-ignored).
set -uo pipefail
dir=${1:?usage: scripts/gpu/gpu-datasets.sh DIR [LOGS] [SHARDS] [PER_SHARD]}
logs=${2:-${OUT:-benchmarks/raw/gpu-datasets}}
shards=${3:-32}
per_shard=${4:-2048}
repeat=${5:-4}
mkdir -p "$logs"
export VITRT_CACHE_DIR=${VITRT_CACHE_DIR:-$(mktemp -d)}
vitrt="$dir/vitrt.bin"
nproc >"$logs/machine.txt"
nvidia-smi --query-gpu=name,driver_version --format=csv >>"$logs/machine.txt" 2>&1
gpus=$(nvidia-smi --query-gpu=name --format=csv,noheader | wc -l)

model=/tmp/vitrt-vit-base
photos=/tmp/vitrt-photos
data=/tmp/vitrt-shards
python3 scripts/fixtures/make_random_vit.py --out "$model" --preset base >"$logs/make.log" 2>&1 || echo "make_random_vit failed"
python3 scripts/fixtures/make_photos.py --out "$photos" --count 4096 --size 500x375 >>"$logs/make.log" 2>&1 || echo "make_photos failed"
python3 - "$photos" "$data" "$shards" "$per_shard" <<'PY'
import io, json, pathlib, sys, tarfile
photos, out, shards, per = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
files = sorted(photos.glob("*.jpg"))
blobs = [f.read_bytes() for f in files]
out.mkdir(parents=True, exist_ok=True)
n = 0
for s in range(shards):
    with tarfile.open(out / f"{s:05d}.tar", "w") as tar:
        for k in range(per):
            key = f"{s:05d}{k:05d}"
            for name, data in ((f"{key}.jpg", blobs[n % len(blobs)]),
                               (f"{key}.json", json.dumps({"n": n}).encode())):
                info = tarfile.TarInfo(name)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
            n += 1
print(f"{shards} shards of {per} samples")
PY
# The dataset: the tars REPEAT times over, as links.
rm -rf "$data/repeated" && mkdir -p "$data/repeated"
for ((r = 0; r < repeat; r++)); do
    for ((s = 0; s < shards; s++)); do
        ln -s "$data/$(printf '%05d' $s).tar" "$data/repeated/$(printf '%05d' $((r * shards + s))).tar"
    done
done
shards=$((shards * repeat))
pattern="$data/repeated/{00000..$(printf '%05d' $((shards - 1)))}.tar"
images=$((shards * per_shard))

devices_for() { # N -> the --device value
    case $1 in
    1) echo cuda:0 ;;
    "$gpus") echo cuda:all ;;
    *) seq -s, 0 $(($1 - 1)) | sed 's/^/cuda:/' ;;
    esac
}
embed() { # N OUT -> runs embed on N devices into OUT
    "$vitrt" embed --model "$model" --dtype f16 --device "$(devices_for "$1")" --batch-size 256 \
        --normalize --quiet --output-dir "$2" "$pattern"
}
# Kernels compiled and cached once, on every device.
"$vitrt" classify --model "$model" --dtype f16 --device cuda:all --batch-size 256 --batch-invariant \
    --quiet --format jsonl "$photos" >/dev/null 2>"$logs/warm.log" || { echo "warm-up failed:"; tail -5 "$logs/warm.log"; }

counts=(1)
[ "$gpus" -ge 2 ] && counts+=(2)
[ "$gpus" -gt 2 ] && counts+=("$gpus")
for n in "${counts[@]}"; do
    rm -rf "/tmp/out-$n"
    start=$(date +%s.%N)
    embed "$n" "/tmp/out-$n" 2>"$logs/embed-$n.log"
    rc=$?
    end=$(date +%s.%N)
    python3 -c "import sys; n, rc, s, e, i = sys.argv[1:]; w = float(e) - float(s); print(f'embed --output-dir on {n} device(s): exit {rc}; {int(i) / w:.0f} images/s, whole process ({w:.2f} s for {i} images)')" \
        "$n" "$rc" "$start" "$end" "$images"
done
# The PyTorch peer on the same shards, one process per GPU.
for n in "${counts[@]}"; do
    rm -rf "/tmp/torch-$n"
    python3 scripts/bench/torch_shards_embed.py --model "$model" --out "/tmp/torch-$n" --world "$n" \
        --batch-size 256 "$data"/repeated/*.tar >"$logs/torch-$n.json" 2>"$logs/torch-$n.log" ||
        { echo "torch peer on $n GPU(s) failed:"; tail -3 "$logs/torch-$n.log"; }
    echo "torch peer (nvJPEG, SDPA, one process per GPU) on $n GPU(s): $(cat "$logs/torch-$n.json")"
done
for n in "${counts[@]}"; do
    [ "$n" = 1 ] && continue
    # The manifests differ by --device alone.
    if diff -r -q -x manifest.json /tmp/out-1 "/tmp/out-$n" >"$logs/diff-$n.txt"; then
        echo "embed on $n devices: shards byte-identical to one device's"
    else
        echo "embed on $n devices: SHARDS DIFFER from one device's ($(wc -l <"$logs/diff-$n.txt") files)"
    fi
done

# A kill -9 at about half, then the same command.
n=${counts[-1]}
rm -rf /tmp/out-killed
# vitrt itself in the background (not a shell function's subshell), so that the kill reaches it.
"$vitrt" embed --model "$model" --dtype f16 --device "$(devices_for "$n")" --batch-size 256 \
    --normalize --quiet --output-dir /tmp/out-killed "$pattern" 2>"$logs/killed-first.log" &
run=$!
while kill -0 $run 2>/dev/null; do
    written=$(ls /tmp/out-killed/*.npy 2>/dev/null | wc -l)
    [ "$written" -ge $((shards / 2)) ] && break
    sleep 0.05
done
kill -9 $run 2>/dev/null
wait $run 2>/dev/null
before=$(ls /tmp/out-killed/*.npy 2>/dev/null | wc -l)
leftover=$(ls -a /tmp/out-killed | grep -c '\.tmp$')
start=$(date +%s.%N)
embed "$n" /tmp/out-killed 2>"$logs/killed-second.log"
rc=$?
end=$(date +%s.%N)
echo "kill -9 with $before of $shards shards written ($leftover temporary files left); the same command: exit $rc in $(python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.2f}')" "$start" "$end") s; $(grep -E 'already written|doing the other' "$logs/killed-second.log" | head -1)"
if diff -r -q -x manifest.json "/tmp/out-$n" /tmp/out-killed >"$logs/diff-killed.txt"; then
    echo "after the kill and the rerun: byte-identical to the uninterrupted run"
else
    echo "after the kill and the rerun: DIFFERS from the uninterrupted run ($(head -3 "$logs/diff-killed.txt"))"
fi

# Where start-up goes, on one device and on every device (VITRT_STARTUP_TIMES=1).
for n in 1 "${counts[-1]}"; do
    rm -rf /tmp/out-startup
    VITRT_STARTUP_TIMES=1 "$vitrt" embed --model "$model" --dtype f16 --device "$(devices_for "$n")" \
        --batch-size 256 --normalize --quiet --output-dir /tmp/out-startup "$data/00000.tar" \
        2>"$logs/startup-$n.log"
    echo "start-up on $n device(s):"; grep -vE '^$' "$logs/startup-$n.log" | tail -14
done

# The Python module on every device, where its wheel is staged.
if ls "$dir"/vitrt-*.whl >/dev/null 2>&1; then
    rm -rf /tmp/pyv
    python3 -m pip install --quiet --no-deps --target /tmp/pyv "$dir"/vitrt-*.whl >"$logs/pip.log" 2>&1 ||
        { echo "the wheel did not install:"; tail -3 "$logs/pip.log"; }
    PYTHONPATH=/tmp/pyv python3 scripts/gpu/gpu_python_devices.py "$model" "$photos" 2>"$logs/python-devices.log" ||
        { echo "python on every device failed:"; tail -5 "$logs/python-devices.log"; }
fi
