"""The sources batches are read from: chunked arrays, ndarrays and memory maps.

A source reads rows into buffers it is given.  Arrays in memory (and memory maps, including
``.npy`` files and contiguous HDF5 datasets opened with ``oc.open``) are gathered row by row
straight into a batch.  Chunked arrays are read a window at a time: runs of whole chunks,
decoded straight into a window buffer on every core, from which batches are gathered.

Sources pickle for other processes (spawned DataLoader workers): chunked arrays and memory
maps by path, reopened read-only on the other side; arrays in memory by value.
"""

from __future__ import annotations

import contextlib
import mmap
import os
from collections.abc import Iterable
from typing import Any, Literal

import numpy as np

from oocarray._compute import ChunkedArray
from oocarray._compute import open as open_array
from oocarray._storage._indexing import ChunkPiece

__all__ = ["ArraySource", "ChunkedSource", "Source", "as_source", "chunk_groups"]

# Rows of the virtual chunks that shuffle="chunks" permutes when no source is chunked.
_VIRTUAL_CHUNK_BYTES = 1 << 20


class Source:
    """Rows of one array: ``n_rows`` of shape ``row_shape`` and dtype ``dtype``."""

    n_rows: int
    row_shape: tuple[int, ...]
    dtype: np.dtype[Any]
    windowed: bool  # read a window into a buffer first (else gathered straight from the array)

    @property
    def row_bytes(self) -> int:
        return int(np.prod(self.row_shape, dtype=np.int64)) * self.dtype.itemsize

    @property
    def chunk_rows(self) -> int | None:
        """Rows per chunk along axis 0 of a chunked source, else None."""
        return None

    @property
    def group_rows(self) -> int | None:
        """Rows per group of chunks stored together along axis 0 (a shard), else None."""
        return None

    def gather(self, rows: np.ndarray, out: np.ndarray) -> None:
        """``out[i] = row rows[i]``."""
        raise NotImplementedError

    def copy_rows(self, start: int, out: np.ndarray) -> None:
        """``out = rows start .. start + len(out)``."""
        raise NotImplementedError

    def read_runs(self, runs: tuple[tuple[int, int], ...], out: np.ndarray) -> None:
        """Rows of ``runs`` one after the other into the first rows of ``out``."""
        raise NotImplementedError

    def read_ahead(
        self, runs: Iterable[tuple[int, int]]
    ) -> contextlib.AbstractContextManager[None]:
        """Inside, reads follow these runs of rows in order (a chunked array in an object store
        fetches their chunks ahead)."""
        return contextlib.nullcontext()


class ArraySource(Source):
    """An array in memory or a memory map: rows are gathered straight into batches."""

    windowed = False

    def __init__(self, array: np.ndarray, reopen: tuple[str, str | None] | None = None) -> None:
        self.array = array
        self.n_rows = len(array)
        self.row_shape = array.shape[1:]
        self.dtype = array.dtype
        # How to reopen the same data in another process: a ChunkedArray's (path, dataset).
        self._reopen = reopen

    def gather(self, rows: np.ndarray, out: np.ndarray) -> None:
        np.take(self.array, rows, axis=0, out=out, mode="clip")  # no temporary (see _fill)

    def copy_rows(self, start: int, out: np.ndarray) -> None:
        out[...] = self.array[start : start + len(out)]

    def __reduce__(self) -> tuple[Any, ...]:
        if self._reopen is not None:
            return (_reopened, self._reopen)
        mapped = _memmap_args(self.array)
        if mapped is not None:
            return (_mapped, mapped)
        return (ArraySource, (np.asarray(self.array),))


