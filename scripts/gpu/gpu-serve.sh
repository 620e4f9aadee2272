#!/usr/bin/env bash
# `vitrt serve` on the GPU machine: the serving targets of the serve issue, in one run.
#
#   scripts/gpu/gpu-serve.sh DIR [LOGS] [COUNT]
#
# DIR holds what `scripts/gpu/gpu-check.sh stage DIR` built (vitrt.bin, release). Makes a random
# ViT-B/16 classifier (scripts/fixtures/make_random_vit.py) and COUNT (default 4096) 500x375 JPEG photos
# (scripts/fixtures/make_photos.py), then, in f16 on the one GPU:
#   1. classify.json, classify-cpu-decode.json: `vitrt classify --batch-size 64` on the photos
#      (--stats), with the default decoding (GPU) and with --decode cpu.
#   2. serve-c256.json: `vitrt serve --max-batch-size 64` (its default decoding: the GPU), one
#      photo per request at concurrency 256 from the compiled client (`vitrt bench serve`).
#      Target: at least 80% of classify's images/s. serve-c1.json: concurrency 1, 1,000
#      requests. Target: p50 at most 5 ms, decoding included.
#   3. invariance.json: /v1/embeddings (base64 float32) for 32 photos alone, then three times
#      while 64 connections keep the batches full of other photos, compared byte for byte,
#      and with `vitrt embed --normalize --batch-invariant` on the same files.
#   4. A photo with a damaged scan: the device marks its batch, which is decoded again on the
#      host (the answer and /metrics' redone count are printed).
#   5. serve-cpu-decode-c256.json: the server with --decode cpu, concurrency 256, for the
#      decoding's share.
#   6. `vitrt parity --batch-invariant` (the server's kernel choices) for the ViT-B at batch
#      16 and 64 in f16 and bf16 against float64 PyTorch references made on the spot.
# The client runs on the same machine and takes cores the server could use. Logs and JSON go
# to LOGS (default $OUT, else benchmarks/raw/gpu-serve, git-ignored).
set -uo pipefail
dir=${1:?usage: scripts/gpu/gpu-serve.sh DIR [LOGS] [COUNT]}
logs=${2:-${OUT:-benchmarks/raw/gpu-serve}}
count=${3:-4096}
mkdir -p "$logs"
export VITRT_CACHE_DIR=${VITRT_CACHE_DIR:-$(mktemp -d)}
vitrt="$dir/vitrt.bin"
nproc >"$logs/machine.txt"
nvidia-smi --query-gpu=name,driver_version --format=csv >>"$logs/machine.txt" 2>&1

model=/tmp/vitrt-vit-base
photos=/tmp/vitrt-photos
python3 scripts/fixtures/make_random_vit.py --out "$model" --preset base >"$logs/make.log" 2>&1 || echo "make_random_vit failed"
python3 scripts/fixtures/make_photos.py --out "$photos" --count "$count" --size 500x375 >>"$logs/make.log" 2>&1 || echo "make_photos failed"

# 1. classify on the same files: once to compile and cache the kernels, then measured.
"$vitrt" classify --model "$model" --dtype f16 --batch-size 64 --quiet --format jsonl "$photos" >/dev/null 2>"$logs/classify-warm.log"
for decode in default cpu; do
    name=classify; flags=()
    if [ "$decode" = cpu ]; then name=classify-cpu-decode; flags=(--decode cpu); fi
    "$vitrt" classify --model "$model" --dtype f16 --batch-size 64 --quiet --format jsonl ${flags[@]+"${flags[@]}"} \
        --stats "$logs/$name.json" "$photos" >/dev/null 2>"$logs/$name.log"
    echo "$name: exit $? $(python3 -c "import json,sys; print(round(json.load(open(sys.argv[1]))['images_per_s']), 'images/s')" "$logs/$name.json" 2>/dev/null)"
done

# 2. The server, decoding on the GPU.
port=18080
start_server() {
    "$vitrt" serve --model "$model" --dtype f16 --port $port --max-batch-size 64 --max-delay-ms 2 \
        --max-queue 4096 "$@" 2>>"$logs/serve.log" &
    server=$!
    for _ in $(seq 600); do
        curl -sf "http://127.0.0.1:$port/health" >/dev/null && return 0
        sleep 0.2
    done
    echo "the server did not become ready"; tail "$logs/serve.log"; kill $server; return 1
}
load() { # NAME CONCURRENCY REQUESTS
    "$vitrt" bench serve --url "127.0.0.1:$port" --concurrency "$2" --requests "$3" \
        --json "$logs/$1.json" "$photos" >"$logs/$1.log" 2>&1
    echo "$1: $(cat "$logs/$1.log")"
}
start_server || exit 1
# A short run first: graphs of the batch sizes the load makes are captured on first use.
"$vitrt" bench serve --url "127.0.0.1:$port" --concurrency 256 --requests 4096 "$photos" >/dev/null 2>&1
load serve-c256 256 $((count * 5))
load serve-c1 1 1000
curl -s "http://127.0.0.1:$port/metrics" >"$logs/metrics-after-load.txt"
python3 - "$logs" <<'PY'
import json, sys
logs = sys.argv[1]
classify = json.load(open(f"{logs}/classify.json"))["images_per_s"]
cpu_decode = json.load(open(f"{logs}/classify-cpu-decode.json"))["images_per_s"]
c256 = json.load(open(f"{logs}/serve-c256.json"))
c1 = json.load(open(f"{logs}/serve-c1.json"))
rate = c256["images_per_s_answered_200"]
print(f"serve at concurrency 256: {rate:.0f} images/s ({c256['statuses']}), "
      f"{rate / classify:.2f}x classify ({classify:.0f}), {rate / cpu_decode:.2f}x classify --decode cpu "
      f"({cpu_decode:.0f}); p50 {c256['latency_ms']['p50']:.1f} ms, p99 {c256['latency_ms']['p99']:.1f} ms")
