#!/usr/bin/env bash
# `vitrt serve` on the GPU machine: the serving targets of the serve issue, in one run.
#
#   scripts/gpu-serve.sh DIR [LOGS] [COUNT]
#
# DIR holds what `scripts/gpu-check.sh stage DIR` built (vitrt.bin, release). Makes a random
# ViT-B/16 classifier (scripts/make_random_vit.py) and COUNT (default 4096) 500x375 JPEG photos
# (scripts/make_photos.py), then, in f16 on the one GPU:
#   1. classify.json, classify-cpu-decode.json: `vitrt classify --batch-size 64` on the photos
#      (--stats), with the default decoding (GPU) and with --decode cpu (the server's).
#   2. serve-c256.json: `vitrt serve --max-batch-size 64`, one photo per request at concurrency
#      256 (scripts/bench_serve.py load, keep-alive connections over 8 client processes).
#      Target: at least 80% of classify's images/s.
#   3. serve-c1.json: concurrency 1, 1,000 requests. Target: p50 at most 5 ms, decoding
#      included. serve-c256-compiled.json: concurrency 256 again from `vitrt bench serve`.
#   4. invariance.json: /v1/embeddings (base64 float32) for 32 photos alone, then three times
#      while 64 connections keep the batches full of other photos, compared byte for byte,
#      and with `vitrt embed --normalize --batch-invariant` on the same files: the server
#      chooses its kernels' programs whatever the batch size (benchmarks/NOTES.md, 2026-11-27
#      "Batch invariance on the GPU"); the figure says how many images differ.
#   5. classify --batch-invariant at batch 1 and 64 on 64 photos (identical results expected),
#      and bench model at batch sizes 1, 8, 64 and 256 with and without --batch-invariant.
# The client runs on the same machine and takes cores the server's decoders could use: its CPU
# time is in serve-c256.json. Logs and JSON go to LOGS (default $OUT, else
# benchmarks/raw/gpu-serve, git-ignored).
set -uo pipefail
dir=${1:?usage: scripts/gpu-serve.sh DIR [LOGS] [COUNT]}
logs=${2:-${OUT:-benchmarks/raw/gpu-serve}}
count=${3:-4096}
mkdir -p "$logs"
export VITRT_CACHE_DIR=${VITRT_CACHE_DIR:-$(mktemp -d)}
vitrt="$dir/vitrt.bin"
nproc >"$logs/machine.txt"
nvidia-smi --query-gpu=name,driver_version --format=csv >>"$logs/machine.txt" 2>&1

model=/tmp/vitrt-vit-base
photos=/tmp/vitrt-photos
python3 scripts/make_random_vit.py --out "$model" --preset base >"$logs/make.log" 2>&1 || echo "make_random_vit failed"
python3 scripts/make_photos.py --out "$photos" --count "$count" --size 500x375 >>"$logs/make.log" 2>&1 || echo "make_photos failed"

# 1. classify on the same files: once to compile and cache the kernels, then measured.
"$vitrt" classify --model "$model" --dtype f16 --batch-size 64 --quiet --format jsonl "$photos" >/dev/null 2>"$logs/classify-warm.log"
for decode in default cpu; do
    name=classify; flags=()
    if [ "$decode" = cpu ]; then name=classify-cpu-decode; flags=(--decode cpu); fi
    "$vitrt" classify --model "$model" --dtype f16 --batch-size 64 --quiet --format jsonl ${flags[@]+"${flags[@]}"} \
        --stats "$logs/$name.json" "$photos" >/dev/null 2>"$logs/$name.log"
    echo "$name: exit $? $(python3 -c "import json,sys; print(round(json.load(open(sys.argv[1]))['images_per_s']), 'images/s')" "$logs/$name.json" 2>/dev/null)"
done

# 2 and 3. The server.
port=18080
"$vitrt" serve --model "$model" --dtype f16 --port $port --max-batch-size 64 --max-delay-ms 2 \
    --max-queue 4096 2>"$logs/serve.log" &
server=$!
for _ in $(seq 600); do
    curl -sf "http://127.0.0.1:$port/health" >/dev/null && break
    sleep 0.2
done
curl -sf "http://127.0.0.1:$port/health" >/dev/null || { echo "the server did not become ready"; tail "$logs/serve.log"; kill $server; exit 1; }
# A short run first: graphs of the batch sizes the load makes are captured on first use.
python3 scripts/bench_serve.py load --url "http://127.0.0.1:$port" --images "$photos" \
    --concurrency 256 --requests 4096 >/dev/null
