"""Garbage collection before a budget refusal or an escape report, throttled."""

from __future__ import annotations

import gc
import time

from oocarray import _native

__all__ = ["collect_garbage_throttled"]

# Garbage collection before a budget refusal or an escape report is throttled to this interval.
GC_MIN_INTERVAL_S = 0.5


_last_gc = 0.0


def collect_garbage_throttled() -> bool:
    global _last_gc
    now = time.monotonic()
    if now - _last_gc < GC_MIN_INTERVAL_S:
        return False
    _last_gc = now
    # Finalizers run by the collection allocate outside the manager that is under pressure.
    previous = _native.set_handler(None)
    try:
        gc.collect()
    finally:
        _native.set_handler(previous)
    return True
