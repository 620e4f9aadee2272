"""The `vitrt` Python module on the CPU, against the repository's fixtures.

Run from anywhere (paths are resolved from this file): `pytest python/tests`.
The fixtures are tiny checkpoints with random weights (tests/fixtures/models), with reference
tensors computed by PyTorch in float64, and the demo digit classifier (examples/digits-vit)
with PyTorch's predictions for the shipped digits (examples/digits/expected.json).
"""

import json
import pathlib
import struct

import numpy as np
import pytest
from PIL import Image

import vitrt

ROOT = pathlib.Path(__file__).resolve().parents[2]
MODELS = ROOT / "tests" / "fixtures" / "models"
IMAGES = ROOT / "tests" / "fixtures" / "images"
DIGITS = ROOT / "examples" / "digits"
DIGITS_MODEL = ROOT / "examples" / "digits-vit"

SAFETENSORS_DTYPES = {"F32": np.float32, "F64": np.float64, "I64": np.int64}


def read_safetensors(path):
    """The tensors of a safetensors file as numpy arrays (the format is an 8-byte header
    length, a JSON header of names to dtype, shape and byte offsets, then the data)."""
    data = pathlib.Path(path).read_bytes()
    (header_len,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + header_len])
    body = data[8 + header_len :]
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        start, end = info["data_offsets"]
        dtype = SAFETENSORS_DTYPES[info["dtype"]]
        tensors[name] = np.frombuffer(body[start:end], dtype=dtype).reshape(info["shape"])
    return tensors


def digit_paths():
    return sorted(DIGITS.glob("*.png"))


@pytest.fixture(scope="module")
def digits_model():
    return vitrt.Model(str(DIGITS_MODEL), device="cpu")


# --- forward: parity with PyTorch ----------------------------------------------------------


@pytest.mark.parametrize(
    "fixture, outputs",
    [
        ("tiny-gelu", ["logits"]),
        ("vitmodel-relu", ["last_hidden_state", "pooler_output"]),
        ("clip-dual-tower", ["last_hidden_state", "pooler_output", "image_embeds"]),
        ("siglip-vision-head", ["last_hidden_state", "pooler_output", "image_embeds"]),
    ],
)
def test_forward_matches_pytorch_float64_references(fixture, outputs):
    reference = read_safetensors(MODELS / fixture / "reference.safetensors")
    model = vitrt.Model(MODELS / fixture, device="cpu", dtype="f32")
    ours = model.forward(reference["pixel_values"].astype(np.float32))
    assert sorted(ours) == sorted(outputs)
    for name in outputs:
        got, want = ours[name], reference[name].astype(np.float64)
        assert got.dtype == np.float32
        assert got.shape == want.shape, name
        # As the Rust parity tests measure it: the worst error relative to the tensor's scale.
        relative = np.max(np.abs(got - want)) / np.max(np.abs(want))
        assert relative < 1e-4, f"{fixture} {name}: relative error {relative:.2e}"


def test_forward_refuses_wrong_shapes_and_dtypes():
    model = vitrt.Model(MODELS / "tiny-gelu", device="cpu")
    with pytest.raises(ValueError, match=r"this model takes \[B, 3, 32, 32\]"):
        model.forward(np.zeros((2, 1, 32, 32), dtype=np.float32))
    with pytest.raises(ValueError, match="this model takes"):
        model.forward(np.zeros((3, 32, 32), dtype=np.float32))
    with pytest.raises(ValueError, match="float32"):
        model.forward(np.zeros((1, 3, 32, 32), dtype=np.float64))
    with pytest.raises(ValueError, match=r"pixel_values\[0, 1, 2, 3\].* is NaN; .*finite"):
        pixels = np.zeros((1, 3, 32, 32), dtype=np.float32)
        pixels[0, 1, 2, 3] = np.nan
        model.forward(pixels)


