"""Running a pass's blocks on a few threads, at most ``workers`` at once, so the bytes in
flight stay what the plan counted; each in the caller's context (its memory manager).

As many blocks again wait queued (a queued block holds no memory): a thread that finishes
one starts the next at once instead of waiting for this loop to wake and hand one out."""

from __future__ import annotations

import contextvars
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import TypeVar

from oocarray._compute._interrupt import DeferredInterrupt
from oocarray._compute._progress import progress_bar

__all__ = ["Outcome", "run_blocks"]

T = TypeVar("T")

# Blocks handed to the pool per thread: one running, the rest queued.
QUEUED_PER_WORKER = 2

# What a block's work returns: the blocks it makes ready (run before further items) and the
# units of progress it made.
Outcome = tuple[list[T], int]


def run_blocks(
    items: Iterable[T],
    work: Callable[[T], Outcome[T]],
    workers: int,
    *,
    total: int,
    initial: int,
    desc: str,
    progress: bool,
) -> None:
    """``work(item)`` for every item and every block a work returns, ``workers`` at a time.

    Ctrl-C lands between blocks: the blocks running finish, none starts, then
    ``KeyboardInterrupt`` is raised; a worker's error is raised likewise."""
    bar = progress_bar(total=total, desc=desc, initial=initial, disable=not progress)
    source: Iterator[T] = iter(items)
    ready: deque[T] = deque()
    running: set[Future[Outcome[T]]] = set()
    exhausted = False
    try:
        with DeferredInterrupt() as interrupt, ThreadPoolExecutor(workers) as pool:
            try:
                while True:
                    while len(running) < QUEUED_PER_WORKER * workers and (ready or not exhausted):
                        if ready:
                            item = ready.popleft()
                        else:
                            try:
                                item = next(source)
                            except StopIteration:
                                exhausted = True
                                continue
                        context = contextvars.copy_context()
                        running.add(pool.submit(context.run, work, item))
                    if not running:
                        break
                    finished, pending = wait(running, return_when=FIRST_COMPLETED)
                    running = set(pending)
                    for future in finished:
                        follow_ups, units = future.result()  # a worker's error
                        ready.extend(follow_ups)
                        bar.update(units)
                    interrupt.check()
            except BaseException:
                for future in running:
                    future.cancel()
                wait(running)
                raise
    finally:
        bar.close()
