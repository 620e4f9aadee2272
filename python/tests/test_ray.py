"""The Ray Data recipe (python/examples/ray_classify.py) on a local Ray cluster: the CPU
backend, two actors, the shipped digits, written to Parquet and read back; every digit's top
label as PyTorch's (examples/digits/expected.json, which `vitrt classify` matches too), and the
folder's other files reported as errors while the digits go on.

Ray is an optional dependency: without it this file is skipped, unless VITRT_REQUIRE_RAY is
set (.ci/python-tests.sh sets it, so CI never skips it).
"""

import importlib.util
import json
import os
import pathlib

import pytest

if not os.environ.get("VITRT_REQUIRE_RAY"):
    pytest.importorskip("ray")
    pytest.importorskip("pyarrow")
import pyarrow.parquet as pq  # noqa: E402
import ray  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[2]
DIGITS = ROOT / "examples" / "digits"
DIGITS_MODEL = ROOT / "examples" / "digits-vit"


def load_example():
    spec = importlib.util.spec_from_file_location(
        "ray_classify", ROOT / "python" / "examples" / "ray_classify.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def local_cluster():
    # Four logical CPUs on a 2-core machine: two actors of half a CPU, and room for Ray
    # Data's read and write tasks.
    ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def test_ray_data_classifies_the_digits_as_pytorch_does(local_cluster, tmp_path):
    example = load_example()
    results = example.classify_files(
        str(DIGITS),
        str(DIGITS_MODEL),
        device="cpu",
        top_k=3,
        actors=2,
        cpus_per_actor=0.5,
        batch_size=8,
    )
    out = tmp_path / "results"
    results.write_parquet(str(out))
    table = pq.read_table(str(out)).to_pylist()
    by_name = {pathlib.Path(row["path"]).name: row for row in table}

    expected = json.loads((DIGITS / "expected.json").read_text())["predictions"]
    assert len(expected) == 40
    for want in expected:
        row = by_name[want["image"]]
        assert row["error"] == "", row
        assert row["label"] == want["label"], want["image"]
        # expected.json rounds to 3 decimals.
        assert abs(row["probability"] - want["probability"]) < 1e-3, want["image"]
        assert len(row["top_k"].split(", ")) == 3

    # The folder's README.md and expected.json are no images: each is reported (as bytes, it
    # has no name to give), alone.
    others = sorted(set(by_name) - {e["image"] for e in expected})
    assert others == ["README.md", "expected.json"]
    for name in others:
        assert by_name[name]["label"] == ""
        assert "is not an image" in by_name[name]["error"], by_name[name]["error"]
