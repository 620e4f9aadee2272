#!/usr/bin/env bash
# JPEG decoding on the GPU, on the GPU machine: the image kernels against their twins, the
# whole job's outputs with --decode gpu against --decode cpu, and the whole-job benchmark.
#
#   scripts/gpu/gpu-decode.sh DIR [LOGS] [COUNT]
#
# DIR holds what `scripts/gpu/gpu-check.sh stage DIR` built. Runs the image kernels' GPU tests
# (model-jpeg_gpu); makes a random ViT-B/16 and COUNT (default 16384) 500x375 JPEG photos;
# classifies the image fixtures and the first 2048 photos with --decode gpu and --decode cpu
# and compares the JSON Lines byte for byte; then scripts/bench/bench_pipeline.py at batch 256 in f16
# (vitrt with each decoder, the forward pass alone, PyTorch with nvJPEG and with a DataLoader);
# with LARGE_COUNT set, the same for that many 12-megapixel photos at batch 64, without PyTorch.
# Logs and pipeline.json go to LOGS (default $OUT, else benchmarks/raw/gpu-decode, git-ignored).
set -uo pipefail
dir=${1:?usage: scripts/gpu/gpu-decode.sh DIR [LOGS] [COUNT]}
logs=${2:-${OUT:-benchmarks/raw/gpu-decode}}
count=${3:-16384}
mkdir -p "$logs"
export VITRT_REPO_ROOT=$PWD
export VITRT_CACHE_DIR=${VITRT_CACHE_DIR:-$(mktemp -d)}
nproc >"$logs/machine.txt"
nvidia-smi --query-gpu=name,driver_version --format=csv >>"$logs/machine.txt" 2>&1
# The image kernels against their twins; the byte path's tests, which the decoding joins.
for test in model-jpeg_gpu model-pixel_bytes_gpu model-graph_replay_gpu; do
    [ -x "$dir/$test" ] || continue
    timeout 300 "$dir/$test" --ignored --test-threads=1 >"$logs/$test.log" 2>&1
    echo "$test: exit $? $(grep -E '^test result' "$logs/$test.log" | tail -1)"
done
model=/tmp/vitrt-vit-base
photos=/tmp/vitrt-photos
python3 scripts/fixtures/make_random_vit.py --out "$model" --preset base >"$logs/make.log" 2>&1 || echo "make_random_vit failed"
python3 scripts/fixtures/make_photos.py --out "$photos" --count "$count" --size 500x375 >>"$logs/make.log" 2>&1 || echo "make_photos failed"
tail -1 "$logs/make.log"
# The same outputs from either decoder: the fixtures (EXIF orientations, grey, CMYK and
# PNG/WebP fall back), photos, and Pillow's test JPEGs when staged (some refused by both).
find tests/fixtures/images -type f \( -name '*.jpg' -o -name '*.png' -o -name '*.webp' \) | sort >/tmp/fixtures.txt
ls "$photos"/*.jpg | head -2048 >/tmp/photos.txt
sets="fixtures photos"
# Pillow's test JPEGs, when staged beside the binaries (DIR/pil-jpegs): odd real-world files.
if [ -d "$dir/pil-jpegs" ]; then
    ls "$dir"/pil-jpegs/* >/tmp/pil.txt
    sets="$sets pil"
fi
for set in $sets; do
    for decode in gpu gpu-idct cpu; do
        "$dir/vitrt.bin" classify --model "$model" --device cuda --dtype f16 --format jsonl --quiet \
            --files-from /tmp/$set.txt --decode $decode --stats "$logs/stats-$set-$decode.json" \
            >"$logs/classify-$set-$decode.jsonl" 2>"$logs/classify-$set-$decode.err"
        echo "classify $set --decode $decode: exit $? ($(wc -l <"$logs/classify-$set-$decode.jsonl") results)"
    done
    if cmp -s "$logs/classify-$set-gpu.jsonl" "$logs/classify-$set-cpu.jsonl" &&
        cmp -s "$logs/classify-$set-gpu-idct.jsonl" "$logs/classify-$set-cpu.jsonl"; then
        echo "classify $set: --decode gpu, gpu-idct and cpu give identical results"
    else
        echo "classify $set: RESULTS DIFFER between --decode gpu, gpu-idct and cpu"
    fi
    python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print('  decoded on the device:', d.get('decoded_on_device'), '(Huffman too:', d.get('entropy_decoded_on_device'), 'redone on the host:', d.get('redone_on_host'), ') on the host:', d.get('decoded_on_host'))" "$logs/stats-$set-gpu.json"
done
python3 scripts/bench/bench_pipeline.py --vitrt "$dir/vitrt.bin" --model "$model" --images "$photos" \
    --batch-size 256 --workers-sweep "${WORKERS_SWEEP-12,14}" --json "$logs/pipeline.json" 2>&1 |
    tee "$logs/bench-pipeline.log"
# 12-megapixel photos (LARGE_COUNT of 4000x3000, when set): each decoder at batch 64.
if [ -n "${LARGE_COUNT:-}" ]; then
    large=/tmp/vitrt-photos-12mp
    python3 scripts/fixtures/make_photos.py --out "$large" --count "$LARGE_COUNT" --size 4000x3000 >>"$logs/make.log" 2>&1 ||
        echo "make_photos (12 MP) failed"
    python3 scripts/bench/bench_pipeline.py --vitrt "$dir/vitrt.bin" --model "$model" --images "$large" \
        --batch-size 64 --workers-sweep "" --no-torch --json "$logs/pipeline-12mp.json" 2>&1 |
        tee "$logs/bench-pipeline-12mp.log"
fi
# Where the batches wait, with each decoder (from the runs' --stats).
python3 - "$logs/pipeline.json" <<'PY'
import json, subprocess, sys, tempfile
doc = json.load(open(sys.argv[1]))
for key in ["vitrt", "vitrt_gpu_idct", "vitrt_host_decode"]:
    if key in doc:
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
            json.dump(doc[key], f)
        print(f"== {key}")
        subprocess.run([sys.executable, "scripts/bench/pipeline_gaps.py", f.name])
PY
