"""The buffers fetched bytes are read from: the network layer's own bytes, counted on the
reader's manager (:meth:`ReadBuffers.counted`, no copy; while a request is in flight, the bytes
it will hold, :meth:`ReadBuffers.in_flight`), and for bytes read from the chunk cache, memory of
the reader's manager reused within a pass.

A pass over a cached remote array reads one buffer per chunk.  A new buffer per chunk pays a
page fault for every 4 KiB written into it (the region cache under a budget keeps at most
16 MiB of freed regions, while a read-ahead holds up to a quarter of the budget), which was a
fifth of a cached epoch's time.  :class:`ReadBuffers` keeps the buffers of one read-ahead and
hands one out again once nothing but itself refers to it: no array, view or buffer export of
it is left anywhere, so reusing it can change nothing anyone can see.  The buffers are the
manager's arrays, so its budget counts them, and they go when the read-ahead ends.
"""

from __future__ import annotations

import sys
import threading
from typing import Any

import numpy as np

from oocarray import _native
from oocarray._memory import Manager

__all__ = ["ReadBuffers", "empty_in"]

# A kept buffer has room for chunks up to this much larger than the one it was made for
# (compressed chunks differ in size), and serves only chunks about half its size or more.
_ROOM = 1.125
_ALIGN = 64 << 10


def empty_in(manager: Manager | None, nbytes: int) -> np.ndarray:
    """A new byte buffer of ``manager`` (the reader's), which counts it."""
    if manager is None:
        return np.empty(nbytes, dtype=np.uint8)
    with manager.activate():
        return np.empty(nbytes, dtype=np.uint8)


class ReadBuffers:
    """Byte buffers of ``manager`` for one pass, at most ``limit`` bytes of them kept.

    Examples
    --------
    >>> from oocarray._storage._objects._buffers import ReadBuffers
    >>> buffers = ReadBuffers(None, limit=1 << 20)
    >>> a = buffers.take(1000)
    >>> b = buffers.take(1000)  # a is still referred to: another buffer
    >>> (a.base is b.base, buffers.kept_bytes)
    (False, 131072)
    >>> del a  # nothing refers to its buffer now: the next take reuses it
    >>> c = buffers.take(900)
    >>> (c.size, buffers.kept_bytes)
    (900, 131072)
    """

    def __init__(self, manager: Manager | None, limit: int) -> None:
        self._manager = manager
        self._limit = limit
        self._kept: list[np.ndarray] = []
        self._kept_bytes = 0
        self._lock = threading.Lock()

    @property
    def kept_bytes(self) -> int:
        """Bytes of the buffers kept for reuse (in use or not)."""
        return self._kept_bytes

    def counted(self, data: Any) -> np.ndarray:
        """``data``'s bytes (a buffer another library made) as a read-only 1-D uint8 array,
        counted on the manager while the array or a view of it lives: no copy."""
        node = None if self._manager is None else self._manager._node
        return np.frombuffer(memoryview(_native.Counted(data, node)), dtype=np.uint8)

    def in_flight(self, nbytes: int) -> Any:
        """``nbytes`` counted on the manager until the object returned goes: what a request
        will hold while the network layer receives it, before its bytes can be seen (and
        counted by :meth:`counted`)."""
        node = None if self._manager is None else self._manager._node
        return None if node is None else _native.Counted(nbytes, node)

    def take(self, nbytes: int) -> np.ndarray:
        """A 1-D uint8 array of ``nbytes`` (contents undefined): a kept buffer nothing else
        refers to any more, else a new one (kept while the limit allows)."""
        with self._lock:
            for base in self._kept:
                # Referred to only by the list, this loop's name and getrefcount's argument:
                # no array, view or buffer export of it exists.
                fits = nbytes <= base.size <= 2 * nbytes + _ALIGN
                if fits and sys.getrefcount(base) == 3:
                    return base[:nbytes]
            size = -(-int(nbytes * _ROOM) // _ALIGN) * _ALIGN
            if self._kept_bytes + size > self._limit:
                return empty_in(self._manager, nbytes)
            base = empty_in(self._manager, size)
            self._kept.append(base)
            self._kept_bytes += size
            return base[:nbytes]
