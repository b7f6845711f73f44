"""The chunk reader: every read of stored chunks goes down to decode through one
:class:`ChunkRead`.

Indexing (``x[...]`` of any store), the compute layer's chunk loops and the feed's batches all
read through :meth:`Store.read_into <oocarray._storage._base.Store.read_into>` and its kin,
which build one ``ChunkRead`` per read: a table of jobs, one row a chunk, saying where its
stored bytes are (a *source*: a local file, or bytes in memory fetched from elsewhere), at
which offset and how many, its codec, which decoded bytes are wanted and where they go.  The
table crosses into C once (``_native.read_chunks``), which releases the GIL once and decodes it
on the native pool with the decoders the pager uses (``native/reader.c``).  A job the native
decoders cannot finish comes back with its reason and is decoded again in Python (numcodecs,
for layouts the native decoders leave alone, such as several zstd frames in one chunk), which
either succeeds or raises the :class:`CorruptChunkError` naming the chunk and its source.
Stores whose codec has no native decoder run every job in Python, on every core.
"""

from __future__ import annotations

import array
import math
import os
import threading
from collections.abc import Callable
from typing import Any

import google_crc32c
import numpy as np

from oocarray import _native
from oocarray._memory import active_manager
from oocarray._storage import _pool
from oocarray.errors import CorruptChunkError

__all__ = ["CheckedFile", "ChunkRead", "Source", "read_one", "scratch_set"]

Decoder = Callable[[bytes, np.ndarray], None]
# Where a chunk's stored bytes are: (a file's path, which the native job opens, an open file's
# descriptor, a CheckedFile, or a buffer of bytes; offset; length or -1 for the rest of it).  A
# path of no file is a chunk never written: it reads as the fill value.
Source = tuple[Any, int, int]


class CheckedFile:
    """An open file holding a chunk's stored bytes ``[offset, offset + nbytes)`` that are
    checked whole against a CRC-32C before any of them is decoded: an entry of the chunk cache,
    whose CRC covers its version string (``seed`` is that string's CRC) and then the bytes.  The
    native jobs read and check it as they decode (no copy into Python); bytes that fail come
    from ``recover()`` instead (the object fetched anew; None: it is gone), which the cache's
    owner sets.  The descriptor is closed by :meth:`close`, or when the object goes."""

    __slots__ = ("crc", "fd", "nbytes", "offset", "recover", "seed")
    _open = 0  # in this process, for open_now()
    _counting = threading.Lock()

    def __init__(self, fd: int, offset: int, nbytes: int, seed: int, crc: int) -> None:
        self.fd, self.offset, self.nbytes, self.seed, self.crc = fd, offset, nbytes, seed, crc
        self.recover: Callable[[], Any] | None = None
        with CheckedFile._counting:
            CheckedFile._open += 1

    @staticmethod
    def open_now() -> int:
        """How many are open in this process (a read-ahead keeps them within a limit)."""
        return CheckedFile._open

    @property
    def source(self) -> Source:
        return (self, self.offset, self.nbytes)

    def native(self) -> tuple[int, int, int]:
        """As the native reader takes it."""
        if self.fd < 0:
            raise ValueError("the cache entry's file is closed")
        return (self.fd, self.seed, self.crc)

    def read(self) -> Any:
        """The stored bytes, checked (a new uint8 array, counted by the active manager); from
        ``recover()`` where they fail (None: the object is gone)."""
        out = np.empty(self.nbytes, np.uint8)
        view, done = out.data, 0
        try:
            while done < self.nbytes:
                count = os.preadv(self.fd, [view[done:]], self.offset + done)
                if count == 0:
                    break
                done += count
        except OSError:
            done = -1
        if done == self.nbytes and int(google_crc32c.extend(self.seed, out)) == self.crc:
            return out
        if self.recover is None:
            raise ValueError("a damaged cache entry, and nowhere to fetch its object from")
        return self.recover()

    def close(self) -> None:
        if self.fd >= 0:
            fd, self.fd = self.fd, -1
            with CheckedFile._counting:
                CheckedFile._open -= 1
            os.close(fd)

    def __del__(self) -> None:
        self.close()


_FIELDS = 9  # the job table's columns: see native/reader.c
_PARALLEL_COPY_BYTES = 8 << 20  # raw reads smaller than this run on the calling thread alone
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


def read_one(where: str, codec: int, skip: int, out: np.ndarray, chunk_nbytes: int) -> bool:
    """Decode bytes ``[skip, skip + out.nbytes)`` of the chunk in the file ``where`` into
    ``out`` (C-contiguous) on the calling thread: one job straight to the native reader,
    without a :class:`ChunkRead`'s bookkeeping, which took most of an ``x[i]``.  False when
    it cannot (no such file, or the job failed): the caller reads through a ``ChunkRead``,
    which fills or reports it."""
    table = array.array("q", (0, 0, -1, skip, 0, 0, out.nbytes, codec, chunk_nbytes))
    failed, absent = _native.read_chunks(table, [where], [out], 1)
    return not failed and not absent


