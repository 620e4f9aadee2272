#!/usr/bin/env bash
# `vitrt serve` beside michaelfeil/infinity (`infinity_emb`, torch engine) on the same CLIP
# ViT-B/32 checkpoint, in one run on the GPU machine: the serve issue's peer target (at least
# 3x infinity's images/s at an equal or better p99).
#
#   scripts/gpu/gpu-serve-peers.sh DIR [LOGS] [COUNT]
#
# DIR holds vitrt.bin (release; `scripts/gpu/gpu-check.sh stage DIR` builds it). infinity_emb
# 0.0.78 and the packages it needs beyond the machine's come as wheels in WHEELS (default
# .whl, git-ignored; carry it): its server (FastAPI 0.115, Starlette, pydantic 2.11, uvicorn
# 0.32 with httptools, orjson, prometheus-fastapi-instrumentator, typer 0.12 and click 8.1 as
# it pins them) and transformers 4.57.6 with the huggingface_hub 0.36 and tokenizers 0.22 that
# it requires: under the machine's transformers 5, CLIPModel.get_image_features returns a
# model output where infinity expects a tensor, and its start fails. They are installed into
# a folder that only infinity's process reads (PYTHONPATH); it runs on the machine's torch,
# PIL and numpy, and nothing else sees the wheels. Makes a CLIP
# ViT-B/32 with random weights (scripts/fixtures/make_random_dual_tower.py) and COUNT (default 4096)
# 500x375 JPEG photos (scripts/fixtures/make_photos.py), then serves it with each server in turn, on the
# one GPU, in f16, and loads each with the same compiled client, `vitrt bench serve
# --embeddings`: one photo a request as an OpenAI-style embeddings request (a data URI,
# base64 output, "modality": "image" as infinity wants it; vitrt ignores that field):
#   1. vitrt-c256.json, vitrt-c1.json: `vitrt serve --max-batch-size 64 --max-delay-ms 2`,
#      warmed with a short run, then 2xCOUNT requests at concurrency 256 and 1,000 at
#      concurrency 1, on /v1/embeddings.
#   2. infinity-c256.json, infinity-c1.json: `infinity_emb v2 --engine torch --device cuda
#      --dtype float16 --batch-size 64` (INFINITY_BATCH_SIZE), the same loads on /embeddings.
#      Its batch size is vitrt's --max-batch-size: one batch of 64 CLIP B/32 images is a few
#      milliseconds on the GPU, far below what its Python preprocessing takes for them, so a
#      larger batch would only lengthen the wait; 64 is also twice its default of 32.
#      Telemetry is off (DO_NOT_TRACK=1, INFINITY_ANONYMOUS_USAGE_STATS=0) and the hub is
#      never asked (HF_HUB_OFFLINE=1: it loads the local folder). Its start is bounded
#      (INFINITY_START_S, default 300 s), and each load by --time-limit, so a slow or broken
#      infinity costs minutes, not the call, and vitrt's figures are reported whatever it does.
#   3. A summary: images/s, p50, p99 of each, and the ratios.
# The client runs on the same machine as each server and takes some of its cores, the same for
# both. The JSON files and gpu-serve-peers-logs.tgz (every log) go to LOGS (default $OUT, else
# benchmarks/raw/gpu-serve-peers, git-ignored). PEERS_DEVICE=cpu runs the same steps on the CPU in f32 at concurrency
# PEERS_CONCURRENCY (a dry run of the script where there is no GPU; the figures mean nothing).
set -uo pipefail
dir=${1:?usage: scripts/gpu/gpu-serve-peers.sh DIR [LOGS] [COUNT]}
logs=${2:-${OUT:-benchmarks/raw/gpu-serve-peers}}
count=${3:-4096}
wheels=${WHEELS:-.whl}
device=${PEERS_DEVICE:-cuda}
high=${PEERS_CONCURRENCY:-256}
batch=${INFINITY_BATCH_SIZE:-64}
start_limit=${INFINITY_START_S:-300}
mkdir -p "$logs"
export VITRT_CACHE_DIR=${VITRT_CACHE_DIR:-$(mktemp -d)}
vitrt="$dir/vitrt.bin"
nproc >"$logs/machine.txt"
nvidia-smi --query-gpu=name,driver_version --format=csv >>"$logs/machine.txt" 2>&1
started=$SECONDS

if [ "$device" = cuda ]; then
    vitrt_flags=(--device cuda --dtype f16)
    infinity_flags=(--device cuda --dtype float16)
else
    vitrt_flags=(--device cpu --dtype f32)
    infinity_flags=(--device cpu --dtype float32)
fi

models=/tmp/vitrt-peers-models
model=$models/clip-vit-base-patch32
photos=/tmp/vitrt-peers-photos
python3 scripts/fixtures/make_random_dual_tower.py --out "$models" clip-vit-base-patch32 >"$logs/make.log" 2>&1 ||
    { echo "make_random_dual_tower failed"; tail "$logs/make.log"; exit 1; }
python3 scripts/fixtures/make_photos.py --out "$photos" --count "$count" --size 500x375 >>"$logs/make.log" 2>&1 ||
    { echo "make_photos failed"; tail "$logs/make.log"; exit 1; }
echo "model and $count photos made in $((SECONDS - started)) s"

# Waits until GET $1/health answers 200 while process $2 lives, at most $3 seconds.
wait_ready() {
    local url=$1 pid=$2 limit=$3 t0=$SECONDS
    while [ $((SECONDS - t0)) -lt "$limit" ]; do
        curl -sf "$url/health" >/dev/null && return 0
        kill -0 "$pid" 2>/dev/null || return 1
        sleep 0.5
    done
    return 1
}

