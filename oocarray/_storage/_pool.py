"""Spread the chunks of one read over the cores.

Chunk decoders (zstd, blosc, zlib) and file reads release the GIL, so threads decode chunks side
by side.  The calling thread takes part, and it returns only once every helper has stopped, so
nothing writes into the caller's buffers afterwards.  Helpers write into buffers the caller made
in its own manager (or workspace) and allocate no NumPy arrays of their own.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor

__all__ = ["reads_on_this_thread", "run_spread", "workers"]

MAX_WORKERS = 8  # each runner holds a chunk-sized scratch buffer; more buys little for reads

_lock = threading.Lock()
_executor: ThreadPoolExecutor | None = None
_executor_pid = 0


_workers = 0  # workers(), found once per process: every read asks
_threads = threading.local()


def _forget_workers() -> None:
    global _workers
    _workers = 0


os.register_at_fork(after_in_child=_forget_workers)  # a child may run on other CPUs


def workers() -> int:
    """Threads a read may use: the CPUs this process may run on, at most ``MAX_WORKERS``; one
    inside :func:`reads_on_this_thread`."""
    global _workers
    if getattr(_threads, "alone", False):
        return 1
    if _workers == 0:
        try:
            cpus = len(os.sched_getaffinity(0))
        except (AttributeError, OSError):  # pragma: no cover - platforms without affinity
            cpus = os.cpu_count() or 1
        _workers = max(1, min(cpus, MAX_WORKERS))
    return _workers


@contextlib.contextmanager
def reads_on_this_thread() -> Iterator[None]:
    """The reads and writes of this thread run on it alone while inside: for threads that
    already keep every core busy between them (the compute engine's workers), where each read
    spread over the pool too put two decoding threads on each core (W5's reduction: 8% slower,
    a thousand context switches more a GiB)."""
    before = getattr(_threads, "alone", False)
    _threads.alone = True
    try:
        yield
    finally:
        _threads.alone = before


def _pool() -> ThreadPoolExecutor:
    global _executor, _executor_pid
    with _lock:
        # A forked child has the parent's executor object but none of its threads.
        if _executor is None or _executor_pid != os.getpid():
            _executor = ThreadPoolExecutor(
                max_workers=max(1, workers() - 1), thread_name_prefix="oocarray-read"
            )
            _executor_pid = os.getpid()
        return _executor


def run_spread(count: int, task: Callable[[int, int], None], runners: int) -> None:
    """Call ``task(i, slot)`` for every ``i`` in ``range(count)`` on up to ``runners`` threads,
    the caller included; ``slot`` (0 for the caller) names the runner, so that each can use its
    own scratch buffer.  The first exception is raised once every runner has stopped."""
    runners = max(1, min(runners, count))
    items = iter(range(count))  # next() on a range iterator is atomic under the GIL
    failures: list[BaseException] = []
    # Helpers reach the task through this list, emptied before returning: a pool thread may
    # hold its finished (or cancelled) work item a moment longer, and that must not keep the
    # task's arrays alive past the call (a workspace cycle would count them as escaped).
    holder = [task]

    def run(slot: int) -> None:
        if not holder:
            return
        call = holder[0]
        for i in items:
            if failures:
                return
            try:
                call(i, slot)
            except BaseException as error:
                failures.append(error)
                return

    helpers: list[Future[None]] = []
    try:
        if runners > 1:
            pool = _pool()
            helpers = [pool.submit(run, slot) for slot in range(1, runners)]
        run(0)
    finally:
        for helper in helpers:
            # A helper that never started has nothing to do any more; one that did must finish.
            if not helper.cancel():
                helper.result()
        holder.clear()
    if failures:
        raise failures[0]