class ChunkedSource(Source):
    """A chunked array read in windows of whole chunks."""

    windowed = True

    def __init__(self, array: ChunkedArray, dataset: str | None) -> None:
        self.array = array
        self.n_rows = len(array)
        self.row_shape = array.shape[1:]
        self.dtype = array.dtype
        self._dataset = dataset
        store = array._store  # the storage layer's store: reads many runs in one parallel pass
        self._store = store
        # Chunks whole along the trailing axes: a run of rows is a run of whole chunk rows,
        # which the store decodes straight into the window buffer.
        self._row_pieces = array.chunks[1:] == array.shape[1:]

    @property
    def chunk_rows(self) -> int | None:
        return self.array.chunks[0]

    @property
    def group_rows(self) -> int | None:
        shards = self.array.shards
        return None if shards is None else shards[0]

    def read_runs(self, runs: tuple[tuple[int, int], ...], out: np.ndarray) -> None:
        if not self._row_pieces:
            at = 0
            for a, b in runs:
                out[at : at + b - a] = self.array[a:b]
                at += b - a
            return
        # One read of all the runs' chunks: their decoding spreads over every core.
        per = self.array.chunks[0]
        rest = tuple(slice(0, s) for s in self.row_shape)
        zeros = (0,) * len(rest)
        pieces = []
        at = 0
        for a, b in runs:
            row = a
            while row < b:
                c, r = divmod(row, per)
                take = min(per - r, b - row)
                covers = r == 0 and take == min(per, self.n_rows - row)
                pieces.append(
                    ChunkPiece(
                        (c, *zeros),
                        (slice(r, r + take), *rest),
                        (slice(at, at + take), *rest),
                        covers,
                    )
                )
                at += take
                row += take
        self._store.read_into(pieces, out)

    def read_ahead(
        self, runs: Iterable[tuple[int, int]]
    ) -> contextlib.AbstractContextManager[None]:
        rest = tuple(slice(0, s) for s in self.row_shape)
        return self.array.read_ahead((slice(a, b), *rest) for a, b in runs)

    def gather(self, rows: np.ndarray, out: np.ndarray) -> None:
        # Rows in file order touch each chunk once; then put them where they belong.
        order = np.argsort(rows, kind="stable")
        out[order] = self.array[rows[order]]

    def copy_rows(self, start: int, out: np.ndarray) -> None:
        self.read_runs(((start, start + len(out)),), out)

    def __reduce__(self) -> tuple[Any, ...]:
        if self._store.reopen_remote() is not None:  # a URL and its options, not a path
            return (ChunkedSource, (self.array, self._dataset))
        return (_reopened, (self.array.path, self._dataset))


def _reopened(path: str, dataset: str | None) -> Source:
    return as_source(open_array(path, "r", dataset))


def _mapped(filename: str, dtype: str, shape: tuple[int, ...], offset: int, order: str) -> Source:
    layout: Literal["C", "F"] = "F" if order == "F" else "C"
    mapped = np.memmap(filename, np.dtype(dtype), "r", offset, shape, layout)
    return ArraySource(mapped)


def _memmap_args(array: np.ndarray) -> tuple[str, str, tuple[int, ...], int, str] | None:
    """How to map ``array`` again, when it is a whole ``np.memmap`` of a file (not a view)."""
    base: object = array.base  # a whole map's base is the mmap; a view's is another array
    if not isinstance(array, np.memmap) or not isinstance(base, mmap.mmap):
        return None
    filename = getattr(array, "filename", None)
    if not filename or not (array.flags.c_contiguous or array.flags.f_contiguous):
        return None
    order = "C" if array.flags.c_contiguous else "F"
    return (os.fspath(filename), array.dtype.str, array.shape, int(array.offset), order)


def as_source(obj: object) -> Source:
    """The source of a ``ChunkedArray``, ``np.ndarray`` or ``np.memmap``."""
    if isinstance(obj, ChunkedArray):
        if obj.ndim == 0:
            raise ValueError(f"batches need arrays with rows (axis 0); {obj!r} is 0-d")
        store = obj._store
        dataset = store.dataset_name
        if obj.location == "mmap":  # .npy, contiguous HDF5: gather from the map directly
            return ArraySource(obj.as_ndarray(), (obj.path, dataset))
        return ChunkedSource(obj, dataset)
    if isinstance(obj, np.ndarray):
        if obj.ndim == 0:
            raise ValueError("batches need arrays with rows (axis 0); got a 0-d ndarray")
        return ArraySource(obj)
    raise TypeError(
        f"batches reads oc.ChunkedArray, np.ndarray and np.memmap sources, got "
        f"{type(obj).__name__}; write a lazy expression out first (z.to_zarr(path)), or "
        "np.asarray() other array types"
    )


def virtual_chunk_rows(sources: list[Source]) -> int:
    """Rows per chunk of the epoch plan: the first chunked source's chunks, else about 1 MiB
    of the widest source's rows."""
    for source in sources:
        rows = source.chunk_rows
        if rows is not None:
            return rows
    widest = max(max(1, s.row_bytes) for s in sources)
    return max(1, _VIRTUAL_CHUNK_BYTES // widest)


def chunk_groups(sources: list[Source]) -> int:
    """Chunks per group stored together (a shard's inner chunks along axis 0) of the source
    whose chunks the epoch plan uses; 1 where chunks are stored alone."""
    for source in sources:
        if source.chunk_rows is not None:
            group = source.group_rows
            return 1 if group is None else max(1, group // source.chunk_rows)
    return 1
