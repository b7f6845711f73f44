"""The C heap's free memory handed back to the system after fetched buffers are let go.

The object-store library allocates each response's buffer on its own threads with the C
allocator.  glibc keeps what is freed for reuse: a chunk-sized buffer freed from another thread
goes back to that thread's arena, and after the first such free glibc stops mapping buffers of
that size on their own, so they are carved from the arenas.  After a scan of a few hundred
chunks this is 40-130 MiB resident.  ``malloc_trim`` returns the free pages of every arena;
it frees nothing in use.  Dask's workers call it for the same reason.  Between two trims the
bytes let go are counted on the reader's manager, as they stay resident until the trim (where
glibc reuses them for the next fetch they are counted twice for a moment: the budget errs on
the safe side).  Written over ctypes because no library wraps it; where the C library has none
(not glibc), this does nothing but count.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import threading
from typing import TYPE_CHECKING, Any

from oocarray import _native

if TYPE_CHECKING:
    from oocarray._memory import Manager

__all__ = ["HeapTrimmer"]

TRIM_EVERY = 64 << 20  # bytes let go between two trims: a read-ahead window (16 MiB cost 10 %)


def _malloc_trim() -> Any:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        trim = libc.malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim


_TRIM = _malloc_trim()


class HeapTrimmer:
    """Counts the bytes of fetched buffers let go and trims the heap every ``every`` of them
    (:data:`TRIM_EVERY` by default, at most ``at_most``); until then they are counted on
    ``manager`` (where one is given).

    Examples
    --------
    >>> from oocarray._storage._objects._heap import HeapTrimmer
    >>> trimmer = HeapTrimmer(every=100)
    >>> [trimmer.let_go(60) for _ in range(4)]  # trims at 120 and 240 bytes
    [False, True, False, True]
    """

    def __init__(
        self,
        every: int | None = None,
        manager: Manager | None = None,
        at_most: int | None = None,
    ) -> None:
        self._every = TRIM_EVERY if every is None else every
        if at_most is not None:
            self._every = min(self._every, at_most)
        self._since = 0
        self._node = None if manager is None else manager._node
        self._held: list[Any] = []  # the counts of the bytes let go since the last trim
        self._lock = threading.Lock()

    @property
    def held_bytes(self) -> int:
        """Bytes let go since the last trim (resident until it)."""
        return self._since

    def let_go(self, nbytes: int) -> bool:
        """Count ``nbytes`` let go; whether the heap was trimmed now."""
        # Counted before the lock is taken: the count makes room first (it may drop pages).
        count = _native.Counted(nbytes, self._node) if self._node is not None and nbytes else None
        with self._lock:
            self._since += nbytes
            if self._since < self._every:
                if count is not None:
                    self._held.append(count)
                return False
        del count  # let go now: trimmed below
        self._trim()
        return True

    def flush(self) -> bool:
        """Trim now if anything was let go since the last trim (a pass that ended: nothing
        stays counted after it); whether the heap was trimmed."""
        if not self._since:
            return False
        self._trim()
        return True

    def _trim(self) -> None:
        with self._lock:
            self._since = 0
            held, self._held = self._held, []
        if _TRIM is not None:
            _TRIM(0)  # ctypes lets go of the GIL for the call
        del held  # their bytes are back with the system now
