"""One pass over a range of batches: a background thread fills a ring of batch buffers.

**Reuse rule.**  Each ring buffer is an array that owns its memory, and the consumer is only
ever handed *views* of it (``buffer[:n]``), never the buffer itself.  NumPy makes every view
of a view point at the array that owns the memory, and torch tensors, memoryviews and pandas
objects built on a batch hold the view they were made from, so every object anyone can use
to reach a buffer's memory holds a reference to the buffer object.  Its reference count,
read where no user code holds it, is then the ring's own references plus one per live
object built on it, whatever container (list, tuple, dict, zip, closure, autograd graph)
keeps those objects.  A buffer at its baseline count is unreachable and is refilled; one
above it is retired to the user (it stays alive as the user's array, counted in the pass's
manager like any array, and re-parented to the active manager when the pass ends) and the
slot takes a new buffer.  An unreachable object still waiting for the cycle collector
counts as reachable: the buffer is retired, never refilled under it.

**When.**  The batch handed out last may still be bound to the caller's loop variable when
the next one is asked for, so its slot is checked one batch later: asking for batch ``k``
checks the slot of batch ``k - 2``, after which (and not before) it may be refilled.  The
check runs in the consumer's thread, before the slot is given to the prefetch thread, so a
buffer anyone can reach is never chosen for a fill.  The ring therefore has ``prefetch + 2``
slots (one buffer per source each; fewer when the pass has fewer batches): ``prefetch``
batches made ahead, the batch in use, and the one before it, waiting for its check.

Batches made for other processes (``fresh=True``: torch DataLoader workers, whose batches are
pickled after they are handed over) use new buffers each and no ring.

Memory: the ring and the window buffers are allocated in a manager of their own, a child of
the manager active where the iteration started, closed when the pass ends (buffers still
referenced then are re-parented to the active manager); the reads' temporaries live in a
cyclic workspace under it.
"""

from __future__ import annotations

import contextlib
import queue
import sys
import threading
from collections import deque
from collections.abc import Callable
from typing import Any

import numpy as np

from oocarray._feed._fill import Filler
from oocarray._feed._plan import Plan
from oocarray._feed._sources import Source
from oocarray._memory import Manager, Workspace, owner
from oocarray.errors import WorkspaceLeakError

__all__ = ["BatchIterator"]

_DONE = object()


class _Failure:
    def __init__(self, error: BaseException) -> None:
        self.error = error


def _refs(buffers: list[np.ndarray], i: int) -> int:
    """References to ``buffers[i]``; taken the same way for the baseline and the check."""
    return sys.getrefcount(buffers[i])


class _Shared:
    """What the prefetch thread and the consumer share (never the iterator itself, so that
    dropping the iterator stops the thread)."""

    def __init__(
        self,
        sources: list[Source],
        plan: Plan,
        spans: list[tuple[int, int]],
        batch_size: int,
        prefetch: int,
        fresh: bool,
    ) -> None:
        self.sources = sources
        self.spans = spans
        self.fresh = fresh
        self.manager = Manager("batches")
        self.workspace = Workspace("batches-read", parent=self.manager, learning="over_time")
        self.filler = Filler(sources, plan, self.manager, self.workspace)
        self.plan = plan
        # A pass of fewer batches than that needs no more buffers than batches.
        ring = 0 if fresh else min(prefetch + 2, len(spans))
        self.slots: list[list[np.ndarray]] = []
        self.baselines: list[list[int]] = []
        for _ in range(ring):
            self.slots.append(self.new_buffers(batch_size))
            self.baselines.append([])
            self.measure(len(self.slots) - 1)
        # Slot numbers: the ring's slots, or for new buffers each batch, how far ahead the
        # prefetch thread may run.
        self.free: queue.Queue[int] = queue.Queue()
        for slot in range(max(1, prefetch + 1 if fresh else ring)):
            self.free.put(slot)
        self.ready: queue.Queue[Any] = queue.Queue()
        self.stop = threading.Event()

    def new_buffers(self, rows: int) -> list[np.ndarray]:
        return [self.new_buffer((rows, *s.row_shape), s.dtype) for s in self.sources]

    def new_buffer(self, shape: tuple[int, ...], dtype: np.dtype[Any]) -> np.ndarray:
        buffer = self.manager.empty(shape, dtype)
        # The reuse rule needs every view to point at this very object (see the module doc).
        assert buffer.flags.owndata
        return buffer

    def measure(self, slot: int) -> None:
        """The reference counts of ``slot``'s buffers while nothing outside holds them."""
        buffers = self.slots[slot]
        self.baselines[slot] = [_refs(buffers, i) for i in range(len(buffers))]

    def reachable(self, slot: int) -> list[int]:
        """The sources whose buffer in ``slot`` something besides the ring refers to, or
        that ``oc.detach`` gave away."""
        buffers = self.slots[slot]
        baseline = self.baselines[slot]
        return [
            i
            for i in range(len(buffers))
            if _refs(buffers, i) != baseline[i] or owner(buffers[i]) is not self.manager
        ]

    def make(self, index: int, slot: int) -> tuple[int, int, list[np.ndarray]]:
        q0, q1 = self.spans[index]
        outs = self.new_buffers(q1 - q0) if self.fresh else self.slots[slot]
        self.filler.fill(q0, q1, outs)
        return slot, q1 - q0, outs

    def produce(self) -> None:
        """The prefetch thread: fill a free slot, hand it over, until done or stopped."""
        try:
            with self.manager.activate(), self.reading_ahead():
                for index in range(len(self.spans)):
                    slot = self.free.get()
                    if self.stop.is_set():
                        return
                    self.ready.put(self.make(index, slot))
        except BaseException as error:
            self.ready.put(_Failure(error))
        else:
            self.ready.put(_DONE)

    def reading_ahead(self) -> contextlib.ExitStack:
        """Each source told the row runs the epoch's windows read, in order."""
        stack = contextlib.ExitStack()
        if self.spans:
            q0, q1 = self.spans[0][0], self.spans[-1][1]
            for source in self.sources:
                stack.enter_context(source.read_ahead(self.plan.runs_between(q0, q1)))
        return stack

    def close(self) -> None:
        self.slots = []
        self.filler = None  # type: ignore[assignment]
        self.workspace.close()
        self.manager.close()


