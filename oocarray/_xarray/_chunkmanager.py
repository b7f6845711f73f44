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
from oocarray._xarray._lazy import OOCLazyArray, resolve_pending, unwrap, wrap
from oocarray._xarray._store import store_in_parallel
from oocarray._xarray._unwrap import stored_source


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


def _copy(data: Any, blocks: tuple[tuple[int, ...], ...]) -> OOCLazyArray:
    """``data`` copied region by region into a temporary chunked array of chunks ``blocks``."""
    out = temp(tuple(data.shape), data.dtype, tuple(max(b[0], 1) for b in blocks))
    for region in _block_regions(blocks):
        out[region] = np.asarray(data[region])
    return OOCLazyArray(out)


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
        """An oocarray array over ``data``: the stored array itself for a variable that
        ``engine="oocarray"`` opened (its CF decoding applied lazily), else ``data`` copied
        block by block into a temporary chunked array (never whole in memory)."""
        if isinstance(data, OOCLazyArray):
            return data
        if isinstance(data, ChunkedArray | Expr):
            return OOCLazyArray(data)
        source = stored_source(data)
        if source is not None:
            return self.rechunk(OOCLazyArray(source), chunks)
        blocks = _normalize(chunks, tuple(data.shape))
        if isinstance(data, np.ndarray):
            return OOCLazyArray(from_numpy(data, chunks=tuple(max(b[0], 1) for b in blocks)))
        return _copy(data, blocks)

    def rechunk(self, data: Any, chunks: Any, **kwargs: Any) -> OOCLazyArray:
        """A temporary chunked array of the new regular chunks, written block by block (each
        block evaluates only its region; a full rechunker is future work)."""
        lazy: OOCLazyArray = wrap(unwrap(data))
        blocks = _normalize(chunks, lazy.shape)
        if blocks == lazy.chunks:
            return lazy
        return _copy(lazy.lazy, blocks)

    def compute(self, *data: Any, **kwargs: Any) -> Any:
        """NumPy arrays for each input, evaluated by oocarray's streaming engine."""
        resolve_pending(*data)  # the reductions deferred in all of them, in shared passes
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
        self,
        func: Callable[..., Any],
        signature: str,
        *args: Any,
        axes: Any = None,
        keepdims: bool = False,
        output_dtypes: Any = None,
        vectorize: bool | None = None,
        **kwargs: Any,
    ) -> Any:
        """``xr.apply_ufunc(..., dask="parallelized")`` for element-wise functions (every core
        dimension empty): ``func`` runs block by block through oocarray's ``map_blocks``."""
        if signature.replace(" ", "") != "->".join(
            [",".join(["()"] * len(args)), "()"]
        ) or kwargs.get("output_sizes"):
            raise _missing(f"apply_gufunc with core dimensions (signature {signature!r})")
        function = np.vectorize(func) if vectorize else func
        dtype = np.dtype(output_dtypes[0]) if output_dtypes else None
        lazy = [unwrap(a) for a in args]
        first = next(i for i, a in enumerate(lazy) if isinstance(a, ChunkedArray | Expr))
        others = lazy[:first] + lazy[first + 1 :]

        def ordered(block: Any, *rest: Any) -> Any:
            return function(*rest[:first], block, *rest[first:])

        return wrap(lazy[first].map_blocks(ordered, *others, dtype=dtype))

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
            if store_in_parallel(lazy, target, region, kwargs.get("lock")):
                continue  # written on every core; else block by block below
            offset = region or tuple(slice(0, n) for n in lazy.shape)
            for block in _block_regions(lazy.chunks):
                placed = tuple(
                    slice((o.start or 0) + b.start, (o.start or 0) + b.stop)
                    for o, b in zip(offset, block, strict=True)
                )
                target[placed] = lazy.lazy[block]  # reads (evaluates) this block only
        return None