def test_forward_names_the_first_value_that_is_not_finite():
    # 48 images of 3x32x32 are checked in three chunks on several threads: the first bad value
    # in array order is named, whichever thread finds it, in contiguous and transposed arrays.
    model = vitrt.Model(MODELS / "tiny-gelu", device="cpu")
    pixels = np.zeros((48, 3, 32, 32), dtype=np.float32)
    pixels[45, 0, 0, 0] = np.nan
    pixels[40, 2, 31, 30] = np.inf
    with pytest.raises(ValueError, match=r"pixel_values\[40, 2, 31, 30\].* is inf"):
        model.forward(pixels)
    transposed = np.zeros((48, 3, 32, 32), dtype=np.float32).transpose(0, 1, 3, 2)
    transposed[41, 1, 5, 7] = -np.inf
    assert not transposed.flags["C_CONTIGUOUS"]
    with pytest.raises(ValueError, match=r"pixel_values\[41, 1, 5, 7\].* is -inf"):
        model.forward(transposed)
    assert model.forward(np.ascontiguousarray(transposed[:40]))["logits"].shape[0] == 40


def test_forward_then_classify_use_their_own_image_sizes(digits_model):
    # forward with another size resamples the positions; classify goes back to the
    # preprocessing's size.
    outputs = digits_model.forward(np.zeros((1, 3, 48, 48), dtype=np.float32))
    assert outputs["logits"].shape == (1, 10)
    predictions = digits_model.classify([str(digit_paths()[0])], top_k=1)
    assert predictions[0][0]["label"] == "0"


# --- classify --------------------------------------------------------------------------------


def test_classify_digits_as_pytorch_does(digits_model):
    expected = json.loads((DIGITS / "expected.json").read_text())["predictions"]
    paths = [DIGITS / e["image"] for e in expected]
    predictions = digits_model.classify([str(p) for p in paths], top_k=3)
    assert len(predictions) == len(paths) == 40
    for want, got in zip(expected, predictions):
        assert len(got) == 3
        assert got[0]["label"] == want["label"], want["image"]
        assert got[0]["index"] == want["index"], want["image"]
        # expected.json rounds to 3 decimals.
        assert abs(got[0]["probability"] - want["probability"]) < 1e-3, want["image"]


def test_classify_returns_lists_of_dicts_sorted_by_probability(digits_model):
    predictions = digits_model.classify([str(digit_paths()[0])], top_k=20)
    assert isinstance(predictions, list) and isinstance(predictions[0], list)
    row = predictions[0]
    assert len(row) == 10, "top_k larger than the classes gives every class"
    for p in row:
        assert set(p) == {"index", "label", "probability"}
        assert isinstance(p["index"], int)
        assert isinstance(p["label"], str)
        assert isinstance(p["probability"], float)
    probabilities = [p["probability"] for p in row]
    assert probabilities == sorted(probabilities, reverse=True)
    assert abs(sum(probabilities) - 1) < 1e-5
    assert digits_model.classify([], top_k=3) == []


def test_every_kind_of_image_gives_the_same_result(digits_model):
    path = digit_paths()[3]
    pil = Image.open(path)
    grey = np.asarray(pil.convert("L"))
    rgb = np.asarray(pil.convert("RGB"))
    inputs = [
        str(path),
        path,  # os.PathLike
        path.read_bytes(),  # the file's contents
        pil,
        grey,  # [H, W]
        grey[:, :, None],  # [H, W, 1]
        rgb,  # [H, W, 3]
        np.asfortranarray(rgb),  # not C-contiguous
    ]
    results = digits_model.classify(inputs, top_k=10)
    for other in results[1:]:
        assert other == results[0]
    # A uint8 batch [N, H, W, C] is N images.
    batch = digits_model.classify(np.stack([rgb, rgb]), top_k=10)
    assert batch == [results[0], results[0]]
    # A column of objects, as Ray Data hands over images of different sizes or file contents.
    column = np.empty(3, dtype=object)
    column[0], column[1], column[2] = rgb, path.read_bytes(), grey
    assert digits_model.classify(column, top_k=10) == [results[0]] * 3


