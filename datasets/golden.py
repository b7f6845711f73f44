"""Golden files: small arrays written by oocarray that pin its on-disk format.

``python -m datasets.golden`` writes them under ``datasets/golden/``; the test suite reads them
back, and writes fresh copies to compare metadata and (uncompressed) chunk bytes, so a change
in what oocarray writes shows up as a failing test instead of silently producing files that
other readers disagree with.  ``golden/before-checksums/`` keeps the same arrays as oocarray
wrote them before its chains carried a checksum (zstd without its frame checksum, no crc32c
codec): stores written then must still read.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent / "golden"
BEFORE_CHECKSUMS = HERE / "before-checksums"
CODECS = ("zstd", "lz4", "blosc", "gzip", "none")
SHAPE = (13, 6)
CHUNKS = (5, 4)


def golden_data() -> np.ndarray:
    """The values every golden array holds."""
    return (np.arange(13 * 6, dtype=np.float32).reshape(SHAPE) - 20.0) / 4.0


def write(directory: Path, codec: str) -> Path:
    import oocarray as oc

    path = directory / f"{codec}.zarr"
    x = oc.create(path, SHAPE, np.float32, chunks=CHUNKS, codec=codec)
    x[...] = golden_data()
    return path


def main() -> None:
    HERE.mkdir(parents=True, exist_ok=True)
    for codec in CODECS:
        shutil.rmtree(HERE / f"{codec}.zarr", ignore_errors=True)  # never before-checksums/
        print(write(HERE, codec))


if __name__ == "__main__":
    main()
