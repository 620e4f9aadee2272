#!/usr/bin/env bash
# The model families at real size on the GPU machine, after scripts/gpu/gpu-check.sh stage DIR (run
# from the repository root):
#
#   scripts/gpu/gpu-families.sh DIR LOGS [PRESET...]
#
# For each preset of scripts/fixtures/make_random_family.py (default: all): a checkpoint with random
# weights, its float64 reference and PyTorch's own bf16 error, made on the spot; `vitrt parity`
# in f32, f16 and bf16 (a row each: worst relative error, and for bf16 the tensors where vitrt
# is worse than PyTorch's bf16); then `vitrt bench model` and HF SDPA (scripts/bench/
# bench_family_torch.py) in f16 at batch 1, 64 and 256, and their ratio. The SigLIP 2 NaFlex
# preset is timed on batches of images of mixed aspect ratios padded to 256 patches (both tools
# the same batches); where it ran beside siglip2-so400m-16-256 (the same encoder at 256 tokens,
# no mask), a last line puts its time per image beside the fixed model's, for vitrt and for HF.
# LOGS gets the logs, the JSON documents and summary.txt; nothing is written into benchmarks/.
set -uo pipefail
dir=${1:?usage: gpu-families.sh DIR LOGS [PRESET...]}
logs=${2:?usage: gpu-families.sh DIR LOGS [PRESET...]}
shift 2
presets=("$@")
[ ${#presets[@]} -eq 0 ] && presets=(deit-base-distilled-16-224 dinov2-base-registers-14 timm-vit-base-16-224
    dinov2-large-14 clip-vit-base-16 clip-vit-large-14-336 siglip-base-16-224 siglip-so400m-14-384
    aimv2-large-14-224 dinov3-large-16-224 siglip2-so400m-16-256 siglip2-so400m-16-naflex)
mkdir -p "$logs"
export VITRT_CACHE_DIR=${VITRT_CACHE_DIR:-/tmp/vitrt-cache}
batches=${GPU_FAMILIES_BATCHES:-1,64,256}
summary=()
failed=0

for preset in "${presets[@]}"; do
    model=/tmp/vitrt-$preset
    log="$logs/$preset.log"
    start=$SECONDS
    if ! python3 scripts/fixtures/make_random_family.py --preset "$preset" --out "$model" >"$log" 2>&1; then
        summary+=("$(printf '%-28s could not make the model (see %s)' "$preset" "$preset.log")")
        failed=1
        continue
    fi
    size=$(python3 -c "import sys; sys.path.insert(0, 'scripts/fixtures'); import make_random_family as m; print(m.PRESETS['$preset'][3])")
    summary+=("$(printf '%-28s made in %ss: %s' "$preset" "$((SECONDS - start))" "$(tail -1 "$log")")")
    for dtype in f32 f16 bf16; do
        out="$logs/$preset-parity-$dtype.txt"
        start=$SECONDS
        timeout 300 "$dir/vitrt.bin" parity --model "$model" --reference "$model/reference.safetensors" \
            --device cuda --dtype "$dtype" >"$out" 2>>"$log"
        rc=$?
        [ "$rc" -ne 0 ] && failed=1
        worst=$(grep -oE 'worst relative error [^)]*' "$out" | tail -1 | awk '{print $4}')
        extra=""
        if [ "$dtype" = bf16 ]; then
            # Per tensor: vitrt's bf16 error against PyTorch's own bf16 error on the same inputs.
            extra=$(python3 - "$out" "$model/torch-bf16.json" <<'PY'
import json, re, sys
# vitrt parity's rows: name, [shape], max abs error, relative error, ok or FAIL.
row = re.compile(r"^(\S+)\s+\[[^]]*\]\s+(\S+)\s+(\S+)\s+(ok|FAIL)")
ours = {m[1]: float(m[3]) for m in map(row.match, open(sys.argv[1])) if m}
torch = json.load(open(sys.argv[2]))
worse = [f"{n} {ours[n]:.2e}>{torch[n]:.2e}" for n in ours if n in torch and ours[n] > torch[n]]
torch_worst = max(torch.values())
print(f"torch bf16 worst {torch_worst:.3e}; vitrt worse than torch on {len(worse)} of {len(ours)} tensors" + (f": {', '.join(worse[:4])}" if worse else ""))
PY
)
        fi
        summary+=("$(printf '%-28s parity %-4s exit %-3s %4ss worst rel err %-10s %s' "$preset" "$dtype" "$rc" "$((SECONDS - start))" "${worst:-?}" "$extra")")
    done
    start=$SECONDS
    timeout 400 "$dir/vitrt.bin" bench model --model "$model" --device cuda --dtype f16 \
        --batch-sizes "$batches" --json "$logs/$preset-vitrt.json" >"$logs/$preset-vitrt.txt" 2>>"$log" || failed=1
    timeout 400 python3 scripts/bench/bench_family_torch.py --model "$model" --size "$size" \
        --batch-sizes "$batches" --json "$logs/$preset-torch.json" >>"$log" 2>&1 || failed=1
    ratios=$(python3 - "$logs/$preset-vitrt.json" "$logs/$preset-torch.json" <<'PY' 2>&1
import json, sys
ours = {r["batch"]: r for r in json.load(open(sys.argv[1]))["models"]}
torch = {r["batch"]: r for r in json.load(open(sys.argv[2]))["models"]}
cells = []
for b in sorted(ours):
    if b in torch:
        cells.append(f"b{b} {ours[b]['median_ms']:.3f}/{torch[b]['median_ms']:.3f} ms {torch[b]['median_ms'] / ours[b]['median_ms']:.2f}x")
print("; ".join(cells))
PY
)
    summary+=("$(printf '%-28s bench f16 (vitrt/hf-sdpa) %4ss %s' "$preset" "$((SECONDS - start))" "$ratios")")
    rm -rf "$model"
done
fixed=siglip2-so400m-16-256
naflex=siglip2-so400m-16-naflex
if [ -f "$logs/$naflex-vitrt.json" ] || [ -f "$logs/$naflex-torch.json" ]; then
    # NaFlex against the fixed-resolution model of the same size at the same token count (256
    # rows a image, padded or not): milliseconds per image at each batch size, and NaFlex's
    # ratio to fixed (1.00x or less: NaFlex no slower per image).
    summary+=("$(python3 - "$logs" "$naflex" "$fixed" <<'PY' 2>&1
import json, sys
from pathlib import Path
logs, naflex, fixed = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
def per_image(name, tool):
    path = logs / f"{name}-{tool}.json"
    if not path.exists():
        return {}
    return {r["batch"]: r["median_ms"] / r["batch"] for r in json.loads(path.read_text())["models"]}
cells = []
for tool, label in (("vitrt", "vitrt"), ("torch", "hf-sdpa")):
    ours, base = per_image(naflex, tool), per_image(fixed, tool)
    row = [f"b{b} {ours[b]:.4f}/{base[b]:.4f} ms {ours[b] / base[b]:.2f}x" for b in sorted(ours) if b in base]
    cells.append(f"{label}: " + ("; ".join(row) if row else "no pair of timings"))
# Both tools must have timed the same mix of grids.
grids = {tool: [r.get("naflex", {}).get("grids") for r in json.loads((logs / f"{naflex}-{tool}.json").read_text())["models"]]
         for tool in ("vitrt", "torch") if (logs / f"{naflex}-{tool}.json").exists()}
if len(grids) == 2:
    cells.append("same grids" if grids["vitrt"] == grids["torch"] else "GRIDS DIFFER between vitrt and hf")
print(f"{'naflex/fixed per image':<28} " + " | ".join(cells))
PY
)")
fi
echo "== gpu-families summary ($(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null)) =="
printf '%s\n' "${summary[@]}" | tee "$logs/summary.txt"
exit $failed
