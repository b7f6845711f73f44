"""How the inner chunks of a sharded zarr array in an object store are fetched.

A read that wants every inner chunk of a shard fetches the shard whole: one GET, its index
read from the end of the body (one request where the index and then the ranges take two, one
after the other, and the server reads the object once rather than twice).  Other reads fetch
a shard's index once (kept, with the shard's version) and then only the byte ranges of the
inner chunks they want, of that version; neighbouring ranges go in one GET.

A read-ahead plans whole shards too, where a pass reads a shard's inner chunks one after
another (a scan, a reduction, a shuffled epoch, which permutes shards and then the chunks of
each) and a shard fits the read-ahead's window (else its ranges go in runs of a quarter of
the window, so a small budget never holds a large shard): the reads that take them share the
shard's body (:class:`_WholeShard`), which goes when the last of its chunks is taken or the
read-ahead ends.  A read's own whole shards fit, as the chunks it decodes at once do.

With a chunk cache, a shard fetched whole is kept as the ranges of its inner chunks, at the
body's version, and a marker saying so (see :meth:`Fetcher.has_parts`).  A shard the cache has
seen is read by its index and ranges, which later passes then find in the cache.
"""

from __future__ import annotations

import contextlib
import math
import os
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from oocarray._storage._objects import _loop
from oocarray._storage._objects._fetcher import Fetcher
from oocarray._storage._objects._requests import MAX_REQUESTS, Request, Stored
from oocarray._storage._zarr._shards import ShardIndex, ShardLayout

__all__ = ["ShardFetches"]

Chunk = tuple[int, ...]


class _WholeShard:
    """A shard a read-ahead fetches whole: its body once a read took it, shared by the reads
    of its other inner chunks until the last is taken."""

    def __init__(self, remaining: set[Chunk]) -> None:
        self.lock = threading.Lock()
        self.remaining = remaining
        self.body: Stored | None = None
        self.fetched = False

    def drop(self) -> None:
        """Out of the plan: the body goes (a read that still holds this fetches it anew)."""
        with self.lock:
            self.body, self.fetched = None, False


