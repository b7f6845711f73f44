"""W7 data: a (N, 1024) float32 array of noise, generated deterministically block by block.

Row ``r`` is a row of a fixed pool of standard-normal noise (``POOL_ROWS`` rows, seeded), picked
by an odd stride so that neighbouring rows differ, with column 0 overwritten by ``r`` itself
(exact in float32 below 2**24 rows): a reader's result names the rows it holds, so every side of
the benchmark can be checked.  Nothing is ever generated whole: each writer fills the file one
block of rows at a time, so memory stays at one block plus the pool (64 MiB).

Writers: a raw ``.npy`` (``np.lib.format.open_memmap``), zarr v3 through ``oc.create`` (any of
its codecs), and HDF5 through h5py (contiguous, or chunked without compression).
"""

from __future__ import annotations

import os
from functools import lru_cache

import numpy as np

COLUMNS = 1024
DTYPE = np.dtype(np.float32)
ROW_BYTES = COLUMNS * DTYPE.itemsize
POOL_ROWS = 16_384
STRIDE = 7_919  # odd, so r -> r * STRIDE % POOL_ROWS is a bijection on each run of POOL_ROWS
SEED = 7_007
MAX_ROWS = 1 << 24  # row ids are exact in float32 below this


@lru_cache(maxsize=1)
def _pool() -> np.ndarray:
    pool = np.random.default_rng(SEED).standard_normal((POOL_ROWS, COLUMNS), dtype=np.float32)
    pool.setflags(write=False)
    return pool


def rows(start: int, stop: int) -> np.ndarray:
    """Rows ``start:stop`` of the array (a new C-contiguous block)."""
    if not 0 <= start <= stop <= MAX_ROWS:
        raise ValueError(f"rows {start}:{stop} out of range 0:{MAX_ROWS}")
    ids = np.arange(start, stop, dtype=np.int64)
    block = _pool()[(ids * STRIDE) % POOL_ROWS]
    block[:, 0] = ids
    return block


def _blocks(n_rows: int, block_rows: int) -> list[tuple[int, int]]:
    return [(a, min(a + block_rows, n_rows)) for a in range(0, n_rows, block_rows)]


def write_npy(path: str, n_rows: int, block_rows: int = 16_384) -> None:
    """A raw ``.npy`` file, written through a memory map and synced to disk."""
    mm = np.lib.format.open_memmap(path, mode="w+", dtype=DTYPE, shape=(n_rows, COLUMNS))
    try:
        for a, b in _blocks(n_rows, block_rows):
            mm[a:b] = rows(a, b)
        mm.flush()
    finally:
        del mm
    _fsync(path)


def write_zarr(
    path: str, n_rows: int, chunk_rows: int, codec: str, block_rows: int = 16_384
) -> None:
    """A zarr v3 array made by ``oc.create(..., codec=codec)`` with chunks ``(chunk_rows, 1024)``;
    blocks are whole chunks, so every chunk is written once without being read."""
    import oocarray as oc

    block_rows = max(chunk_rows, block_rows // chunk_rows * chunk_rows)
    x = oc.create(path, (n_rows, COLUMNS), DTYPE, chunks=(chunk_rows, COLUMNS), codec=codec)
    try:
        for a, b in _blocks(n_rows, block_rows):
            x[a:b] = rows(a, b)
    finally:
        x.close()
    for directory, _, files in os.walk(path):
        for name in files:
            _fsync(os.path.join(directory, name))


def write_hdf5(
    path: str, n_rows: int, chunk_rows: int | None = None, block_rows: int = 16_384
) -> None:
    """An HDF5 file with one dataset ``"data"``: contiguous (``chunk_rows=None``) or chunked
    ``(chunk_rows, 1024)``, uncompressed either way."""
    import h5py

    chunks = None if chunk_rows is None else (chunk_rows, COLUMNS)
    if chunk_rows is not None:
        block_rows = max(chunk_rows, block_rows // chunk_rows * chunk_rows)
    with h5py.File(path, "w") as f:
        ds = f.create_dataset("data", shape=(n_rows, COLUMNS), dtype=DTYPE, chunks=chunks)
        for a, b in _blocks(n_rows, block_rows):
            ds[a:b] = rows(a, b)
    _fsync(path)


def _fsync(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
