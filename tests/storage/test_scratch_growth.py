"""The native reader's per-thread decode buffers: chunks whose stored sizes differ by a few
percent (compressed chunks do) reuse one buffer instead of mapping a larger one each time,
which faulted every page of it anew."""

from __future__ import annotations

import itertools
import os
import threading
from pathlib import Path

import numcodecs
import numpy as np
import pytest

from oocarray import _native
from oocarray._memory import scratch_step

needs_zstd = pytest.mark.skipif(not _native.zstd_available(), reason="no libzstd here")

BASE = 256 * 1024
PAGE = os.sysconf("SC_PAGE_SIZE")


@needs_zstd
def test_slightly_larger_chunks_reuse_the_threads_stored_bytes_buffer(tmp_path: Path) -> None:
    # Noise does not compress: each frame is a page larger than the one before, 11 % in all.
    rng = np.random.default_rng(5)
    chunks = []
    for i in range(8):
        data = rng.integers(0, 256, BASE + i * PAGE, dtype=np.uint8)
        path = tmp_path / f"chunk-{i}"
        path.write_bytes(bytes(numcodecs.Zstd(level=1).encode(data)))
        chunks.append((str(path), data))
    stored = [os.path.getsize(p) for p, _ in chunks]
    assert all(b - a >= PAGE for a, b in itertools.pairwise(stored))

    mapped: list[int] = []
    errors: list[BaseException] = []

    def read_in_order() -> None:
        # A thread of its own: its reader state (and buffers) starts empty.
        try:
            for path, data in chunks:
                fd = os.open(path, os.O_RDONLY)
                try:
                    out = np.zeros(data.nbytes, np.uint8)  # whole, as a reduction's blocks
                    row = [0, 0, -1, 0, 0, 0, out.nbytes, _native.CODEC_ZSTD, data.nbytes]
                    table = np.array([row], dtype=np.int64)
                    failed, absent = _native.read_chunks(table, [fd], [out], 1)
                finally:
                    os.close(fd)
                assert not failed and not absent
                assert np.array_equal(out, data)
                mapped.append(_native.scratch())
        except BaseException as e:  # reported by the test's thread
            errors.append(e)

    reader = threading.Thread(target=read_in_order)
    with scratch_step():  # no other step's end gives scratch back while this one reads
        reader.start()
        reader.join()
    assert not errors, errors
    # The first chunk maps the buffers; none of the larger ones maps anything more.
    assert mapped[1:] == [mapped[0]] * (len(chunks) - 1), mapped