class ShardFetches:
    """The shard indexes of one array, and how its reads and read-aheads ask for inner chunks.

    ``key_of`` names a shard's object; ``grid``: chunks per axis; ``chunk_nbytes``: an inner
    chunk's decoded bytes; ``path``: the array, for messages."""

    def __init__(
        self,
        layout: ShardLayout,
        key_of: Callable[[Chunk], str],
        where: Callable[[str], str],
        grid: Chunk,
        chunk_nbytes: int,
        path: str,
    ) -> None:
        self._layout = layout
        self._key_of = key_of
        self._where = where
        self._grid = grid
        self._chunk_nbytes = chunk_nbytes
        self._path = path
        self.fetcher: Fetcher | None = None  # set by the store, which makes both
        self._indexes: dict[Chunk, tuple[ShardIndex, str | None] | None] = {}
        self._shard_of_key: dict[str, Chunk] = {}
        self._planned: dict[Chunk, _WholeShard] = {}
        self._lock = threading.Lock()
        self._pid = os.getpid()

    def _in_this_process(self) -> None:
        """In a forked child, forget the parent's plan: its read-ahead does not run here, and
        a lock of it (this one, or a planned shard's) may be held by a thread that does not
        exist here.  The indexes kept stay: the objects they describe are the same."""
        if os.getpid() != self._pid:
            self._pid = os.getpid()
            self._lock = threading.Lock()
            self._planned = {}

    @property
    def whole_nbytes(self) -> int:
        """A shard's stored bytes, at most about: its inner chunks' decoded bytes and index."""
        return math.prod(self._layout.per_shard) * self._chunk_nbytes + self._layout.index_bytes

    def forget(self) -> None:
        """Drop the indexes kept: a shard changed since they were read."""
        self._in_this_process()
        with self._lock:
            self._indexes.clear()

    # ---- which shards go whole ------------------------------------------------------------

    def _inner_count(self, shard: Chunk) -> int:
        """The shard's inner chunks inside the array's chunk grid."""
        per_axis = zip(shard, self._layout.per_shard, self._grid, strict=True)
        return math.prod(min(n, g - s * n) for s, n, g in per_axis)

    def _whole(self, shard: Chunk, wanted: int) -> bool:
        """Fetch the shard whole for a read wanting ``wanted`` of its inner chunks: every one,
        and no cache has its ranges (a marker says it kept them)."""
        if wanted < self._inner_count(shard):
            return False
        fetcher = self.fetcher
        assert fetcher is not None
        return fetcher.cache is None or not fetcher.has_parts(self._key_of(shard))

    def _places(self, chunks: Sequence[Chunk]) -> dict[Chunk, tuple[Chunk, int]]:
        return {c: self._layout.locate(c) for c in chunks}

    # ---- a read-ahead ---------------------------------------------------------------------

    @contextlib.contextmanager
    def planned(self, chunks: Sequence[Chunk], window: int) -> Iterator[list[Request]]:
        """The requests of a read-ahead of ``chunks`` within ``window`` bytes, in their order:
        a shard all of whose inner chunks come near one another as one whole object (the
        reads inside share it) where a shard fits the window, the others as ranges, their
        indexes fetched first (a run of ranges is at most a quarter of the window)."""
        self._in_this_process()
        planner = os.getpid()
        places = self._places(chunks)
        positions: dict[Chunk, list[int]] = {}
        members: dict[Chunk, set[Chunk]] = {}
        for i, (chunk, (shard, _)) in enumerate(places.items()):
            positions.setdefault(shard, []).append(i)
            members.setdefault(shard, set()).add(chunk)
        whole: dict[Chunk, _WholeShard] = {}
        fits = self.whole_nbytes <= window
        for shard, where in positions.items():
            # near one another (a window of a shuffled pass may straddle two shards): the
            # body is held no longer than the reads of about two shards
            together = where[-1] - where[0] < 2 * len(where)
            if together and fits and self._whole(shard, len(where)):
                whole[shard] = _WholeShard(members[shard])
        with self._lock:
            mine = {s: w for s, w in whole.items() if self._planned.setdefault(s, w) is w}
        try:
            ranged = [c for c, (s, _) in places.items() if s not in whole]
            self._fetch_indexes(ranged)
            requests, asked = [], set()
            for chunk, (shard, number) in places.items():
                if shard in whole:
                    if shard not in asked:
                        asked.add(shard)
                        requests.append(self._whole_request(shard))
                else:
                    request = self._range_request(shard, number, chunk)
                    if request is not None:
                        requests.append(request)
            yield requests
        finally:
            if os.getpid() == planner:  # (a forked child leaves its parent's plan alone)
                self._unplan(mine)

    def _unplan(self, mine: dict[Chunk, _WholeShard]) -> None:
        """A read-ahead's planned shards leave the plan, and their bodies go."""
        with self._lock:
            for shard, held in mine.items():
                if self._planned.get(shard) is held:
                    del self._planned[shard]
        for held in mine.values():
            held.drop()

    # ---- a read ---------------------------------------------------------------------------

    def fetch(self, chunks: Sequence[Chunk]) -> dict[Chunk, Stored | None]:
        """The stored bytes of each inner chunk (None: never written): from the shards a
        read-ahead fetches whole, from shards this read wants whole, else from ranges."""
        self._in_this_process()
        places = self._places(chunks)
        by_shard: dict[Chunk, list[Chunk]] = {}
        for chunk, (shard, _) in places.items():
            by_shard.setdefault(shard, []).append(chunk)
        with self._lock:
            held = {s: self._planned[s] for s in by_shard if s in self._planned}
        whole = [s for s in by_shard if s not in held and self._whole(s, len(by_shard[s]))]
        ranged = [c for s, cs in by_shard.items() if s not in held and s not in whole for c in cs]
        self._fetch_indexes(ranged)
        requests = [self._whole_request(s) for s in whole]
        wanted: list[Chunk] = []
        out: dict[Chunk, Stored | None] = {}
        for chunk in ranged:
            shard, number = places[chunk]
            request = self._range_request(shard, number, chunk)
            if request is None:
                out[chunk] = None  # never written: the fill value
            else:
                requests.append(request)
                wanted.append(chunk)
        bodies = self._held_bodies(held, by_shard)
        assert self.fetcher is not None
        found = self.fetcher.fetch(requests)
        bodies.update(zip(whole, found[: len(whole)], strict=True))
        out.update(zip(wanted, found[len(whole) :], strict=True))
        for shard, body in bodies.items():
            index = None if body is None else self._parse(body, shard)
            for chunk in by_shard[shard]:
                entry = None
                if index is not None:
                    entry = index.entry(places[chunk][1], chunk, self._chunk_nbytes)
                out[chunk] = None if entry is None else body[entry[0] : entry[0] + entry[1]]  # type: ignore[index]
        return out

    def _held_bodies(
        self, held: dict[Chunk, _WholeShard], by_shard: dict[Chunk, list[Chunk]]
    ) -> dict[Chunk, Stored | None]:
        """The bodies of the planned shards a read takes chunks of, fetched (taken from the
        read-ahead) together where no read took them yet.  A shard none of whose chunks is
        left to take leaves the plan: its body then goes with the reads' views of it."""
        ordered = sorted(held.items())
        for _, w in ordered:
            w.lock.acquire()
        try:
            todo = [(s, w) for s, w in ordered if not w.fetched]
            if todo:
                assert self.fetcher is not None
                found = self.fetcher.fetch([self._whole_request(s) for s, _ in todo])
                for (_, w), body in zip(todo, found, strict=True):
                    w.body, w.fetched = body, True
            bodies = {s: w.body for s, w in ordered}
        finally:
            for _, w in ordered:
                w.lock.release()
        done = []
        with self._lock:
            for shard, w in ordered:
                w.remaining.difference_update(by_shard[shard])
                planned = self._planned.get(shard) is w
                if planned and not w.remaining:
                    del self._planned[shard]
                if not planned or not w.remaining:  # (left the plan while this read waited)
                    done.append(w)
        for w in done:  # (not under the plan's lock: a read holding w's waits for the loop)
            w.drop()
        return bodies

    # ---- requests and indexes -------------------------------------------------------------

    def _whole_request(self, shard: Chunk) -> Request:
        key = self._key_of(shard)
        self._shard_of_key[key] = shard
        return Request(key)

    def _range_request(self, shard: Chunk, number: int, chunk: Chunk) -> Request | None:
        known = self._indexes.get(shard)
        entry = None if known is None else known[0].entry(number, chunk, self._chunk_nbytes)
        if known is None or entry is None:
            return None
        offset, nbytes = entry
        return Request(self._key_of(shard), offset, offset + nbytes, known[1])

    def _parse(self, body: Any, shard: Chunk) -> ShardIndex:
        layout = self._layout
        size = len(body)
        if layout.index_at_end:
            tail = body[size - layout.index_bytes :] if size >= layout.index_bytes else body[:0]
        else:
            tail = body[: layout.index_bytes]
        first = tuple(s * n for s, n in zip(shard, layout.per_shard, strict=True))
        return ShardIndex(tail, size, self._where(self._key_of(shard)), self._path, layout, first)

    def parts(self, key: str, body: np.ndarray, version: str | None) -> list[tuple[int, int]]:
        """A shard fetched whole (on the event loop, as it arrives): its index, read and
        checked, kept with the body's version; the byte ranges of its inner chunks, which a
        cache keeps as ranges of that version."""
        shard = self._shard_of_key.get(key)
        if shard is None:  # not asked for as a shard: nothing to keep apart
            return []
        index = self._parse(body, shard)
        with self._lock:
            self._indexes[shard] = (index, version)
        ranges = []
        for number in range(math.prod(self._layout.per_shard)):
            entry = index.entry(number, shard, self._chunk_nbytes)
            if entry is not None:
                ranges.append((entry[0], entry[0] + entry[1]))
        return ranges

    def _fetch_indexes(self, chunks: Sequence[Chunk]) -> None:
        """Fetch, at once, the indexes of the shards of these chunks that are not known."""
        layout = self._layout
        firsts: dict[Chunk, Chunk] = {}
        for chunk in chunks:
            firsts.setdefault(layout.locate(chunk)[0], chunk)
        with self._lock:
            missing = [k for k in firsts if k not in self._indexes]
        if not missing:
            return
        fetcher = self.fetcher
        assert fetcher is not None
        backend = fetcher.backend

        async def one(shard: Chunk) -> tuple[Any, Any]:
            name = self._key_of(shard)
            fetcher.requests += 1
            if layout.index_at_end:
                return shard, await backend.get_suffix(name, layout.index_bytes)
            found = await backend.get(name)
            if found is None:
                return shard, None
            data = np.frombuffer(found.data, dtype=np.uint8)  # type: ignore[union-attr]
            return shard, (type(found)(data[: layout.index_bytes], found.version), len(data))  # type: ignore[union-attr, call-arg]

        for shard, found in _loop.run_all((one(k) for k in missing), MAX_REQUESTS):
            if found is None:
                index = None
            else:
                fetched, size = found
                where = self._where(self._key_of(shard))
                parsed = ShardIndex(fetched.data, size, where, self._path, layout, firsts[shard])
                index = (parsed, fetched.version)
            with self._lock:
                self._indexes[shard] = index
