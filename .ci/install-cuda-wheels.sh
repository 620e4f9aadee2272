#!/usr/bin/env bash
# Installs NVRTC and the CUDA runtime headers from PyPI (the wheels nvidia-cuda-nvrtc and
# nvidia-cuda-runtime, CUDA 13.0), so that the kernels' NVRTC compile test can run on a
# machine with no GPU and no CUDA toolkit. Idempotent: a folder that already holds the
# wanted versions is left alone.
#
# Prints, on stdout and nothing else, the variables the test needs:
#     eval "$(bash .ci/install-cuda-wheels.sh)"
#     cargo test -p vitrt-kernels --test nvrtc_compile -- --nocapture
#
# Folder: $VITRT_CUDA_WHEELS_DIR, else ${XDG_CACHE_HOME:-$HOME/.cache}/vitrt/cuda-wheels-13.0
# (outside the repository, so a fresh clone reuses it). Progress goes to stderr.
set -euo pipefail

NVRTC_VERSION="13.0.88"
RUNTIME_VERSION="13.0.96"
dir="${VITRT_CUDA_WHEELS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/vitrt/cuda-wheels-13.0}"
lib="$dir/nvidia/cu13/lib/libnvrtc.so.13"
include="$dir/nvidia/cu13/include"

installed() {
    [ -f "$lib" ] && [ -f "$include/cuda_fp16.h" ] && [ -f "$include/cuda_bf16.h" ] &&
        [ -d "$dir/nvidia_cuda_nvrtc-$NVRTC_VERSION.dist-info" ] &&
        [ -d "$dir/nvidia_cuda_runtime-$RUNTIME_VERSION.dist-info" ]
}

if installed; then
    echo "install-cuda-wheels: already in $dir" >&2
else
    python=$(command -v python3 || command -v python) || {
        echo "install-cuda-wheels: no python3 to run pip with" >&2
        exit 1
    }
    echo "install-cuda-wheels: installing into $dir" >&2
    # Install into a fresh sibling folder and swap it in, so an interrupted run leaves no
    # half-installed folder that would pass for a whole one.
    staging="$dir.partial.$$"
    rm -rf "$staging"
    mkdir -p "$(dirname "$dir")"
    "$python" -m pip install --quiet --disable-pip-version-check --root-user-action=ignore --no-deps --no-compile \
        --target "$staging" \
        "nvidia-cuda-nvrtc==$NVRTC_VERSION" "nvidia-cuda-runtime==$RUNTIME_VERSION" >&2
    rm -rf "$dir"
    mv "$staging" "$dir"
    installed || {
        echo "install-cuda-wheels: pip finished but $lib or $include is missing" >&2
        exit 1
    }
fi

echo "export VITRT_NVRTC_LIB='$lib'"
echo "export VITRT_CUDA_INCLUDE='$include'"
