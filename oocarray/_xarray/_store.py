"""``to_zarr`` of oocarray variables on every core: the chunk manager's ``store``.

xarray hands the chunk manager each variable's lazy data and the zarr array to write it to.
Writing block by block on the calling thread leaves the other cores idle while one block is
read, computed and compressed; the streaming engine's store pass instead evaluates and writes
blocks on worker threads, each block made of whole chunks of the target (so no two threads
ever write one chunk), inside the active manager's budget.
"""

from __future__ import annotations

import contextlib
from typing import Any

import numpy as np

from oocarray._compute._deferred import resolve
from oocarray._compute._engine import StoreTarget, evaluate
from oocarray._compute._nodes import as_node
from oocarray._xarray._lazy import OOCLazyArray

__all__ = ["store_in_parallel"]


def _aligned_grid(target: Any, offset: tuple[int, ...], shape: tuple[int, ...]) -> Any:
    """The target's chunk shape where every block of that grid, shifted by ``offset``, covers
    whole target chunks (or the end of the data); else None."""
    chunks = getattr(target, "chunks", None)
    if not isinstance(chunks, tuple) or len(chunks) != len(shape):
        return None
    if not all(isinstance(c, int | np.integer) and c > 0 for c in chunks):
        return None
    if any(o % int(c) for o, c in zip(offset, chunks, strict=True)):
        return None
    return tuple(int(c) for c in chunks)


def store_in_parallel(source: OOCLazyArray, target: Any, region: Any, lock: Any = None) -> bool:
    """Writes ``source`` into ``target`` (at ``region``: slices, or None for all of it) on
    the engine's worker threads; False (nothing written) where the target's chunks do not
    line up with the region, so a caller writes block by block instead.

    Examples
    --------
    >>> import numpy as np, oocarray as oc, zarr
    >>> from oocarray._xarray._lazy import OOCLazyArray
    >>> target = zarr.create_array(store={}, shape=(6,), chunks=(2,), dtype="f8")
    >>> store_in_parallel(OOCLazyArray(oc.from_numpy(np.arange(6.0), chunks=3)), target, None)
    True
    >>> target[:].tolist()
    [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    """
    node = as_node(source.lazy._tree())
    shape = tuple(node.shape)
    offset = tuple((s.start or 0) for s in region) if region else (0,) * len(shape)
    grid = _aligned_grid(target, offset, shape)
    if grid is None or not shape:
        return False
    guard = lock if lock is not None and hasattr(lock, "__enter__") else contextlib.nullcontext()

    def write(block_region: tuple[slice, ...], block: np.ndarray) -> None:
        placed = tuple(
            slice(o + s.start, o + s.stop) for o, s in zip(offset, block_region, strict=True)
        )
        with guard:
            target[placed] = block

    resolve([node], progress=False)
    evaluate([], [StoreTarget(node, write, grid)], progress=False)
    return True
