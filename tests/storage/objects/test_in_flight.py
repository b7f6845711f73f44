"""The requests a read-ahead keeps in flight follow what its reader sees: fewer while fetched
objects pile up untaken (the latency is hidden with fewer), twice as many as soon as a read
waits for its request, never more than the window holds.  Driven step by step with a stand-in
for the requests, so nothing depends on timing."""

from __future__ import annotations

import asyncio

import numpy as np

from oocarray._storage._objects._fetch_ahead import MIN_IN_FLIGHT, FetchAhead
from oocarray._storage._objects._requests import Request


class _Requests:
    """Stands in for a Fetcher: a request completes at once, or when the test releases it."""

    object_bytes = 1
    whole_bytes = 1
    cache = None

    def __init__(self, held: set[str]) -> None:
        self.held = held
        self.release = asyncio.Event()
        self.started: list[str] = []

    async def listed_versions(self, requests):
        return {}

    async def _get(self, group, manager, known=None):
        key = group[0][1].key
        self.started.append(key)
        if key in self.held:
            await self.release.wait()
        return [np.zeros(1, np.uint8) for _ in group]


def test_requests_in_flight_shrink_while_the_reader_lags_and_grow_when_it_waits():
    async def scenario() -> None:
        keys = [f"c/{i}" for i in range(300)]
        requests = [Request(k) for k in keys]
        stand_in = _Requests(held=set(keys[200:]))
        ahead = FetchAhead(stand_in, requests, None)  # type: ignore[arg-type]
        most = ahead.in_flight
        assert most > 8
        task = asyncio.ensure_future(ahead.start())
        while len(stand_in.started) < 200 + most:  # the first 200 done, the rest held
            await asyncio.sleep(0)
        for key in keys[:100]:  # the reader lags: fetched objects pile up untaken
            assert ahead.take(Request(key)).done()
        assert ahead.in_flight == MIN_IN_FLIGHT
        for key in keys[100:200]:
            ahead.take(Request(key))
        waited = ahead.take(Request(keys[200]))  # this read waits for its request
        assert not waited.done()
        assert ahead.in_flight == 2 * MIN_IN_FLIGHT
        for key in keys[201:205]:
            ahead.take(Request(key))
        assert ahead.in_flight == min(most, MIN_IN_FLIGHT * 2**5)  # doubled per wait, capped
        stand_in.release.set()
        await ahead.stop()
        task.cancel()

    asyncio.run(scenario())
