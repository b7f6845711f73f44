"""A forward scan of an ``as_ndarray()`` of an array in an object store, read ahead by the
process that made it: the next chunks fetched and handed to the pager in memory.

The feeder process (``_feeder``) is what every fill can count on: the pager's threads never
wait for Python, and the thread that faulted may hold the GIL.  But every chunk it fetches goes
through a file (written, then read back), and it starts as a new interpreter, a second of CPU
on a 2-core machine.  This reader only helps, whenever the GIL lets it run: it follows the
fills (the pager writes an eventfd when they move to another chunk) and, while they go forward,
keeps the next chunks fetched and handed over (``Pages.remote_give``; those never written said
to be absent), so the fills decode them from memory: from the fetch's own buffers, lent to the
pager, not copied.  A fill that finds nothing handed over waits while chunks keep coming, then
asks the feeder (which the pager starts then: a scan read ahead here never starts one).
Chunks behind the fills are let go, and the pager gives their buffers back whenever this
thread calls it.  When this thread ends, it tells the pager, whose fills then ask the feeder at
once.

Memory: the window ahead is a quarter of what the budget of the manager the array was made in
(above a workspace) has left then, at most 64 MiB.  The fetch's buffers are counted on that
manager, the array's pages filled longest ago dropped to make room, from the request until the
pager gives them back; so, until the C heap is trimmed (``_heap``), is the memory they leave
there, though this thread has no manager active: it names the array's.
"""

from __future__ import annotations

import errno
import logging
import os
import threading
import weakref
from typing import Any

from oocarray._memory import budget_left
from oocarray._storage._objects._heap import HeapTrimmer
from oocarray._storage._objects._requests import MAX_WINDOW, reader_manager

__all__ = ["ReadAhead", "row_chunks_together"]

_log = logging.getLogger(__name__)

AHEAD_BYTES = 64 << 20  # stored bytes handed over ahead of the fills, at most
AHEAD_CHUNKS = 256  # and chunks
BEHIND_CHUNKS = 8  # kept behind the latest fill, at most


