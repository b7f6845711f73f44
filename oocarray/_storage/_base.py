"""The interface every storage backend implements."""

from __future__ import annotations

import abc
import contextlib
import math
import os
import threading
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import numpy as np

from oocarray._storage._indexing import ChunkPiece
from oocarray.errors import ReadOnlyError

__all__ = ["Store", "auto_chunks", "check_dtype"]

TARGET_CHUNK_BYTES = 4 << 20


def auto_chunks(
    shape: tuple[int, ...], itemsize: int, target: int = TARGET_CHUNK_BYTES
) -> tuple[int, ...]:
    """Chunks of about ``target`` bytes: trailing axes whole where they fit, the leading axes
    split.  ``auto_chunks((10**6, 64), 4)`` is ``(16384, 64)``."""
    chunks = [max(1, s) for s in shape]
    for axis in range(len(chunks)):
        inner = math.prod(chunks[axis + 1 :]) * itemsize
        if math.prod(chunks) * itemsize <= target:
            break
        chunks[axis] = max(1, min(chunks[axis], target // max(inner, 1)))
    return tuple(chunks)


# Locks of the blocks being written, shared by every array of the process: a block maps to
# one of a fixed set of locks (by its array and position), so the table never grows.
_BLOCK_LOCKS = 512
_block_locks = [threading.Lock() for _ in range(_BLOCK_LOCKS)]


def _fresh_block_locks() -> None:
    # A forked child has one thread: locks other threads held at the fork would never open.
    global _block_locks
    _block_locks = [threading.Lock() for _ in range(_BLOCK_LOCKS)]


os.register_at_fork(after_in_child=_fresh_block_locks)


def _region(
    index: tuple[int, ...], grid: tuple[int, ...], shape: tuple[int, ...]
) -> tuple[slice, ...]:
    return tuple(
        slice(c * n, min((c + 1) * n, s)) for c, n, s in zip(index, grid, shape, strict=True)
    )


def check_dtype(dtype: np.dtype[Any], allow_object: bool, where: str) -> None:
    if dtype.hasobject and not allow_object:
        raise ValueError(
            f"{where} holds Python objects (dtype {dtype}), which can run code when read; "
            "pass allow_object=True only for data you trust"
        )


class Store(abc.ABC):
    """A chunked, array-shaped store: the one interface the layers above read and write
    through.

    A backend sets ``shape``, ``dtype``, ``chunks``, ``fill_value``, ``readonly``, ``path``,
    ``format`` and ``codec``, and implements the abstract methods on chunk-aligned regions; the
    other methods have defaults made of those, which a backend overrides where it can do
    better.  What a backend can do beyond that is said by its capability flags, which callers
    read instead of asking which backend a store is (as zarr-python's ``abc.store.Store``
    does with ``supports_writes`` and its kin):

    - ``supports_partial_reads``: :meth:`read_piece` reads less than the whole chunk;
    - ``supports_appends``: the array grows along axis 0 (``grown``, ``commit_rows``);
    - ``supports_paging``: ``as_ndarray()`` can page its chunks (the store gives a paging
      plan of its format);
    - ``memory_mapped`` (from ``memmap``): the data is one memory map, indexed in place.
    """

    supports_partial_reads: bool = False
    supports_appends: bool = False
    supports_paging: bool = False

    shape: tuple[int, ...]
    dtype: np.dtype[Any]
    chunks: tuple[int, ...]
    fill_value: Any = 0
    readonly: bool
    path: str
    format: str
    codec: str
    memmap: np.ndarray | None = None

    def reopen_remote(self) -> tuple[Any, str | None, Any] | None:
        """For a store in an object store: (its location, the array's path in the group there
        or None, its chunk cache or None), all a process needs to open it again; None for
        local stores, which reopen by path."""
        return None

    @contextlib.contextmanager
    def read_ahead(self, chunks: Iterable[tuple[int, ...]]) -> Iterator[None]:
        """Inside, reads follow ``chunks`` (their order): a store that fetches over a network
        starts fetching them ahead of the reads; local stores need no such hint."""
        yield

    # The array inside its file, where the path alone does not name it (an HDF5 dataset).
    dataset_name: str | None = None

    @property
    def memory_mapped(self) -> bool:
        return self.memmap is not None

    def chunk_region(self, chunk: tuple[int, ...]) -> tuple[slice, ...]:
        return _region(chunk, self.chunks, self.shape)

    @property
    def write_grid(self) -> tuple[int, ...]:
        """The blocks writes are made of: the chunks, or the shards of sharded arrays (a write
        of part of a shard rewrites the whole shard)."""
        return self.chunks

    def block_region(self, block: tuple[int, ...]) -> tuple[slice, ...]:
        return _region(block, self.write_grid, self.shape)

    @property
    def identity(self) -> str:
        """What names this array in the process: two stores of one array share it."""
        return os.path.realpath(self.path)

    @contextlib.contextmanager
    def locked_blocks(self, blocks: Sequence[tuple[int, ...]]) -> Iterator[None]:
        """Hold the locks of ``blocks`` of :attr:`write_grid` (of this array, in this process).

        A write of part of a block reads it, updates it and writes it back: without the lock,
        another thread's write to another part of the same block, made in between, is lost.
        Locks are taken in one global order, so writers never deadlock."""
        identity = self.identity
        locks = _block_locks
        numbers = sorted({hash((identity, block)) % _BLOCK_LOCKS for block in blocks})
        with contextlib.ExitStack() as held:
            for number in numbers:
                held.enter_context(locks[number])
            yield

    def read_block(self, block: tuple[int, ...]) -> np.ndarray:
        """A writable copy of the valid part of one block of :attr:`write_grid`."""
        return np.array(self.read_chunk(block))

    def write_blocks(self, blocks: Sequence[tuple[tuple[int, ...], np.ndarray]]) -> None:
        """Replace the valid part of each given block of :attr:`write_grid` with its data;
        backends that can write several at once do."""
        for block, data in blocks:
            self.write_chunk(block, data)

    @abc.abstractmethod
    def read_chunk(self, chunk: tuple[int, ...]) -> np.ndarray:
        """The valid part of one chunk, allocated in the active manager."""

    def read_piece(self, chunk: tuple[int, ...], local: tuple[Any, ...]) -> np.ndarray:
        """``read_chunk(chunk)[local]``; backends that can read less than a chunk do (and say
        so with ``supports_partial_reads``)."""
        return np.asarray(self.read_chunk(chunk)[local])

    def read_into(self, pieces: Sequence[ChunkPiece], out: np.ndarray) -> None:
        """``out[p.out] = read_piece(p.chunk, p.local)`` for every piece; backends that can
        read several chunks at once do."""
        for piece in pieces:
            out[piece.out] = self.read_piece(piece.chunk, piece.local)

    def read_rows_into(self, start: int, out: np.ndarray) -> bool:
        """Fill ``out`` with rows ``start:start + len(out)`` straight from storage, when the
        backend can (rows whole in one chunk along the other axes); False when it cannot."""
        return False

    @abc.abstractmethod
    def write_chunk(self, chunk: tuple[int, ...], data: np.ndarray) -> None:
        """Replace the valid part of one chunk with ``data``."""

    def write_direct(self, on: bool) -> None:  # noqa: B027 -- optional: a no-op by default
        """Write chunks past the page cache (``O_DIRECT``) from now on, or not, where the
        backend can; the others ignore it.  For an output larger than the page cache would
        keep and that nobody reads back at once: its pages would push the cache's others
        out, and each fresh page costs a copy (and, on a virtual machine that hands free
        memory back to its host, a fault of the host: 1.6-2.0 s of CPU per GiB written in
        files of 4 MiB on this project's machine, 0.09 s direct)."""

    @abc.abstractmethod
    def stored_bytes(self) -> int:
        """Bytes the data takes on disk."""

    def grown(self, rows: int) -> Store:
        """With ``supports_appends``: a second store of this array, ``rows`` rows long in
        memory only, that appends write their chunks through before :meth:`commit_rows`."""
        raise NotImplementedError(f"{self.format} arrays do not grow")

    def commit_rows(self, rows: int) -> None:
        """With ``supports_appends``: make the array ``rows`` rows long on disk, whole."""
        raise NotImplementedError(f"{self.format} arrays do not grow")

    def check_writable(self) -> None:
        if self.readonly:
            raise ReadOnlyError(
                f"{self.path!r} was opened read-only; open it with mode='r+' to write"
            )

    # Not abstract: a store that holds no file open between reads (zarr) has nothing to do.
    def close(self) -> None:  # noqa: B027
        """Release files held open."""
