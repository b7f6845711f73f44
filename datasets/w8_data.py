"""W8 data: a (N, 256) float32 array of noisy features, generated deterministically.

Column 0 is the row number (exact in float32 below 2**24 rows, 16 GiB of such rows), so a
reader can check that an epoch saw every row exactly once.  The other columns are a slow
per-column signal plus Gaussian noise, rounded to 3 decimals, like :mod:`datasets.w5_data`
(values that compress modestly with zstd, as real measurements do).  Each block of
``BLOCK_ROWS`` rows comes from its own generator seeded by ``(SEED, block)``: any block can
be made alone, in any order, and memory stays at one block (16 MiB).
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

COLUMNS = 256
DTYPE = np.dtype(np.float32)
ROW_BYTES = COLUMNS * DTYPE.itemsize
BLOCK_ROWS = 16_384  # 16 MiB
CHUNK_ROWS = 4_096  # 4 MiB chunks
SEED = 8_008
DECIMALS = 3


def rows_for(nbytes: int) -> int:
    """Rows of an array of about ``nbytes``, a whole number of blocks."""
    return max(1, nbytes // (ROW_BYTES * BLOCK_ROWS)) * BLOCK_ROWS


def _column_params() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(SEED)
    return (
        rng.uniform(-50.0, 50.0, COLUMNS),
        rng.uniform(0.5, 20.0, COLUMNS),
        rng.uniform(1e3, 1e6, COLUMNS),
    )


def block(index: int, n_rows: int) -> np.ndarray:
    """Block ``index`` (rows ``index * BLOCK_ROWS`` onwards, cut at ``n_rows``): a new array."""
    start = index * BLOCK_ROWS
    stop = min(start + BLOCK_ROWS, n_rows)
    if not 0 <= start < stop:
        raise ValueError(f"block {index} is outside {n_rows} rows")
    offset, scale, period = _column_params()
    rng = np.random.default_rng([SEED, index])
    r = np.arange(start, stop, dtype=np.float32)[:, None]
    out = rng.standard_normal((stop - start, COLUMNS), dtype=np.float32)
    out += (offset + scale * np.sin(2 * np.pi * r / period)).astype(np.float32)
    np.round(out, DECIMALS, out=out)
    out[:, 0] = r[:, 0]
    return out


def blocks(n_rows: int) -> Iterator[np.ndarray]:
    """Every block in order: the stream an ingest writes."""
    for i in range((n_rows + BLOCK_ROWS - 1) // BLOCK_ROWS):
        yield block(i, n_rows)


def write_zarr(path: str, n_rows: int) -> None:
    """The array by ``oc.from_batches``: zstd, chunks ``(CHUNK_ROWS, 256)``."""
    import oocarray as oc

    oc.from_batches(blocks(n_rows), path, chunks=(CHUNK_ROWS, COLUMNS), codec="zstd").close()
