"""``python -m benchmarks.cache_entry_reads [--entries 1024] [--passes 7]``: the native
reader's cost of a chunk-cache entry, by codec.

Each entry is a file of a short header and a 1 MiB chunk of random float32 stored as zarr
stores it (uncompressed or zstd level 3, then zarr's crc32c), read through
``_native.read_chunks`` as the chunk cache hands it over: checked against the entry's
CRC-32C (seeded with its version's) before it is decoded.  One thread; the best passes' CPU
seconds per GiB.  Run it under two source trees (``PYTHONPATH=TREE``) to compare them.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time

import google_crc32c
import numcodecs
import numpy as np

from oocarray import _native
from oocarray._storage._zarr._layout import _load_libraries

CHUNK_BYTES = 1 << 20
HEADER = b"header"


def _entries(directory: str, payload: bytes, count: int) -> list[int]:
    """``count`` entry files of ``payload``, open for reading."""
    fds = []
    for i in range(count):
        path = os.path.join(directory, f"e{i}")
        with open(path, "wb") as f:
            f.write(HEADER + payload)
        fds.append(os.open(path, os.O_RDONLY))
    return fds


def measure(codec: str, count: int, passes: int) -> dict[str, float]:
    """The best three passes' CPU seconds per GiB of chunks, for ``codec`` ("raw", "zstd")."""
    _load_libraries()
    chunk = np.random.default_rng(0).standard_normal(CHUNK_BYTES // 4).astype(np.float32)
    raw = chunk.view(np.uint8)
    body = raw.tobytes() if codec == "raw" else numcodecs.Zstd(level=3).encode(raw)
    payload = body + int(google_crc32c.value(body)).to_bytes(4, "little")
    seed = int(google_crc32c.value(b"etag"))
    entry_crc = int(google_crc32c.extend(seed, payload))
    kind = (_native.CODEC_RAW if codec == "raw" else _native.CODEC_ZSTD) | _native.CODEC_CRC32C
    jobs = np.array(
        [
            [i, len(HEADER), len(payload), 0, i, 0, CHUNK_BYTES, kind, CHUNK_BYTES]
            for i in range(count)
        ]
    )
    outs = [np.empty(CHUNK_BYTES, np.uint8) for _ in range(count)]
    with tempfile.TemporaryDirectory(prefix="oocarray-cache-entries-") as directory:
        fds = _entries(directory, payload, count)
        try:
            seconds = []
            for _ in range(passes):
                start = time.process_time()
                failed, absent = _native.read_chunks(
                    jobs, [(fd, seed, entry_crc) for fd in fds], outs, 1
                )
                seconds.append(time.process_time() - start)
                if failed or absent or not np.array_equal(outs[-1], raw):
                    raise AssertionError(f"cache entries read wrong: {failed[:1]} {absent[:1]}")
        finally:
            for fd in fds:
                os.close(fd)
    gib = count * CHUNK_BYTES / 2**30
    return {f"best{i + 1}_s_per_gib": round(s / gib, 3) for i, s in enumerate(sorted(seconds)[:3])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--entries", type=int, default=1024)
    parser.add_argument("--passes", type=int, default=7)
    args = parser.parse_args()
    for codec in ("raw", "zstd"):
        print(json.dumps({"codec": codec, **measure(codec, args.entries, args.passes)}))


if __name__ == "__main__":
    main()
