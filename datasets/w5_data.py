"""W5/W6/W9 data: a (N, 64) float32 array of noisy "measurements", generated deterministically.

Column ``j`` of row ``r`` is a slow per-column signal (an offset, a scale and a sine of the row
number with the column's own period) plus Gaussian noise, rounded to 3 decimals as a sensor
would report it.  Such values compress with zstd like real measurements do (a modest factor,
from the exponent and the high mantissa bits), unlike zeros or pure random bits.  The noise of
each block of ``BLOCK_ROWS`` rows comes from its own generator seeded by ``(SEED, block)``, so
any block can be made alone and the array never depends on the order blocks are written in.
Nothing is generated whole: memory stays at one block (16 MiB).

Writers: zarr v3 through ``oc.create`` (oocarray's own writer, any codec) and a raw ``.npy``
(``np.lib.format.open_memmap``) holding the same values (the uncompressed floor).
"""

from __future__ import annotations

import os

import numpy as np

COLUMNS = 64
DTYPE = np.dtype(np.float32)
ROW_BYTES = COLUMNS * DTYPE.itemsize
BLOCK_ROWS = 65_536  # 16 MiB; generation unit (chunk rows must divide it or be a multiple)
SEED = 5_005
DECIMALS = 3


def rows_for(nbytes: int) -> int:
    """Rows of an array of about ``nbytes``, a whole number of blocks."""
    return max(1, nbytes // (ROW_BYTES * BLOCK_ROWS)) * BLOCK_ROWS


def _column_params() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(SEED)
    offset = rng.uniform(-50.0, 50.0, COLUMNS)
    scale = rng.uniform(0.5, 20.0, COLUMNS)
    period = rng.uniform(1e3, 1e6, COLUMNS)
    return offset, scale, period


def block(index: int, n_rows: int) -> np.ndarray:
    """Block ``index`` (rows ``index*BLOCK_ROWS`` onwards, cut at ``n_rows``): a new array."""
    start = index * BLOCK_ROWS
    stop = min(start + BLOCK_ROWS, n_rows)
    if not 0 <= start < stop:
        raise ValueError(f"block {index} is outside {n_rows} rows")
    offset, scale, period = _column_params()
    rng = np.random.default_rng([SEED, index])
    r = np.arange(start, stop, dtype=np.float64)[:, None]
    signal = offset + scale * np.sin(2 * np.pi * r / period)
    noise = rng.standard_normal((stop - start, COLUMNS), dtype=np.float32)
    out = (signal + noise).astype(np.float32)
    return np.round(out, DECIMALS, out=out)


def blocks(n_rows: int) -> range:
    return range((n_rows + BLOCK_ROWS - 1) // BLOCK_ROWS)


def write_zarr(path: str, n_rows: int, chunk_rows: int = 16_384, codec: str = "zstd") -> None:
    """A zarr v3 array by ``oc.create(..., codec=codec)``, chunks ``(chunk_rows, 64)``."""
    import oocarray as oc

    if BLOCK_ROWS % chunk_rows:
        raise ValueError(f"chunk_rows must divide {BLOCK_ROWS}, got {chunk_rows}")
    x = oc.create(path, (n_rows, COLUMNS), DTYPE, chunks=(chunk_rows, COLUMNS), codec=codec)
    try:
        for i in blocks(n_rows):
            a = i * BLOCK_ROWS
            data = block(i, n_rows)
            x[a : a + len(data)] = data
    finally:
        x.close()
    for directory, _, files in os.walk(path):
        for name in files:
            _fsync(os.path.join(directory, name))


def write_npy(path: str, n_rows: int) -> None:
    """A raw ``.npy`` of the same values, written through a memory map and synced."""
    mm = np.lib.format.open_memmap(path, mode="w+", dtype=DTYPE, shape=(n_rows, COLUMNS))
    try:
        for i in blocks(n_rows):
            a = i * BLOCK_ROWS
            data = block(i, n_rows)
            mm[a : a + len(data)] = data
        mm.flush()
    finally:
        del mm
    _fsync(path)


def expected_moments(n_rows: int) -> tuple[np.ndarray, np.ndarray]:
    """Mean and std over axis 0 in float64, block by block (the reference every side meets)."""
    total = np.zeros(COLUMNS)
    total2 = np.zeros(COLUMNS)
    for i in blocks(n_rows):
        data = block(i, n_rows).astype(np.float64)
        total += data.sum(axis=0)
        total2 += np.square(data).sum(axis=0)
    mean = total / n_rows
    return mean, np.sqrt(np.maximum(total2 / n_rows - mean * mean, 0.0))


def _fsync(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