class ChunkRead:
    """The jobs of one read of one array.

    ``native_codec`` is the native decoders' number for the array's codec (a ``CODEC_``
    number of ``_native``, with its flags), or None where only Python decodes it;
    ``decode(raw, out)`` fills all of a chunk-sized, C-contiguous ``out`` from stored bytes
    (the Python path, and the judge of what the native decoders reject), or is None where
    there is no Python path (a chunk the native decoders reject is damaged).  ``array_name``
    (``'x.zarr'``, ``HDF5 dataset 'x' in 'f.h5'``) and ``describe(chunk)``, where the chunk's
    bytes are, name it in errors.
    """

    def __init__(
        self,
        *,
        native_codec: int | None,
        decode: Decoder | None,
        codec_name: str,
        chunk_shape: tuple[int, ...],
        dtype: np.dtype[Any],
        array_name: str,
        describe: Callable[[tuple[int, ...]], str],
        fill_value: Any = 0,
    ) -> None:
        self._native_codec = native_codec
        self._decode = decode
        self._codec_name = codec_name
        self._chunk_shape = chunk_shape
        self._dtype = dtype
        self._chunk_nbytes = math.prod(chunk_shape) * dtype.itemsize
        self._array_name = array_name
        self._describe = describe
        self._fill_value = fill_value
        self._buffers: list[np.ndarray] = []
        self._sources: list[Any] = []
        self._source_numbers: dict[Any, int] = {}
        self._checked = False  # whether a source is a CheckedFile
        # The table, _FIELDS int64 a job (native/reader.c): an array, not an ndarray, which
        # would cost more than the one job of a row read.
        self._table = array.array("q")
        self._chunks: list[tuple[int, ...]] = []
        self._wanted = 0  # decoded bytes the jobs want

    def buffer(self, array: np.ndarray) -> int:
        """Register a C-contiguous destination; jobs name it by the number returned."""
        if not array.flags.c_contiguous or not array.flags.writeable:
            raise ValueError("chunk job destinations must be writable and C-contiguous")
        # datetime64 and timedelta64 arrays give no buffer: their bytes are given instead.
        self._buffers.append(array.view(np.uint8) if array.dtype.kind in "mM" else array)
        return len(self._buffers) - 1

    @property
    def empty(self) -> bool:
        """No job added since the last run, and no buffer held."""
        return not self._chunks and not self._buffers

    def _bytes(self, buffer: int) -> np.ndarray:
        return self._buffers[buffer].reshape(-1).view(np.uint8)

    def _source_number(self, where: Any) -> int:
        # A path or a file descriptor by its value, stored bytes (or a cache entry) by their
        # object: each once.
        key = where if isinstance(where, (int, str)) else ("object", id(where))
        number = self._source_numbers.get(key)
        if number is None:
            number = self._source_numbers[key] = len(self._sources)
            self._sources.append(where)
            self._checked = self._checked or isinstance(where, CheckedFile)
        return number

    def add(
        self,
        source: Source,
        skip: int,
        buffer: int,
        at: int,
        length: int,
        chunk: tuple[int, ...],
        codec: int | None = None,
    ) -> None:
        """Decode bytes ``[skip, skip + length)`` of the chunk whose stored bytes ``source``
        gives into bytes ``[at, at + length)`` of buffer number ``buffer``; ``codec``, where
        given, is this chunk's own native codec (an HDF5 chunk whose filters were skipped)."""
        where, offset, nbytes = source
        number = self._source_number(where)
        code = self._native_codec if codec is None else codec
        self._table.extend(
            (number, offset, nbytes, skip, buffer, at, length, code or 0, self._chunk_nbytes)
        )
        self._chunks.append(chunk)
        self._wanted += length

    def _job(self, i: int) -> array.array[int]:
        return self._table[i * _FIELDS : (i + 1) * _FIELDS]

    def run(self) -> None:
        """Run every job added since the last run, on up to :func:`_pool.workers` threads."""
        count = len(self._chunks)
        try:
            if not count:
                return
            runners = min(_pool.workers(), count)
            codec = self._native_codec
            raw = codec is not None and codec & 0xFF == _native.CODEC_RAW
            if raw and self._wanted < _PARALLEL_COPY_BYTES:
                runners = 1  # copies of raw bytes: waking the pool costs more than it saves
            if codec is None:
                assert self._decode is not None, "a read with no decoder at all"
                scratch = scratch_set(runners, self._chunk_shape, self._dtype, "runner")
                _pool.run_spread(count, lambda i, slot: self._run_python(i, scratch[slot]), runners)
                return
            failed, absent = _native.read_chunks(
                self._table, self._native_sources(), self._buffers, runners
            )
            if failed and self._checked:
                failed, recovered_absent = self._recover(failed, runners)
                absent = [*absent, *recovered_absent]
            for i in absent:
                self._fill(i)
            if failed:
                # Only the jobs the native decoders could not finish: Python decodes what they
                # leave alone, or raises the error that names the chunk.
                buffer = scratch_set(1, self._chunk_shape, self._dtype, "runner")[0]
                for i, reason in failed:
                    self._run_python(i, buffer, reason)
        finally:  # emptied in place: a thread's read of an array is kept for its next read
            self._buffers.clear()
            self._sources.clear()
            self._source_numbers.clear()
            self._checked = False
            del self._table[:]
            self._chunks.clear()
            self._wanted = 0

    def _native_sources(self) -> list[Any]:
        if not self._checked:  # (every read of a local array, x[i] too: no copy of the list)
            return self._sources
        return [s.native() if isinstance(s, CheckedFile) else s for s in self._sources]

    def _recover(self, failed: list[Any], runners: int) -> tuple[list[Any], list[int]]:
        """The jobs that failed on a checked source (a damaged cache entry) run again on their
        object's bytes, read and checked again or else fetched anew; the failures left, and the
        jobs whose object is gone."""
        replaced: set[int] = set()
        again: list[int] = []
        left: list[Any] = []
        for i, reason in failed:
            number = self._job(i)[0]
            where = self._sources[number]
            if isinstance(where, CheckedFile):
                self._sources[number] = where.read()
                replaced.add(number)
            if number in replaced:
                # the bytes are the object's now, all of them
                self._table[i * _FIELDS + 1 : i * _FIELDS + 3] = array.array("q", (0, -1))
                again.append(i)
            else:
                left.append((i, reason))
        gone = [i for i in again if self._sources[self._job(i)[0]] is None]
        rerun = [i for i in again if self._sources[self._job(i)[0]] is not None]
        if rerun:
            table = array.array("q")
            for i in rerun:
                table.extend(self._job(i))
            sources = [b"" if s is None else s for s in self._native_sources()]
            failed_again, _ = _native.read_chunks(table, sources, self._buffers, runners)
            left.extend((rerun[j], reason) for j, reason in failed_again)
        return sorted(left), gone

    def _fill(self, i: int) -> None:
        """Job ``i``'s chunk was never written: its bytes are the fill value's."""
        buffer, at, length = self._job(i)[4:7]
        self._bytes(buffer)[at : at + length].view(self._dtype)[...] = self._fill_value

    def _stored(self, i: int) -> bytes | None:
        """Job ``i``'s stored bytes; None for a chunk never written."""
        number, offset, nbytes = self._job(i)[:3]
        where = self._sources[number]
        if isinstance(where, str):
            try:
                fd = os.open(where, os.O_RDONLY | os.O_CLOEXEC)
            except FileNotFoundError:
                return None
            try:
                return _pread(fd, offset, nbytes)
            finally:
                os.close(fd)
        if isinstance(where, int):
            return _pread(where, offset, nbytes)
        if isinstance(where, CheckedFile):
            data = where.read()
            return None if data is None else bytes(data)
        data = memoryview(where).cast("B")
        return bytes(data[offset:] if nbytes < 0 else data[offset : offset + nbytes])

    def _run_python(self, i: int, scratch: np.ndarray, native_reason: str | None = None) -> None:
        skip, buffer, at, length = self._job(i)[3:7]
        chunk = self._chunks[i]
        dest = self._bytes(buffer)[at : at + length]
        scratch = scratch.reshape(-1).view(np.uint8)
        what = (
            f"chunk {chunk} of {self._array_name} cannot be decoded ({self._codec_name}) from "
            f"{self._describe(chunk)}: it is corrupt or truncated"
        )
        if self._decode is None:
            raise CorruptChunkError(f"{what} ({native_reason})")
        try:
            raw = self._stored(i)
            if raw is None:
                self._fill(i)
                return
            if skip == 0 and length == self._chunk_nbytes:
                self._decode(raw, dest)
            else:
                self._decode(raw, scratch)
                dest[:] = scratch[skip : skip + length]
        except Exception as error:
            native = f"; the native decoder: {native_reason}" if native_reason else ""
            raise CorruptChunkError(f"{what} ({error}{native})") from error


def _pread(fd: int, offset: int, nbytes: int) -> bytes:
    if nbytes < 0:
        nbytes = os.fstat(fd).st_size - offset
    raw = os.pread(fd, nbytes, offset)
    if len(raw) != nbytes:
        raise ValueError(f"read {len(raw)} of {nbytes} stored bytes")
    return raw
