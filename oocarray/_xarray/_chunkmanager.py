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

Functions written for dask's blocks run block by block, core dimensions whole in each call:

>>> cube = xr.DataArray(np.arange(24.0).reshape(4, 6), dims=("time", "x"))
>>> cube = cube.chunk(time=2, chunked_array_type="oocarray")
>>> norm = xr.apply_ufunc(np.linalg.norm, cube, input_core_dims=[["x"]],
...                       kwargs={"axis": -1}, dask="parallelized", output_dtypes=[float])
>>> np.round(norm.values, 2).tolist()
[7.42, 21.24, 35.76, 50.39]
>>> cube.rolling(time=2).mean().isel(x=0).values.tolist()
[nan, 3.0, 9.0, 15.0]
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np
from xarray.namedarray.parallelcompat import ChunkManagerEntrypoint

from oocarray._compute import ChunkedArray, Expr, from_numpy, temp
from oocarray._xarray import _block_calls, _block_scans, _distributed
from oocarray._xarray._lazy import OOCLazyArray, resolve_pending, unwrap, wrap
from oocarray._xarray._store import store_in_parallel
from oocarray._xarray._unwrap import stored_source


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

    def compute(self, *data: Any, client: Any = None, **kwargs: Any) -> Any:
        """NumPy arrays for each input, evaluated by oocarray's streaming engine (the
        reductions deferred in all of them together, in shared passes), or block by block on
        a ``dask.distributed`` cluster when ``client`` is given (``ds.compute(client=c)``) or
        a default client is active (each worker under its own budget: register
        ``oocarray.dask.MemoryBudgetPlugin`` on it)."""
        # Deferred reductions first, here (each small; blocks on the workers read them held).
        resolve_pending(*data)
        cluster = _distributed.active_client(client)
        if cluster is None:
            return tuple(np.asarray(unwrap(d)) for d in data)
        results = []
        for item in data:
            if not self.is_chunked_array(item):
                results.append(np.asarray(item))
                continue
            node, chunks = _block_calls.node_of(item)
            results.append(_distributed.compute_blocks(cluster, node, _block_regions(chunks)))
        return tuple(results)

    @property
    def array_api(self) -> Any:
        from oocarray import array_api

        return array_api

    def reduction(
        self,
        arr: Any,
        func: Callable[..., Any],
        combine_func: Callable[..., Any] | None = None,
        aggregate_func: Callable[..., Any] | None = None,
        axis: int | Sequence[int] | None = None,
        dtype: Any = None,
        keepdims: bool = False,
    ) -> Any:
        """dask's ``reduction`` (xarray's ``first``/``last``): ``func`` on each block, then
        ``aggregate_func`` over the partials, both lazy."""
        return _block_scans.reduction(
            arr, func, combine_func, aggregate_func, axis=axis, dtype=dtype, keepdims=keepdims
        )

    def scan(
        self,
        func: Callable[..., Any],
        binop: Callable[..., Any],
        ident: float,
        arr: Any,
        axis: int | None = None,
        dtype: Any = None,
        **kwargs: Any,
    ) -> Any:
        """dask's ``cumreduction``: the block totals in one pass now, the scan lazy.  (xarray
        2026.9 calls it only from its dask ``push``; ``ffill``/``bfill`` on oocarray arrays
        are refused, see ``_whole_routes.py``.)"""
        kwargs.pop("method", None)
        return _block_scans.scan(func, binop, ident, arr, axis=axis, dtype=dtype, **kwargs)

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
        """``xr.apply_ufunc(..., dask="parallelized")``: ``func`` on blocks of the loop
        dimensions with the core dimensions whole, lazily (``output_sizes`` names new output
        core dimensions).  One call's blocks must fit the active manager's budget."""
        return _block_calls.apply_gufunc(
            func,
            signature,
            *args,
            axes=axes,
            keepdims=keepdims,
            output_dtypes=output_dtypes,
            vectorize=vectorize,
            **kwargs,
        )

    def map_blocks(
        self,
        func: Callable[..., Any],
        *args: Any,
        dtype: Any = None,
        chunks: Any = None,
        drop_axis: int | Sequence[int] | None = None,
        new_axis: int | Sequence[int] | None = None,
        **kwargs: Any,
    ) -> Any:
        """dask's ``map_blocks``, lazily on oocarray's engine (``drop_axis`` axes are given
        whole to each call; ``new_axis``/``chunks`` shape the output)."""
        return _block_calls.map_blocks(
            func, *args, dtype=dtype, chunks=chunks, drop_axis=drop_axis, new_axis=new_axis,
            **kwargs,
        )  # fmt: skip

    def blockwise(
        self,
        func: Callable[..., Any],
        out_ind: Iterable[Any],
        *args: Any,
        name: str | None = None,
        token: Any | None = None,
        dtype: Any = None,
        adjust_chunks: dict[Any, Callable[..., Any]] | None = None,
        new_axes: dict[Any, int] | None = None,
        align_arrays: bool = True,
        concatenate: bool | None = None,
        meta: Any = None,
        **kwargs: Any,
    ) -> Any:
        """dask's ``blockwise``, lazily on oocarray's engine (axes a call contracts are given
        to it whole, as with ``concatenate=True``)."""
        return _block_calls.blockwise(
            func, tuple(out_ind), *args, dtype=dtype, adjust_chunks=adjust_chunks,
            new_axes=new_axes, concatenate=concatenate, **kwargs,
        )  # fmt: skip

    def store(self, sources: Any, targets: Any, client: Any = None, **kwargs: Any) -> Any:
        """Writes each source into its target region by region (``to_zarr``); on a
        ``dask.distributed`` cluster when ``client`` is given (``to_zarr(...,
        chunkmanager_store_kwargs={"client": c})``) or active, each worker computing and
        writing its blocks."""
        sources = sources if isinstance(sources, list | tuple) else [sources]
        targets = targets if isinstance(targets, list | tuple) else [targets]
        regions = kwargs.get("regions") or [None] * len(sources)
        cluster = _distributed.active_client(client)
        for source, target, region in zip(sources, targets, regions, strict=True):
            lazy = wrap(unwrap(source))
            if cluster is None and store_in_parallel(lazy, target, region, kwargs.get("lock")):
                continue  # written on every core; else block by block below
            offset = region or tuple(slice(0, n) for n in lazy.shape)
            blocks = _block_regions(lazy.chunks)
            placed = [
                tuple(
                    slice((o.start or 0) + b.start, (o.start or 0) + b.stop)
                    for o, b in zip(offset, block, strict=True)
                )
                for block in blocks
            ]
            if cluster is not None:
                node, _ = _block_calls.node_of(lazy)
                _distributed.store_blocks(cluster, node, blocks, target, placed)
                continue
            for block, where in zip(blocks, placed, strict=True):
                target[where] = lazy.lazy[block]  # reads (evaluates) this block only
        return None
