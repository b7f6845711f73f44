"""Fetching one array's objects: many requests in flight, read ahead of the reader, in budget.

A read asks :meth:`Fetcher.fetch` for the objects (or byte ranges of them) it decodes, all at
once: they are requested together on the event loop (:mod:`._loop`), up to
:func:`requests_in_flight` at a time.  A pass that knows what it will read next (the chunk loop,
the batch feed) says so with :meth:`Fetcher.read_ahead`: those requests start in its order,
ahead of the reads, while the bytes fetched and not yet taken stay under a window sized from the
active manager's budget; a read then takes its bytes from there.  The requests in flight adapt
to the latency the reader sees: as many as the window holds at first, fewer while fetched
objects wait untaken, twice as many whenever a read has to wait for its request.

Fetched bytes are copied once, from the network layer's buffer into a NumPy buffer allocated
in the reader's manager, so the budget counts them; chunks are decoded from that buffer
straight into their destination.  With a :class:`~._cache.ChunkCache`, whole objects are
fetched only when their version (ETag) changed (a conditional request answers 304 otherwise),
and ranges of a shard whose version the read already knows are not requested at all.  A
read-ahead over many cached objects validates them together: one listing of their keys gives
every version at the start of the pass (a thousand per request), so an unchanged cached object
costs no request of its own.  A cached object is handed to the reader as its open entry file
(a :class:`~oocarray._storage._reader.CheckedFile`), which the native reader checks and decodes
as it does a local chunk file: its bytes are never copied into Python.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import os
import posixpath
import threading
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, NamedTuple

import numpy as np

from oocarray import _native
from oocarray._memory import Manager, Workspace, active_manager, budget_left
from oocarray._storage._objects import _loop
from oocarray._storage._objects._backend import NOT_MODIFIED, Backend, Fetched
from oocarray._storage._objects._buffers import ReadBuffers
from oocarray._storage._reader import CheckedFile

__all__ = ["Fetcher", "Request", "read_window", "reader_manager", "requests_in_flight"]

MAX_REQUESTS = 64  # requests in flight per read: enough to hide 20-100 ms of latency
MIN_IN_FLIGHT = 2  # a read-ahead whose reader never waits keeps at least this many
MIN_WINDOW = 16 << 20  # read-ahead bytes, at least (a few chunks)
MAX_WINDOW = 512 << 20  # and at most, without a budget
COALESCE_GAP = 1 << 20  # ranges of one object closer than this are fetched as one
COALESCE_LOOKAHEAD = 256  # queued requests a read-ahead looks through for ranges to coalesce
# A read-ahead of at least this many whole objects, with a cache, validates its cached objects
# by one listing; it lists at most LIST_SLACK times the objects it reads (plus a page), so a
# pass over a small part of a large array does not list the rest of it.
LIST_VALIDATION_MIN = 16
LIST_SLACK = 4
LIST_PAGE = 1000
# Cache entries handed to readers as open files, at most, in a process (a read-ahead over many
# small chunks would hold a descriptor for each); beyond, entries are read into buffers.
MAX_OPEN_ENTRIES = 256


# What a request gives: the bytes fetched, or a cache entry's open file (read by the decoder)
Stored = np.ndarray | CheckedFile


class Request(NamedTuple):
    """An object, or bytes ``[start, end)`` of one (``end`` -1: all of it); ``version``: only
    of that version (ranges of a shard whose index the read has)."""

    key: str
    start: int = 0
    end: int = -1
    version: str | None = None


def reader_manager() -> Manager | None:
    """The manager fetched bytes are counted on: the active one, or where a workspace is
    active, the manager above it.  A fetched buffer is freed when its read ends, but the
    event loop may still hold its last reference for a moment after: in a workspace's arena
    that would be an escape from the cycle."""
    manager = active_manager()
    while isinstance(manager, Workspace):
        manager = manager.parent
    return manager


def requests_in_flight(window: int, object_bytes: int) -> int:
    """Requests to keep in flight: as many as the window holds objects, up to MAX_REQUESTS."""
    return max(2, min(MAX_REQUESTS, window // max(1, object_bytes)))


def read_window() -> int:
    """The bytes a read in this thread may hold fetched at once (see :func:`_window`)."""
    return _window(reader_manager())


def _window(manager: Manager | None) -> int:
    """Read-ahead bytes: a quarter of what the budget has left, within the bounds."""
    left = None if manager is None else budget_left(manager)
    if left is None:
        return MAX_WINDOW
    return max(MIN_WINDOW, min(MAX_WINDOW, left // 4))


class Fetcher:
    """The requests of one array: ``backend`` makes them, ``cache`` (optional) keeps whole
    objects and shard ranges between passes under ``namespace``."""

    def __init__(
        self, backend: Backend, object_bytes: int, cache: Any = None, namespace: str = ""
    ) -> None:
        self.backend = backend
        self.object_bytes = max(1, object_bytes)  # a typical object's size (a stored chunk)
        self.cache = cache
        self.namespace = namespace
        self.requests = 0  # requests made, for tests and reports
        self.cache_hits = 0
        self._ahead: _Ahead | None = None
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
        self, requests: list[Request], manager: Manager | None, ahead: _Ahead | None
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
        limit = asyncio.Semaphore(requests_in_flight(_window(manager), self.object_bytes))
        buffers = ReadBuffers(manager, 0)  # a read alone: new buffers, none kept
        groups = _coalesced([(i, requests[i]) for i in todo])
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
        if self.cache is None:  # (every read of an uncached array passes here)
            return {}
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
                mine = self._ahead = _Ahead(self, list(requests), counted, window)
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
        ``known``: versions listed at the start of the pass (see :meth:`_Ahead.listed`)."""
        first = group[0][1]
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


