"""Where the inner chunks of a zarr v3 shard lie: the shard's layout (inner chunks per
shard, where its index is) and its index, read and checked (offset and stored bytes of each
inner chunk).
"""

from __future__ import annotations

import math
import os
import struct
from typing import Any

import google_crc32c

from oocarray.errors import CorruptChunkError

__all__ = ["OpenShard", "ShardIndex", "ShardLayout"]

_ENTRY = struct.Struct("<QQ")  # a shard index entry: offset and length of an inner chunk


class ShardLayout:
    """Where an inner chunk lies in its shard file: the shard index (one little-endian
    (offset, nbytes) pair per inner chunk, C order, at the end or start of the file, optionally
    followed by a CRC-32C) says."""

    def __init__(self, per_shard: tuple[int, ...], index_at_end: bool, checksum: bool) -> None:
        self.per_shard = per_shard  # inner chunks per shard, per axis
        self.index_at_end = index_at_end
        self.checksum = checksum  # a CRC-32C of the entries follows them
        self.index_bytes = 16 * math.prod(per_shard) + (4 if checksum else 0)
        # Inner chunks per step along the first axis, in the index's C order.
        self.inner_per_row = math.prod(per_shard[1:])

    def locate(self, chunk: tuple[int, ...]) -> tuple[tuple[int, ...], int]:
        """The shard holding an inner chunk, and the chunk's number inside it."""
        shard = []
        number = 0
        for c, n in zip(chunk, self.per_shard, strict=True):
            q, r = divmod(c, n)
            shard.append(q)
            number = number * n + r
        return tuple(shard), number


class ShardIndex:
    """The index of one shard, read and checked: where each inner chunk's bytes lie.
    ``index``: the index's bytes as stored; ``size``: the shard's size in bytes; ``where``:
    the shard, for messages."""

    def __init__(
        self,
        index: Any,
        size: int,
        where: str,
        array_path: str,
        layout: ShardLayout,
        chunk: tuple[int, ...],
    ) -> None:
        self.size = size
        self._where = where
        self._array_path = array_path
        count = math.prod(layout.per_shard)
        index = bytes(index)
        if len(index) != layout.index_bytes:
            raise CorruptChunkError(
                f"chunk {chunk} of {array_path!r}: the index of shard {where} is truncated"
            )
        if layout.checksum and google_crc32c.value(index[: 16 * count]) != int.from_bytes(
            index[16 * count :], "little"
        ):
            raise CorruptChunkError(
                f"chunk {chunk} of {array_path!r}: the index of shard {where} fails its "
                "CRC-32C checksum (the shard is damaged)"
            )
        self._index = index

    def entry(
        self, number: int, chunk: tuple[int, ...], chunk_nbytes: int
    ) -> tuple[int, int] | None:
        """(offset, stored bytes) of inner chunk ``number``, or None when it was never written."""
        offset, nbytes = _ENTRY.unpack_from(self._index, 16 * number)
        if offset == nbytes == 2**64 - 1:
            return None
        if offset + nbytes > self.size or nbytes > 2 * chunk_nbytes + 4096:
            raise CorruptChunkError(
                f"chunk {chunk} of {self._array_path!r}: the index of shard {self._where} "
                f"points past the end of the file or is corrupt (offset {offset}, {nbytes} "
                "bytes)"
            )
        return offset, nbytes


class OpenShard(ShardIndex):
    """One shard file, open, with its index read."""

    def __init__(
        self, fd: int, path: str, array_path: str, layout: ShardLayout, chunk: tuple[int, ...]
    ) -> None:
        self.fd = fd
        self.path = path
        size = os.fstat(fd).st_size
        base = size - layout.index_bytes if layout.index_at_end else 0
        index = os.pread(fd, layout.index_bytes, base) if base >= 0 else b""
        super().__init__(index, size, path, array_path, layout, chunk)

    def close(self) -> None:
        os.close(self.fd)