# The same loads for each server: NAME PORT ROUTE. A short warm-up run first (vitrt captures
# a graph per batch size on first use; infinity's torch allocator grows), then the two measured.
measure() {
    local name=$1 port=$2 route=$3
    local load=("$vitrt" bench serve --url "127.0.0.1:$port" --path "$route" --embeddings clip)
    timeout 200 "${load[@]}" --concurrency "$high" --requests $((count / 2)) --time-limit 30 \
        "$photos" >"$logs/$name-warm.log" 2>&1
    timeout 200 "${load[@]}" --concurrency "$high" --requests $((count * 2)) --time-limit 75 \
        --json "$logs/$name-c256.json" "$photos" >"$logs/$name-c256.log" 2>&1
    echo "$name at concurrency $high: $(cat "$logs/$name-c256.log")"
    timeout 120 "${load[@]}" --concurrency 1 --threads 1 --requests 1000 --time-limit 40 \
        --json "$logs/$name-c1.json" "$photos" >"$logs/$name-c1.log" 2>&1
    echo "$name at concurrency 1: $(cat "$logs/$name-c1.log")"
}

# Stops process $1 with SIGTERM, then SIGKILL after 20 s.
stop() {
    local pid=$1
    kill -TERM "$pid" 2>/dev/null
    for _ in $(seq 40); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.5
    done
    kill -KILL "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
}

# 1. vitrt serve.
port=18080
t0=$SECONDS
"$vitrt" serve --model "$model" "${vitrt_flags[@]}" --port $port --max-batch-size 64 --max-delay-ms 2 \
    --max-queue 4096 2>"$logs/vitrt-serve.log" &
server=$!
if wait_ready "http://127.0.0.1:$port" $server 300; then
    echo "vitrt serve ready in $((SECONDS - t0)) s"
    measure vitrt $port /v1/embeddings
else
    echo "vitrt serve did not become ready"
    tail "$logs/vitrt-serve.log"
fi
stop $server

# 2. infinity_emb, from the wheels, on the machine's torch and transformers.
site=/tmp/vitrt-peers-site
port=17997
infinity_ok=0
if python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site" \
    "$wheels"/*.whl >"$logs/infinity-install.log" 2>&1; then
    PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}" python3 -c '
import importlib.metadata as m
for name in ("infinity_emb", "torch", "transformers", "fastapi", "pydantic", "uvicorn", "pillow", "numpy"):
    print(name, m.version(name))' >"$logs/infinity-versions.txt" 2>&1
    t0=$SECONDS
    PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}" DO_NOT_TRACK=1 INFINITY_ANONYMOUS_USAGE_STATS=0 \
        HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_HUB_DISABLE_TELEMETRY=1 \
        python3 -c 'import sys; from infinity_emb.cli import cli; sys.argv[0] = "infinity_emb"; cli()' \
        v2 --model-id "$model" --served-model-name clip --engine torch "${infinity_flags[@]}" \
        --batch-size "$batch" --host 127.0.0.1 --port $port --log-level warning \
        >"$logs/infinity-serve.log" 2>&1 &
    server=$!
    if wait_ready "http://127.0.0.1:$port" $server "$start_limit"; then
        echo "infinity_emb ready in $((SECONDS - t0)) s (batch size $batch)"
        infinity_ok=1
        measure infinity $port /embeddings
    else
        echo "infinity_emb did not become ready in $start_limit s"
        tail -20 "$logs/infinity-serve.log"
    fi
    stop $server
else
    echo "installing infinity_emb's wheels failed"
    tail "$logs/infinity-install.log"
fi

# 3. The summary.
python3 - "$logs" "$infinity_ok" <<'EOF'
import json, sys
logs, infinity_ok = sys.argv[1], sys.argv[2] == "1"
figures = {}
for name in ("vitrt", "infinity"):
    for load in ("c256", "c1"):
        try:
            figures[name, load] = json.load(open(f"{logs}/{name}-{load}.json"))
        except (OSError, ValueError):
            pass
print(f"{'':10} {'load':6} {'images/s':>9} {'p50 ms':>8} {'p99 ms':>8}  statuses")
for (name, load), f in figures.items():
    print(f"{name:10} {'c' + str(f['concurrency']):6} {f['images_per_s_answered_200']:9.0f} {f['latency_ms']['p50']:8.2f} "
          f"{f['latency_ms']['p99']:8.2f}  {f['statuses']} ({f['requests']} of {f['requests_asked']} sent)")
for load in ("c256", "c1"):
    ours, theirs = figures.get(("vitrt", load)), figures.get(("infinity", load))
    if ours and theirs and theirs["images_per_s_answered_200"] > 0:
        ratio = ours["images_per_s_answered_200"] / theirs["images_per_s_answered_200"]
        p99 = (ours["latency_ms"]["p99"], theirs["latency_ms"]["p99"])
        verdict = "met" if ratio >= 3 and p99[0] <= p99[1] else "NOT met"
        print(f"c{ours['concurrency']}: vitrt {ratio:.2f}x infinity's images/s, p99 {p99[0]:.2f} ms against {p99[1]:.2f} ms"
              + (f"; target (3x at an equal or better p99) {verdict}" if load == "c256" else ""))
    elif not infinity_ok:
        print(f"{load}: no infinity figures (it did not start: see infinity-serve.log)")
EOF
echo "gpu-serve-peers: $((SECONDS - started)) s in all"
# The device brings back at most 8 files from $OUT: the logs go into one archive, beside the
# four JSON files.
(cd "$logs" && tar czf gpu-serve-peers-logs.tgz --remove-files -- *.log *.txt 2>/dev/null)
