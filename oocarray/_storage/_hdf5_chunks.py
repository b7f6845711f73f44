"""HDF5 chunks read by the native decoders: which filter pipelines they undo, and eager reads of
chunked datasets through the chunk reader (:mod:`oocarray._storage._reader`), the way the pager
reads them for ``as_ndarray()``.

HDF5 tells where each chunk's bytes are in the file (offset, stored size, and a filter mask of
the filters it skipped for that chunk); the native decoders undo deflate, shuffle and
fletcher32 in any order (``native/h5filters.c``).  A dataset with other filters, a stored type
that is not exactly its dtype's bytes, or partial edge chunks stored in a way that cannot be
told is read by h5py instead.  Only datasets opened read-only are read this way: HDF5 keeps
writes of this process in its chunk cache, where the file's bytes do not show them yet.

A write can move a chunk in the file, also while a dataset is open read-only in the same process
(HDF5 shares one file between the handles of a process): each reader watches its dataset's
writes through ``_hdf5.watch_chunks`` as the pager does, reads under the lock every such write
holds, and learns each written chunk's new place once the writer has flushed the file.  Writes
by other processes, or through h5py directly, are not seen.
"""

from __future__ import annotations

import os
import weakref
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Any, NamedTuple

import numpy as np

from oocarray import _native
from oocarray._storage import _pool
from oocarray._storage._indexing import ChunkPiece
from oocarray._storage._reader import ChunkRead, scratch_set

__all__ = ["UNKNOWN", "NativeChunks", "NoNativePipeline", "PagingLayout", "native_pipeline"]

UNKNOWN = "unknown"  # a chunk's place after a write that failed: it may have moved

# HDF5's registered filter ids the native decoders undo, and their step numbers there.
_STEPS = {1: _native.H5_DEFLATE, 2: _native.H5_SHUFFLE, 3: _native.H5_FLETCHER32}


class PagingLayout(NamedTuple):
    """What the native decoders need to know of a dataset."""

    kind: str  # "chunked", "contiguous", "compact", "virtual" or "external"
    filters: list[tuple[int, str, tuple[int, ...]]]  # (id, name, parameters), in write order
    exact_type: bool  # the stored type is the bytes of ``dtype`` (numbers, no padding bits)
    partial_unfiltered: bool | None  # partial edge chunks stored unfiltered; None: unknown


class NoNativePipeline(Exception):
    """The native decoders cannot undo a dataset's filters.  ``kind``: ``"filter"`` (one they
    do not know, named by ``name``), ``"steps"`` (more steps, or a shuffle, than they take) or
    ``"zlib"`` (the system's libz.so.1 cannot be loaded)."""

    def __init__(self, kind: str, name: str = "", elsize: int = 0) -> None:
        super().__init__(kind, name)
        self.kind = kind
        self.name = name
        self.elsize = elsize


def native_pipeline(layout: PagingLayout, dtype: np.dtype[Any]) -> tuple[int, int]:
    """The native codec number of a chunked dataset's filter pipeline, and its number of steps;
    :class:`NoNativePipeline` where the native decoders cannot undo it."""
    steps = []
    elsize = dtype.itemsize
    for number, name, values in layout.filters:
        if number not in _STEPS:
            raise NoNativePipeline("filter", name)
        if number == 2:
            elsize = values[0] if values else elsize
        steps.append(_STEPS[number])
    if (
        len(steps) > _native.H5_MAX_STEPS
        or steps.count(_native.H5_DEFLATE) > 1
        or not 0 < elsize < 128
    ):
        raise NoNativePipeline("steps", elsize=elsize)
    if _native.H5_DEFLATE in steps and not _native.zlib_available():
        raise NoNativePipeline("zlib")
    codec = _native.CODEC_H5 | elsize << 24
    for i, step in enumerate(steps):
        codec |= step << (8 + 4 * i)
    return codec, len(steps)


class _Places:
    """A dataset's chunk places, kept current by the writes of this process (the watcher
    ``_hdf5.HDF5Store.write_blocks`` tells, under the watch lock and after flushing the file).
    It holds no reference to its reader, which is its key among the watchers."""

    def __init__(self, places: dict[tuple[int, ...], tuple[int, int, int]]) -> None:
        self.places = places
        self.lost = False  # a write whose chunks' places could not be learned

    def moving(self, key: Any, blocks: Any) -> None:
        return None

    def moved(self, key: Any, token: Any, places: dict[tuple[int, ...], Any]) -> None:
        for chunk, place in places.items():
            if place == UNKNOWN:
                self.lost = True
            elif place is None:
                self.places.pop(chunk, None)
            else:
                self.places[chunk] = place


