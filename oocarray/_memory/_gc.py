"""Garbage collection before a budget refusal or an escape report, throttled.

A collection frees arrays that only reference cycles still hold, which is worth one try before
spilling or refusing.  But a full collection of a large heap takes a while (0.3 s and more in a
test runner with tens of thousands of objects), and a tight budget can be hit thousands of times
a second: collections are spaced at least ``GC_MIN_INTERVAL_S`` apart, and at least
``GC_TIME_FACTOR`` times as long as the last one took, so they never take more than about a
tenth of the process's time.
"""

from __future__ import annotations

import gc
import time

from oocarray import _native

__all__ = ["collect_garbage_throttled"]

GC_MIN_INTERVAL_S = 0.5
GC_TIME_FACTOR = 10.0

_next_allowed = 0.0


def collect_garbage_throttled() -> bool:
    """Collect garbage unless a collection ran too recently; whether it ran."""
    global _next_allowed
    start = time.monotonic()
    if start < _next_allowed:
        return False
    _next_allowed = start + GC_MIN_INTERVAL_S  # no other thread starts one meanwhile
    # Finalizers run by the collection allocate outside the manager that is under pressure.
    previous = _native.set_handler(None)
    try:
        gc.collect()
    finally:
        _native.set_handler(previous)
    end = time.monotonic()
    _next_allowed = end + max(GC_MIN_INTERVAL_S, GC_TIME_FACTOR * (end - start))
    return True
