"""Zarr (v3 and v2) arrays.

zarr-python parses metadata and creates arrays, so what is written stays plain zarr.  For the
common layouts — a local directory, regular chunks, C order, and one compressor at most
(zstd, blosc or gzip in v3; any numcodecs compressor in v2) — chunks are read and written
directly: the chunk file is read and decoded straight into a buffer of the active manager,
without zarr-python's per-call async machinery.  Anything else (sharding, filters, other
codecs, remote stores) goes through zarr-python.
"""

from __future__ import annotations

import math
import os
import struct
import tempfile
import threading
from collections.abc import Callable
from typing import Any

import numcodecs
import numpy as np
import zarr
import zarr.codecs

from oocarray._manager import active_manager
from oocarray._stores._base import Store, check_dtype
from oocarray.errors import CorruptChunkError, StoreNotFoundError

__all__ = ["CODECS", "ZarrStore", "create_zarr"]


def _compressors(codec: str, itemsize: int) -> Any:
    if codec == "zstd":
        return zarr.codecs.ZstdCodec(level=3)
    if codec in ("lz4", "blosc"):
        return zarr.codecs.BloscCodec(
            cname="lz4" if codec == "lz4" else "zstd",
            clevel=5,
            shuffle="shuffle",
            typesize=itemsize,
        )
    if codec == "gzip":
        return zarr.codecs.GzipCodec(level=5)
    if codec == "none":
        return None
    raise ValueError(f"codec must be one of {CODECS}, got {codec!r}")


CODECS = ("zstd", "lz4", "blosc", "gzip", "none")


def create_zarr(
    path: str,
    shape: tuple[int, ...],
    dtype: np.dtype[Any],
    chunks: tuple[int, ...],
    codec: str,
    overwrite: bool,
) -> None:
    zarr.create_array(
        store=path,
        shape=shape,
        chunks=chunks,
        dtype=dtype,
        compressors=_compressors(codec, dtype.itemsize),
        fill_value=0,
        zarr_format=3,
        overwrite=overwrite,
    )


class _Direct:
    """How to find, decode and encode one chunk without zarr-python."""

    def __init__(
        self,
        key: Callable[[tuple[int, ...]], str],
        codec: Any,
        stored_dtype: np.dtype[Any],
        shard: _Shard | None = None,
    ) -> None:
        self.key = key
        self.codec = codec  # a numcodecs codec, or None for raw bytes
        self.stored_dtype = stored_dtype  # with the byte order of the files
        self.shard = shard  # set when chunks are inner chunks of shards (read-only path)


class _Shard:
    """Where an inner chunk lies in its shard file: the shard index (one little-endian
    (offset, nbytes) pair per inner chunk, C order, at the end or start of the file, optionally
    followed by a CRC-32C) says."""

    def __init__(self, per_shard: tuple[int, ...], index_at_end: bool, checksum: bool) -> None:
        self.per_shard = per_shard  # inner chunks per shard, per axis
        self.index_at_end = index_at_end
        self.index_bytes = 16 * math.prod(per_shard) + (4 if checksum else 0)

    def locate(self, chunk: tuple[int, ...]) -> tuple[tuple[int, ...], int]:
        """The shard holding an inner chunk, and the chunk's number inside it."""
        shard = []
        number = 0
        for c, n in zip(chunk, self.per_shard, strict=True):
            q, r = divmod(c, n)
            shard.append(q)
            number = number * n + r
        return tuple(shard), number


