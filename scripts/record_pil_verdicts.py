#!/usr/bin/env python3
"""Record PIL's verdict on every file of the PIL corpus (scripts/fetch_pil_corpus.py).

For each file, what `transformers.image_utils.load_image` makes of it: `PIL.Image.open`,
`ImageOps.exif_transpose`, `convert("RGB")`. The verdict is either the exception that stopped
it (`refused`, with its type and message) or the upright RGB image's size and the SHA-256 of
its pixels (`tobytes()`, HWC, 8 bits a sample), with the mode Pillow opened it in, the EXIF
orientation it applied and any warning it gave, for the reader. Written as one JSON file that
model/tests/pil_corpus.rs checks vitrt against, so CI needs neither Pillow nor transformers.

    python3 scripts/record_pil_verdicts.py [--corpus target/pil-corpus]
        [--out tests/fixtures/pil_corpus/verdicts.json]
    python3 scripts/record_pil_verdicts.py --every-file --corpus fuzz/corpus/image_decode \
        --out tests/fixtures/pil_corpus/fuzz_image_decode.json

The second records the image fuzzer's committed corpus (odd files the fuzzers found, every
file whatever its name), which the same test checks.

Files where vitrt deliberately differs from Pillow are listed in DELIBERATE_DIFFERENCES with
the reason and vitrt's outcome; the script copies them into the JSON as `vitrt_differs`, and
README.md must say them too.

Needs: pip install pillow==13.0.0 (the version the committed verdicts were made with; the
script refuses another unless --any-pillow is given).
"""

import argparse
import hashlib
import json
import pathlib
import warnings

import PIL
from PIL import Image, ImageOps, features

PILLOW_VERSION = "13.0.0"
REPO = pathlib.Path(__file__).resolve().parent.parent
EXTENSIONS = (".jpg", ".jpeg", ".png", ".webp")

# File (its path under Tests/images/) -> {"reason": why vitrt's verdict is not Pillow's,
# "vitrt": "refused"}, the outcome model/tests/pil_corpus.rs then expects of vitrt. None now:
# vitrt agrees with Pillow on every file.
DELIBERATE_DIFFERENCES: dict[str, dict[str, str]] = {}


def verdict(path: pathlib.Path) -> dict:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            with Image.open(path) as opened:
                mode = opened.mode
                orientation = opened.getexif().get(0x0112)
                upright = ImageOps.exif_transpose(opened)
                rgb = upright.convert("RGB")
        except Exception as error:  # noqa: BLE001: every refusal is a verdict
            # Without the corpus's location, which some messages name.
            message = str(error).replace(str(path), path.name)
            found = {"refused": f"{type(error).__name__}: {message}"}
        else:
            found = {
                "mode": mode,
                "orientation": orientation,
                "size": [rgb.width, rgb.height],
                "rgb_sha256": hashlib.sha256(rgb.tobytes()).hexdigest(),
            }
    messages = sorted({str(w.message) for w in caught})
    if messages:
        found["warnings"] = messages
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=pathlib.Path, default=REPO / "target" / "pil-corpus")
    parser.add_argument(
        "--out", type=pathlib.Path, default=REPO / "tests" / "fixtures" / "pil_corpus" / "verdicts.json"
    )
    parser.add_argument("--any-pillow", action="store_true", help="record with another Pillow version")
    parser.add_argument("--every-file", action="store_true", help="every file, not only .jpg/.jpeg/.png/.webp")
    parser.add_argument("--source", help="what the corpus is, for the record (default: Pillow's test images)")
    args = parser.parse_args()
    if PIL.__version__ != PILLOW_VERSION and not args.any_pillow:
        raise SystemExit(f"Pillow {PIL.__version__} is installed; the verdicts are Pillow {PILLOW_VERSION}'s")

    files = sorted(
        p.relative_to(args.corpus).as_posix()
        for p in args.corpus.rglob("*")
        if p.is_file() and (args.every_file or p.suffix.lower() in EXTENSIONS)
    )
    if not files:
        raise SystemExit(f"no images under {args.corpus}: run scripts/fetch_pil_corpus.py first")
    verdicts = {name: verdict(args.corpus / name) for name in files}
    for name, reason in DELIBERATE_DIFFERENCES.items():
        verdicts[name]["vitrt_differs"] = reason
    record = {
        "source": args.source
        or f"Tests/images/ of pillow-{PILLOW_VERSION}.tar.gz (PyPI), scripts/fetch_pil_corpus.py",
        "pillow": PIL.__version__,
        "libjpeg_turbo": features.version("libjpeg_turbo"),
        "libwebp": features.version("webp"),
        "zlib": features.version("zlib"),
        "steps": "Image.open, ImageOps.exif_transpose, convert('RGB') (transformers' load_image)",
        "files": verdicts,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    # One line a file, so that a new Pillow's changes read as a short diff.
    lines = [f"  {json.dumps(name)}: {json.dumps(v)}" for name, v in verdicts.items()]
    header = json.dumps({k: v for k, v in record.items() if k != "files"}, indent=1)[:-2]
    args.out.write_text(header + ',\n "files": {\n' + ",\n".join(lines) + "\n }\n}\n")
    refused = sum("refused" in v for v in verdicts.values())
    print(f"{len(files)} files ({refused} refused by Pillow) -> {args.out}")


if __name__ == "__main__":
    main()
