"""Zarr arrays in object stores (S3, GCS, Azure, HTTP, or any zarr ``Store`` object).

zarr-python reads and writes the metadata, over the backend's zarr ``Store`` (consolidated
metadata is used where a group has it).  Chunks take the local directory's path where the
layout allows (see :mod:`._layout`): a read fetches the stored bytes of every chunk it needs at
once, many requests in flight (:mod:`oocarray._storage._objects._fetcher`), and the native
reader decodes them from the fetched buffers straight into the destination.  Inner chunks of
shards are fetched as :mod:`._remote_shards` says: whole shards, or ranges after the shard's
index.  Unsharded chunks are written as one object each (one PUT: a
reader sees the old chunk or the new one, whole), shards through zarr-python; the metadata of
an append is written last.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import zarr

from oocarray._storage import _pool
from oocarray._storage._indexing import ChunkPiece
from oocarray._storage._objects import _loop
from oocarray._storage._objects._backend import Backend, VersionChanged, translate
from oocarray._storage._objects._backend_choice import backend_for
from oocarray._storage._objects._fetcher import Fetcher
from oocarray._storage._objects._requests import (
    MAX_REQUESTS,
    Request,
    read_window,
    reader_manager,
    window_for,
)
from oocarray._storage._objects._urls import Remote
from oocarray._storage._reader import CheckedFile, Source
from oocarray._storage._zarr._chunk_files import encoded_parts
from oocarray._storage._zarr._groups import array_member
from oocarray._storage._zarr._remote_shards import ShardFetches
from oocarray._storage._zarr._store import _METADATA_DAMAGE, ZarrStore
from oocarray.errors import StoreNotFoundError

if TYPE_CHECKING:
    from oocarray._memory import Manager

__all__ = ["RemoteZarrStore", "open_array_at"]


class RemoteZarrStore(ZarrStore):
    _local_files = False

    def __init__(
        self,
        array: Any,
        remote: Remote,
        backend: Backend,
        prefix: str,
        readonly: bool,
        allow_object: bool,
        cache: Any = None,
    ) -> None:
        self.remote = remote
        self.backend = backend
        self._prefix = prefix  # the array's keys below the backend's root ("" or "name/")
        super().__init__(
            array,
            backend.where(prefix.rstrip("/")) if prefix else backend.name,
            readonly,
            allow_object,
        )
        self.supports_partial_reads = False
        # as_ndarray(): pages filled from chunks a feeder process fetches (see _feeder.py)
        self.supports_paging = self._layout is not None
        layout = self._layout
        inner = self._chunk_nbytes if layout is not None else 1 << 20
        namespace = remote.cache_namespace + prefix
        self._shards: ShardFetches | None = None
        if layout is not None and layout.shard is not None:
            grid = tuple(-(-n // c) for n, c in zip(self.shape, self.chunks, strict=True))
            shards = self._shards = ShardFetches(
                layout.shard, self._key, backend.where, grid, inner, self.path
            )
            self.fetcher = Fetcher(
                backend, inner, cache, namespace, shards.parts, shards.whole_nbytes
            )
            shards.fetcher = self.fetcher
        else:
            self.fetcher = Fetcher(backend, inner, cache, namespace)
        self._wave = threading.local()

    @classmethod
    def open_remote(
        cls,
        remote: Remote,
        mode: str,
        allow_object: bool,
        dataset: str | None = None,
        cache: Any = None,
    ) -> RemoteZarrStore:
        """Open the zarr array at ``remote``, or the array ``dataset`` of the group there."""
        if dataset is not None and not isinstance(dataset, str):
            raise TypeError(f"dataset must be a str, got {dataset!r}")
        if mode == "r+" and remote.read_only:
            raise PermissionError(f"{remote.name}: {remote.scheme}:// URLs are read-only")
        backend = backend_for(remote, read_only=mode == "r")
        try:
            array, prefix = open_array_at(backend, dataset, mode)
        except (StoreNotFoundError, ValueError, TypeError):
            raise
        except _METADATA_DAMAGE as error:
            raise ValueError(
                f"the zarr metadata at {remote.name!r} is damaged or not zarr: "
                f"{type(error).__name__}: {error}"
            ) from error
        except Exception as error:
            raise translate(error, remote.name) from error
        return cls(array, remote, backend, prefix, mode == "r", allow_object, cache)

    def reopen_remote(self) -> tuple[Remote, str | None, Any]:
        return self.remote, self._prefix.rstrip("/") or None, self.fetcher.cache

    def _key(self, chunk: tuple[int, ...]) -> str:
        assert self._layout is not None
        return self._prefix + self._layout.key(chunk)

    # ---- reading --------------------------------------------------------------------------

    def _chunk_sources(self, chunks: Sequence[tuple[int, ...]]) -> _FetchedChunks:
        wave: _FetchedChunks | None = getattr(self._wave, "sources", None)
        if wave is not None and wave.has(chunks):
            return wave.borrowed()
        return _FetchedChunks(self, chunks)

    def _row_chunk_sources(self, first: int, stop: int) -> _FetchedChunks:
        return self._chunk_sources([(c, *self._rest) for c in range(first, stop)])

    def read_into(self, pieces: Sequence[ChunkPiece], out: np.ndarray) -> None:
        """Fetch the chunks of a selection in waves that fit the read-ahead window, each wave's
        requests all in flight together, then decode them as a local read does."""
        if self._layout is None:
            super().read_into(pieces, out)
            return
        # as many chunks as the budget's read-ahead window holds (their stored bytes are at
        # most about their decoded size)
        per_wave = max(1, read_window() // max(1, self._chunk_nbytes))
        wave: list[ChunkPiece] = []
        chunks: dict[tuple[int, ...], None] = {}
        for piece in pieces:
            if piece.chunk not in chunks and len(chunks) == per_wave:
                self._read_wave(wave, list(chunks), out)
                wave, chunks = [], {}
            wave.append(piece)
            chunks[piece.chunk] = None
        if wave:
            self._read_wave(wave, list(chunks), out)

    def _read_wave(
        self, pieces: list[ChunkPiece], chunks: list[tuple[int, ...]], out: np.ndarray
    ) -> None:
        sources = _FetchedChunks(self, chunks)
        self._wave.sources = sources
        try:
            super().read_into(pieces, out)
        finally:
            self._wave.sources = None
            sources.release()

    @contextlib.contextmanager
    def read_ahead(
        self,
        chunks: Iterable[tuple[int, ...]],
        window: int | None = None,
        manager: Manager | None = None,
    ) -> Iterator[None]:
        """Fetch these chunks in this order ahead of the reads inside (a pass's plan), within
        the budget's read-ahead window or ``window`` bytes, the bytes counted on the reader's
        manager (or ``manager``).  Inner chunks of shards: see :class:`ShardFetches`."""
        layout = self._layout
        if layout is None:
            yield
            return
        if self._shards is None:
            requests = [Request(self._key(c)) for c in chunks]
            with self.fetcher.read_ahead(requests, window, manager):
                yield
            return
        if window is None:
            window = window_for(manager if manager is not None else reader_manager())
        with (
            self._shards.planned(list(chunks), window) as planned,
            self.fetcher.read_ahead(planned, window, manager),
        ):
            yield

    def forget_shards(self) -> None:
        """Drop the shard indexes kept: a shard changed since they were read."""
        if self._shards is not None:
            self._shards.forget()

    # ---- writing --------------------------------------------------------------------------

    def write_blocks(self, blocks: Sequence[tuple[tuple[int, ...], np.ndarray]]) -> None:
        """Unsharded chunks: encoded on every core, then put as one object each, the puts all
        in flight together.  Shards: through zarr-python, one object each too."""
        self.check_writable()
        layout = self._layout
        if layout is None or layout.shard is not None:
            super().write_blocks(blocks)
            self.forget_shards()  # their indexes changed
            return
        encoded: list[Any] = [None] * len(blocks)

        def encode(i: int, slot: int) -> None:
            parts = encoded_parts(layout, self._stored_chunk(layout, blocks[i][1]))
            encoded[i] = b"".join(parts)

        _pool.run_spread(len(blocks), encode, _pool.workers())
        self._put_all([(self._key(c), e) for (c, _), e in zip(blocks, encoded, strict=True)])

    def _put_all(self, objects: list[tuple[str, Any]]) -> None:
        _loop.run_all((self.backend.put(key, data) for key, data in objects), MAX_REQUESTS)

    # ---- growing along axis 0 -------------------------------------------------------------

    def grown(self, rows: int) -> ZarrStore:
        handle = zarr.open_array(
            store=self.backend.zarr_store, path=self._prefix.rstrip("/"), mode="r+"
        )
        shape = (rows, *self.shape[1:])
        object.__setattr__(handle.async_array, "metadata", handle.metadata.update_shape(shape))
        return RemoteZarrStore(
            handle, self.remote, self.backend, self._prefix, False, True, self.fetcher.cache
        )

    def commit_rows(self, rows: int) -> None:
        """The new length, in the metadata object, rewritten whole after the chunks."""
        self.check_writable()
        shape = (rows, *self.shape[1:])
        name = self._prefix + ("zarr.json" if self.zarr_format == 3 else ".zarray")
        found = _loop.run(self.backend.get(name))
        if found is None:
            raise StoreNotFoundError(f"the metadata of {self.path} is gone")
        meta = json.loads(bytes(found.data))  # type: ignore[union-attr]
        meta["shape"] = list(shape)
        _loop.run(self.backend.put(name, json.dumps(meta, indent=2).encode()))
        self.array = zarr.open_array(
            store=self.backend.zarr_store, path=self._prefix.rstrip("/"), mode="r+"
        )
        self.shape = shape

    def stored_bytes(self) -> int:
        if self.remote.read_only:
            raise NotImplementedError(
                f"{self.path}: a plain HTTP server lists no objects, so their size is unknown"
            )
        return sum(size for _, size in _loop.run(self.backend.list(self._prefix)))


class _FetchedChunks:
    """The stored bytes of the chunks of one read, fetched together when it starts: the
    sources :class:`ZarrStore`'s reads decode from (see ``_ChunkFiles`` for local files)."""

    def __init__(self, store: RemoteZarrStore, chunks: Sequence[tuple[int, ...]]) -> None:
        self._store = store
        self._data: dict[tuple[int, ...], np.ndarray | CheckedFile | None] = {}
        self._owner = True
        wanted = list(dict.fromkeys(chunks))
        for attempt in (1, 2):
            try:
                self._fetch(wanted)
                break
            except VersionChanged:
                if attempt == 2:
                    raise
                store.forget_shards()  # a shard was rewritten: read its new index

    def _fetch(self, chunks: list[tuple[int, ...]]) -> None:
        store = self._store
        if store._shards is not None:
            self._data = store._shards.fetch(chunks)
            return
        found = store.fetcher.fetch([Request(store._key(c)) for c in chunks])
        self._data = dict(zip(chunks, found, strict=True))

    def has(self, chunks: Sequence[tuple[int, ...]]) -> bool:
        return all(c in self._data for c in chunks)

    def borrowed(self) -> _FetchedChunks:
        """This wave's bytes for one of its reads, which must not release them."""
        view = object.__new__(_FetchedChunks)
        view._store, view._data, view._owner = self._store, self._data, False
        return view

    def source(self, chunk: tuple[int, ...]) -> Source | None:
        data = self._data.get(chunk)
        if isinstance(data, CheckedFile):  # a cache entry, decoded from its file
            return data.source
        return None if data is None else (data, 0, -1)

    def stored_bytes(self, chunk: tuple[int, ...]) -> Any:
        """The chunk's stored bytes in memory (a cache entry's read and checked), for those
        that hand them on rather than decode them; None: never written."""
        data = self._data.get(chunk)
        return data.read() if isinstance(data, CheckedFile) else data

    def row_source(self, i: int) -> Source | None:
        return self.source((i, *self._store._rest))

    def close(self) -> None:
        if self._owner:
            self.release()

    def release(self) -> None:
        for data in self._data.values():
            if isinstance(data, CheckedFile):
                data.close()
        self._data = {}


def open_array_at(backend: Backend, dataset: str | None, mode: str) -> tuple[Any, str]:
    """The zarr array (and its key prefix) at the backend's root, or ``dataset`` in the group
    there; zarr-python reads consolidated metadata where a group has it."""
    store = backend.zarr_store
    try:
        node = zarr.open(store=store, mode="r")
    except FileNotFoundError as error:
        raise StoreNotFoundError(f"no zarr array or group at {backend.name!r}") from error
    array: Any
    if isinstance(node, zarr.Array):
        if dataset is not None:
            raise ValueError(
                f"dataset= names an array inside a zarr group, but {backend.name!r} is a zarr "
                "array: open it without dataset="
            )
        array, prefix = node, ""
    else:
        members = dict(node.members(max_depth=None))
        name = array_member(members, dataset, backend.name)
        array, prefix = members[name], name + "/"
    if mode == "r+":
        array = zarr.open_array(store=store, path=prefix.rstrip("/"), mode="r+")
    return array, prefix
