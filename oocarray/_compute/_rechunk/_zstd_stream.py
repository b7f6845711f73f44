"""Zstd chunk files written and read as streams, a piece at a time.

Why: the native codec encodes a chunk in one call into an output buffer the chunk's size and
decodes one from a buffer holding all its stored bytes, both kept per thread.  With 64 MiB
chunks that is 64 MiB or more per thread and kind of work, which kept a rechunk in 256 MiB on
one core.  Streamed, a thread holds a codec context (a window of a few MiB) and a piece of
input and of output.  The file written is the one the one-shot writer makes: one zstd frame
with the content size in its header (the size is pledged), the codec's checksum flag, then
zarr's crc32c codec's CRC-32C of the frame where the chain has one.  :func:`copy_frames`
writes a chunk as other chunks' frames one after the other instead, and the reader takes
those too.

Written by hand over ctypes, because no library does both halves exactly: numcodecs has no
streaming API, and python-zstandard's bounded stream reader cannot tell a whole frame from one
whose checksum trailer was cut short (both read back every byte without an error), while its
decompressobj returns a call's whole output, up to a chunk, at once.  The library is the one
the native codec uses (see :mod:`oocarray._memory._zstd_library`), and ctypes releases the GIL
for every call into it.
"""

from __future__ import annotations

import ctypes
import functools
import os
import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from oocarray import _native
from oocarray._memory._zstd_library import zstd_library
from oocarray._storage._zarr._chunk_files import written_beside
from oocarray._storage._zarr._layout import crc32c_of
from oocarray._storage._zarr._store import ZarrStore
from oocarray.errors import CorruptChunkError

__all__ = [
    "CONTEXT_BYTES",
    "PIECE_BYTES",
    "FrameReader",
    "copy_frames",
    "streamable",
    "write_frame",
]

# Stored bytes read, and a chunk's bytes encoded, per call.
PIECE_BYTES = 1 << 20
# A thread's compression and decompression contexts, counted in a plan (libzstd's memory,
# not NumPy's): zstd estimates 3.5 MiB for a compression stream at level 3 (the ``zstd``
# codec's) and 2.5 MiB for decoding frames of levels up to 4 (a 2 MiB window); a source
# written at a higher level decodes with a larger window, within the 64 MiB the RSS may
# exceed the budget by.
CONTEXT_BYTES = 8 << 20

# libzstd's stable API values (the enums of its header).
_C_COMPRESSION_LEVEL = 100
_C_CHECKSUM_FLAG = 201
_RESET_SESSION_AND_PARAMETERS = 3
_E_CONTINUE, _E_END = 0, 2
_CONTENTSIZE_UNKNOWN = 2**64 - 1
_CONTENTSIZE_ERROR = 2**64 - 2


class _Window(ctypes.Structure):
    """zstd's ZSTD_inBuffer and ZSTD_outBuffer: an address, its size, the position in it."""

    _fields_ = [("data", ctypes.c_void_p), ("size", ctypes.c_size_t), ("pos", ctypes.c_size_t)]


@functools.cache
def _library() -> Any:
    """The libzstd the native code uses, with the prototypes used here, or None where it
    cannot be loaded."""
    try:
        lib = ctypes.CDLL(zstd_library())
    except OSError:
        return None
    size, pointer, window = ctypes.c_size_t, ctypes.c_void_p, ctypes.POINTER(_Window)
    for name, result, args in [
        ("ZSTD_createCCtx", pointer, []),
        ("ZSTD_freeCCtx", size, [pointer]),
        ("ZSTD_CCtx_reset", size, [pointer, ctypes.c_int]),
        ("ZSTD_CCtx_setParameter", size, [pointer, ctypes.c_int, ctypes.c_int]),
        ("ZSTD_CCtx_setPledgedSrcSize", size, [pointer, ctypes.c_ulonglong]),
        ("ZSTD_compressStream2", size, [pointer, window, window, ctypes.c_int]),
        ("ZSTD_createDCtx", pointer, []),
        ("ZSTD_freeDCtx", size, [pointer]),
        ("ZSTD_DCtx_reset", size, [pointer, ctypes.c_int]),
        ("ZSTD_decompressStream", size, [pointer, window, window]),
        ("ZSTD_getFrameContentSize", ctypes.c_ulonglong, [pointer, size]),
        ("ZSTD_isError", ctypes.c_uint, [size]),
        ("ZSTD_getErrorName", ctypes.c_char_p, [size]),
    ]:
        function = getattr(lib, name, None)
        if function is None:
            return None
        function.restype, function.argtypes = result, args
    return lib


