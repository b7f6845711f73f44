"""Fetching one array's objects: many requests in flight, read ahead of the reader, in budget.

A read asks :meth:`Fetcher.fetch` for the objects (or byte ranges of them) it decodes, all at
once: they are requested together on the event loop (:mod:`._loop`), up to
:func:`~._requests.requests_in_flight` at a time.  A pass that knows what it will read next (the
chunk loop, the batch feed) says so with :meth:`Fetcher.read_ahead`
(:class:`~._fetch_ahead.FetchAhead`): those requests start in its order, ahead of the reads,
while the bytes fetched and not yet taken stay under a window sized from the active manager's
budget; a read then takes its bytes from there.  The requests in flight adapt to the latency the
reader sees: as many as the window holds at first, fewer while fetched objects wait untaken,
twice as many whenever a read has to wait for its request.

Fetched bytes are copied once, from the network layer's buffer into a NumPy buffer allocated
in the reader's manager, so the budget counts them; chunks are decoded from that buffer
straight into their destination.  With a :class:`~._cache.ChunkCache`, whole objects are
fetched only when their version (ETag) changed (a conditional request answers 304 otherwise),
and ranges of a shard whose version the read already knows are not requested at all.  A
read-ahead over many cached objects validates them together: one listing of their keys gives
every version at the start of the pass (a thousand per request), so an unchanged cached object
costs no request of its own.  An object read for its parts (a shard, for its inner chunks: the
``parts`` hook finds them in its body) is fetched whole and cached as those ranges, never
whole.  A cached object is handed to the reader as its open entry file
(a :class:`~oocarray._storage._reader.CheckedFile`), which the native reader checks and decodes
as it does a local chunk file: its bytes are never copied into Python.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import posixpath
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import numpy as np

from oocarray import _native
from oocarray._memory import Manager
from oocarray._storage._objects import _loop
from oocarray._storage._objects._backend import NOT_MODIFIED, Backend, Fetched
from oocarray._storage._objects._buffers import ReadBuffers
from oocarray._storage._objects._fetch_ahead import FetchAhead
from oocarray._storage._objects._requests import (
    Request,
    Stored,
    coalesced,
    reader_manager,
    requests_in_flight,
    window_for,
)
from oocarray._storage._reader import CheckedFile

__all__ = ["Fetcher", "Parts"]

# The byte ranges of the parts of an object fetched whole (key, body, version)
Parts = Callable[[str, np.ndarray, "str | None"], list[tuple[int, int]]]

# A read-ahead of at least this many whole objects, with a cache, validates its cached objects
# by one listing; it lists at most LIST_SLACK times the objects it reads (plus a page), so a
# pass over a small part of a large array does not list the rest of it.
LIST_VALIDATION_MIN = 16
LIST_SLACK = 4
LIST_PAGE = 1000
# Cache entries handed to readers as open files, at most, in a process (a read-ahead over many
# small chunks would hold a descriptor for each); beyond, entries are read into buffers.
MAX_OPEN_ENTRIES = 256


class Fetcher:
    """The requests of one array: ``backend`` makes them, ``cache`` (optional) keeps whole
    objects and shard ranges between passes under ``namespace``."""

    def __init__(
        self,
        backend: Backend,
        object_bytes: int,
        cache: Any = None,
        namespace: str = "",
        parts: Parts | None = None,
        whole_bytes: int = 0,
    ) -> None:
        self.backend = backend
        self.object_bytes = max(1, object_bytes)  # a typical object's size (a stored chunk)
        # Objects read for their parts (shards, for their inner chunks): ``parts`` finds the
        # parts' byte ranges in a body; a cache keeps those, never the whole object.
        self._parts = parts
        self.whole_bytes = max(self.object_bytes, whole_bytes)  # such an object's size, at most
        self.cache = cache
        self.namespace = namespace
        self.requests = 0  # requests made, for tests and reports
        self.cache_hits = 0
        self._ahead: FetchAhead | None = None
        self._lock = threading.Lock()
        self._pid = os.getpid()

    def _in_this_process(self) -> None:
        """In a forked child, forget the parent's read-ahead: its futures belong to an event
        loop (and its lock perhaps to a thread) that do not exist here."""
        if os.getpid() != self._pid:
            self._pid = os.getpid()
            self._ahead = None
            self._lock = threading.Lock()

    # ---- one read -------------------------------------------------------------------------

    def fetch(self, requests: Sequence[Request]) -> list[Stored | None]:
        """The bytes of each request (None: the object does not exist), fetched together."""
        if not requests:
            return []
        self._in_this_process()
        manager = reader_manager()
        ahead = self._ahead
        return _loop.run(self._fetch_all(list(requests), manager, ahead))

    async def _fetch_all(
        self, requests: list[Request], manager: Manager | None, ahead: FetchAhead | None
    ) -> list[Stored | None]:
        results: list[Any] = [None] * len(requests)
        waiting: dict[int, asyncio.Future[Any]] = {}
        todo: list[int] = []
        for i, request in enumerate(requests):
            future = ahead.take(request) if ahead is not None else None
            if future is not None:
                waiting[i] = future
            else:
                todo.append(i)
        limit = asyncio.Semaphore(requests_in_flight(window_for(manager), self.object_bytes))
        buffers = ReadBuffers(manager, 0)  # a read alone: new buffers, none kept
        groups = coalesced([(i, requests[i]) for i in todo])
        if ahead is not None:
            known = await ahead.listed() if todo else None
        else:
            known = await self.listed_versions(requests[i] for i in todo)

        async def run(group: list[tuple[int, Request]]) -> None:
            async with limit:
                found = await self._get(group, buffers, known)
                for (i, _), data in zip(group, found, strict=True):
                    results[i] = data

        await asyncio.gather(*(run(group) for group in groups))
        for i, future in waiting.items():
            results[i] = await future
        return results

    async def listed_versions(self, requests: Iterable[Request]) -> dict[str, str]:
        """With a cache, the versions of the whole objects of ``requests``, from one listing
        of their keys (where they are enough to be worth it), so that their cached copies
        need no request each; what it misses is validated by a conditional request."""
        if self.cache is None or self._parts is not None:  # (every uncached read passes here)
            return {}  # objects read for their parts are not cached whole
        keys = sorted({r.key for r in requests if r.end < 0})
        if len(keys) < LIST_VALIDATION_MIN:
            return {}
        common = posixpath.commonpath(keys)
        prefix = f"{common}/" if common else ""
        # The listing starts after the first key's folder (a valid key that sorts before it).
        before = keys[0].rpartition("/")[0] or None
        limit = LIST_SLACK * len(keys) + LIST_PAGE
        try:
            known = await self.backend.versions(prefix, before, keys[-1], limit)
        except Exception:  # no listing (a permission, say): each object is validated alone
            known = {}
        self.requests += 1 + min(limit, len(known)) // LIST_PAGE
        return known

    # ---- reading ahead --------------------------------------------------------------------

    @contextlib.contextmanager
    def read_ahead(
        self,
        requests: Iterable[Request],
        window: int | None = None,
        manager: Manager | None = None,
    ) -> Iterator[None]:
        """Fetch ``requests`` in order, ahead of the reads inside, within the window (the
        budget's, or ``window`` bytes), the bytes counted on the reader's manager (or
        ``manager``, for a thread that reads for another); what is left untaken at the end is
        dropped.  Nested or concurrent read-aheads of one array: the first one reads ahead,
        the others read as they go."""
        self._in_this_process()
        with self._lock:
            if self._ahead is not None:
                mine = None
            else:
                counted = manager if manager is not None else reader_manager()
                mine = self._ahead = FetchAhead(self, list(requests), counted, window)
        if mine is None:
            yield
            return
        _loop.submit(mine.start())
        try:
            yield
        finally:
            with self._lock:
                self._ahead = None
            _loop.run(mine.stop())

    # ---- requests -------------------------------------------------------------------------

    async def _get(
        self,
        group: list[tuple[int, Request]],
        buffers: ReadBuffers,
        known: dict[str, str] | None = None,
    ) -> list[Stored | None]:
        """The bytes of a group of requests: one object, or neighbouring ranges of one.
        ``known``: versions listed at the start of the pass (see :meth:`FetchAhead.listed`)."""
        first = group[0][1]
        if first.end < 0 and self._parts is not None:
            return [await self._get_in_parts(first.key, buffers)]
        if first.end < 0:
            return [await self._get_object(first.key, buffers, known)]
        start, end = first.start, max(r.end for _, r in group)
        cached = [await self._cached_range(r, buffers) for _, r in group]
        if all(c is not None for c in cached):
            return list(cached)
        self.requests += 1
        # Counted while in flight, then whole: each range is a view of it, and the run's bytes
        # stay as long as any is.  The in-flight count goes before the bytes are counted (no
        # await between): counted twice at once, a run took its size again from the budget.
        receiving = buffers.in_flight(end - start)
        try:
            raw = await self.backend.get_range(first.key, start, end, first.version)
        finally:
            del receiving  # now: a traceback would keep the frame, and the count, alive
        data = buffers.counted(raw)
        out: list[Stored | None] = []
        for (_, request), hit in zip(group, cached, strict=True):
            if hit is not None:
                out.append(hit)
                continue
            part = data[request.start - start : request.end - start]
            await self._keep(_range_key(request), request.version, part)
            out.append(part)
        return out

    async def _get_object(
        self, key: str, buffers: ReadBuffers, known: dict[str, str] | None = None
    ) -> Stored | None:
        listed = known.get(key) if known else None
        if listed is not None:  # cached at the listed version: no request of its own
            data = await self._read_version(key, listed, buffers, Request(key))
            if data is not None:
                self.cache_hits += 1
                return data
        entry = await self._lookup(key)
        self.requests += 1
        receiving = buffers.in_flight(self.object_bytes)  # a typical object's, until it is seen
        try:
            fetched = await self.backend.get(key, entry.version if entry is not None else None)
        finally:
            del receiving  # now: a traceback would keep the frame, and the count, alive
        if fetched is NOT_MODIFIED:
            assert entry is not None
            data = await self._read_version(key, entry.version, buffers, Request(key))
            if data is not None:
                self.cache_hits += 1
                return data
            self.requests += 1
            fetched = await self.backend.get(key)  # the entry went meanwhile: fetch it whole
        if fetched is None:
            if entry is not None:
                await self._discard(key)
            return None
        assert isinstance(fetched, Fetched)
        data = buffers.counted(fetched.data)
        await self._keep(key, fetched.version, data)
        return data

    async def _get_in_parts(self, key: str, buffers: ReadBuffers) -> Stored | None:
        """An object read for its parts, fetched whole; with a cache, each part is kept as a
        range of the body's version, then a marker that says they all were (see
        :meth:`has_parts`)."""
        self.requests += 1
        receiving = buffers.in_flight(self.whole_bytes)
        try:
            fetched = await self.backend.get(key)
        finally:
            del receiving  # now: a traceback would keep the frame, and the count, alive
        if fetched is None:
            return None
        assert isinstance(fetched, Fetched)
        data = buffers.counted(fetched.data)
        assert self._parts is not None
        ranges = self._parts(key, data, fetched.version)
        cache, version = self.cache, fetched.version
        if cache is not None and version is not None:

            def keep() -> None:
                for start, end in ranges:
                    request = Request(key, start, end, version)
                    cache.store(self.namespace, _range_key(request), version, data[start:end])
                cache.store(self.namespace, key + _PARTS_MARK, version, _MARKER)

            await asyncio.to_thread(keep)
        return data

    def has_parts(self, key: str) -> bool:
        """Whether the cache kept the parts of ``key`` (of some version) when it was fetched
        whole: a read of them then asks for the ranges, which it may find there."""
        return self.cache is not None and (
            self.cache.lookup(self.namespace, key + _PARTS_MARK) is not None
        )

    # ---- the cache (its files are read and written off the loop's thread) ------------------

    async def _lookup(self, key: str) -> Any:
        if self.cache is None:
            return None
        return await asyncio.to_thread(self.cache.lookup, self.namespace, key)

    async def _read_version(
        self, key: str, version: str, buffers: ReadBuffers, request: Request
    ) -> Stored | None:
        """The cached copy of ``key`` if it is of ``version``: one trip to the cache's thread.
        Where the native reader checks cache entries, the entry's open file, which it decodes
        from without a copy (``request`` fetches its object anew if the entry is damaged)."""
        if self.cache is None:
            return None
        native = _native.codec_ready(_native.CODEC_RAW | _native.CODEC_CRC32C)
        if native and CheckedFile.open_now() < MAX_OPEN_ENTRIES:
            # Opened here, on the loop: a few system calls, which cost less than a trip to a
            # worker thread and back (a cached epoch ran 10 % slower so).  A damaged file is
            # left for the store that replaces it: its removal takes the cache's lock.
            entry: CheckedFile | None = self.cache.open_version(
                self.namespace, key, version, remove_damaged=False
            )
            if entry is not None:
                entry.recover = lambda: self._fetch_anew(key, request)
            return entry
        data = await asyncio.to_thread(
            self.cache.read_version, self.namespace, key, version, buffers.take
        )
        return None if data is None else np.frombuffer(data, dtype=np.uint8)

    async def _cached_range(self, request: Request, buffers: ReadBuffers) -> Stored | None:
        if request.version is None:
            return None
        data = await self._read_version(_range_key(request), request.version, buffers, request)
        if data is not None:
            self.cache_hits += 1
        return data

    def _fetch_anew(self, key: str, request: Request) -> Any:
        """The bytes of a request whose cache entry ``key`` was found damaged when read,
        fetched again (on the loop, from the reader's thread) and cached again; None: the
        object is gone."""
        assert self.cache is not None
        self.cache.discard(self.namespace, key)
        self.requests += 1
        if request.end >= 0:
            data = _loop.run(
                self.backend.get_range(request.key, request.start, request.end, request.version)
            )
            version = request.version
        else:
            fetched = _loop.run(self.backend.get(request.key))
            if fetched is None:
                return None
            assert isinstance(fetched, Fetched)
            data, version = fetched.data, fetched.version
        if version is not None:
            self.cache.store(self.namespace, key, version, data)
        return data

    async def _keep(self, key: str, version: str | None, data: np.ndarray) -> None:
        if self.cache is not None and version is not None:
            await asyncio.to_thread(self.cache.store, self.namespace, key, version, data)

    async def _discard(self, key: str) -> None:
        await asyncio.to_thread(self.cache.discard, self.namespace, key)


_PARTS_MARK = "#parts"  # the cache's marker of an object whose parts it kept
_MARKER = np.frombuffer(b"parts", dtype=np.uint8)


def _range_key(request: Request) -> str:
    return f"{request.key}#{request.start}-{request.end}"
