"""HDF5 chunks read by the native decoders: which filter pipelines they undo, and eager reads of
chunked datasets through the chunk reader (:mod:`oocarray._storage._reader`), the way the pager
reads them for ``as_ndarray()``.

HDF5 tells where each chunk's bytes are in the file (offset, stored size, and a filter mask of
the filters it skipped for that chunk); the native decoders undo deflate, shuffle and
fletcher32 in any order (``native/h5filters.c``).  A dataset with other filters, a stored type
that is not exactly its dtype's bytes, or partial edge chunks stored in a way that cannot be
told is read by h5py instead.  Only datasets opened read-only are read this way: HDF5 keeps
writes of this process in its chunk cache, where the file's bytes do not show them yet.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

from oocarray import _native
from oocarray._storage import _pool
from oocarray._storage._indexing import ChunkPiece
from oocarray._storage._reader import ChunkRead, scratch_set

__all__ = ["NativeChunks", "NoNativePipeline", "PagingLayout", "native_pipeline"]

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


def masked(codec: int, mask: int) -> int:
    """``codec`` without the steps HDF5 skipped for one chunk (bit i of ``mask``: step i), as
    the pager's decoder takes them (``oc_h5_masked`` in native/h5filters.c)."""
    out = codec & ~(0xFFFF << 8)
    kept = 0
    for i in range(_native.H5_MAX_STEPS):
        step = (codec >> (8 + 4 * i)) & 0xF
        if step and not mask & (1 << i):
            out |= step << (8 + 4 * kept)
            kept += 1
    return out


class NativeChunks:
    """Eager reads of one chunked dataset, opened read-only, by the native decoders.

    ``places`` gives, per chunk (its coordinates in the chunk grid), HDF5's (filter mask, byte
    offset, stored size); a chunk it does not list was never written.  ``name`` names the
    dataset in errors."""

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
        self._places = places
        self._name = name
        self._fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)

    def _codec_of(self, chunk: tuple[int, ...], mask: int) -> int:
        mask &= self._all_steps
        if self._partial_unfiltered and any(
            (c + 1) * n > s for c, n, s in zip(chunk, self._chunks, self._shape, strict=True)
        ):
            mask = self._all_steps  # a partial edge chunk HDF5 stored without its filters
        return masked(self._codec, mask)

    def read_into(self, pieces: Sequence[ChunkPiece], out: np.ndarray) -> None:
        """``out[p.out] = chunk[p.local]`` for every piece: chunks decoded on every core into
        chunk-sized scratch buffers, a batch at a time, and copied from there."""
        batch = max(1, min(len(pieces), 2 * _pool.workers()))
        scratch = scratch_set(batch, self._chunks, self._dtype, "hdf5")
        for start in range(0, len(pieces), batch):
            read = self._read()
            copies: list[tuple[np.ndarray, ChunkPiece]] = []
            for piece in pieces[start : start + batch]:
                place = self._places.get(piece.chunk)
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
        _, offset, size = self._places[chunk]
        return f"its {size} bytes at offset {offset} of the file"

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
