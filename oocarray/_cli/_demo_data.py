"""The demo's data: a regression table of float32 features on very different scales, and a
target linear in them, generated deterministically block by block.

Column ``j < FEATURES`` is ``offset[j] + scale[j] * u[j]`` with ``u`` uniform on
``[-0.5, 0.5)``; the last column is the target ``u @ weights + NOISE * e`` (``e`` uniform
too), all rounded to 3 decimals as a sensor reports them.  The offsets (-50..50) and scales
(0.5..20) differ per column, so the features need normalising before gradient descent.  Each
block comes from its own generator seeded by ``(SEED, block)``: any block can be made alone,
in any order (in parallel), and memory stays at one block.

This module ships with the package so that ``oocarray demo`` works from an installed wheel;
``datasets/demo_data.py`` in the source tree is the same generator, for the benchmarks.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = [
    "COLUMNS",
    "DTYPE",
    "FEATURES",
    "ROW_BYTES",
    "DemoData",
]

FEATURES = 31
COLUMNS = FEATURES + 1  # the features, then the target
DTYPE = np.dtype(np.float32)
ROW_BYTES = COLUMNS * DTYPE.itemsize
SEED = 14_014
NOISE = 0.5
DECIMALS = 3


@dataclass(frozen=True)
class DemoData:
    """The demo table of ``n_rows`` rows, made in blocks of ``block_rows``.

    Examples
    --------
    >>> data = DemoData(n_rows=1000, block_rows=256)
    >>> data.n_blocks, data.block(3).shape
    (4, (232, 32))
    >>> bool((data.block(1) == data.block(1)).all())
    True
    """

    n_rows: int
    block_rows: int

    @staticmethod
    def rows_for(nbytes: int, block_rows: int) -> int:
        """Rows of a table of about ``nbytes`` (at least one block)."""
        return max(block_rows, nbytes // ROW_BYTES)

    @property
    def nbytes(self) -> int:
        return self.n_rows * ROW_BYTES

    @property
    def n_blocks(self) -> int:
        return -(-self.n_rows // self.block_rows)

    @staticmethod
    def params() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The per-feature offsets and scales, and the true weights of the target."""
        rng = np.random.default_rng(SEED)
        offset = rng.uniform(-50.0, 50.0, FEATURES)
        scale = rng.uniform(0.5, 20.0, FEATURES)
        weights = rng.standard_normal(FEATURES)
        return offset, scale, weights

    def block(self, index: int) -> np.ndarray:
        """Rows ``index * block_rows`` onwards (cut at ``n_rows``): a new array."""
        start = index * self.block_rows
        stop = min(start + self.block_rows, self.n_rows)
        if not 0 <= start < stop:
            raise ValueError(f"block {index} is outside {self.n_rows} rows")
        offset, scale, weights = self.params()
        u = np.random.default_rng([SEED, index]).random((stop - start, COLUMNS), DTYPE)
        u -= 0.5
        out = np.empty_like(u)
        np.matmul(u[:, :FEATURES], weights.astype(DTYPE), out=out[:, FEATURES])
        out[:, FEATURES] += NOISE * u[:, FEATURES]
        np.multiply(u[:, :FEATURES], scale.astype(DTYPE), out=out[:, :FEATURES])
        out[:, :FEATURES] += offset.astype(DTYPE)
        return np.round(out, DECIMALS, out=out)

    def true_weights(self, mean: Any, std: Any) -> np.ndarray:
        """The weights a linear model of the normalised table should learn, given the
        columns' mean and std (the normalisation the demo applied)."""
        _, scale, weights = self.params()
        std = np.asarray(std, np.float64)
        return np.asarray(weights * std[:FEATURES] / scale / std[FEATURES])
