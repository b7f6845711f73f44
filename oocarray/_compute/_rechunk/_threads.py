"""Running a pass's blocks on a few threads, at most ``workers`` at once, so the bytes in
flight stay what the plan counted; each thread in the caller's context (its memory manager).

The threads take their blocks themselves, from the blocks made ready by earlier ones first,
then from the pass's items: no thread waits for another to hand it one (a hand-out thread
woken per block was the limit of a pass of many small blocks).  The calling thread only
watches: it updates the progress bar and delivers Ctrl-C.
"""

from __future__ import annotations

import contextvars
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from typing import Generic, TypeVar

from oocarray._compute._interrupt import DeferredInterrupt
from oocarray._compute._progress import progress_bar

__all__ = ["Outcome", "run_blocks"]

T = TypeVar("T")

# What a block's work returns: the blocks it makes ready (run before further items) and the
# units of progress it made.
Outcome = tuple[list[T], int]

# Seconds between the watching thread's looks at the progress and at Ctrl-C.
WATCH_SECONDS = 0.05


class _Blocks(Generic[T]):
    """The blocks still to run, shared by the threads: take one, report one done."""

    def __init__(self, items: Iterable[T]) -> None:
        self._changed = threading.Condition()
        self._source: Iterator[T] = iter(items)
        self._ready: deque[T] = deque()
        self._exhausted = False
        self._running = 0
        self.units = 0
        self.stopped = False
        self.error: BaseException | None = None

    def take(self) -> tuple[bool, T | None]:
        """The next block (``(True, block)``), or ``(False, None)`` once there is none left
        and none running that could make more ready, or the pass is stopped."""
        with self._changed:
            while not self.stopped:
                if self._ready:
                    item = self._ready.popleft()
                elif not self._exhausted:
                    try:
                        item = next(self._source)  # the items' generator is not thread-safe
                    except StopIteration:
                        self._exhausted = True
                        continue
                elif self._running == 0:
                    self._changed.notify_all()
                    return False, None
                else:
                    self._changed.wait()
                    continue
                self._running += 1
                return True, item
            return False, None

    def done(self, outcome: Outcome[T] | None, error: BaseException | None = None) -> None:
        with self._changed:
            self._running -= 1
            if outcome is not None:
                self._ready.extend(outcome[0])
                self.units += outcome[1]
            if error is not None and self.error is None:
                self.error, self.stopped = error, True
            self._changed.notify_all()

    def stop(self) -> None:
        with self._changed:
            self.stopped = True
            self._changed.notify_all()


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
    blocks: _Blocks[T] = _Blocks(items)

    def run() -> None:
        while True:
            found, item = blocks.take()
            if not found:
                return
            try:
                outcome = work(item)  # type: ignore[arg-type]
            except BaseException as error:  # raised in the calling thread
                blocks.done(None, error)
                return
            blocks.done(outcome)

    bar = progress_bar(total=total, desc=desc, initial=initial, disable=not progress)
    threads = [
        threading.Thread(
            target=contextvars.copy_context().run, args=(run,), name=f"oocarray-rechunk-{i}"
        )
        for i in range(max(1, workers))
    ]
    shown = 0
    try:
        with DeferredInterrupt() as interrupt:
            try:
                for thread in threads:
                    thread.start()
                for thread in threads:
                    while thread.is_alive():
                        thread.join(WATCH_SECONDS)
                        bar.update(blocks.units - shown)
                        shown = blocks.units
                        interrupt.check()
            except BaseException:
                blocks.stop()
                for thread in threads:
                    if thread.ident is not None:
                        thread.join()
                raise
        if blocks.error is not None:
            raise blocks.error
        bar.update(blocks.units - shown)
    finally:
        bar.close()