def _check(lib: Any, code: int, what: str) -> int:
    if lib.ZSTD_isError(code):
        raise CorruptChunkError(f"{what}: zstd: {lib.ZSTD_getErrorName(code).decode()}")
    return code


def streamable(store: Any) -> bool:
    """Whether ``store``'s chunks are local, unsharded zstd chunk files stored in its dtype (the
    chunks this module writes and reads)."""
    if not isinstance(store, ZarrStore) or not store._local_files or _library() is None:
        return False
    layout = store._layout
    native = layout.native_codec if layout is not None else None
    return (
        layout is not None
        and layout.shard is None
        and native is not None
        and native & 0xFF == _native.CODEC_ZSTD
        and layout.stored_dtype == store.dtype
        and not store.dtype.hasobject
    )


class _Contexts:
    """A thread's zstd contexts and byte piece, made on its first use and freed with it."""

    def __init__(self) -> None:
        self.lib = _library()
        self.cctx = self.lib.ZSTD_createCCtx()
        self.dctx = self.lib.ZSTD_createDCtx()
        if not self.cctx or not self.dctx:
            self.__del__()
            raise MemoryError("libzstd could not make a context")
        # A writer's encoded piece and its input; a reader's stored bytes, apart, so that a
        # writer may fill its input from readers (a streamed direct pass).
        self.piece = np.empty(PIECE_BYTES, dtype=np.uint8)
        self.source = np.empty(PIECE_BYTES, dtype=np.uint8)
        self.stored = np.empty(PIECE_BYTES, dtype=np.uint8)

    def __del__(self) -> None:
        lib = getattr(self, "lib", None)
        if lib is not None:
            if self.cctx:
                lib.ZSTD_freeCCtx(self.cctx)
            if self.dctx:
                lib.ZSTD_freeDCtx(self.dctx)
            self.lib = None


_per_thread = threading.local()


def _mine() -> _Contexts:
    contexts: _Contexts | None = getattr(_per_thread, "contexts", None)
    if contexts is None:
        contexts = _per_thread.contexts = _Contexts()
    return contexts


def write_frame(
    store: ZarrStore,
    chunk: tuple[int, ...],
    nbytes: int,
    fill: Callable[[int, np.ndarray], None],
) -> None:
    """Write the file of ``chunk``, ``nbytes`` (a whole chunk as stored) compressed a piece
    at a time; ``fill(start, out)`` puts the chunk's bytes from ``start`` on into ``out`` (a
    uint8 array).  Written beside and renamed: a reader sees the old file or the whole new
    one; a failed write (a full disk) leaves nothing and raises."""
    layout = store._layout
    assert layout is not None
    own = _mine()
    lib, cctx = own.lib, own.cctx
    path = store._chunk_path(chunk)
    with written_beside(path) as fd:
        lib.ZSTD_CCtx_reset(cctx, _RESET_SESSION_AND_PARAMETERS)
        level = layout.codec.level
        _check(lib, lib.ZSTD_CCtx_setParameter(cctx, _C_COMPRESSION_LEVEL, level), path)
        checksum = int(bool(layout.codec.checksum))
        _check(lib, lib.ZSTD_CCtx_setParameter(cctx, _C_CHECKSUM_FLAG, checksum), path)
        _check(lib, lib.ZSTD_CCtx_setPledgedSrcSize(cctx, nbytes), path)
        source, out = own.source, own.piece
        crc = 0
        for start in range(0, nbytes, PIECE_BYTES):
            stop = min(nbytes, start + PIECE_BYTES)
            fill(start, source[: stop - start])
            mode = _E_END if stop == nbytes else _E_CONTINUE
            given = _Window(source.ctypes.data, stop - start, 0)
            while True:
                taken = _Window(out.ctypes.data, out.nbytes, 0)
                left = _check(lib, lib.ZSTD_compressStream2(cctx, taken, given, mode), path)
                if taken.pos:
                    view = memoryview(out[: taken.pos])  # type: ignore[arg-type]
                    if layout.crc32c:
                        crc = crc32c_of(view, crc)
                    _write_all(fd, view)
                if (mode == _E_END and left == 0) or (
                    mode == _E_CONTINUE and given.pos == given.size
                ):
                    break
        if layout.crc32c:
            _write_all(fd, memoryview(int(crc).to_bytes(4, "little")))