def test_pil_images_of_other_modes_are_converted_as_transformers_does():
    model = vitrt.Model(MODELS / "clip-zero-shot", device="cpu")
    for name in ["astronaut_rgba.png", "cat_palette.png", "coffee.png", "camera_gray.png"]:
        from_file = model.embed([str(IMAGES / name)])
        from_pil = model.embed([Image.open(IMAGES / name)])
        np.testing.assert_array_equal(from_file, from_pil, err_msg=name)


@pytest.mark.parametrize("fixture", ["clip-zero-shot", "vitmodel-relu"])
# Pillow's own warning for palette8_alpha_bytes.png, as transformers' conversion raises it.
@pytest.mark.filterwarnings("ignore:Palette images with Transparency")
def test_pil_images_with_a_transparent_colour_are_read_as_their_files(fixture):
    # CLIP's processor converts to RGB (the transparent colour turned white); ViT's does not.
    model = vitrt.Model(MODELS / fixture, device="cpu")
    paths = [IMAGES / "cat_palette_transparent_index.png"]
    paths += sorted((IMAGES / "transparency").glob("*.png"))
    for path in paths:
        from_file = model.embed([str(path)])
        from_pil = model.embed([Image.open(path)])
        np.testing.assert_array_equal(from_file, from_pil, err_msg=path.name)


def test_batch_size_does_not_change_results():
    paths = [str(p) for p in digit_paths()[:7]]
    one_batch = vitrt.Model(DIGITS_MODEL, device="cpu", batch_size=8)
    small_batches = vitrt.Model(DIGITS_MODEL, device="cpu", batch_size=3)
    assert one_batch.batch_size == 8 and small_batches.batch_size == 3
    a = one_batch.classify(paths, top_k=10)
    b = small_batches.classify(paths, top_k=10)
    for row_a, row_b in zip(a, b):
        assert [p["index"] for p in row_a] == [p["index"] for p in row_b]
        for p, q in zip(row_a, row_b):
            assert abs(p["probability"] - q["probability"]) < 1e-6


def test_decoding_threads_give_the_same_results_and_the_first_error(tmp_path):
    paths = [str(p) for p in digit_paths()[:7]]
    one = vitrt.Model(DIGITS_MODEL, device="cpu", workers=1)
    three = vitrt.Model(DIGITS_MODEL, device="cpu", workers=3)
    assert one.classify(paths, top_k=10) == three.classify(paths, top_k=10)
    broken = tmp_path / "broken.png"
    broken.write_bytes(b"\x89PNG\r\n\x1a\n not really")
    with_broken = paths[:4] + [str(broken)] + paths[4:] + [str(broken)]
    with pytest.raises(ValueError, match=r"images\[4\]: .*broken\.png"):
        three.classify(with_broken)
    with pytest.raises(ValueError, match="workers"):
        vitrt.Model(DIGITS_MODEL, device="cpu", workers=0)


def test_model_properties():
    model = vitrt.Model(str(DIGITS_MODEL), device="cpu")
    assert model.device == "cpu"
    assert model.dtype == "f32"
    assert model.batch_size == 8
    assert model.image_size == (32, 32)
    assert "digits-vit" in repr(model)
    bf16 = vitrt.Model(DIGITS_MODEL, device="cpu", dtype="bf16")
    assert bf16.dtype == "bf16"
    default = vitrt.Model(DIGITS_MODEL, cuda_graphs=False)
    assert default.device == "cpu" or default.device.startswith("cuda:")
    assert isinstance(vitrt.__version__, str)


# --- embed -----------------------------------------------------------------------------------


