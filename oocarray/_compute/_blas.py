"""One BLAS thread per compute worker while a pass of products runs.

The engine runs a worker per core; a BLAS call in each that starts a thread per core of its own
oversubscribes the machine (``X.T @ X`` of a 64 MiB float32 array ran 3x slower on two cores).
While a pass whose blocks call BLAS (a product, lazy or reduced: nodes and reductions say so
with ``calls_blas``) runs on several workers, BLAS is limited to one thread, through
``threadpoolctl`` when it is installed (without it, BLAS keeps its own threads). The limit is
set and given back by the thread that runs the pass: set from the engine's workers, OpenBLAS
did not always take it back. A pass of one block runs on the calling thread and keeps every
BLAS thread.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

__all__ = ["one_blas_thread"]

_lock = threading.Lock()
_users = 0
_limiter: Any = None


def _make_limiter() -> Any:
    try:
        from threadpoolctl import ThreadpoolController  # type: ignore[import-untyped]
    except ImportError:
        return None
    # Scanned each time (a few ms a pass): a BLAS loaded since (SciPy's own, say) is limited too.
    return ThreadpoolController().limit(limits=1, user_api="blas")


@contextlib.contextmanager
def one_blas_thread(workers: int) -> Iterator[None]:
    """BLAS limited to one thread while a pass of ``workers`` threads (more than one) runs;
    entered on the thread that runs the pass.  Nested and concurrent passes share the limit,
    taken by the first and given back by the last."""
    global _users, _limiter
    if workers <= 1:
        yield
        return
    with _lock:
        _users += 1
        if _users == 1:
            _limiter = _make_limiter()
    try:
        yield
    finally:
        with _lock:
            _users -= 1
            if _users == 0 and _limiter is not None:
                _limiter.restore_original_limits()
                _limiter = None
