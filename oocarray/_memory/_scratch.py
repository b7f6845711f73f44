"""Memory oocarray uses for its own work between the arrays: decode, encode and staging
buffers and zstd contexts (native scratch), and freed regions kept for reuse.

The native code keeps a thread's scratch from one call to the next (making a zstd context and
its buffers for every chunk would cost more than decoding a small chunk), maps each buffer on
its own so that freeing it returns the memory to the system at once, and counts every byte.
At the end of a step (a pass of the chunk loop, ``from_batches``, ``append``)
:func:`release_scratch` hands back what idle threads hold (a thread inside a call
drops its own when the call ends) and empties the cache of freed regions, so each step of a
pipeline leaves the process as large as it found it.  Steps inside steps (the appends of
``from_batches``) release once, when the outermost ends.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from oocarray import _native

__all__ = ["release_scratch", "scratch_bytes", "scratch_step"]

_lock = threading.Lock()
_steps = 0  # steps running now, in every thread


def release_scratch() -> None:
    """Return idle threads' scratch and the cached free regions to the system, unless a step
    is running (it releases them when it ends)."""
    with _lock:
        if _steps:
            return
    _native.scratch(True)


@contextmanager
def scratch_step() -> Iterator[None]:
    """A step of work: when the last step running ends, its scratch is released."""
    global _steps
    with _lock:
        _steps += 1
    try:
        yield
    finally:
        with _lock:
            _steps -= 1
            last = _steps == 0
        if last:
            _native.scratch(True)


def scratch_bytes() -> int:
    """Bytes of native scratch mapped now: every thread's decode and encode buffers and zstd
    contexts, the pager's staging buffers and the chunks handed to a remote array's pager."""
    return _native.scratch()