def test_embed_shapes_pools_and_normalisation():
    model = vitrt.Model(MODELS / "vitmodel-relu", device="cpu")
    images = [str(IMAGES / "coffee.png"), str(IMAGES / "cat.jpg"), str(IMAGES / "astronaut.webp")]
    default = model.embed(images)
    assert default.dtype == np.float32 and default.shape == (3, 48)
    pooler = model.embed(images, pool="pooler")
    np.testing.assert_array_equal(default, pooler)  # the pooler is this checkpoint's first
    for pool in ["cls", "mean"]:
        assert model.embed(images, pool=pool).shape == (3, 48)
    unit = model.embed(images, pool="mean", normalize=True)
    np.testing.assert_allclose(np.linalg.norm(unit, axis=1), 1, rtol=1e-5)
    assert model.embed([]).shape == (0, 48)
    with pytest.raises(ValueError, match='has no image_embeds; it has pool="pooler"'):
        model.embed(images, pool="projected")
    with pytest.raises(ValueError, match="is not a pool"):
        model.embed(images, pool="max")


def test_embed_defaults_to_the_projection_of_a_dual_tower():
    model = vitrt.Model(MODELS / "clip-zero-shot", device="cpu")
    embeddings = model.embed([str(IMAGES / "cat.jpg")])
    assert embeddings.shape == (1, 24)
    reference = read_safetensors(MODELS / "clip-zero-shot" / "reference.safetensors")
    outputs = model.forward(reference["pixel_values"])
    assert outputs["image_embeds"].shape == (2, 24)


# --- zero-shot -------------------------------------------------------------------------------


@pytest.mark.parametrize("fixture", ["clip-zero-shot", "siglip-zero-shot", "siglip2-zero-shot"])
def test_zero_shot_scores_labels(fixture):
    model = vitrt.Model(MODELS / fixture, device="cpu")
    images = [str(IMAGES / "cat.jpg"), str(IMAGES / "coffee.png")]
    labels = ["cat", "dog", "a cup of coffee"]
    results = model.zero_shot(images, labels, top_k=2)
    assert len(results) == 2 and all(len(row) == 2 for row in results)
    for row in results:
        for p in row:
            assert p["label"] == labels[p["index"]]
            assert 0 <= p["probability"] <= 1
    full = model.zero_shot(images, labels, top_k=5)
    assert all(len(row) == 3 for row in full)
    if fixture.startswith("clip"):
        # CLIP: a softmax over the labels.
        for row in full:
            assert abs(sum(p["probability"] for p in row) - 1) < 1e-5
    # Another label set, then the first again: each call scores against its own labels.
    other = model.zero_shot(images, ["bird", "car"], top_k=5)
    assert {p["label"] for p in other[0]} == {"bird", "car"}
    assert model.zero_shot(images, labels, top_k=5) == full
    averaged = model.zero_shot(
        images, labels, templates=["a photo of a {}.", "a picture of {}"], top_k=1
    )
    assert len(averaged) == 2 and averaged[0][0]["label"] in labels


def test_zero_shot_refuses_bad_labels_templates_and_checkpoints():
    model = vitrt.Model(MODELS / "clip-zero-shot", device="cpu")
    image = [str(IMAGES / "cat.jpg")]
    with pytest.raises(ValueError, match="label list is empty"):
        model.zero_shot(image, [])
    with pytest.raises(ValueError, match="named twice"):
        model.zero_shot(image, ["cat", "cat"])
    with pytest.raises(ValueError, match="has no {} to put the label in"):
        model.zero_shot(image, ["cat"], templates=["a photo"])
    with pytest.raises(ValueError, match="takes one label"):
        model.zero_shot(image, ["cat"], templates=["{} and {}"])
    with pytest.raises(ValueError, match="top_k"):
        model.zero_shot(image, ["cat"], top_k=0)
    vision_only = vitrt.Model(MODELS / "tiny-gelu", device="cpu")
    with pytest.raises(ValueError, match="without image embeddings"):
        vision_only.zero_shot(image, ["cat"])


# --- errors ----------------------------------------------------------------------------------


def test_loading_errors_are_value_errors(tmp_path):
    missing = tmp_path / "no-such-model"
    with pytest.raises(ValueError, match="no-such-model"):
        vitrt.Model(str(missing), device="cpu", offline=True)
    with pytest.raises(ValueError, match='unknown dtype "f64"'):
        vitrt.Model(DIGITS_MODEL, device="cpu", dtype="f64")
    with pytest.raises(ValueError, match="tpu"):
        vitrt.Model(DIGITS_MODEL, device="tpu")
    with pytest.raises(ValueError, match="batch_size"):
        vitrt.Model(DIGITS_MODEL, device="cpu", batch_size=0)
    empty = tmp_path / "empty-model"
    empty.mkdir()
    with pytest.raises(ValueError, match="config.json"):
        vitrt.Model(str(empty), device="cpu")