def _write_all(fd: int, view: memoryview) -> None:
    while view:
        view = view[os.write(fd, view) :]


class FrameReader:
    """The file of one chunk of ``store``, decoded a piece at a time into the caller's
    buffers (:meth:`read_into`), its frames and checksum checked to the end (:meth:`finish`);
    a chunk never written reads as the fill value.  The chunk's bytes may be one zstd frame or
    several one after the other (as :func:`copy_frames` writes them).  Damage is a
    :class:`~oocarray.errors.CorruptChunkError` naming the file."""

    def __init__(self, store: ZarrStore, chunk: tuple[int, ...]) -> None:
        layout = store._layout
        assert layout is not None
        self._own = _mine()
        self._path = store._chunk_path(chunk)
        self._fill = store.fill_value
        self._chunk_bytes = store._chunk_nbytes
        self._crc = layout.crc32c
        self._sink: Callable[[memoryview], None] | None = None
        self._fd: int | None = None
        try:
            self._fd = os.open(self._path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            return
        stored = os.fstat(self._fd).st_size
        self._frame_end = stored - (4 if self._crc else 0)
        if self._frame_end <= 0:
            self._damaged(f"{stored} bytes stored")
        self._offset = 0
        self._checksum = 0
        self._given = _Window(self._own.stored.ctypes.data, 0, 0)
        self._left = 1  # what zstd says the frame still holds
        self._decoded = 0
        self._one_frame = False  # whether the first frame's header says it is the whole chunk
        self._own.lib.ZSTD_DCtx_reset(self._own.dctx, 1)  # the session only

    @property
    def stored(self) -> bool:
        """Whether the chunk has a file (else it reads as the fill value)."""
        return self._fd is not None

    def _damaged(self, why: str) -> None:
        self.close()
        raise CorruptChunkError(f"chunk file {self._path} is damaged ({why})")

    def _more(self) -> bool:
        """Whether stored bytes of the frames are still to be decoded."""
        return self._given.pos < self._given.size or self._offset < self._frame_end

    def _refill(self) -> None:
        assert self._fd is not None
        want = min(PIECE_BYTES, self._frame_end - self._offset)
        if want <= 0:
            self._damaged(f"the frame ends after {self._decoded} of {self._chunk_bytes} bytes")
        view = memoryview(self._own.stored)[:want]  # type: ignore[arg-type]
        got = os.preadv(self._fd, [view], self._offset)
        if got <= 0:
            self._damaged("the file ended early")
        if self._offset == 0:
            size = int(self._own.lib.ZSTD_getFrameContentSize(self._own.stored.ctypes.data, got))
            if size == _CONTENTSIZE_ERROR:
                self._damaged("not a zstd frame")
            if size != _CONTENTSIZE_UNKNOWN and size > self._chunk_bytes:
                self._damaged(f"the frame holds {size} bytes, expected {self._chunk_bytes}")
            self._one_frame = size == self._chunk_bytes
        if self._crc:
            self._checksum = crc32c_of(view[:got], self._checksum)
        if self._sink is not None:
            self._sink(view[:got])
        self._offset += got
        self._given = _Window(self._own.stored.ctypes.data, got, 0)

    def read_into(self, out: np.ndarray) -> None:
        """Fill ``out`` (C-contiguous, writable) with the chunk's next decoded bytes."""
        if self._fd is None:
            out[...] = self._fill
            return
        lib, dctx = self._own.lib, self._own.dctx
        taken = _Window(out.ctypes.data, out.nbytes, 0)
        while taken.pos < taken.size:
            if self._given.pos == self._given.size:
                self._refill()
            code = lib.ZSTD_decompressStream(dctx, taken, self._given)
            if lib.ZSTD_isError(code):
                self._damaged(f"zstd: {lib.ZSTD_getErrorName(code).decode()}")
            self._left = code
            # A frame ending with stored bytes after it is followed by the next frame.
            if code == 0 and taken.pos < taken.size and not self._more():
                self._damaged(
                    f"the frame holds {self._decoded + taken.pos} bytes, expected "
                    f"{self._chunk_bytes}"
                )
        self._decoded += out.nbytes

    def finish(self) -> None:
        """Check that the frames end where the chunk does (and the checksums), then close."""
        if self._fd is None:
            return
        lib, dctx = self._own.lib, self._own.dctx
        spare = np.empty(1, dtype=np.uint8)
        # The last frame's own checksum, after the last decoded byte; any frame after it.
        while self._left != 0 or self._more():
            if self._given.pos == self._given.size:
                self._refill()
            taken = _Window(spare.ctypes.data, 1, 0)
            code = lib.ZSTD_decompressStream(dctx, taken, self._given)
            if lib.ZSTD_isError(code):
                self._damaged(f"zstd: {lib.ZSTD_getErrorName(code).decode()}")
            if taken.pos:
                self._damaged(f"the frame holds more than {self._chunk_bytes} bytes")
            self._left = code
        self._check_crc()
        self.close()

    def _check_crc(self) -> None:
        if self._crc:
            assert self._fd is not None
            stored = os.pread(self._fd, 4, self._frame_end)
            if len(stored) != 4 or int.from_bytes(stored, "little") != self._checksum:
                self._damaged("the CRC-32C checksum does not match")

    def copy_to(self, sink: Callable[[memoryview], None]) -> None:
        """Pass the chunk's stored frames to ``sink`` a piece at a time, checked: by their
        CRC-32C where the chain has one and one frame's header says it holds the whole chunk,
        else by decoding them (into a scratch piece, nothing kept).  Damage raises before
        the piece that shows it or after the last."""
        if self._fd is None:
            raise FileNotFoundError(self._path)
        self._sink = sink
        self._refill()  # the first piece: the first frame's header
        if self._crc and self._one_frame:
            while self._offset < self._frame_end:
                self._refill()
            self._check_crc()
            self.close()
            return
        scratch = self._own.piece
        for start in range(0, self._chunk_bytes, scratch.nbytes):
            self.read_into(scratch[: min(scratch.nbytes, self._chunk_bytes - start)])
        self.finish()

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def copy_frames(
    source: ZarrStore, out: ZarrStore, chunk: tuple[int, ...], parts: list[tuple[int, ...]]
) -> bool:
    """Write the file of ``out``'s ``chunk`` as the stored zstd frames of ``source``'s chunks
    ``parts``, one after the other, none decoded or encoded again: zstd decodes concatenated
    frames as one stream, so where the chunk's bytes are those of its parts in that order (a
    direct rechunk merging whole chunks) that is the chunk.  Each part is checked as it is
    copied (:meth:`FrameReader.copy_to`); damage raises with nothing written.  False, with
    nothing written, where a part was never written (the caller encodes the chunk)."""
    paths = [source._chunk_path(part) for part in parts]
    if not all(os.path.exists(path) for path in paths):
        return False
    layout = out._layout
    assert layout is not None
    crc = 0

    def sink(view: memoryview) -> None:
        nonlocal crc
        if layout.crc32c:
            crc = crc32c_of(view, crc)
        _write_all(fd, view)

    try:
        with written_beside(out._chunk_path(chunk)) as fd:
            for part in parts:
                reader = FrameReader(source, part)
                try:
                    reader.copy_to(sink)
                finally:
                    reader.close()
            if layout.crc32c:
                _write_all(fd, memoryview(int(crc).to_bytes(4, "little")))
    except FileNotFoundError:  # a part removed since: nothing was written
        return False
    return True
