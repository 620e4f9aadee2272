#!/usr/bin/env python3
"""Record Pillow's reading of EXIF blocks, damaged ones above all, for vitrt's EXIF reader.

Takes the EXIF block of every file of the PIL corpus (scripts/fetch_pil_corpus.py) that has
one, keeps its first 160 bytes (the header and the first directory's first entries; what
lies past them reads as cut off), drops repeats, and makes seeded mutations of each (bit flips, bytes set to
values that matter to a TIFF directory, truncations, the byte order swapped): damaged EXIF as
cameras, editors and fuzzers make it. For every block it records what Pillow's
`Exif().load(block)` followed by `.get(0x0112)` gives, the Orientation tag that
`ImageOps.exif_transpose` acts on:

- `null`: no Orientation tag;
- an integer n from 1 to 9: a tag whose value equals n (as Python's `==` says: 6, 6.0, 12/2);
- 0: a tag whose value equals no such integer (text, bytes, 6.5, x/0, 300);
- "raises": Pillow raises, so `exif_transpose`, and `load_image`, fail.

Written to tests/fixtures/pil_corpus/exif_blocks.json (hex blocks), which the unit tests of
model/src/preprocess/pil_metadata.rs check `orientation_tag` against.

    python3 scripts/record_exif_verdicts.py [--corpus target/pil-corpus] [--mutations 16]

Needs: pip install pillow==13.0.0.
"""

import argparse
import json
import pathlib
import random
import warnings

import PIL
from PIL import Image

PILLOW_VERSION = "13.0.0"
REPO = pathlib.Path(__file__).resolve().parent.parent
EXTENSIONS = (".jpg", ".jpeg", ".png", ".webp")
KEEP_BYTES = 160
# Bytes that matter in a TIFF directory: small counts and types, orientations, 0x01 0x12
# (Orientation's tag), and the extremes.
INTERESTING = [0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x08, 0x09, 0x0A, 0x0B, 0x0C, 0x10,
               0x12, 0x2A, 0x2B, 0x4D, 0x49, 0x7F, 0x80, 0xFF]


def pillow_orientation(block: bytes):
    exif = Image.Exif()
    try:
        exif.load(block)
        if 0x0112 not in exif:
            return None
        value = exif.get(0x0112)
    except Exception:  # noqa: BLE001: any exception is Pillow's refusal
        return "raises"
    return next((n for n in range(1, 10) if value == n), 0)


def mutate(rng: random.Random, block: bytes) -> bytes:
    out = bytearray(block)
    for _ in range(rng.randint(1, 3)):
        if not out:
            break
        # Most edits land in the header and the first directory, where the orientation is.
        at = rng.randrange(min(len(out), 64 if rng.random() < 0.7 else len(out)))
        choice = rng.randrange(5)
        if choice == 0:
            out[at] ^= 1 << rng.randrange(8)
        elif choice == 1:
            out[at] = rng.choice(INTERESTING)
        elif choice == 2:
            del out[rng.randrange(len(out)):]
        elif choice == 3:
            prefix = 6 if out.startswith(b"Exif\0\0") else 0
            if len(out) >= prefix + 2 and out[prefix:prefix + 2] in (b"II", b"MM"):
                out[prefix:prefix + 2] = b"MM" if out[prefix:prefix + 2] == b"II" else b"II"
        else:
            out[at:at] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 4)))
    return bytes(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=pathlib.Path, default=REPO / "target" / "pil-corpus")
    parser.add_argument(
        "--out", type=pathlib.Path, default=REPO / "tests" / "fixtures" / "pil_corpus" / "exif_blocks.json"
    )
    parser.add_argument("--mutations", type=int, default=16, help="mutations of each block")
    args = parser.parse_args()
    if PIL.__version__ != PILLOW_VERSION:
        raise SystemExit(f"Pillow {PIL.__version__} is installed; the verdicts are Pillow {PILLOW_VERSION}'s")
    warnings.simplefilter("ignore")
    bases = {}
    for path in sorted(args.corpus.rglob("*")):
        if not (path.is_file() and path.suffix.lower() in EXTENSIONS):
            continue
        try:
            with Image.open(path) as image:
                image.load()
                exif = image.info.get("exif")
        except Exception:  # noqa: BLE001: files Pillow refuses have no block to take
            continue
        if isinstance(exif, bytes) and exif and exif[:KEEP_BYTES] not in bases.values():
            bases[path.relative_to(args.corpus).as_posix()] = exif[:KEEP_BYTES]
    rng = random.Random(39)
    blocks = []
    for name, base in bases.items():
        blocks.append({"from": name, "hex": base.hex(), "pillow": pillow_orientation(base)})
        for i in range(args.mutations):
            block = mutate(rng, base)
            blocks.append({"from": f"{name} mutation {i}", "hex": block.hex(), "pillow": pillow_orientation(block)})
    lines = [f"  {json.dumps(b)}" for b in blocks]
    args.out.write_text(
        "{\n"
        f' "pillow": {json.dumps(PIL.__version__)},\n'
        f' "source": "EXIF blocks of the PIL corpus (first {KEEP_BYTES} bytes) and {args.mutations} '
        'seeded mutations of each, scripts/record_exif_verdicts.py",\n'
        ' "blocks": [\n' + ",\n".join(lines) + "\n ]\n}\n"
    )
    outcomes = {}
    for b in blocks:
        outcomes[str(b["pillow"])] = outcomes.get(str(b["pillow"]), 0) + 1
    print(f"{len(blocks)} blocks from {len(bases)} files -> {args.out}: {outcomes}")


if __name__ == "__main__":
    main()
