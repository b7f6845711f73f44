"""One pass over a range of batches: a background thread fills a ring of batch buffers.

The ring has ``prefetch + 1`` slots (one per source each): the consumer holds one batch while
the prefetch thread fills up to ``prefetch`` more.  A slot goes back to the thread only when
the consumer asks for the next batch, and only after a check that nothing outside still
refers to the batch it held: ``sys.getrefcount`` of every object handed out, against the
count taken when it was handed out plus one (the loop variable, or the tuple of a batch of
several sources).  A batch still referenced beyond that, or detached with ``oc.detach``, is
never overwritten: the slot gets fresh buffers and the old ones stay the user's
(``on_escape="pin"``), or :class:`WorkspaceLeakError` is raised (``"raise"``).

Batches made for other processes (``fresh=True``: torch DataLoader workers, whose batches are
pickled after they are handed over) use a new buffer each and no ring.

Memory: the ring and the window buffers are allocated in a manager of their own, a child of
the manager active where the iteration started, closed when the pass ends; the reads'
temporaries live in a cyclic workspace under it.
"""

from __future__ import annotations

import contextlib
import queue
import sys
import threading
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


def _refs(items: list[Any], i: int) -> int:
    """References to ``items[i]``; taken the same way when handing out and when checking."""
    return sys.getrefcount(items[i])


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
        self.slots: list[list[np.ndarray]] = (
            [] if fresh else [self.new_buffers(batch_size) for _ in range(max(1, prefetch + 1))]
        )
        self.free: queue.Queue[int] = queue.Queue()
        for slot in range(max(1, prefetch + 1)):
            self.free.put(slot)
        self.ready: queue.Queue[Any] = queue.Queue()
        self.stop = threading.Event()

    def new_buffers(self, rows: int) -> list[np.ndarray]:
        return [self.manager.empty((rows, *s.row_shape), s.dtype) for s in self.sources]

    def make(self, index: int, slot: int) -> tuple[int, int, list[np.ndarray]]:
        q0, q1 = self.spans[index]
        outs = self.new_buffers(q1 - q0) if self.fresh else self.slots[slot]
        self.filler.fill(q0, q1, outs)
        return slot, q1 - q0, outs

    def produce(self) -> None:
        """The prefetch thread: fill a free slot, hand it over, until done or stopped."""
        try:
            with self.manager.activate():
                for index in range(len(self.spans)):
                    slot = self.free.get()
                    if self.stop.is_set():
                        return
                    self.ready.put(self.make(index, slot))
        except BaseException as error:
            self.ready.put(_Failure(error))
        else:
            self.ready.put(_DONE)

    def close(self) -> None:
        self.slots = []
        self.filler = None  # type: ignore[assignment]
        self.workspace.close()
        self.manager.close()


class BatchIterator:
    """Iterates the batches of ``spans`` (ranges of epoch positions)."""

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
        self._held: int | None = None  # the slot of the batch the consumer holds
        self._handed: list[Any] = []
        self._baseline: list[int] = []
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
        self._take_back()
        if self._thread is None:
            if self._next_index == len(shared.spans):
                self.close()
                raise StopIteration
            with shared.manager.activate():
                item = shared.make(self._next_index, shared.free.get())
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
        arrays = [out if len(out) == n else out[:n] for out in outs]
        del outs, item
        if self._convert is not None:
            arrays = [self._convert(a) for a in arrays]
        if not shared.fresh:
            # Counted before the batch is made: the reference it holds (a tuple's, or the
            # array itself) becomes the caller's, the one allowed when taking back.
            self._held = slot
            self._handed = arrays
            self._baseline = [_refs(arrays, i) for i in range(len(arrays))]
        else:
            shared.free.put(slot)
        batch = arrays[0] if self._single else tuple(arrays)
        del arrays
        if self._on_batch is not None:
            self._on_batch()
        return batch

    def _take_back(self) -> None:
        """Return the held slot to the ring, after checking its batch is no longer used."""
        slot = self._held
        if slot is None:
            return
        shared = self._shared
        escaped = [
            i for i in range(len(self._handed)) if _refs(self._handed, i) > self._baseline[i] + 1
        ]
        detached = [
            i for i, buffer in enumerate(shared.slots[slot]) if owner(buffer) is not shared.manager
        ]
        self._handed = []
        self._baseline = []
        self._held = None
        if escaped and not detached and self._on_escape == "raise":
            self.close()
            raise WorkspaceLeakError(
                "a batch from oc.batches was still referenced when the next batch was asked "
                f"for (source{'s' if len(escaped) > 1 else ''} {escaped}); its buffer would be "
                "refilled. A batch is valid until the next one: keep one with oc.detach(batch) "
                "or np.array(batch), or pass on_escape='pin' to have kept batches left alone"
            )
        if escaped or detached:
            # The user keeps the old buffers; the slot gets new ones.
            self.escapes += 1
            shared.slots[slot] = shared.new_buffers(len(shared.slots[slot][0]))
        shared.free.put(slot)

    def close(self) -> None:
        """Stop the prefetch thread and release the ring (a batch still held stays valid)."""
        if self._closed:
            return
        self._closed = True
        shared = self._shared
        shared.stop.set()
        shared.free.put(-1)  # wakes a thread waiting for a slot
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()
        self._handed = []
        shared.close()

    def __del__(self) -> None:
        # Dropped unfinished (a loop left with break): stop the thread.  Nothing can be
        # reported from here, and at interpreter exit the modules may be gone.
        with contextlib.suppress(Exception):
            self.close()