def _range_key(request: Request) -> str:
    return f"{request.key}#{request.start}-{request.end}"


def _coalesced(requests: list[tuple[int, Request]]) -> list[list[tuple[int, Request]]]:
    """Requests grouped into fetches: each whole object alone; ranges of one object and version
    merged where they lie within COALESCE_GAP of each other."""
    groups: list[list[tuple[int, Request]]] = []
    ranges: dict[tuple[str, str | None], list[tuple[int, Request]]] = collections.defaultdict(list)
    for item in requests:
        request = item[1]
        if request.end < 0:
            groups.append([item])
        else:
            ranges[(request.key, request.version)].append(item)
    for items in ranges.values():
        items.sort(key=lambda item: item[1].start)
        current = [items[0]]
        for item in items[1:]:
            if item[1].start - max(r.end for _, r in current) <= COALESCE_GAP:
                current.append(item)
            else:
                groups.append(current)
                current = [item]
        groups.append(current)
    return groups


class _Ahead:
    """One read-ahead: its requests in order, started on the loop while the bytes fetched and
    not yet taken fit the window.  Lives on the loop's thread only."""

    def __init__(
        self,
        fetcher: Fetcher,
        requests: list[Request],
        manager: Manager | None,
        window: int | None = None,
    ):
        self._fetcher = fetcher
        self._queue = collections.deque(dict.fromkeys(requests))  # each request once, in order
        self._window = _window(manager) if window is None else window
        # the buffers of the bytes fetched ahead, reused as the reader is done with them
        self._buffers = ReadBuffers(manager, 2 * self._window + 2 * fetcher.object_bytes)
        # Requests in flight: at most what the window holds; fewer while the reader finds
        # more fetched than it is taking (the latency is hidden with fewer), more again as
        # soon as it waits for a request (see take).
        self._max_in_flight = requests_in_flight(self._window, fetcher.object_bytes)
        self._in_flight = self._max_in_flight
        self._futures: dict[Request, asyncio.Future[Any]] = {}
        self._held = 0  # bytes fetched or in flight, not yet taken
        self._running = 0
        self._wake: asyncio.Event | None = None
        self._stopped = False
        self._tasks: set[asyncio.Task[None]] = set()
        self._known: dict[str, str] = {}  # versions listed at the start (see _validate)
        self._validated = asyncio.Event()

    def take(self, request: Request) -> asyncio.Future[Any] | None:
        """The future of ``request`` if it was read ahead (it leaves the window); else None."""
        future = self._futures.pop(request, None)
        if future is None:
            return None
        self._adapt(waits=not future.done())
        self._held -= self._size(request) if not future.done() else _size(future)
        if self._wake is not None:
            self._wake.set()
        return future

    def _adapt(self, waits: bool) -> None:
        """Size the requests in flight to the latency the reader sees: a read that waits for
        its request (the latency is not hidden) doubles them, up to the window's; a read
        that finds more requests done and untaken than are in flight lowers them by one."""
        if waits:
            self._in_flight = min(self._max_in_flight, 2 * self._in_flight)
        elif sum(f.done() for f in self._futures.values()) > self._in_flight:
            self._in_flight = max(MIN_IN_FLIGHT, self._in_flight - 1)

    @property
    def in_flight(self) -> int:
        """Requests it keeps in flight now (adapted as the reader takes them)."""
        return self._in_flight

    async def start(self) -> None:
        self._wake = asyncio.Event()
        try:
            await self._validate()
        finally:
            self._validated.set()
        while self._queue and not self._stopped:
            if self._running >= self._in_flight or self._held >= self._window:
                self._wake.clear()
                await self._wake.wait()
                continue
            run = self._next_run()
            loop = asyncio.get_running_loop()
            futures = [loop.create_future() for _ in run]
            for request, future in zip(run, futures, strict=True):
                self._futures[request] = future
                self._held += self._size(request)
            self._running += 1
            task = asyncio.ensure_future(self._run(run, futures))
            self._tasks.add(task)  # kept until done: the loop holds tasks weakly
            task.add_done_callback(self._tasks.discard)

    async def listed(self) -> dict[str, str]:
        """The versions listed at the start, once listed: reads that were not read ahead use
        them too (rather than a conditional request each while the listing runs)."""
        await self._validated.wait()
        return self._known

    async def _validate(self) -> None:
        self._known = await self._fetcher.listed_versions(self._queue)

    def _next_run(self) -> list[Request]:
        """The next request, with the ranges of the same object version queued near it that
        lie within COALESCE_GAP of each other (the inner chunks of a shard, which a shuffled
        pass asks for over several windows, not in file order): one GET for them all, up to a
        quarter of the window."""
        first = self._queue.popleft()
        if first.end < 0:
            return [first]
        near = [self._queue.popleft() for _ in range(min(COALESCE_LOOKAHEAD, len(self._queue)))]
        same = sorted(
            (r for r in near if (r.key, r.version) == (first.key, first.version) and r.end >= 0),
            key=lambda r: r.start,
        )
        run = _chain_around(first, same, self._window // 4)
        taken = set(run)
        self._queue.extendleft(reversed([r for r in near if r not in taken]))
        return run

    def _size(self, request: Request) -> int:
        """What a request will hold: its range, or a typical object."""
        return request.end - request.start if request.end >= 0 else self._fetcher.object_bytes

    async def _run(self, run: list[Request], futures: list[asyncio.Future[Any]]) -> None:
        try:
            found = await self._fetcher._get(list(enumerate(run)), self._buffers, self._known)
        except BaseException as error:  # the reads that take them raise it
            for future in futures:
                if not future.done():
                    future.set_exception(error)
                    future.exception()  # retrieved, if no read takes it
        else:
            for request, future, data in zip(run, futures, found, strict=True):
                if request in self._futures:  # still in the window: count its real size
                    self._held += _nbytes(data) - self._size(request)
                if not future.done():
                    future.set_result(data)
        finally:
            self._running -= 1
            if self._wake is not None:
                self._wake.set()

    async def stop(self) -> None:
        self._stopped = True
        self._validated.set()
        if self._wake is not None:
            self._wake.set()
        for future in self._futures.values():
            if not future.done():
                future.cancel()
        self._futures.clear()
        for task in list(self._tasks):  # the requests no read will take: dropped, not awaited
            task.cancel()


def _chain_around(first: Request, same: list[Request], limit: int) -> list[Request]:
    """``first`` and the ranges of ``same`` (sorted by start) linked to it by gaps of at most
    COALESCE_GAP, nearest first on either side while they total at most ``limit`` bytes;
    sorted by start."""
    below = [r for r in same if r.start < first.start][::-1]
    above = [r for r in same if r.start >= first.start]
    run, low, high = [first], first.start, first.end
    total = first.end - first.start
    while total < limit:
        if above and 0 <= above[0].start - high <= COALESCE_GAP:
            grow = above.pop(0)
            high = max(high, grow.end)
        elif below and 0 <= low - below[0].end <= COALESCE_GAP:
            grow = below.pop(0)
            low = min(low, grow.start)
        else:
            break
        run.append(grow)
        total += grow.end - grow.start
    return sorted(run, key=lambda r: r.start)


def _nbytes(data: Stored | None) -> int:
    """The bytes a fetched object holds in the window (an open cache entry: its payload, which
    also bounds the files a read-ahead keeps open)."""
    return 0 if data is None else int(data.nbytes)


def _size(future: asyncio.Future[Any]) -> int:
    if future.cancelled() or future.exception() is not None:
        return 0
    return _nbytes(future.result())
