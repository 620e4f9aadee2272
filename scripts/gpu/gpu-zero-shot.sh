#!/usr/bin/env bash
# Zero-shot at real size on the GPU machine, after scripts/gpu/gpu-check.sh stage DIR (run from the
# repository root):
#
#   scripts/gpu/gpu-zero-shot.sh DIR LOGS [PRESET...]
#
# 1. For each preset of scripts/fixtures/make_random_dual_tower.py (default: CLIP ViT-B/32, ViT-L/14,
#    SigLIP base/16): a dual tower with random weights, its float64 text and image references
#    and PyTorch's own bf16 errors (on the GPU), made on the spot; then the text towers and the
#    image-text scores against them in f32, f16 and bf16, fused and unfused
#    (DIR/model-text_parity_gpu with VITRT_TEXT_MODELS).
# 2. The whole job, files on disk to results, for the first CLIP and the SigLIP preset in f16:
#    `vitrt embed` (the vision tower alone) against `vitrt zero-shot` with 10 and with 1,000
#    labels on the same folder of photos (scripts/fixtures/make_photos.py), batch 256, each run twice
#    with the kernel cache warm, the second timed (wall seconds, images per second).
# LOGS gets the logs and summary.txt; nothing is written into benchmarks/.
set -uo pipefail
dir=${1:?usage: gpu-zero-shot.sh DIR LOGS [PRESET...]}
logs=${2:?usage: gpu-zero-shot.sh DIR LOGS [PRESET...]}
shift 2
presets=("$@")
[ ${#presets[@]} -eq 0 ] && presets=(clip-vit-base-patch32 clip-vit-large-patch14 siglip-base-patch16-224)
mkdir -p "$logs"
export VITRT_CACHE_DIR=${VITRT_CACHE_DIR:-/tmp/vitrt-cache} VITRT_REPO_ROOT=$PWD
root=/tmp/vitrt-dual
summary=()
failed=0

start=$SECONDS
if python3 scripts/fixtures/make_random_dual_tower.py --out "$root" "${presets[@]}" >"$logs/make.log" 2>&1; then
    summary+=("made ${presets[*]} in $((SECONDS - start))s")
else
    summary+=("could not make the models (see make.log)")
    printf '%s\n' "${summary[@]}" | tee "$logs/summary.txt"
    exit 1
fi
VITRT_TEXT_MODELS=$(printf "$root/%s:" "${presets[@]}")
export VITRT_TEXT_MODELS=${VITRT_TEXT_MODELS%:}
start=$SECONDS
timeout 400 "$dir/model-text_parity_gpu" --ignored --nocapture >"$logs/text-parity.log" 2>&1
rc=$?
[ $rc -ne 0 ] && failed=1
summary+=("$(printf 'text parity (fixtures + real sizes): exit %s in %ss' "$rc" "$((SECONDS - start))")")

photos=/tmp/vitrt-photos
python3 scripts/fixtures/make_photos.py --out "$photos" --count "${ZERO_SHOT_PHOTOS:-2048}" >"$logs/photos.log" 2>&1
images=$(find "$photos" -type f | wc -l)
python3 -c "print('\n'.join(f'thing number {i}' for i in range(1000)))" >"$logs/labels-1000.txt"

# Runs a command twice (the first warms the kernel cache and the page cache) and prints the
# second run's wall seconds.
timed() {
    local log=$1
    shift
    "$@" >/dev/null 2>>"$log" || return 1
    local t0 t1
    t0=$(date +%s.%N)
    "$@" >/dev/null 2>>"$log" || return 1
    t1=$(date +%s.%N)
    python3 -c "print(f'{$t1 - $t0:.2f}')"
}

for preset in "${presets[@]}"; do
    case "$preset" in clip-vit-large-patch14) continue ;; esac
    model=$root/$preset
    log="$logs/speed-$preset.log"
    common=(--model "$model" --device cuda --dtype f16 --batch-size 256 --quiet)
    embed=$(timed "$log" "$dir/vitrt.bin" embed "${common[@]}" "$photos" --output /tmp/vitrt-embeds.npy --force)
    ten=$(timed "$log" "$dir/vitrt.bin" zero-shot "${common[@]}" --labels "$(python3 -c "print(','.join(f'thing {i}' for i in range(10)))")" --format jsonl "$photos")
    thousand=$(timed "$log" "$dir/vitrt.bin" zero-shot "${common[@]}" --labels-file "$logs/labels-1000.txt" --format jsonl "$photos")
    [ -z "$embed" ] || [ -z "$ten" ] || [ -z "$thousand" ] && failed=1
    summary+=("$(python3 - "$preset" "$images" "$embed" "$ten" "$thousand" <<'PY'
import sys
preset, images = sys.argv[1], int(sys.argv[2])
def rate(s):
    try:
        return f"{float(s):6.2f}s {images / float(s):7.0f} img/s"
    except ValueError:
        return "failed"
print(f"{preset:26} {images} photos f16 b256: embed {rate(sys.argv[3])}; zero-shot 10 labels "
      f"{rate(sys.argv[4])}; 1000 labels {rate(sys.argv[5])}")
PY
)")
done
printf '%s\n' "${summary[@]}" | tee "$logs/summary.txt"
exit $failed
