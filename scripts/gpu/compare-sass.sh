#!/usr/bin/env bash
# Compares the SASS of every kernel instantiation between two builds, without a GPU.
#
#     bash scripts/gpu/compare-sass.sh dump DIR      # compile every instantiation here, keep cubins in DIR
#     bash scripts/gpu/compare-sass.sh diff OLD NEW  # disassemble both dumps and compare them
#
# `dump` runs the NVRTC compile test with VITRT_COMPILE_DUMP (NVRTC from
# .ci/install-cuda-wheels.sh). `diff` needs nvdisasm: set NVDISASM, or have it on PATH (the pip
# wheel nvidia-cuda-nvdisasm ships one under nvidia/cu13/bin). It disassembles each cubin with
# `nvdisasm -c` (code only) unless the two cubins are byte-identical already, and prints, for
# each instantiation, whether the SASS is identical, differs, or exists on one side only; it
# exits 1 when anything differs or is missing.
set -euo pipefail

usage() {
    sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
}

case "${1:-}" in
dump)
    [ $# -eq 2 ] || usage
    dir=$2
    mkdir -p "$dir"
    dir=$(cd "$dir" && pwd)
    root=$(cd "$(dirname "$0")/../.." && pwd)
    cd "$root"
    eval "$(bash .ci/install-cuda-wheels.sh)"
    VITRT_COMPILE_DUMP="$dir" cargo test --release -p vitrt-kernels --test nvrtc_compile -- --nocapture >"$dir/compile.txt" 2>&1 || {
        tail -30 "$dir/compile.txt" >&2
        exit 1
    }
    echo "$(ls "$dir"/*.cubin | wc -l) cubins in $dir"
    ;;
diff)
    [ $# -eq 3 ] || usage
    old=$2
    new=$3
    nvdisasm=${NVDISASM:-$(command -v nvdisasm || true)}
    [ -n "$nvdisasm" ] || {
        echo "compare-sass: no nvdisasm (set NVDISASM or pip install nvidia-cuda-nvdisasm)" >&2
        exit 2
    }
    identical=0 differ=0 missing=0
    declare -A seen=()
    for path in "$old"/*.cubin "$new"/*.cubin; do
        [ -e "$path" ] || continue
        name=$(basename "$path")
        [ -z "${seen[$name]:-}" ] || continue
        seen[$name]=1
        if [ ! -e "$old/$name" ] || [ ! -e "$new/$name" ]; then
            echo "only in $([ -e "$old/$name" ] && echo "$old" || echo "$new"): $name"
            missing=$((missing + 1))
        elif cmp -s "$old/$name" "$new/$name" ||
            cmp -s <("$nvdisasm" -c "$old/$name") <("$nvdisasm" -c "$new/$name"); then
            identical=$((identical + 1))
        else
            echo "differs: $name"
            differ=$((differ + 1))
        fi
    done
    echo "SASS: $identical identical, $differ differ, $missing on one side only"
    [ "$differ" -eq 0 ] && [ "$missing" -eq 0 ]
    ;;
*) usage ;;
esac