def row_chunks_together(store: Any) -> int:
    """Row chunks fetched together: a shard's where the chunks are in shards (one request
    for their ranges), else one; one for a 0-d array."""
    if not store.shape:
        return 1
    return max(1, int(store.write_grid[0]) // max(1, int(store.chunks[0])))


class ReadAhead:
    """Chunks fetched ahead of one remote paged array's fills; stops when the array goes."""

    def __init__(self, store: Any, pages: Any, nchunks: int, chunk_bytes: int) -> None:
        self._store = store
        self._pages = weakref.ref(pages)
        self._nchunks = nchunks
        self._group = row_chunks_together(store)  # taken from the fetch in groups
        # A quarter of what the budget has left now, before the array's pages fill it (they
        # are dropped to make room for what is handed over, the pager's rule for its fills),
        # and not the floor of a streaming pass's window: a small budget stays small.
        manager = self._manager = reader_manager()
        left = None if manager is None else budget_left(manager)
        # The fetch reads no further ahead than the chunks are handed over.
        self._window = max(chunk_bytes, min(AHEAD_BYTES, MAX_WINDOW if left is None else left // 4))
        self._ahead = max(1, min(AHEAD_CHUNKS, self._window // max(1, chunk_bytes)), self._group)
        self._wake = os.eventfd(0, os.EFD_CLOEXEC)
        self._lock = threading.Lock()
        self._stopping = False
        self._furthest = -1  # the furthest chunk the fills went to in this scan
        # The fetch's freed buffers, counted until given back, at least once a window: what
        # the budget holds for them is then no more than the window.
        self._trimmer = HeapTrimmer(manager=manager, at_most=self._window)
        pages.remote_progress(self._wake)
        # The first chunks before the array is returned: a scan's first touch often holds the
        # GIL (a reduction copies its first row), and would wait for the feeder's start.
        self._give(range(min(nchunks, self._group)))
        thread = threading.Thread(target=self._follow, name="oocarray-read-ahead", daemon=True)
        thread.start()
        weakref.finalize(pages, self.stop)

    def stop(self) -> None:
        with self._lock:
            if self._stopping:
                return
            self._stopping = True
            os.eventfd_write(self._wake, 1)

    def _follow(self) -> None:
        """Runs of chunks read ahead in order (the fetcher's read-ahead, as a streaming pass
        reads), each handed over when the fills come within the window of it; a new run where
        the fills go back, or jump past the window."""
        start = min(self._nchunks, self._group)
        try:
            self._runs(start)
        except Exception:  # the feeder fetches what this does not, and says why it fails
            _log.debug("the read-ahead of %s stopped", self._store.path, exc_info=True)
        finally:
            with self._lock:
                self._stopping = True  # no write to the eventfd after this
            pages = self._pages()
            if pages is not None:
                pages.remote_progress(-1)  # no fill waits for this thread any more
            os.close(self._wake)

    def _runs(self, start: int) -> None:
        rest = self._store._rest
        while True:
            if start < self._nchunks:
                stop = self._nchunks
                chunks = [(c, *rest) for c in range(start, stop)]
                with self._store.read_ahead(chunks, self._window, self._manager):
                    at = self._run(start, stop)
                self._trimmer.flush()  # the run's buffers are freed: nothing left counted
            else:  # every chunk handed over, the fetch's buffers freed: wait for a new scan
                at = self._wait_back()
            if at < 0:
                return
            start = at + 1

    def _run(self, start: int, stop: int) -> int:
        """Hands over chunks from ``start`` to ``stop`` while the fills go forward; the chunk
        the fills are at when a new run must start after it (they went back, or far past the
        window; the last chunk of the run when every one is handed over), or -1 to stop."""
        for first in range(start, stop, self._group):
            group = range(first, min(stop, first + self._group))
            while True:
                pos = self._position()
                if pos is None:
                    return -1
                if self._went_back(pos) or pos > group[-1] + self._ahead:
                    return max(pos, 0)  # read on from there
                if group[0] <= pos + self._ahead:
                    break
                os.eventfd_read(self._wake)  # the fills moved on, or stop
            self._give(group)
        return stop - 1

    def _wait_back(self) -> int:
        """Waits for a new scan from behind; where the fills are then, or -1 to stop."""
        while True:
            pos = self._position()
            if pos is None:
                return -1
            if self._went_back(pos):
                return pos
            os.eventfd_read(self._wake)

    def _went_back(self, pos: int) -> bool:
        """Whether the fills went back well behind the furthest they went (a new scan; a
        little behind is the pager's threads filling out of order)."""
        if pos < self._furthest - self._ahead:
            self._furthest = pos
            return True
        self._furthest = max(self._furthest, pos)
        return False

    def _position(self) -> int | None:
        """The chunk the fills are at, the chunks behind it let go; None to stop."""
        pages = self._pages()
        if pages is None or self._stopping:
            return None
        pos = int(pages.remote_position())
        # Kept a few chunks behind: the pager's threads fill units out of order (its own read-
        # ahead among them).  Ahead, all that was handed over for the furthest fill of this
        # scan: a group is handed over once its first chunk is in the window of a fill, and a
        # later fill a few chunks behind that one would otherwise let go of the group's last
        # chunks before any fill read them (which then waited for the feeder to start).
        behind = min(self._ahead, BEHIND_CHUNKS)
        front = max(pos, self._furthest)
        freed = pages.remote_keep(max(pos - behind, 0), front + 1 + self._ahead + self._group)
        self._trimmer.let_go(freed)
        return pos

    def _give(self, numbers: range) -> None:
        """Fetch these chunks (taken from the read-ahead where one runs) and hand them over,
        those behind the latest fill too: the pager's threads fill out of order (its own
        read-ahead among them), so a fill may be waiting for one of them, and would otherwise
        wait for the feeder (which may still be starting).  Those the fills are done with go
        at the next move of the fills; lending them costs no copy."""
        rest = self._store._rest
        try:
            sources = self._store._chunk_sources([(c, *rest) for c in numbers])
        except Exception:
            return  # the feeder fetches these chunks when they are asked for, and says why
        freed = 0  # bytes of the fetch's buffers the pager gave back
        try:
            pages = self._pages()
            if pages is None:
                return  # the array is gone
            for c in numbers:
                data = sources.stored_bytes((c, *rest))
                if data is None:
                    pages.remote_absent(c)  # never written: its fills read the fill value
                    continue
                try:
                    freed += pages.remote_give(c, data)
                except OSError as error:
                    if error.errno != errno.ENOSPC:
                        raise
                    return  # a full budget, nothing to drop: the fills ask the feeder
        finally:
            sources.close()
            self._trimmer.let_go(freed)
