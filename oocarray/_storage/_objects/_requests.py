"""What a read asks of an object store: its requests, how they are grouped into fetches and
how many bytes and requests a read keeps in flight.

A :class:`Request` names an object or a byte range of one.  Ranges of one object lying within
:data:`COALESCE_GAP` of each other are fetched by one GET (:func:`coalesced` for a read,
:func:`chain_around` for a read-ahead).  A read holds at most a window of fetched bytes, a
quarter of what its manager's budget has left (:func:`window_for`), with up to
:func:`requests_in_flight` requests at a time.
"""

from __future__ import annotations

import collections
from typing import NamedTuple

import numpy as np

from oocarray._memory import Manager, Workspace, active_manager, budget_left
from oocarray._storage._reader import CheckedFile

__all__ = [
    "COALESCE_GAP",
    "MAX_REQUESTS",
    "MAX_WINDOW",
    "MIN_WINDOW",
    "Request",
    "Stored",
    "chain_around",
    "coalesced",
    "read_window",
    "reader_manager",
    "requests_in_flight",
    "window_for",
]

MAX_REQUESTS = 64  # requests in flight per read: enough to hide 20-100 ms of latency
MIN_WINDOW = 16 << 20  # read-ahead bytes, at least (a few chunks)
MAX_WINDOW = 512 << 20  # and at most, without a budget
COALESCE_GAP = 1 << 20  # ranges of one object closer than this are fetched as one


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
    """The bytes a read in this thread may hold fetched at once (see :func:`window_for`)."""
    return window_for(reader_manager())


def window_for(manager: Manager | None) -> int:
    """Read-ahead bytes: a quarter of what the budget has left, within the bounds."""
    left = None if manager is None else budget_left(manager)
    if left is None:
        return MAX_WINDOW
    return max(MIN_WINDOW, min(MAX_WINDOW, left // 4))


def coalesced(requests: list[tuple[int, Request]]) -> list[list[tuple[int, Request]]]:
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


def chain_around(first: Request, same: list[Request], limit: int) -> list[Request]:
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