def test_a_broken_image_among_good_ones_raises_naming_it(digits_model, tmp_path):
    broken = tmp_path / "broken.png"
    good = digit_paths()[0].read_bytes()
    broken.write_bytes(good[: len(good) // 2])
    paths = [str(p) for p in digit_paths()[:2]] + [str(broken)]
    with pytest.raises(ValueError, match=r"images\[2\]: .*broken\.png"):
        digits_model.classify(paths)
    not_an_image = tmp_path / "notes.txt"
    not_an_image.write_text("hello")
    with pytest.raises(ValueError, match="is not an image"):
        digits_model.classify([str(not_an_image)])
    with pytest.raises(ValueError, match="does not exist"):
        digits_model.classify([str(tmp_path / "missing.png")])
    # The model still works after a failure.
    assert len(digits_model.classify([str(digit_paths()[0])])) == 1


def test_bad_image_arguments(digits_model):
    with pytest.raises(TypeError, match="list of images"):
        digits_model.classify(str(digit_paths()[0]))
    with pytest.raises(TypeError, match="list of images"):
        digits_model.classify(np.zeros((32, 32, 3), dtype=np.uint8))
    with pytest.raises(TypeError, match="list of images"):
        digits_model.classify(digit_paths()[0].read_bytes())
    with pytest.raises(ValueError, match=r"images\[0\]: .*not an image"):
        digits_model.classify([b"hello"])
    with pytest.raises(TypeError, match=r"images\[0\] is a int"):
        digits_model.classify([3])
    with pytest.raises(ValueError, match="dtype float32"):
        digits_model.classify([np.zeros((32, 32, 3), dtype=np.float32)])
    with pytest.raises(ValueError, match=r"shape \[32, 32, 4\]"):
        digits_model.classify([np.zeros((32, 32, 4), dtype=np.uint8)])
    with pytest.raises(ValueError, match="top_k"):
        digits_model.classify([str(digit_paths()[0])], top_k=0)


def test_classify_needs_a_classifier():
    model = vitrt.Model(MODELS / "vitmodel-relu", device="cpu")
    with pytest.raises(ValueError, match="without a classification head"):
        model.classify([str(IMAGES / "cat.jpg")])


def test_forward_reads_arrays_of_any_memory_order():
    reference = read_safetensors(MODELS / "tiny-gelu" / "reference.safetensors")
    pixels = reference["pixel_values"].astype(np.float32)
    model = vitrt.Model(MODELS / "tiny-gelu", device="cpu")
    want = model.forward(pixels)["logits"]
    np.testing.assert_array_equal(model.forward(np.asfortranarray(pixels))["logits"], want)
    np.testing.assert_array_equal(model.forward(pixels[::-1][::-1])["logits"], want)


def test_a_cpu_model_runs_on_any_thread(digits_model):
    # On the CPU (as on CUDA with cuda_graphs=False) nothing is tied to the creating thread:
    # Ray Data's actors call from another thread than the one that created them.
    import threading

    path = str(digit_paths()[0])
    want = digits_model.classify([path])
    got, caught = [], []

    def classify_elsewhere():
        try:
            got.append(digits_model.classify([path]))
        except BaseException as error:
            caught.append(error)

    thread = threading.Thread(target=classify_elsewhere)
    thread.start()
    thread.join()
    assert caught == [] and got == [want]
    assert digits_model.classify([path]) == want


# --- DLPack ----------------------------------------------------------------------------------


class HostTensor:
    """A host tensor of some other library: it speaks DLPack and is no numpy array."""

    def __init__(self, array):
        self.array = array

    def __dlpack__(self, **kwargs):
        return self.array.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self.array.__dlpack_device__()


class CudaTensorStub:
    """What a CUDA tensor says of itself through DLPack, and nothing more."""

    def __dlpack_device__(self):
        return (2, 0)

    def __dlpack__(self, **kwargs):
        raise AssertionError("a CPU model must refuse before asking for the data")


def test_forward_reads_host_tensors_of_other_libraries_through_dlpack():
    reference = read_safetensors(MODELS / "tiny-gelu" / "reference.safetensors")
    pixels = np.ascontiguousarray(reference["pixel_values"].astype(np.float32))
    model = vitrt.Model(MODELS / "tiny-gelu", device="cpu")
    want = model.forward(pixels)["logits"]
    got = model.forward(HostTensor(pixels))["logits"]
    np.testing.assert_array_equal(got, want)


def test_a_cpu_model_refuses_cuda_tensors_with_a_clear_message():
    model = vitrt.Model(MODELS / "tiny-gelu", device="cpu")
    with pytest.raises(ValueError, match=r"CUDA tensor \(cuda:0\), but this model runs on the CPU"):
        model.forward(CudaTensorStub())


def test_residual_dtype_is_the_clis():
    """`residual_dtype=` stores the residual stream as `--residual-dtype` does: an f16 run with
    an f32 stream gives the CLI's probabilities, and a stream neither f32 nor the run's dtype
    is refused with the CLI's message."""
    import os
    import subprocess

    # The CLI `cargo test` built (.ci/python-tests.sh runs after it).
    vitrt_bin = os.environ.get("VITRT_BIN", str(ROOT / "target" / "debug" / "vitrt"))
    image = str(DIGITS / "digit-0003-label-3.png")
    cli = subprocess.run(
        [vitrt_bin, "classify", "--model", str(DIGITS_MODEL), "--device", "cpu", "--dtype", "f16",
         "--residual-dtype", "f32", "--top-k", "3", "--format", "jsonl", image],
        capture_output=True, text=True, check=True,
    )
    want = json.loads(cli.stdout)["predictions"]
    model = vitrt.Model(str(DIGITS_MODEL), device="cpu", dtype="f16", residual_dtype="f32")
    got = model.classify([image], top_k=3)[0]
    assert [p["index"] for p in got] == [p["index"] for p in want]
    assert [np.float32(p["probability"]) for p in got] == [np.float32(p["probability"]) for p in want]
    with pytest.raises(ValueError, match="residual stream is stored as f32 or as the run's dtype"):
        vitrt.Model(DIGITS_MODEL, device="cpu", dtype="f32", residual_dtype="f16")
    with pytest.raises(ValueError, match='residual_dtype: unknown dtype "f8"'):
        vitrt.Model(DIGITS_MODEL, device="cpu", residual_dtype="f8")


def test_fp8_runs_the_clis_fp8_layers(tmp_path):
    """`dtype="fp8"` is the CLI's `--dtype fp8` (emulated on the CPU): the digits keep their
    f16 top-1 classes with other probabilities, and `fp8_layers` reads a report's choice."""
    images = sorted(str(p) for p in DIGITS.glob("*.png"))
    model = vitrt.Model(str(DIGITS_MODEL), device="cpu", dtype="fp8")
    assert model.dtype == "fp8"
    half = vitrt.Model(str(DIGITS_MODEL), device="cpu", dtype="f16")
    got = model.classify(images, top_k=1)
    want = half.classify(images, top_k=1)
    assert [g[0]["index"] for g in got] == [w[0]["index"] for w in want]
    assert [g[0]["probability"] for g in got] != [w[0]["probability"] for w in want]
    choice = tmp_path / "fp8.json"
    choice.write_text(json.dumps({
        "format": "vitrt-fp8-layers", "version": 1, "model": "digits", "keep": [],
        "fp8": ["layer.1.attention.qkv"], "max_cosine_drop": 0.002,
        "measured": {"images": 1, "mean_cosine": 1.0, "worst_cosine": 1.0, "same_top1": 1},
    }))
    one = vitrt.Model(str(DIGITS_MODEL), device="cpu", dtype="fp8", fp8_layers=str(choice))
    assert [g[0]["index"] for g in one.classify(images, top_k=1)] == [w[0]["index"] for w in want]
    with pytest.raises(ValueError, match='fp8_layers goes with dtype="fp8"'):
        vitrt.Model(str(DIGITS_MODEL), device="cpu", dtype="f16", fp8_layers=str(choice))
    choice.write_text("{}")
    with pytest.raises(ValueError, match="not an FP8 choice"):
        vitrt.Model(str(DIGITS_MODEL), device="cpu", dtype="fp8", fp8_layers=str(choice))


def test_fp8_scales_reads_the_clis_calibration(tmp_path):
    """`fp8_scales` is the CLI's `--fp8-scales`: static input scales for every linear layer of
    the blocks (the digits keep their f16 top-1 classes), refused without dtype="fp8", when
    malformed, and when made for another model."""
    images = sorted(str(p) for p in DIGITS.glob("*.png"))
    shapes = {"attention.qkv": [192, 64], "attention.output+add": [64, 64],
              "intermediate+activation": [128, 64], "output+add": [64, 128]}
    layers = [{"name": f"layer.{i}.{name}", "weight_shape": shape, "input_amax": 4.48,
               "scale": 0.02} for i in range(4) for name, shape in shapes.items()]
    scales = tmp_path / "scales.json"
    scales.write_text(json.dumps({"format": "vitrt-fp8-scales", "version": 1, "model": "digits",
                                  "images": 1, "margin": 2.0, "layers": layers}))
    model = vitrt.Model(str(DIGITS_MODEL), device="cpu", dtype="fp8", fp8_scales=str(scales))
    assert model.dtype == "fp8"
    half = vitrt.Model(str(DIGITS_MODEL), device="cpu", dtype="f16")
    got = [g[0]["index"] for g in model.classify(images, top_k=1)]
    want = [w[0]["index"] for w in half.classify(images, top_k=1)]
    assert sum(g == w for g, w in zip(got, want)) >= len(want) - 1
    with pytest.raises(ValueError, match='fp8_scales goes with dtype="fp8"'):
        vitrt.Model(str(DIGITS_MODEL), device="cpu", dtype="f16", fp8_scales=str(scales))
    layers[5]["weight_shape"] = [64, 96]
    scales.write_text(json.dumps({"format": "vitrt-fp8-scales", "version": 1, "model": "other",
                                  "images": 1, "margin": 2.0, "layers": layers}))
    with pytest.raises(ValueError, match="calibrated for another model"):
        vitrt.Model(str(DIGITS_MODEL), device="cpu", dtype="fp8", fp8_scales=str(scales))
    scales.write_text("{}")
    with pytest.raises(ValueError, match="not an FP8 scales file"):
        vitrt.Model(str(DIGITS_MODEL), device="cpu", dtype="fp8", fp8_scales=str(scales))


def test_decode_says_where_jpegs_are_decoded():
    """`decode=` is the CLI's `--decode`: "cpu" decodes on the host everywhere (the same
    results as the default on the CPU); "gpu" and "gpu-idct" need a CUDA device, and anything
    else is refused by name."""
    jpeg = str(ROOT / "tests" / "fixtures" / "images" / "cat.jpg")
    default = vitrt.Model(DIGITS_MODEL, device="cpu")
    on_host = vitrt.Model(DIGITS_MODEL, device="cpu", decode="cpu")
    assert default.classify([jpeg], top_k=3) == on_host.classify([jpeg], top_k=3)
    for gpu in ["gpu", "gpu-idct"]:
        with pytest.raises(ValueError, match=f'decode="{gpu}" needs a CUDA device'):
            vitrt.Model(DIGITS_MODEL, device="cpu", decode=gpu)
    with pytest.raises(ValueError, match='decode: unknown value "nvjpeg"'):
        vitrt.Model(DIGITS_MODEL, device="cpu", decode="nvjpeg")


# --- several devices -------------------------------------------------------------------------
# A list of devices runs an engine per device on a thread of its own, as `--device cuda:all`
# does; "cpu" named twice stands two devices in here (the GPU check runs cuda:all).


def test_several_devices_give_one_devices_results_in_input_order(tmp_path):
    paths = [str(p) for p in digit_paths()]
    one = vitrt.Model(DIGITS_MODEL, device="cpu", batch_size=2)
    two = vitrt.Model(DIGITS_MODEL, device=["cpu", "cpu"], batch_size=2, workers=2)
    assert two.devices == ["cpu", "cpu"] and two.device == "cpu,cpu"
    assert one.devices == ["cpu"]
    assert two.dtype == "f32" and two.image_size == (32, 32) and two.batch_size == 2
    # Many batches of two, dealt over both devices, come back in order.
    many = paths * 3
    assert two.classify(many, top_k=3) == one.classify(many, top_k=3)
    assert two.classify([]) == []
    # The first bad image in input order is the one raised, whichever device read it.
    broken = tmp_path / "broken.png"
    broken.write_bytes(b"\x89PNG\r\n\x1a\n not really")
    with_broken = paths[:5] + [str(broken)] + paths[5:] + [str(broken)]
    with pytest.raises(ValueError, match=r"images\[5\]: .*broken\.png"):
        two.classify(with_broken)
    # The engines are whole after an error.
    assert two.classify(paths[:3], top_k=3) == one.classify(paths[:3], top_k=3)


def test_several_devices_embed_zero_shot_and_forward_as_one_does():
    images = [str(IMAGES / "cat.jpg"), str(IMAGES / "coffee.png"), str(IMAGES / "astronaut.webp")]
    one = vitrt.Model(MODELS / "clip-zero-shot", device="cpu", batch_size=1)
    three = vitrt.Model(MODELS / "clip-zero-shot", device=["cpu"] * 3, batch_size=1)
    np.testing.assert_array_equal(three.embed(images), one.embed(images))
    np.testing.assert_array_equal(
        three.embed(images, pool="cls", normalize=True),
        one.embed(images, pool="cls", normalize=True),
    )
    labels = ["cat", "dog", "a cup of coffee"]
    assert three.zero_shot(images, labels) == one.zero_shot(images, labels)
    assert three.zero_shot(images, ["bird", "car"]) == one.zero_shot(images, ["bird", "car"])
    # forward: the batch's rows are cut over the devices and joined again.
    reference = read_safetensors(MODELS / "clip-zero-shot" / "reference.safetensors")
    pixels = np.concatenate([reference["pixel_values"].astype(np.float32)] * 3)
    want, got = one.forward(pixels), three.forward(pixels)
    assert sorted(got) == sorted(want)
    for name in want:
        np.testing.assert_array_equal(got[name], want[name])
    with pytest.raises(ValueError, match="this model takes"):
        three.forward(pixels[:, :2])
    pixels[4, 1, 2, 3] = np.nan
    with pytest.raises(ValueError, match=r"pixel_values\[4, 1, 2, 3\].* is NaN"):
        three.forward(pixels)
    with pytest.raises(ValueError, match="runs on cpu, cpu, cpu"):
        three.forward(CudaTensorStub())


def test_device_lists_are_checked():
    with pytest.raises(ValueError, match="at least one device"):
        vitrt.Model(DIGITS_MODEL, device=[])
    with pytest.raises(ValueError, match=r"device\[1\]=\"tpu\""):
        vitrt.Model(DIGITS_MODEL, device=["cpu", "tpu"])
    with pytest.raises(ValueError, match="cuda:1 is named twice"):
        vitrt.Model(DIGITS_MODEL, device=["cuda:1", "cuda:1"])
    with pytest.raises(ValueError, match="list of names"):
        vitrt.Model(DIGITS_MODEL, device=3)
    # One name in a list is that device.
    assert vitrt.Model(DIGITS_MODEL, device=["cpu"]).device == "cpu"
