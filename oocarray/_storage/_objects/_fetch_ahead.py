"""Reading ahead of a pass over one array's objects (:class:`FetchAhead`).

A pass that knows what it will read next hands its requests to
:meth:`~._fetcher.Fetcher.read_ahead`: they start on the event loop in its order, ahead of the
reads, while the bytes fetched and not yet taken stay under a window sized from the budget; a
read then takes its bytes from here.  The requests in flight adapt to the latency the reader
sees: as many as the window holds at first, fewer while fetched objects wait untaken, twice as
many whenever a read has to wait for its request.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Iterable
from typing import Any, Protocol

from oocarray._memory import Manager
from oocarray._storage._objects._buffers import ReadBuffers
from oocarray._storage._objects._requests import (
    Request,
    Stored,
    chain_around,
    requests_in_flight,
    window_for,
)

__all__ = ["COALESCE_LOOKAHEAD", "MIN_IN_FLIGHT", "FetchAhead"]

MIN_IN_FLIGHT = 2  # a read-ahead whose reader never waits keeps at least this many
COALESCE_LOOKAHEAD = 256  # queued requests a read-ahead looks through for ranges to coalesce


class _Fetches(Protocol):
    """What a read-ahead asks of its :class:`~._fetcher.Fetcher`."""

    object_bytes: int
    whole_bytes: int

    async def listed_versions(self, requests: Iterable[Request]) -> dict[str, str]: ...

    async def _get(
        self,
        group: list[tuple[int, Request]],
        buffers: ReadBuffers,
        known: dict[str, str] | None = None,
    ) -> list[Stored | None]: ...


class FetchAhead:
    """One read-ahead: its requests in order, started on the loop while the bytes fetched and
    not yet taken fit the window.  Lives on the loop's thread only."""

    def __init__(
        self,
        fetcher: _Fetches,
        requests: list[Request],
        manager: Manager | None,
        window: int | None = None,
    ):
        self._fetcher = fetcher
        self._queue = collections.deque(dict.fromkeys(requests))  # each request once, in order
        self._window = window_for(manager) if window is None else window
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
        run = chain_around(first, same, self._window // 4)
        taken = set(run)
        self._queue.extendleft(reversed([r for r in near if r not in taken]))
        return run

    def _size(self, request: Request) -> int:
        """What a request will hold: its range, or a whole object's bytes at most."""
        return request.end - request.start if request.end >= 0 else self._fetcher.whole_bytes

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


def _nbytes(data: Stored | None) -> int:
    """The bytes a fetched object holds in the window (an open cache entry: its payload, which
    also bounds the files a read-ahead keeps open)."""
    return 0 if data is None else int(data.nbytes)


def _size(future: asyncio.Future[Any]) -> int:
    if future.cancelled() or future.exception() is not None:
        return 0
    return _nbytes(future.result())