print(f"serve at concurrency 1: p50 {c1['latency_ms']['p50']:.2f} ms, p99 {c1['latency_ms']['p99']:.2f} ms ({c1['statuses']})")
PY
grep -E "^vitrt_(images_decoded_on_device|images_redone_on_host|images)_total" "$logs/metrics-after-load.txt"

# 3. Batch invariance through the server, and against vitrt embed.
"$vitrt" embed --model "$model" --dtype f16 --normalize --batch-invariant --quiet -o - "$photos" \
    >"$logs/embed-reference.jsonl" 2>"$logs/embed-reference.log"
python3 scripts/bench/bench_serve.py invariance --url "http://127.0.0.1:$port" --images "$photos" \
    --count 32 --reference "$logs/embed-reference.jsonl" --json "$logs/invariance.json" >"$logs/invariance.log"
python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print('invariance:', len(r['differ_under_load']), 'of', r['images'], 'differ under load,', len(r.get('differ_from_cli', [])), 'differ from vitrt embed')" "$logs/invariance.json"
rm -f "$logs/embed-reference.jsonl" # 8,192 vectors: too large to bring back

# 4. A damaged scan: 32 bytes from the middle of the entropy-coded data replaced by stuffed
# 0xFF bytes (a code no Huffman table holds), sent while other photos keep the batches full.
python3 - "$photos" /tmp/damaged.jpg <<'PY'
import sys, pathlib
photo = sorted(pathlib.Path(sys.argv[1]).glob("*.jpg"))[0].read_bytes()
sos = photo.index(b"\xff\xda")
start = sos + 2 + int.from_bytes(photo[sos + 2:sos + 4], "big")
middle = start + (len(photo) - 2 - start) // 2
damaged = photo[:middle] + b"\xff\x00" * 32 + photo[middle + 64:]
pathlib.Path(sys.argv[2]).write_bytes(damaged)
PY
"$vitrt" bench serve --url "127.0.0.1:$port" --concurrency 64 --requests 2048 "$photos" >/dev/null 2>&1 &
background=$!
sleep 0.3
status=$(curl -s -o "$logs/damaged-answer.json" -w '%{http_code}' --data-binary @/tmp/damaged.jpg \
    -H 'Content-Type: image/jpeg' "http://127.0.0.1:$port/v1/classify")
wait $background
echo "a damaged scan: HTTP $status $(head -c 200 "$logs/damaged-answer.json"); $(curl -s "http://127.0.0.1:$port/metrics" | grep -E '^vitrt_images_redone_on_host_total')"
kill -TERM $server
wait $server
echo "serve: exit $? after SIGTERM (0 expected)"

# 5. The same server decoding on the host.
start_server --decode cpu || exit 1
"$vitrt" bench serve --url "127.0.0.1:$port" --concurrency 256 --requests 4096 "$photos" >/dev/null 2>&1
load serve-cpu-decode-c256 256 $((count * 3))
kill -TERM $server
wait $server

# 6. Parity of the server's kernel choices (--batch-invariant) against float64 PyTorch, with
# PyTorch's own bf16 error on the same inputs (torch-bf16.json, which `vitrt parity` holds bf16
# to) beside each reference.
for batch in 16 64; do
    ref="$model/b$batch"
    mkdir -p "$ref"
    {
        python3 scripts/fixtures/reference.py --model "$model" --out "$ref/reference.safetensors" \
            --random-batch "$batch" --seed 1 --dtype float64 &&
            python3 scripts/fixtures/reference.py --model "$model" --out "$ref/torch-bf16.safetensors" \
                --random-batch "$batch" --seed 1 --dtype bfloat16 --device cuda &&
            python3 - "$ref" <<'PY'
import json, sys
from safetensors.torch import load_file
ref = sys.argv[1]
want, got = load_file(f"{ref}/reference.safetensors"), load_file(f"{ref}/torch-bf16.safetensors")
errors = {n: float((got[n].float() - w).abs().max() / w.abs().max().clamp_min(1e-30))
          for n, w in want.items() if n != "pixel_values"}
json.dump(errors, open(f"{ref}/torch-bf16.json", "w"), indent=1, sort_keys=True)
PY
    } >>"$logs/parity-invariant.log" 2>&1 || { echo "parity: could not make the batch-$batch references"; continue; }
    for dtype in f16 bf16; do
        "$vitrt" parity --model "$model" --reference "$ref/reference.safetensors" --device cuda \
            --dtype "$dtype" --batch-invariant >>"$logs/parity-invariant.log" 2>&1
        rc=$?
        echo "parity --batch-invariant batch $batch $dtype: exit $rc, $(grep -oE 'worst relative error [^)]*' "$logs/parity-invariant.log" | tail -1)$([ "$dtype" = bf16 ] && python3 -c "import json,sys; print('; PyTorch bf16 worst', '%.3e' % max(json.load(open(sys.argv[1])).values()))" "$ref/torch-bf16.json")"
    done
done