class BatchIterator:
    """Iterates the batches of ``spans`` (ranges of epoch positions).

    ``escapes`` counts the batches retired to the caller: still reachable when their slot
    came up for refilling (kept, or a view, tensor or frame of them kept), or detached.
    """

    def __init__(
        self,
        sources: list[Source],
        plan: Plan,
        spans: list[tuple[int, int]],
        *,
        batch_size: int,
        prefetch: int,
        fresh: bool,
        single: bool,
        on_escape: str,
        convert: Callable[[np.ndarray], Any] | None = None,
        on_batch: Callable[[], None] | None = None,
    ) -> None:
        self._shared = _Shared(sources, plan, spans, batch_size, prefetch, fresh)
        self._single = single
        self._on_escape = on_escape
        self._convert = convert
        self._on_batch = on_batch
        self._next_index = 0
        self._handed: deque[int] = deque()  # slots handed out and not yet checked, oldest first
        self._closed = False
        self.escapes = 0
        self._thread: threading.Thread | None = None
        if prefetch > 0 and spans:
            self._thread = threading.Thread(
                target=self._shared.produce, name="oocarray-batches", daemon=True
            )
            self._thread.start()

    def __iter__(self) -> BatchIterator:
        return self

    def __next__(self) -> Any:
        if self._closed:
            raise StopIteration
        shared = self._shared
        # The batch handed out last may still be the loop variable: check the one before.
        try:
            while len(self._handed) > 1:
                self._release(self._handed.popleft())
        except BaseException:
            # WorkspaceLeakError, a kept batch's replacement over the budget, Ctrl-C: the pass
            # ends here rather than going on a slot short (with prefetch=0, waiting for it).
            self.close()
            raise
        if self._thread is None:
            if self._next_index == len(shared.spans):
                self.close()
                raise StopIteration
            try:
                with shared.manager.activate():
                    item = shared.make(self._next_index, shared.free.get())
            except BaseException:
                self.close()  # as when the prefetch thread fails: the pass ends here
                raise
        else:
            item = shared.ready.get()
            if item is _DONE:
                self.close()
                raise StopIteration
            if isinstance(item, _Failure):
                self.close()
                raise item.error
        self._next_index += 1
        slot, n, outs = item
        del item
        # Views, never the buffers themselves: whatever is built on a batch then refers to
        # the buffer object, whose reference count decides its reuse (see the module doc).
        arrays = [out[:n] for out in outs]
        del outs
        if shared.fresh:
            shared.free.put(slot)
        else:
            self._handed.append(slot)
        if self._convert is not None:
            arrays = [self._convert(a) for a in arrays]
        batch = arrays[0] if self._single else tuple(arrays)
        del arrays
        if self._on_batch is not None:
            self._on_batch()
        return batch

    def _release(self, slot: int) -> None:
        """Give ``slot`` back for refilling; buffers still reachable are retired to the
        caller first and replaced by new ones."""
        shared = self._shared
        kept = shared.reachable(slot)
        if kept:
            if self._on_escape == "raise" and any(
                owner(shared.slots[slot][i]) is shared.manager for i in kept
            ):
                raise WorkspaceLeakError(
                    "a batch from oc.batches (or a view, tensor or frame made from it) was "
                    "still referenced two batches later, when its buffer came up for "
                    "refilling, and on_escape='raise' forbids keeping batches. Keep one with "
                    "oc.detach(batch) or batch.copy(), or leave on_escape='pin' (the default) "
                    "to keep batches at the cost of their memory"
                )
            self.escapes += 1
            buffers = shared.slots[slot]
            for i in kept:  # counted in the budget: may raise MemoryBudgetError
                buffers[i] = shared.new_buffer(buffers[i].shape, buffers[i].dtype)
            del buffers
            shared.measure(slot)
        shared.free.put(slot)

    def close(self) -> None:
        """Stop the prefetch thread and release the ring (batches still held stay valid)."""
        if self._closed:
            return
        self._closed = True
        shared = self._shared
        shared.stop.set()
        shared.free.put(-1)  # wakes a thread waiting for a slot
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()
        self._handed.clear()
        shared.close()

    def __del__(self) -> None:
        # Dropped unfinished (a loop left with break): stop the thread.  Nothing can be
        # reported from here, and at interpreter exit the modules may be gone.
        with contextlib.suppress(Exception):
            self.close()