class NativeChunks:
    """Eager reads of one chunked dataset, opened read-only, by the native decoders.

    ``places`` gives, per chunk (its coordinates in the chunk grid), HDF5's (filter mask, byte
    offset, stored size); a chunk it does not list was never written.  ``guard()`` is the lock
    every write of the dataset holds; the caller registers ``watcher`` for those writes.
    ``name`` names the dataset in errors."""

    def __init__(
        self,
        *,
        path: str,
        shape: tuple[int, ...],
        chunks: tuple[int, ...],
        dtype: np.dtype[Any],
        fill_value: Any,
        codec: tuple[int, int],
        codec_name: str,
        partial_unfiltered: bool,
        places: dict[tuple[int, ...], tuple[int, int, int]],
        guard: Callable[[], AbstractContextManager[Any]],
        name: str,
    ) -> None:
        self._path = path
        self._shape = shape
        self._chunks = chunks
        self._dtype = dtype
        self._fill_value = fill_value
        self._codec, nsteps = codec
        self._all_steps = (1 << nsteps) - 1
        self._codec_name = codec_name
        self._partial_unfiltered = partial_unfiltered
        self.watcher = _Places(places)
        self._guard = guard
        self._name = name
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        self._fd = fd
        # Closed with this reader, or when it goes, where its store was never closed.
        self._closer = weakref.finalize(self, os.close, fd)

    def _codec_of(self, chunk: tuple[int, ...], mask: int) -> int:
        mask &= self._all_steps
        if self._partial_unfiltered and any(
            (c + 1) * n > s for c, n, s in zip(chunk, self._chunks, self._shape, strict=True)
        ):
            mask = self._all_steps  # a partial edge chunk HDF5 stored without its filters
        return _native.h5_masked(self._codec, mask)

    @property
    def stale(self) -> bool:
        """A write moved chunks to places this reader could not learn: make a new one."""
        return self.watcher.lost

    def read_into(self, pieces: Sequence[ChunkPiece], out: np.ndarray) -> None:
        """``out[p.out] = chunk[p.local]`` for every piece: chunks decoded on every core into
        chunk-sized scratch buffers, a batch at a time, and copied from there; under the lock of
        writes, so that none moves a chunk while its old bytes are read."""
        batch = max(1, min(len(pieces), 2 * _pool.workers()))
        scratch = scratch_set(batch, self._chunks, self._dtype, "hdf5")
        with self._guard():
            self._read_batches(pieces, out, batch, scratch)

    def _read_batches(
        self, pieces: Sequence[ChunkPiece], out: np.ndarray, batch: int, scratch: list[np.ndarray]
    ) -> None:
        places = self.watcher.places
        for start in range(0, len(pieces), batch):
            read = self._read()
            copies: list[tuple[np.ndarray, ChunkPiece]] = []
            for piece in pieces[start : start + batch]:
                place = places.get(piece.chunk)
                if place is None:
                    out[piece.out] = self._fill_value
                    continue
                mask, offset, size = place
                buffer = scratch[len(copies)]
                copies.append((buffer, piece))
                read.add(
                    (self._fd, offset, size),
                    0,
                    read.buffer(buffer),
                    0,
                    buffer.nbytes,
                    piece.chunk,
                    codec=self._codec_of(piece.chunk, mask),
                )
            read.run()
            for buffer, piece in copies:
                out[piece.out] = buffer[piece.local]

    def _read(self) -> ChunkRead:
        return ChunkRead(
            native_codec=self._codec,
            decode=None,  # every pipeline read here is one the native decoders undo
            codec_name=self._codec_name,
            chunk_shape=self._chunks,
            dtype=self._dtype,
            array_name=self._name,
            describe=self._where,
        )

    def _where(self, chunk: tuple[int, ...]) -> str:
        _, offset, size = self.watcher.places[chunk]
        return f"its {size} bytes at offset {offset} of the file"

    def close(self) -> None:
        self._closer()
