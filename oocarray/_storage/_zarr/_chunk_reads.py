"""Reads of zarr chunks without zarr-python, for the common layouts (see :mod:`._layout`):
the stored bytes of the chunks a read needs are found (chunk files, or inner chunks of shards)
and decoded as chunk jobs on every core, straight into the result where a piece is a run of
whole rows (see :mod:`oocarray._storage._reader`).
"""

from __future__ import annotations

import functools
import math
import os
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from oocarray import _native
from oocarray._storage import _pool
from oocarray._storage._base import Store
from oocarray._storage._indexing import ChunkPiece
from oocarray._storage._reader import ChunkRead, Source, read_one, scratch_set
from oocarray._storage._zarr._chunk_files import (
    ADVISE_MIN_CHUNK_BYTES,
    chunk_file,
    describe,
    open_or_none,
    will_need,
)
from oocarray._storage._zarr._layout import Layout
from oocarray._storage._zarr._shards import OpenShard

__all__ = ["ZarrChunkReads"]


class _ChunkFiles:
    """Where a chunk's stored bytes are, for one read, as a
    :data:`oocarray._storage._reader.Source`: a chunk file's path (the native job opens it; a
    path of no file is a chunk never written), or the place of an inner chunk in its shard
    (each shard opened once, to read its index); None for an inner chunk never written."""

    def __init__(self, store: ZarrChunkReads) -> None:
        self._store = store
        self._shards: dict[tuple[int, ...], OpenShard | None] = {}

    def source(self, chunk: tuple[int, ...]) -> Source | None:
        layout = self._store._layout
        assert layout is not None
        if layout.shard is None:
            return self._file_source(chunk)
        key, number = layout.shard.locate(chunk)
        return self._shard_source(key, number, chunk)

    def row_source(self, i: int) -> Source | None:
        """:meth:`source` of chunk ``(i, 0, ...)``, the chunks of row-wise reads, with the
        shard arithmetic done for that case."""
        layout = self._store._layout
        assert layout is not None
        chunk = (i, *self._store._rest)
        if layout.shard is None:
            return self._file_source(chunk)
        per_shard = layout.shard.per_shard[0]
        key = (i // per_shard, *self._store._rest)
        return self._shard_source(key, (i % per_shard) * layout.shard.inner_per_row, chunk)

    def _file_source(self, chunk: tuple[int, ...]) -> Source:
        return (self._store._chunk_path(chunk), 0, -1)

    def _shard_source(
        self, key: tuple[int, ...], number: int, chunk: tuple[int, ...]
    ) -> Source | None:
        store = self._store
        if key not in self._shards:
            path = store._chunk_path(key)
            fd = open_or_none(path)
            if fd is None:
                self._shards[key] = None
            else:
                assert store._layout is not None and store._layout.shard is not None
                try:
                    self._shards[key] = OpenShard(fd, path, store.path, store._layout.shard, chunk)
                except BaseException:
                    os.close(fd)
                    raise
        shard = self._shards[key]
        if shard is None:
            return None
        entry = shard.entry(number, chunk, store._chunk_nbytes)
        return None if entry is None else (shard.fd, *entry)

    def close(self) -> None:
        for shard in self._shards.values():
            if shard is not None:
                shard.close()
        self._shards.clear()


class ZarrChunkReads(Store):
    """The chunk reads of :class:`~oocarray._storage._zarr._store.ZarrStore`, which sets the
    attributes declared here when it opens an array (see its ``__init__``)."""

    array: Any  # the zarr-python array: it reads what has no direct layout
    _local_files: bool  # chunks are files of a local directory
    _root: str  # the array's directory (real path), or its location in an object store
    _layout: Layout | None  # how chunks lie and decode, or None: zarr-python reads them
    _chunk_nbytes: int  # the decoded bytes of a whole chunk
    _rest: tuple[int, ...]  # chunk coordinates after the first
    _plain_files: bool  # uncompressed, unsharded chunk files: rows read in place
    _rows_direct: bool  # rows whole in their chunks, stored as read
    _one_file_rows: bool  # row reads within one chunk file are one native job
    _row_path: tuple[str, str]  # the file of row chunk c is head + str(c) + tail
    _thread_reads: threading.local  # each thread's chunk read and where its last row read ended

    def _chunk_sources(self, chunks: Sequence[tuple[int, ...]]) -> Any:
        """Where the stored bytes of ``chunks`` are, for one read: ``source(chunk)``,
        ``row_source(i)`` and ``close()`` (see :class:`_ChunkFiles`)."""
        return _ChunkFiles(self)

    def _row_chunk_sources(self, first: int, stop: int) -> Any:
        """:meth:`_chunk_sources` of row chunks ``first`` to ``stop`` (exclusive), for row
        reads: local files need no list of them made (``x[i]`` is a hot path)."""
        return _ChunkFiles(self)

    def _chunk_path(self, chunk: tuple[int, ...]) -> str:
        assert self._layout is not None
        return chunk_file(self._root, self._layout, chunk)

    # ---- reading ----

    def read_piece(self, chunk: tuple[int, ...], local: tuple[Any, ...]) -> np.ndarray:
        layout = self._layout
        if layout is None or not self._plain_files or not self.chunks:
            # Decode the whole chunk into a buffer reused by this thread, then take the piece.
            return np.asarray(self.read_chunk(chunk, scratch=True)[local])
        # Uncompressed: read only the rows of the chunk's first axis that the piece touches.
        first = local[0]
        if isinstance(first, slice):
            positions = range(*first.indices(self.chunks[0]))
            # The ends of a range, not min()/max() over it: those walk every row in Python.
            ends = (positions[0], positions[-1]) if positions else (0, -1)
            lo, hi = min(ends), max(ends) + 1
        else:
            lo, hi = (int(first.min()), int(first.max()) + 1) if first.size else (0, 0)
        row_bytes = math.prod(self.chunks[1:]) * layout.stored_dtype.itemsize
        block = np.empty((hi - lo, *self.chunks[1:]), dtype=layout.stored_dtype)
        self._read_rows_of_chunk(chunk, lo * row_bytes, block)
        shifted = (
            slice(first.start - lo, first.stop - lo, first.step)
            if isinstance(first, slice)
            else np.asarray(first) - lo
        )
        piece = block[(shifted, *local[1:])]
        return piece if piece.dtype == self.dtype else piece.astype(self.dtype)

    def read_rows_into(self, start: int, out: np.ndarray) -> bool:
        if not self._rows_direct:
            return False
        if out.size == 0:
            return True
        per_chunk = self.chunks[0]
        c, r = divmod(start, per_chunk)
        codec = self._row_read_codec(start, start + len(out))
        if self._one_file_rows and r + len(out) <= per_chunk:  # x[i]: one job, no more
            assert self._layout is not None and self._layout.native_codec is not None
            row_bytes = self._chunk_nbytes // per_chunk
            path = self._row_path[0] + str(c) + self._row_path[1]
            one = self._layout.native_codec if codec is None else codec
            if read_one(path, one, r * row_bytes, out, self._chunk_nbytes):
                return True
        # Every chunk's share is a run of whole rows: it is read (or decoded) straight into
        # ``out``, the chunks on every core.
        row_bytes = self._chunk_nbytes // per_chunk
        jobs = self._jobs()
        buffer = jobs.buffer(out)
        row, stop = start, start + len(out)
        first, last = start // per_chunk, (stop - 1) // per_chunk + 1
        files = self._row_chunk_sources(first, last)
        try:
            sources = [files.row_source(c) for c in range(first, last)]
            self._hint(sources)
            while row < stop:
                c, r = divmod(row, per_chunk)
                take = min(per_chunk - r, stop - row)
                source = sources[c - first]
                if source is None:
                    out[row - start : row - start + take] = self.fill_value
                else:
                    at, length = (row - start) * row_bytes, take * row_bytes
                    jobs.add(source, r * row_bytes, buffer, at, length, (c, *self._rest), codec)
                row += take
            jobs.run()
        finally:
            files.close()
        return True

    def _read_rows_of_chunk(self, chunk: tuple[int, ...], skip: int, block: np.ndarray) -> None:
        """Fill ``block`` with the decoded bytes of ``chunk`` from ``skip`` on: raw chunks
        are read from there only (their checksum, which covers the whole chunk, is checked when
        all of it is read)."""
        files = self._chunk_sources([chunk])
        try:
            source = files.source(chunk)
            if source is None:
                block[...] = self.fill_value
                return
            jobs = self._jobs()
            jobs.add(source, skip, jobs.buffer(block), 0, block.nbytes, chunk)
            jobs.run()
        finally:
            files.close()

    def read_chunk(self, chunk: tuple[int, ...], scratch: bool = False) -> np.ndarray:
        region = self.chunk_region(chunk)
        if self._layout is None:
            return np.asarray(self.array[region])
        stored = self._layout.stored_dtype
        out = (
            scratch_set(1, self.chunks, stored, "read_chunk")[0]
            if scratch
            else np.empty(self.chunks, dtype=stored)
        )
        files = self._chunk_sources([chunk])
        try:
            source = files.source(chunk)
            if source is None:
                out[...] = self.fill_value
            else:
                jobs = self._jobs()
                jobs.add(source, 0, jobs.buffer(out), 0, out.nbytes, chunk)
                jobs.run()
        finally:
            files.close()
        if out.dtype != self.dtype:
            out = out.astype(self.dtype)
        return out[tuple(slice(0, r.stop - r.start) for r in region)]

    def _row_read_codec(self, start: int, stop: int) -> int | None:
        """The native codec of the jobs of a read of rows ``[start, stop)``: where the rows
        of an uncompressed chunk file start it (the kernel would take that for a read in order
        and read on), the file is read at random (``CODEC_RANDOM``: no readahead past the
        rows) unless this thread's last row read ended at ``start``, a scan in order, whose
        next reads the readahead makes warm; else the array's own (None)."""
        if not self._plain_files or self._layout is None:
            return None
        reads = self._thread_reads
        in_order = getattr(reads, "next_row", None) == start
        reads.next_row = stop
        first = start % self.chunks[0]
        starts_a_file = first == 0 or first + stop - start > self.chunks[0]
        if in_order or not starts_a_file:
            return None
        codec = self._layout.native_codec
        return None if codec is None else codec | _native.CODEC_RANDOM

    def read_into(self, pieces: Sequence[ChunkPiece], out: np.ndarray) -> None:
        """Read the chunks of a selection as chunk jobs on every core (see
        :mod:`oocarray._storage._reader`). A piece that is a run of whole rows of its
        chunk decodes (or, uncompressed, is read) straight into ``out``, only as far into the
        chunk as it needs; an uncompressed chunk's other pieces read only the rows they touch;
        any other piece (integer arrays too: ``x[rows]`` spread over many chunks) decodes its
        chunk into a scratch buffer, a few chunks at once on every core, and NumPy takes the
        piece from there."""
        layout = self._layout
        if layout is None or not pieces or layout.stored_dtype != self.dtype:
            super().read_into(pieces, out)
            return
        jobs = self._jobs()
        files = self._chunk_sources([piece.chunk for piece in pieces])
        scratch: list[np.ndarray] = []
        copies: list[tuple[np.ndarray, ChunkPiece]] = []
        try:
            sources = [files.source(piece.chunk) for piece in pieces]
            self._hint(sources)
            for piece, source in zip(pieces, sources, strict=True):
                if source is None:
                    out[piece.out] = self.fill_value
                    continue
                run = self._row_run(piece, out)
                if run is not None:
                    target, skip = run
                    jobs.add(source, skip, jobs.buffer(target), 0, target.nbytes, piece.chunk)
                    continue
                if self._plain_files:  # uncompressed: only the rows the piece touches are read
                    out[piece.out] = self.read_piece(piece.chunk, piece.local)
                    continue
                if not scratch:
                    limit = min(len(pieces), 2 * _pool.workers())
                    scratch = scratch_set(limit, self.chunks, self.dtype, "read_into")
                if len(copies) == len(scratch):  # every buffer in use: decode, copy, reuse
                    self._finish(jobs, copies, out)
                buffer = scratch[len(copies)]
                copies.append((buffer, piece))
                jobs.add(source, 0, jobs.buffer(buffer), 0, buffer.nbytes, piece.chunk)
            self._finish(jobs, copies, out)
        finally:
            files.close()

    @staticmethod
    def _finish(
        jobs: ChunkRead, copies: list[tuple[np.ndarray, ChunkPiece]], out: np.ndarray
    ) -> None:
        jobs.run()
        for buffer, piece in copies:
            out[piece.out] = buffer[piece.local]
        copies.clear()

    def _hint(self, sources: Sequence[Source | None]) -> None:
        """:func:`will_need` for a read of this array's chunks, when they are large enough."""
        if self._local_files and self._chunk_nbytes >= ADVISE_MIN_CHUNK_BYTES:
            will_need(sources)

    def _row_run(self, piece: ChunkPiece, out: np.ndarray) -> tuple[np.ndarray, int] | None:
        """When ``piece`` is rows ``i:j`` of its chunk, whole along every other axis, and lands
        on a contiguous part of ``out``: that part, and the bytes of the chunk before row i."""
        if not piece.local:  # a 0-d array: its one chunk goes through a scratch buffer
            return None
        first, *rest = piece.local
        if not isinstance(first, slice) or (first.step or 1) != 1:
            return None
        for index, size in zip(rest, self.chunks[1:], strict=True):
            if not isinstance(index, slice) or (index.start, index.stop, index.step or 1) != (
                0,
                size,
                1,
            ):
                return None
        target = out[piece.out]
        if not target.flags.c_contiguous:
            return None
        return target, first.start * (self._chunk_nbytes // self.chunks[0])

    def _jobs(self) -> ChunkRead:
        """This thread's chunk read of this array: made once and kept, as row reads are
        frequent and small; a read left unfinished by an error is never reused."""
        jobs: ChunkRead | None = getattr(self._thread_reads, "jobs", None)
        if jobs is None or not jobs.empty:
            jobs = self._thread_reads.jobs = self._new_jobs()
        return jobs

    def _new_jobs(self) -> ChunkRead:
        layout = self._layout
        assert layout is not None
        return ChunkRead(
            native_codec=layout.native_codec,
            decode=layout.decode,
            codec_name=self.codec,
            chunk_shape=self.chunks,
            dtype=layout.stored_dtype,
            array_name=repr(self.path),
            fill_value=self.fill_value,
            # Not a method of this store: each thread keeps its read, which must not keep the
            # store alive in a reference cycle.
            describe=functools.partial(describe, self._root, layout),
        )
