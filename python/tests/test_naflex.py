"""`vitrt.Model` on a SigLIP 2 NaFlex checkpoint, on the CPU: the dual-tower fixture
tests/fixtures/naflex/siglip2-naflex-zero-shot (made by scripts/fixtures/make_naflex_fixture.py)
with transformers' float64 image_embeds and zero-shot probabilities for its four images of
different aspect ratios, each preprocessed to its own patch grid.
"""

import pathlib

import numpy as np
import pytest
from PIL import Image

import vitrt
from test_vitrt import read_safetensors

ROOT = pathlib.Path(__file__).resolve().parents[2]
NAFLEX = ROOT / "tests" / "fixtures" / "naflex" / "siglip2-naflex-zero-shot"
IMAGES = [NAFLEX / "images" / f"{i}.png" for i in range(4)]
# The prompts the reference scored first, put in as they are (template "{}").
PROMPTS = ["a photo of a cat.", "a photo of a dog.", "a photo of a bird."]


@pytest.fixture(scope="module")
def reference():
    return read_safetensors(NAFLEX / "reference.safetensors")


@pytest.fixture(scope="module")
def model():
    return vitrt.Model(NAFLEX, device="cpu")


def test_embed_from_paths_is_siglip2_image_embeds(model, reference):
    assert model.device == "cpu" and model.dtype == "f32"
    embeddings = model.embed([str(p) for p in IMAGES])
    want = reference["image_embeds"]
    assert embeddings.shape == want.shape
    np.testing.assert_allclose(embeddings, want, atol=1e-4)


def test_pil_images_numpy_arrays_and_bytes_embed_as_their_files(model):
    from_paths = model.embed(IMAGES)
    pil = [Image.open(p) for p in IMAGES]
    np.testing.assert_allclose(model.embed(pil), from_paths, atol=1e-6)
    arrays = [np.asarray(Image.open(p).convert("RGB")) for p in IMAGES]
    np.testing.assert_allclose(model.embed(arrays), from_paths, atol=1e-6)
    contents = [p.read_bytes() for p in IMAGES]
    np.testing.assert_allclose(model.embed(contents), from_paths, atol=1e-6)


def test_batches_of_any_size_give_the_same_embeddings(reference):
    # Batches of 3 then 1: two batch shapes, each planned once.
    small = vitrt.Model(NAFLEX, device="cpu", batch_size=3)
    embeddings = small.embed(IMAGES)
    np.testing.assert_allclose(embeddings, reference["image_embeds"], atol=1e-4)
    np.testing.assert_allclose(small.embed(IMAGES), embeddings, atol=0)


def test_pools_and_normalize(model):
    pooled = model.embed(IMAGES, pool="pooler")
    np.testing.assert_allclose(pooled, model.embed(IMAGES, pool="projected"), atol=0)
    mean = model.embed(IMAGES, pool="mean")
    assert mean.shape == pooled.shape and np.isfinite(mean).all()
    assert not np.allclose(mean, pooled)
    unit = model.embed(IMAGES, normalize=True)
    np.testing.assert_allclose(np.linalg.norm(unit, axis=1), 1, atol=1e-5)
    with pytest.raises(ValueError, match=r"SigLIP 2 NaFlex\) has no"):
        model.embed(IMAGES, pool="cls")


def test_zero_shot_is_siglip2_model(model, reference):
    results = model.zero_shot(IMAGES, PROMPTS, templates=["{}"], top_k=3)
    probs = reference["probs"]
    assert len(results) == 4
    for image, row in enumerate(results):
        assert len(row) == 3
        for p in row:
            assert p["label"] == PROMPTS[p["index"]]
            assert abs(p["probability"] - probs[image, p["index"]]) < 1e-5
    # Another label set, then the first again.
    other = model.zero_shot(IMAGES, ["cat", "dog"], top_k=2)
    assert {p["label"] for p in other[0]} == {"cat", "dog"}
    assert model.zero_shot(IMAGES, PROMPTS, templates=["{}"], top_k=3) == results


def test_what_is_not_built_for_naflex_is_refused_by_name(model):
    with pytest.raises(ValueError, match="classify\\(\\) is not built for SigLIP 2 NaFlex"):
        model.classify(IMAGES)
    with pytest.raises(ValueError, match="forward\\(\\) is not built for SigLIP 2 NaFlex"):
        model.forward(np.zeros((1, 3, 16, 16), dtype=np.float32))
    with pytest.raises(ValueError, match="images\\[1\\]"):
        model.embed([IMAGES[0], np.zeros((4, 4, 2), dtype=np.uint8)])
