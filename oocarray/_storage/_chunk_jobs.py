"""Chunk jobs: read one chunk's stored bytes from a file and decode them into a buffer.

A read collects a job per chunk it touches (file, offset, stored size, the decoded bytes it
wants, destination) and runs them on every core (:func:`._pool.run_spread`).  Codecs the native
reader knows, raw bytes and zstd, run whole in C without the GIL: a zstd frame is decoded as a
stream that stops once the destination is full, so the first rows of a chunk cost less than the
whole.  Other codecs are read and decoded per job in Python (numcodecs releases the GIL while
it decodes).  A job the native reader rejects runs again in Python, which either decodes it (a
layout the native reader leaves alone, such as several zstd frames) or raises the
:class:`CorruptChunkError` naming the chunk and its file.
"""

from __future__ import annotations

import math
import os
import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from oocarray import _native
from oocarray._memory import active_manager
from oocarray._storage import _pool
from oocarray.errors import CorruptChunkError

__all__ = ["ChunkJobs", "scratch_set"]

Decoder = Callable[[bytes, np.ndarray], None]

_thread_buffers = threading.local()


def scratch_set(
    count: int, shape: tuple[int, ...], dtype: np.dtype[Any], role: str
) -> list[np.ndarray]:
    """``count`` decode buffers, made in this thread, for it or the runners of its read; buffers
    of different ``role`` never alias.  Inside a manager they come from it (and a workspace's
    arena or the region cache makes that cheap); outside, this thread's buffers are reused,
    sparing a fresh mapping, and its page faults, for every chunk."""
    if active_manager() is not None:
        return [np.empty(shape, dtype=dtype) for _ in range(count)]
    key = (shape, dtype.str)
    cache: dict[str, tuple[tuple[Any, ...], list[np.ndarray]]] | None = getattr(
        _thread_buffers, "by_role", None
    )
    if cache is None:
        cache = _thread_buffers.by_role = {}
    cached = cache.get(role)
    if cached is None or cached[0] != key:
        cached = cache[role] = (key, [])
    buffers = cached[1]
    while len(buffers) < count:
        buffers.append(np.empty(shape, dtype=dtype))
    return buffers[:count]


class ChunkJobs:
    """The chunk jobs of one read of one array.

    ``native_codec`` is ``_native.CODEC_RAW`` or ``CODEC_ZSTD`` when the native reader can run
    the jobs, else None; ``decode(raw, out)`` fills all of a chunk-sized, C-contiguous ``out``
    from stored bytes (the Python path, and the judge of what the native reader rejects).
    ``describe(chunk)`` names the chunk's file for errors.
    """

    def __init__(
        self,
        *,
        native_codec: int | None,
        decode: Decoder,
        codec_name: str,
        chunk_shape: tuple[int, ...],
        dtype: np.dtype[Any],
        array_path: str,
        describe: Callable[[tuple[int, ...]], str],
    ) -> None:
        self._native_codec = native_codec
        self._decode = decode
        self._codec_name = codec_name
        self._chunk_shape = chunk_shape
        self._dtype = dtype
        self._chunk_nbytes = math.prod(chunk_shape) * dtype.itemsize
        self._array_path = array_path
        self._describe = describe
        self._buffers: list[np.ndarray] = []
        self._specs: list[tuple[int, int, int, int, int, int, int]] = []
        self._chunks: list[tuple[int, ...]] = []

    def buffer(self, array: np.ndarray) -> int:
        """Register a C-contiguous destination; jobs name it by the number returned."""
        if not array.flags.c_contiguous or not array.flags.writeable:
            raise ValueError("chunk job destinations must be writable and C-contiguous")
        # Kept as bytes: the native reader takes buffers, which datetime64 arrays cannot give.
        self._buffers.append(array.reshape(-1).view(np.uint8))
        return len(self._buffers) - 1

    def add(
        self,
        source: tuple[int, int, int],
        skip: int,
        buffer: int,
        at: int,
        length: int,
        chunk: tuple[int, ...],
    ) -> None:
        """Decode bytes ``[skip, skip + length)`` of the chunk whose stored bytes ``source``
        gives (fd, offset, length or -1 for the rest of the file) into bytes
        ``[at, at + length)`` of buffer number ``buffer``."""
        self._specs.append((*source, skip, buffer, at, length))
        self._chunks.append(chunk)

    def run(self) -> None:
        """Run every job added since the last run, on up to :func:`_pool.workers` threads."""
        specs = np.array(self._specs, dtype=np.int64).reshape(-1, 7)
        chunks = self._chunks
        count = len(specs)
        try:
            if count == 0:
                return
            runners = min(_pool.workers(), count)
            if self._native_codec is not None:
                self._run_native(self._native_codec, specs, chunks, runners)
            else:
                scratch = scratch_set(runners, self._chunk_shape, self._dtype, "runner")
                _pool.run_spread(
                    count,
                    lambda i, slot: self._run_python(specs[i], chunks[i], scratch[slot]),
                    runners,
                )
        finally:
            self._buffers.clear()
            self._specs = []
            self._chunks = []

    def _run_native(
        self, codec: int, specs: np.ndarray, chunks: list[tuple[int, ...]], runners: int
    ) -> None:
        counter = np.zeros(1, dtype=np.int64)
        failed: list[tuple[int, str]] = []

        def runner(_: int, __: int) -> None:
            failure = _native.read_chunks(codec, specs, self._buffers, self._chunk_nbytes, counter)
            if failure is not None:
                failed.append(failure)

        _pool.run_spread(runners, runner, runners)
        if failed:
            # The native reader stopped at its first rejection; every job runs again in Python,
            # which decodes what the native reader leaves alone or raises the right error.
            scratch = scratch_set(1, self._chunk_shape, self._dtype, "runner")[0]
            for spec, chunk in zip(specs, chunks, strict=True):
                self._run_python(spec, chunk, scratch)

    def _run_python(self, spec: np.ndarray, chunk: tuple[int, ...], scratch: np.ndarray) -> None:
        fd, offset, nbytes, skip, buffer, at, length = (int(v) for v in spec)
        dest = self._buffers[buffer][at : at + length]
        scratch = scratch.reshape(-1).view(np.uint8)
        try:
            if nbytes < 0:
                nbytes = os.fstat(fd).st_size - offset
            raw = os.pread(fd, nbytes, offset)
            if len(raw) != nbytes:
                raise ValueError(f"read {len(raw)} of {nbytes} stored bytes")
            if skip == 0 and length == self._chunk_nbytes:
                self._decode(raw, dest)
            else:
                self._decode(raw, scratch)
                dest[:] = scratch[skip : skip + length]
        except Exception as error:
            raise CorruptChunkError(
                f"chunk {chunk} of {self._array_path!r} cannot be decoded ({self._codec_name}) "
                f"from {self._describe(chunk)}: it is corrupt or truncated ({error})"
            ) from error
