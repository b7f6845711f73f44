"""Rows of an uncompressed array read at random read those rows only: the chunk file is
opened with the kernel told it is read at random, so its readahead does not read on to the
file's end.  Rows that go on from where the thread's last read ended keep the readahead."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

import oocarray as oc
from oocarray import _native

PAGE = 4096
ROW = 1024  # float32: one page a row
ROWS = 512  # a chunk: 2 MiB and its CRC-32C


def _cached(path: Path, drop: bool = False) -> int:
    """How many of the file's pages are in the page cache (after evicting them: ``drop``)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        if drop:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        return _native.cached_pages(fd, 0, os.fstat(fd).st_size)
    finally:
        os.close(fd)


def _pread_pages(path: Path, first: int, count: int) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.pread(fd, count * PAGE, first * PAGE)
    finally:
        os.close(fd)


@pytest.fixture
def store(tmp_path: Path) -> tuple[str, np.ndarray, Path]:
    values = np.random.default_rng(0).random((2 * ROWS, ROW), dtype=np.float32)
    path = str(tmp_path / "raw.zarr")
    oc.create(path, values.shape, "float32", chunks=(ROWS, ROW), codec="none")[:] = values
    chunk = tmp_path / "raw.zarr" / "c" / "1" / "0"
    if _cached(chunk, drop=True):
        pytest.skip("this file system keeps the pages cached")
    return path, values, chunk


@pytest.mark.parametrize("rows", [slice(ROWS - 16, ROWS + 16), slice(ROWS, ROWS + 256)])
def test_rows_read_at_random_are_read_alone(
    store: tuple[str, np.ndarray, Path], rows: slice
) -> None:
    # Rows that start the second chunk's file: the kernel's readahead would read on.
    path, values, chunk = store
    x = oc.open(path)
    np.testing.assert_array_equal(x[rows], values[rows])
    assert _cached(chunk) == rows.stop - ROWS  # one page a row
    # A whole chunk is read whole (its CRC-32C after its bytes).
    np.testing.assert_array_equal(x[ROWS:], values[ROWS:])
    assert _cached(chunk) == -(-chunk.stat().st_size // PAGE)


def test_rows_read_in_order_keep_the_readahead(store: tuple[str, np.ndarray, Path]) -> None:
    path, values, chunk = store
    # The kernel reads ahead of a read that goes on from cached pages (else nothing to check).
    _pread_pages(chunk, 0, 256)
    _pread_pages(chunk, 256, 4)
    if _cached(chunk) == 260:
        pytest.skip("this kernel reads no more than asked after cached pages")
    _cached(chunk, drop=True)
    x = oc.open(path)
    np.testing.assert_array_equal(x[ROWS : ROWS + 256], values[ROWS : ROWS + 256])
    assert _cached(chunk) == 256  # the first read: at random
    np.testing.assert_array_equal(x[ROWS + 256 : ROWS + 260], values[ROWS + 256 : ROWS + 260])
    assert _cached(chunk) > 260  # on from the last: read ahead
    # From elsewhere again: at random.
    _cached(chunk, drop=True)
    np.testing.assert_array_equal(x[ROWS + 100 : ROWS + 104], values[ROWS + 100 : ROWS + 104])
    assert _cached(chunk) == 4
