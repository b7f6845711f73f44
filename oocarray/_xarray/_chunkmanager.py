"""The ``chunked_array_type="oocarray"`` xarray chunk manager.

Variables it creates hold :class:`~oocarray._xarray._lazy.OOCLazyArray` objects over oocarray
chunked arrays, so xarray's arithmetic, ufuncs and reductions build oocarray expressions and
``compute``/``load`` evaluate them with the streaming engine inside the active manager's
budget.  Operations not built yet raise ``NotImplementedError`` naming the operation.

Examples
--------
>>> import numpy as np, xarray as xr
>>> ds = xr.Dataset({"t": ("x", np.arange(8.0))}).chunk(x=4, chunked_array_type="oocarray")
>>> float((ds.t * 2).mean().compute())
7.0
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from xarray.namedarray.parallelcompat import ChunkManagerEntrypoint

from oocarray._compute import ChunkedArray, Expr, from_numpy, temp
from oocarray._xarray._lazy import OOCLazyArray, unwrap, wrap


def _missing(operation: str) -> NotImplementedError:
    return NotImplementedError(
        f"{operation} is not supported by chunked_array_type='oocarray' yet: .compute() the "
        "data first or use chunked_array_type='dask'"
    )


def _normalize(chunks: Any, shape: tuple[int, ...]) -> tuple[tuple[int, ...], ...]:
    """Dask-style block sizes from ints, tuples of ints, tuples of sizes or ``-1``/``None``."""
    if isinstance(chunks, dict):
        chunks = tuple(chunks.get(i, -1) for i in range(len(shape)))
    if not isinstance(chunks, tuple | list):
        chunks = (chunks,) * len(shape)
    out = []
    for c, n in zip(chunks, shape, strict=True):
        if isinstance(c, tuple | list):
            out.append(tuple(int(v) for v in c))
            continue
        size = n if c in (None, -1, "auto") else int(c)
        size = max(min(size, n), 1)
        out.append(tuple([size] * (n // size) + ([n % size] if n % size else [])) or (0,))
    return tuple(out)


def _block_regions(chunks: tuple[tuple[int, ...], ...]) -> list[tuple[slice, ...]]:
    """The region of every block, from dask-style block sizes."""
    starts = [np.cumsum((0, *sizes)) for sizes in chunks]
    return [
        tuple(slice(int(s[i]), int(s[i + 1])) for s, i in zip(starts, index, strict=True))
        for index in np.ndindex(*(len(sizes) for sizes in chunks))
    ]


class OOCArrayChunkManager(ChunkManagerEntrypoint[Any]):
    """xarray's chunk manager for oocarray: chunked variables computed out of core."""

    def __init__(self) -> None:
        self.array_cls = OOCLazyArray
        self.available = True

    def is_chunked_array(self, data: Any) -> bool:
        return isinstance(data, OOCLazyArray | ChunkedArray | Expr)

    def chunks(self, data: Any) -> Any:
        return wrap(unwrap(data)).chunks

    def normalize_chunks(
        self,
        chunks: Any,
        shape: tuple[int, ...] | None = None,
        limit: int | None = None,
        dtype: Any = None,
        previous_chunks: Any = None,
    ) -> Any:
        """Block sizes per axis, as ``dask.array.core.normalize_chunks`` gives them."""
        assert shape is not None
        return _normalize(chunks, tuple(shape))

    def from_array(self, data: Any, chunks: Any, **kwargs: Any) -> OOCLazyArray:
        """An oocarray array over ``data``, copied block by block into a temporary chunked
        array (never the whole array in memory when ``data`` is a lazy backend array)."""
        if isinstance(data, OOCLazyArray):
            return data
        if isinstance(data, ChunkedArray | Expr):
            return OOCLazyArray(data)
        shape = tuple(data.shape)
        blocks = _normalize(chunks, shape)
        chunk = tuple(max(b[0], 1) for b in blocks)
        if isinstance(data, np.ndarray):
            return OOCLazyArray(from_numpy(data, chunks=chunk))
        out = temp(shape, data.dtype, chunk)
        for region in _block_regions(blocks):
            out[region] = np.asarray(data[region])
        return OOCLazyArray(out)

    def rechunk(self, data: Any, chunks: Any, **kwargs: Any) -> Any:
        """Keeps the stored chunks: oocarray streams over any chunking (a full rechunk is
        future work), so only the reported block sizes would differ."""
        return data

    def compute(self, *data: Any, **kwargs: Any) -> tuple[np.ndarray, ...]:
        """NumPy arrays for each input, evaluated by oocarray's streaming engine."""
        return tuple(np.asarray(unwrap(d)) for d in data)

    @property
    def array_api(self) -> Any:
        from oocarray import array_api

        return array_api

    def reduction(self, *args: Any, **kwargs: Any) -> Any:
        raise _missing("a custom reduction (chunkmanager.reduction)")

    def scan(self, *args: Any, **kwargs: Any) -> Any:
        raise _missing("a cumulative scan (chunkmanager.scan)")

    def apply_gufunc(
        self, func: Callable[..., Any], signature: str, *args: Any, **kwargs: Any
    ) -> Any:
        raise _missing("xr.apply_ufunc(..., dask='parallelized') (apply_gufunc)")

    def map_blocks(self, *args: Any, **kwargs: Any) -> Any:
        raise _missing("map_blocks")

    def blockwise(self, *args: Any, **kwargs: Any) -> Any:
        raise _missing("blockwise")

    def store(self, sources: Any, targets: Any, **kwargs: Any) -> Any:
        """Writes each source into its target region by region (``to_zarr``)."""
        sources = sources if isinstance(sources, list | tuple) else [sources]
        targets = targets if isinstance(targets, list | tuple) else [targets]
        regions = kwargs.get("regions") or [None] * len(sources)
        for source, target, region in zip(sources, targets, regions, strict=True):
            lazy = wrap(unwrap(source))
            offset = region or tuple(slice(0, n) for n in lazy.shape)
            for block in _block_regions(lazy.chunks):
                placed = tuple(
                    slice((o.start or 0) + b.start, (o.start or 0) + b.stop)
                    for o, b in zip(offset, block, strict=True)
                )
                target[placed] = lazy.lazy[block]  # reads (evaluates) this block only
        return None
