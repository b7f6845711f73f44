"""map_chunks' job: what every block needs, and how many rows a block takes.

A :class:`Job` is small and picklable on purpose: the dask engine sends it with every task,
so it names chunked inputs by path (a worker process reopens them) rather than holding them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from oocarray._compute import ChunkedArray
from oocarray._storage._base import auto_chunks

__all__ = ["Job", "Spec", "Structure", "block_rows_for", "dataset_of"]

# Inputs whose chunks along axis 0 differ are read in blocks of their least common multiple of
# rows, unless that is more than this many times their largest chunk (memory would balloon).
MAX_BLOCK_GROWTH = 4

Structure = Literal["one", "tuple", "dict"]  # the shape of ``out``, and of what fn returns
Spec = tuple[np.dtype[Any], tuple[int, ...]]  # an output's dtype and row shape


@dataclass(frozen=True)
class Job:
    """One map_chunks run: the function, how to reach inputs and outputs, and the blocks.

    The chunked inputs and outputs travel to worker processes pickled, which is by location:
    a worker reopens each (a path, or a URL with its storage options) and reads or writes
    the chunks itself."""

    fn: Callable[..., Any]
    sources: tuple[ChunkedArray | None, ...]  # None: an ndarray, handed over block by block
    outputs: tuple[ChunkedArray, ...]  # empty until the outputs are open
    structure: Structure
    names: tuple[Any, ...]  # dict keys, or positions
    rows: int
    block_rows: int

    @property
    def block_count(self) -> int:
        return math.ceil(self.rows / self.block_rows)

    def region(self, index: int) -> slice:
        start = index * self.block_rows
        return slice(start, min(start + self.block_rows, self.rows))


def dataset_of(x: ChunkedArray) -> str | None:
    """The HDF5 dataset a reopened store needs (zarr and .npy paths name the array)."""
    name = x._store.dataset_name
    return name if isinstance(name, str) else None


def _grid_rows(x: ChunkedArray) -> int:
    return x.shards[0] if x.shards else x.chunks[0]


def block_rows_for(
    sources: Sequence[ChunkedArray | np.ndarray],
    outputs: Sequence[ChunkedArray],
    rows: int,
    given: int | None,
) -> int:
    """Rows per block: whole chunks of every output; the inputs' chunks where they agree."""
    required = sorted({_grid_rows(o) for o in outputs})
    if given is not None:
        if isinstance(given, bool) or not isinstance(given, (int, np.integer)) or given < 1:
            raise ValueError(f"block_rows must be a positive int, got {given!r}")
        bad = [r for r in required if given % r]
        if bad:
            raise ValueError(
                f"block_rows={given} must be a multiple of the outputs' chunk rows {bad}, so a "
                "block writes whole chunks"
            )
        return int(given)
    # Memory-mapped inputs (.npy, contiguous HDF5) have no chunks worth following.
    preferred = sorted(
        {_grid_rows(x) for x in sources if isinstance(x, ChunkedArray) and x.location != "mmap"}
    )
    grids = required + preferred
    if not grids:
        widest = max(sources, key=lambda x: math.prod(x.shape[1:]) * x.dtype.itemsize)
        return max(1, auto_chunks((max(rows, 1), *widest.shape[1:]), widest.dtype.itemsize)[0])
    common = math.lcm(*grids)
    if common > MAX_BLOCK_GROWTH * max(grids) and common > min(rows, max(grids)):
        raise ValueError(
            f"the inputs and outputs are chunked differently along axis 0 ({grids} rows), and "
            f"a block covering whole chunks of each would take {common} rows; pass "
            f"block_rows= (a multiple of the outputs' chunk rows {required or 'any'}), or "
            "rewrite an input with matching chunks (x.to_zarr(path, chunks=...))"
        )
    return common
