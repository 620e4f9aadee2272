#!/usr/bin/env python3
"""Fetch the PIL corpus: the JPEG, PNG and WebP files of Pillow's own test images.

Pillow's developers collected these odd files over the years (CMYK and YCCK JPEGs, damaged
EXIF, every PNG colour type and bit depth, APNG syntax errors, truncated files, ...). They ship
in Pillow's source distribution on PyPI under `Tests/images/`, which `pip download` fetches
(PyPI is reachable from CI, GitHub is not). The archive's SHA-256 is checked against the one
pinned here, and only the files whose names end in .jpg, .jpeg, .png or .webp are extracted,
keeping their paths under `Tests/images/` (`apng/chunk_no_fctl.png`, ...).

    python3 scripts/fetch_pil_corpus.py [--out target/pil-corpus]

A folder already extracted from the pinned archive (its `.source` file names it) is kept as
it is, so a second run costs nothing. model/tests/pil_corpus.rs compares vitrt with the
verdicts that scripts/record_pil_verdicts.py recorded for these files with Pillow.
"""

import argparse
import hashlib
import pathlib
import shutil
import subprocess
import sys
import tarfile
import tempfile

PILLOW_VERSION = "13.0.0"
SDIST_NAME = f"pillow-{PILLOW_VERSION}.tar.gz"
SDIST_SHA256 = "cdcd1ba258178f7356d74170c9a81ba4eab6a5d55748bc402a5a2a6fe6be3510"
IMAGES_PREFIX = f"pillow-{PILLOW_VERSION}/Tests/images/"
EXTENSIONS = (".jpg", ".jpeg", ".png", ".webp")
DEFAULT_OUT = pathlib.Path(__file__).resolve().parent.parent / "target" / "pil-corpus"


def download_sdist(into: pathlib.Path) -> pathlib.Path:
    """Pillow's source distribution from PyPI, through pip (which prepares its metadata with
    setuptools and pybind11 wheels in an isolated environment: a few seconds)."""
    subprocess.run(
        [
            sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check",
            "--no-deps", "--no-binary", "pillow", f"pillow=={PILLOW_VERSION}", "--dest", str(into),
        ],
        check=True,
    )
    return into / SDIST_NAME


def sha256_of(path: pathlib.Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def extract_images(sdist: pathlib.Path, out: pathlib.Path) -> int:
    count = 0
    with tarfile.open(sdist) as archive:
        for member in archive.getmembers():
            if not (member.isfile() and member.name.startswith(IMAGES_PREFIX)):
                continue
            relative = pathlib.PurePosixPath(member.name[len(IMAGES_PREFIX):])
            if relative.suffix.lower() not in EXTENSIONS or ".." in relative.parts:
                continue
            target = out.joinpath(*relative.parts)
            target.parent.mkdir(parents=True, exist_ok=True)
            with archive.extractfile(member) as source, target.open("wb") as sink:
                shutil.copyfileobj(source, sink)
            count += 1
    return count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=pathlib.Path, default=DEFAULT_OUT)
    args = parser.parse_args()
    out: pathlib.Path = args.out
    stamp = out / ".source"
    source = f"{SDIST_NAME} sha256 {SDIST_SHA256}\n"
    if stamp.is_file() and stamp.read_text() == source:
        print(f"PIL corpus: {out} already holds {SDIST_NAME}'s images")
        return
    with tempfile.TemporaryDirectory() as download:
        sdist = download_sdist(pathlib.Path(download))
        found = sha256_of(sdist)
        if found != SDIST_SHA256:
            sys.exit(f"{SDIST_NAME}: sha256 {found}, expected {SDIST_SHA256}")
        if out.exists():
            shutil.rmtree(out)
        out.mkdir(parents=True)
        count = extract_images(sdist, out)
    stamp.write_text(source)
    print(f"PIL corpus: {count} files from {SDIST_NAME} in {out}")


if __name__ == "__main__":
    main()