def _v3_direct(array: Any) -> _Direct | None:
    meta: Any = array.metadata
    codecs = list(meta.codecs)
    shard = None
    if len(codecs) == 1 and isinstance(codecs[0], zarr.codecs.ShardingCodec):
        sharding = codecs[0]
        index_codecs = list(sharding.index_codecs)
        little = all(
            getattr(getattr(c, "endian", None), "value", "little") == "little"
            for c in index_codecs
            if isinstance(c, zarr.codecs.BytesCodec)
        )
        extra = [c for c in index_codecs if not isinstance(c, zarr.codecs.BytesCodec)]
        if not little or any(not isinstance(c, zarr.codecs.Crc32cCodec) for c in extra):
            return None
        outer = tuple(meta.chunk_grid.chunk_shape)
        inner = tuple(sharding.chunk_shape)
        shard = _Shard(
            tuple(o // i for o, i in zip(outer, inner, strict=True)),
            str(getattr(sharding.index_location, "value", sharding.index_location)) == "end",
            bool(extra),
        )
        codecs = list(sharding.codecs)
    if not codecs or not isinstance(codecs[0], zarr.codecs.BytesCodec):
        return None
    endian = codecs[0].endian
    dtype = np.dtype(array.dtype)
    little = endian is None or getattr(endian, "value", endian) == "little"
    stored = dtype.newbyteorder("<" if little else ">") if dtype.itemsize > 1 else dtype
    rest = codecs[1:]
    codec: Any = None
    if len(rest) > 1:
        return None
    if rest:
        c = rest[0]
        if isinstance(c, zarr.codecs.ZstdCodec):
            codec = numcodecs.Zstd(level=c.level, checksum=c.checksum)
        elif isinstance(c, zarr.codecs.BloscCodec):
            shuffle = {"noshuffle": 0, "shuffle": 1, "bitshuffle": 2}[str(c.shuffle.value)]
            codec = numcodecs.Blosc(
                cname=str(c.cname.value), clevel=c.clevel, shuffle=shuffle, blocksize=c.blocksize
            )
        elif isinstance(c, zarr.codecs.GzipCodec):
            codec = numcodecs.GZip(level=c.level)
        else:
            return None
    encoding = meta.chunk_key_encoding
    separator = getattr(encoding, "separator", "/")
    if separator not in ("/", "."):
        return None
    if type(encoding).__name__ == "DefaultChunkKeyEncoding":

        def key(chunk: tuple[int, ...]) -> str:
            return "c" + (separator + separator.join(map(str, chunk)) if chunk else "")

    elif type(encoding).__name__ == "V2ChunkKeyEncoding":

        def key(chunk: tuple[int, ...]) -> str:
            return separator.join(map(str, chunk)) if chunk else "0"

    else:
        return None
    return _Direct(key, codec, stored, shard)


def _v2_direct(array: Any) -> _Direct | None:
    meta: Any = array.metadata
    if meta.filters or meta.order != "C":
        return None
    separator = meta.dimension_separator or "."
    if separator not in ("/", "."):
        return None

    def key(chunk: tuple[int, ...]) -> str:
        return separator.join(map(str, chunk)) if chunk else "0"

    dtype = (
        np.dtype(meta.dtype.to_native_dtype())
        if hasattr(meta.dtype, "to_native_dtype")
        else np.dtype(array.dtype)
    )
    return _Direct(key, meta.compressor, dtype)


_thread_buffers = threading.local()


def _scratch(shape: tuple[int, ...], dtype: np.dtype[Any]) -> np.ndarray:
    """A decode buffer reused by this thread.  Inside a manager the buffer comes from it (and a
    workspace's arena or the region cache makes that cheap); outside, one buffer per thread
    spares a fresh mapping, and its page faults, for every chunk."""
    if active_manager() is not None:
        return np.empty(shape, dtype=dtype)
    key = (shape, dtype.str)
    cached: tuple[tuple[Any, ...], np.ndarray] | None = getattr(_thread_buffers, "buffer", None)
    if cached is None or cached[0] != key:
        cached = (key, np.empty(shape, dtype=dtype))
        _thread_buffers.buffer = cached
    return cached[1]


class ZarrStore(Store):
    format = "zarr"

    def __init__(self, array: Any, path: str, readonly: bool, allow_object: bool) -> None:
        self.array = array
        self.path = path
        self.readonly = readonly
        self.dtype = np.dtype(array.dtype)
        check_dtype(self.dtype, allow_object, f"zarr array {path!r}")
        self.shape = tuple(array.shape)
        self.chunks = tuple(array.chunks)
        self.fill_value = array.fill_value if array.fill_value is not None else 0
        self.zarr_format = array.metadata.zarr_format
        self.sharded = getattr(array, "shards", None) is not None
        self._root = os.path.realpath(path)
        direct = None
        if not self.dtype.hasobject and os.path.isdir(path):
            direct = _v3_direct(array) if self.zarr_format == 3 else _v2_direct(array)
        self._direct = direct
        self.codec = self._codec_name()

    @classmethod
    def open(cls, path: str, mode: str, allow_object: bool) -> ZarrStore:
        try:
            array = zarr.open_array(store=path, mode="r" if mode == "r" else "r+")
        except FileNotFoundError as error:
            raise StoreNotFoundError(f"no zarr array at {path!r}") from error
        return cls(array, path, mode == "r", allow_object)

    def _codec_name(self) -> str:
        meta: Any = self.array.metadata
        if self.zarr_format == 2:
            compressor = meta.compressor
            return "none" if compressor is None else str(compressor.codec_id)
        names = [type(c).__name__.removesuffix("Codec").lower() for c in meta.codecs]
        if names[:1] == ["bytes"]:
            names = names[1:]
        return "+".join(names) or "none"

    @property
    def direct(self) -> bool:
        """Whether chunks are read and written without zarr-python."""
        return self._direct is not None

    def _chunk_path(self, chunk: tuple[int, ...]) -> str:
        assert self._direct is not None
        # Keys are made of integers and a validated separator: they cannot leave the root.
        return self._root + os.sep + self._direct.key(chunk)

    def read_piece(self, chunk: tuple[int, ...], local: tuple[Any, ...]) -> np.ndarray:
        direct = self._direct
        if (
            direct is None
            or direct.codec is not None
            or direct.shard is not None
            or not self.chunks
        ):
            # Decode the whole chunk into a buffer reused by this thread, then take the piece.
            return np.asarray(self.read_chunk(chunk, scratch=True)[local])
        # Uncompressed: read only the rows of the chunk's first axis that the piece touches.
        first = local[0]
        if isinstance(first, slice):
            positions = range(*first.indices(self.chunks[0]))
            lo, hi = (min(positions), max(positions) + 1) if positions else (0, 0)
        else:
            lo, hi = (int(first.min()), int(first.max()) + 1) if first.size else (0, 0)
        row_bytes = math.prod(self.chunks[1:]) * direct.stored_dtype.itemsize
        block = np.empty((hi - lo, *self.chunks[1:]), dtype=direct.stored_dtype)
        path = self._chunk_path(chunk)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            block[...] = self.fill_value
            got = block.nbytes
        else:
            try:
                got = os.preadv(fd, [memoryview(block).cast("B")], lo * row_bytes)  # type: ignore[arg-type]
            finally:
                os.close(fd)
        if got != block.nbytes:
            raise CorruptChunkError(
                f"chunk {chunk} of {self.path!r} is truncated: {path} ends before row {hi} "
                f"of {self.chunks[0]}"
            )
        shifted = (
            slice(first.start - lo, first.stop - lo, first.step)
            if isinstance(first, slice)
            else np.asarray(first) - lo
        )
        piece = block[(shifted, *local[1:])]
        return piece if piece.dtype == self.dtype else piece.astype(self.dtype)

    def read_rows_into(self, start: int, out: np.ndarray) -> bool:
        direct = self._direct
        if (
            direct is None
            or direct.codec is not None
            or direct.shard is not None
            or direct.stored_dtype != self.dtype
            or self.chunks[1:] != self.shape[1:]
        ):
            return False
        if out.size == 0:
            return True
        per_chunk = self.chunks[0]
        row_bytes = out.nbytes // len(out)
        flat = memoryview(out).cast("B")  # type: ignore[arg-type]
        done = 0
        while done < len(out):
            c, r = divmod(start + done, per_chunk)
            take = min(per_chunk - r, len(out) - done)
            target = flat[done * row_bytes : (done + take) * row_bytes]
            path = self._chunk_path((c,) + (0,) * (len(self.shape) - 1))
            try:
                fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            except FileNotFoundError:
                out[done : done + take] = self.fill_value
            else:
                try:
                    got = os.preadv(fd, [target], r * row_bytes)
                finally:
                    os.close(fd)
                if got != len(target):
                    raise CorruptChunkError(
                        f"chunk {c} of {self.path!r} is truncated: {path} ends before row "
                        f"{r + take} of {per_chunk}"
                    )
            done += take
        return True

    def read_chunk(self, chunk: tuple[int, ...], scratch: bool = False) -> np.ndarray:
        region = self.chunk_region(chunk)
        if self._direct is None:
            return np.asarray(self.array[region])
        direct = self._direct
        out = (
            _scratch(self.chunks, direct.stored_dtype)
            if scratch
            else np.empty(self.chunks, dtype=direct.stored_dtype)
        )
        if direct.shard is not None:
            self._read_inner_chunk(chunk, out)
            if out.dtype != self.dtype:
                out = out.astype(self.dtype)
            return out[tuple(slice(0, r.stop - r.start) for r in region)]
        path = self._chunk_path(chunk)
        try:
            with open(path, "rb") as f:
                if direct.codec is None:
                    got = f.readinto(memoryview(out).cast("B"))  # type: ignore[arg-type]
                    if got != out.nbytes:
                        raise CorruptChunkError(
                            f"chunk {chunk} of {self.path!r} is truncated: {path} has {got} "
                            f"bytes, expected {out.nbytes}"
                        )
                else:
                    self._decode_into(f.read(), None, out, chunk, path)
        except FileNotFoundError:
            out[...] = self.fill_value  # chunks never written hold the fill value
        if out.dtype != self.dtype:
            out = out.astype(self.dtype)
        return out[tuple(slice(0, r.stop - r.start) for r in region)]

    def _read_inner_chunk(self, chunk: tuple[int, ...], out: np.ndarray) -> None:
        """Decode one inner chunk of a shard into ``out``: two reads, the shard's index entry
        and the chunk's bytes, never the whole shard."""
        direct = self._direct
        assert direct is not None and direct.shard is not None
        shard_key, number = direct.shard.locate(chunk)
        path = self._chunk_path(shard_key)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            out[...] = self.fill_value
            return
        try:
            size = os.fstat(fd).st_size
            base = size - direct.shard.index_bytes if direct.shard.index_at_end else 0
            entry = os.pread(fd, 16, base + 16 * number)
            if len(entry) != 16 or base < 0:
                raise CorruptChunkError(
                    f"chunk {chunk} of {self.path!r}: the index of shard {path} is truncated"
                )
            offset, nbytes = struct.unpack("<QQ", entry)
            if offset == nbytes == 2**64 - 1:
                out[...] = self.fill_value  # never written
                return
            if offset + nbytes > size or nbytes > 2 * out.nbytes + 4096:
                raise CorruptChunkError(
                    f"chunk {chunk} of {self.path!r}: the index of shard {path} points past "
                    f"the end of the file or is corrupt (offset {offset}, {nbytes} bytes)"
                )
            raw = os.pread(fd, nbytes, offset)
        finally:
            os.close(fd)
        self._decode_into(raw, nbytes, out, chunk, f"shard {path}")

    def _decode_into(
        self, raw: bytes, expected: int | None, out: np.ndarray, chunk: tuple[int, ...], where: str
    ) -> None:
        """Decode one chunk's stored bytes into ``out``; damage becomes a CorruptChunkError
        naming the chunk and where its bytes came from."""
        codec = self._direct.codec if self._direct is not None else None
        try:
            if expected is not None and len(raw) != expected:
                raise ValueError(f"read {len(raw)} of {expected} bytes")
            if codec is None:
                out.reshape(-1).view(np.uint8)[:] = np.frombuffer(raw, dtype=np.uint8)
            else:
                codec.decode(raw, out=out)
        except Exception as error:
            name = "raw bytes" if codec is None else codec.codec_id
            raise CorruptChunkError(
                f"chunk {chunk} of {self.path!r} cannot be decoded ({name}) from {where}: it is "
                f"corrupt or truncated ({error})"
            ) from error

    def write_chunk(self, chunk: tuple[int, ...], data: np.ndarray) -> None:
        self.check_writable()
        region = self.chunk_region(chunk)
        if self._direct is None or self._direct.shard is not None:
            self.array[region] = data
            return
        direct = self._direct
        if data.shape != self.chunks:
            full = np.full(self.chunks, self.fill_value, dtype=self.dtype)
            full[tuple(slice(0, n) for n in data.shape)] = data
            data = full
        data = np.ascontiguousarray(data, dtype=direct.stored_dtype)
        encoded = data if direct.codec is None else direct.codec.encode(data)
        path = self._chunk_path(chunk)
        directory = os.path.dirname(path)
        os.makedirs(directory, exist_ok=True)
        # Write beside it and rename: readers never see half a chunk.
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(memoryview(encoded).cast("B"))  # type: ignore[arg-type]
            os.replace(tmp, path)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise

    def stored_bytes(self) -> int:
        total = 0
        for directory, _, files in os.walk(self._root):
            for name in files:
                total += os.path.getsize(os.path.join(directory, name))
        return total
