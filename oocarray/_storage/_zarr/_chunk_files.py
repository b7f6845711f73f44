"""The files of a local zarr array's chunks: where each lies, a new one written beside its
name and renamed over it (readers see the old file or the whole new one), a chunk encoded as
its file holds it, and the kernel told of the files a large read is about to read."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator, Sequence

import numpy as np

from oocarray import _native
from oocarray._storage._reader import Source
from oocarray._storage._zarr._layout import Layout, crc32c_of
from oocarray._storage._zarr._zstd_write import ZstdChunkWriter

__all__ = [
    "ADVISE_MIN_CHUNK_BYTES",
    "as_encodable",
    "chunk_file",
    "describe",
    "encoded_parts",
    "mkstemp_beside",
    "new_file_mode",
    "open_or_none",
    "will_need",
    "written_beside",
    "zstd_writer",
]


def new_file_mode() -> int:
    """The mode ``open()`` would give a new file: 0666 less the process's umask (read from
    /proc, since ``os.umask`` can only be read by changing it, which races other threads)."""
    try:
        with open("/proc/self/status", "rb") as f:
            for line in f:
                if line.startswith(b"Umask:"):
                    return 0o666 & ~int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    return 0o644


def mkstemp_beside(directory: str) -> tuple[int, str]:
    """A new file in ``directory`` to write and rename over a store file: made with
    ``O_EXCL`` (never a link someone placed), then given an ordinary file's mode, since
    ``mkstemp``'s 0600 would make the store unreadable to the users it is shared with."""
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".tmp-")
    try:
        os.fchmod(fd, new_file_mode())
    except BaseException:
        os.close(fd)
        os.unlink(tmp)
        raise
    return fd, tmp


@contextlib.contextmanager
def written_beside(path: str) -> Iterator[int]:
    """A descriptor of a new file beside ``path`` (its folders made) that is renamed over it
    when the block ends: readers see the old file or the whole new one.  On any error,
    a full disk say, the new file is removed and ``path`` is left as it was."""
    directory = os.path.dirname(path)
    os.makedirs(directory, exist_ok=True)
    fd, tmp = mkstemp_beside(directory)
    try:
        try:
            yield fd
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def as_encodable(data: np.ndarray) -> np.ndarray:
    if data.dtype.kind in "mM":  # no buffer format of their own: encode as ints
        return data.view(f"{data.dtype.byteorder}i{data.dtype.itemsize}")
    return data


def encoded_parts(layout: Layout, data: np.ndarray) -> list[memoryview]:
    """A stored chunk (as
    :meth:`oocarray._storage._zarr._store.ZarrStore._stored_chunk` makes it) encoded as its
    file or object holds it: the codec's bytes, then zarr's crc32c codec's CRC-32C of them."""
    data = as_encodable(data)
    encoded = data if layout.codec is None else layout.codec.encode(data)
    view = memoryview(encoded).cast("B")  # type: ignore[arg-type]
    checksum = crc32c_of(view).to_bytes(4, "little") if layout.crc32c else b""
    return [view, memoryview(checksum)]


def zstd_writer(layout: Layout | None) -> ZstdChunkWriter | None:
    """The native zstd writer of an array's unsharded chunks, where its codec is zstd."""
    if layout is None or layout.shard is not None or layout.native_codec is None:
        return None
    if layout.native_codec & 0xFF != _native.CODEC_ZSTD:
        return None
    return ZstdChunkWriter(layout.codec.level, layout.codec.checksum, layout.crc32c)


def chunk_file(root: str, layout: Layout, chunk: tuple[int, ...]) -> str:
    # Keys are made of integers and a validated separator: they cannot leave the root.
    return root + os.sep + layout.key(chunk)


def describe(root: str, layout: Layout, chunk: tuple[int, ...]) -> str:
    """The file a chunk's bytes come from, for error messages."""
    if layout.shard is None:
        return chunk_file(root, layout, chunk)
    return f"shard {chunk_file(root, layout, layout.shard.locate(chunk)[0])}"


# Reads of at least this many chunks tell the kernel of their files first (see will_need),
# when their chunks are this large: the hint costs a few system calls a chunk, which a warm
# read of small chunks would feel (a quarter more for 1,024 chunks of 16 KiB) and a chunk of a
# MiB or more, decoded, does not.
_ADVISE_FROM_CHUNKS = 4
ADVISE_MIN_CHUNK_BYTES = 1 << 20


def will_need(sources: Sequence[Source | None]) -> None:
    """Tell the kernel that a read of many chunks is about to read their bytes, so that
    uncached ones are read from disk together, many requests in flight, rather than one or two
    at a time as the jobs reach them (1.4-2.9x the cold throughput of two readers here).  A
    hint only: cached files cost a few system calls, and any error is ignored.  A chunk several
    pieces share is named once."""
    stored = [source for source in sources if source is not None]
    if len(stored) < _ADVISE_FROM_CHUNKS:
        return
    # Only files (a path) and open shards (a descriptor) can be advised: stored bytes already
    # in memory (an object store's) are left out (nor are they hashable).
    files = dict.fromkeys(source for source in stored if isinstance(source[0], (str, int)))
    for where, offset, nbytes in files:
        try:
            if isinstance(where, int):  # a shard open for this read: the inner chunk's bytes
                os.posix_fadvise(where, offset, max(nbytes, 0), os.POSIX_FADV_WILLNEED)
            elif isinstance(where, str):  # a chunk file, opened by its job
                fd = open_or_none(where)
                if fd is not None:
                    try:
                        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_WILLNEED)
                    finally:
                        os.close(fd)
        except OSError:
            continue


def open_or_none(path: str) -> int | None:
    try:
        return os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return None  # chunks never written hold the fill value