python3 scripts/bench_serve.py load --url "http://127.0.0.1:$port" --images "$photos" \
    --concurrency 256 --requests $((count * 5)) --json "$logs/serve-c256.json" >"$logs/serve-c256.log"
python3 scripts/bench_serve.py load --url "http://127.0.0.1:$port" --images "$photos" \
    --concurrency 1 --processes 1 --requests 1000 --json "$logs/serve-c1.json" >"$logs/serve-c1.log"
# The same load from the compiled client, which keeps all 256 requests in flight (the Python
# one kept 13-34: benchmarks/NOTES.md, 2026-11-27 "why vitrt serve measured 0.49x classify").
"$vitrt" bench serve --url "127.0.0.1:$port" --concurrency 256 --requests $((count * 5)) \
    --json "$logs/serve-c256-compiled.json" "$photos" >"$logs/serve-c256-compiled.log" 2>&1
echo "serve at concurrency 256, compiled client: $(cat "$logs/serve-c256-compiled.log")"
curl -s "http://127.0.0.1:$port/metrics" >"$logs/metrics-after-load.txt"
python3 - "$logs" <<'EOF'
import json, sys
logs = sys.argv[1]
classify = json.load(open(f"{logs}/classify-cpu-decode.json"))["images_per_s"]
gpu_decode = json.load(open(f"{logs}/classify.json"))["images_per_s"]
c256 = json.load(open(f"{logs}/serve-c256.json"))
c1 = json.load(open(f"{logs}/serve-c1.json"))
print(f"serve at concurrency 256: {c256['images_per_s_answered_200']:.0f} images/s "
      f"({c256['statuses']}), {c256['images_per_s_answered_200'] / classify:.2f}x classify --decode cpu "
      f"({classify:.0f}), {c256['images_per_s_answered_200'] / gpu_decode:.2f}x classify ({gpu_decode:.0f}); "
      f"p50 {c256['latency_ms']['p50']:.1f} ms, p99 {c256['latency_ms']['p99']:.1f} ms; "
      f"client CPU {c256['client_cpu_s']:.0f} s")
print(f"serve at concurrency 1: p50 {c1['latency_ms']['p50']:.2f} ms, p99 {c1['latency_ms']['p99']:.2f} ms ({c1['statuses']})")
EOF

# 4. Batch invariance through the server, and against vitrt embed.
"$vitrt" embed --model "$model" --dtype f16 --normalize --batch-invariant --quiet -o - "$photos" \
    >"$logs/embed-reference.jsonl" 2>"$logs/embed-reference.log"
python3 scripts/bench_serve.py invariance --url "http://127.0.0.1:$port" --images "$photos" \
    --count 32 --reference "$logs/embed-reference.jsonl" --json "$logs/invariance.json" >"$logs/invariance.log"
python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print('invariance:', len(r['differ_under_load']), 'of', r['images'], 'differ under load,', len(r.get('differ_from_cli', [])), 'differ from vitrt embed')" "$logs/invariance.json"

kill -TERM $server
wait $server
echo "serve: exit $? after SIGTERM (0 expected)"

# 5. The CLI's own invariance and its cost: 64 photos classified at batch 1 and batch 64
# with --batch-invariant (identical JSON Lines expected), and the forward pass at batch sizes
# 1, 8, 64 and 256 with and without it.
ls "$photos"/*.jpg | head -64 >/tmp/invariance-64.txt
for b in 1 64; do
    "$vitrt" classify --model "$model" --dtype f16 --batch-invariant --batch-size $b --format jsonl \
        --quiet --files-from /tmp/invariance-64.txt >"$logs/classify-invariant-b$b.jsonl" 2>/dev/null
done
if cmp -s "$logs/classify-invariant-b1.jsonl" "$logs/classify-invariant-b64.jsonl"; then
    echo "classify --batch-invariant: batch 1 and batch 64 give identical results"
else
    echo "classify --batch-invariant: RESULTS DIFFER between batch 1 and batch 64"
fi
for mode in "" --batch-invariant; do
    "$vitrt" bench model --model "$model" --dtype f16 $mode --batch-sizes 1,8,64,256 \
        --json "$logs/bench-model${mode:+-invariant}.json" >"$logs/bench-model${mode:+-invariant}.log" 2>&1
done
python3 - "$logs/bench-model.json" "$logs/bench-model-invariant.json" <<'PY'
import json, sys
rows = [{r["batch"]: r["median_ms"] for r in json.load(open(f))["models"]} for f in sys.argv[1:]]
for batch in sorted(rows[0]):
    print(f"forward at batch {batch}: {rows[0][batch]:.3f} ms, --batch-invariant {rows[1].get(batch, float('nan')):.3f} ms")
PY
