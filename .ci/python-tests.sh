#!/usr/bin/env bash
# The `vitrt` Python module (python/): builds it into a virtual environment and runs its
# tests (python/tests, CPU only). Meant to be called by .ci/run after `cargo test`:
#     bash .ci/python-tests.sh
# The environment is target/python-venv (VITRT_PYTHON_VENV overrides it); the extension is
# built by `maturin develop` in the dev profile (opt-level 1, dependencies at 2, as the
# workspace sets it) into the workspace's target/debug, so it reuses what `cargo test` built
# there: a release wheel (`maturin build --release`) would compile every dependency again.
set -euo pipefail
cd "$(dirname "$0")/.."

venv="${VITRT_PYTHON_VENV:-target/python-venv}"
started=$SECONDS

echo "== python: virtual environment $venv"
if [ ! -x "$venv/bin/python" ]; then
    python3 -m venv "$venv"
fi
# openai and prometheus_client: the clients tests/serve checks `vitrt serve` with.
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
    maturin pytest numpy pillow "ray[data]" openai prometheus_client

echo "== python: maturin develop (the vitrt module into $venv)"
# --strip: the debug build's symbols would put 225 MB more into the environment.
VIRTUAL_ENV="$(cd "$venv" && pwd)" "$venv/bin/maturin" develop --strip \
    --manifest-path python/Cargo.toml
built=$SECONDS

echo "== python: pytest python/tests"
# The Ray Data test skips itself where Ray is missing, except here.
VITRT_REQUIRE_RAY=1 "$venv/bin/python" -m pytest python/tests -q
tested=$SECONDS

echo "== python: pytest tests/serve (vitrt serve, with target/debug/vitrt from cargo test)"
"$venv/bin/python" -m pytest tests/serve -q
echo "== python: $((built - started)) s to set up and build, $((tested - built)) s of module tests, $((SECONDS - tested)) s of server tests"
