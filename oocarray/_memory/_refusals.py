"""When the allocation handler says no: from the native refusal to the Python error.

The path, in the order it runs (read this module top to bottom to follow it):

1. **Before refusing**, the native handler (``native/alloc.c``) calls
   :func:`relieve_pressure`: one garbage collection, throttled by
   :func:`collect_garbage_throttled` (closing a manager with ``on_close="raise"`` collects in full,
   unthrottled, before it reports escapes).
   Under a ``spill="fail"`` policy it also snapshots the tree as it is now, for the message.
2. **When placing the array on disk fails** instead, the handler calls
   :func:`note_disk_refusal`, which records the free space and the tree at that moment.
   Both snapshots are needed because NumPy frees the failed expression's temporaries before
   it raises, so the tree seen when the error is built no longer shows them.
3. **The handler returns NULL** after recording why in a thread-local
   (``_native.take_failure()`` reads and clears it), and NumPy raises its private
   ``numpy._core._exceptions._ArrayMemoryError``.
4. **The error is built**: :func:`install` replaces that class's ``__new__``.  When the
   recorded failure matches the request it returns a :class:`MemoryBudgetError`,
   :class:`ClosedError`, :class:`WorkspaceFullError` or :class:`SpillError` that is still an
   instance of NumPy's class and of ``MemoryError``, with a message (:func:`budget_message`)
   that says which budget refused and carries the debug dump.  A plain out-of-memory failure
   of the system stays NumPy's error.

   This is the package's one patch of a class it does not own, and it stays one: NumPy makes
   the error in C, by its class, after the handler has returned, so there is no hook to hand
   it a different class and no other place to put oocarray's message.  Only
   ``_ArrayMemoryError.__new__`` is replaced, nothing else; errors NumPy makes without a
   matching record of the handler (the system out of memory, or made by hand) are NumPy's
   own, unchanged.  Without the private class (a NumPy that renamed it) nothing is patched
   and refusals stay plain ``MemoryError``.

Refusals raised from Python (``m.attach``, ``oc.unspill``) report through
:func:`report_budget_refusal` too.
"""

from __future__ import annotations

import gc
import math
import threading
import time
from dataclasses import dataclass
from typing import Any

from oocarray import _native
from oocarray._memory import _events
from oocarray._memory._registry import manager_by_node_id
from oocarray._memory._spill_files import disk_refusal, free_spill_bytes
from oocarray._memory._units import format_bytes
from oocarray.errors import (
    ClosedError,
    MemoryBudgetError,
    OOCArrayError,
    SpillError,
    WorkspaceFullError,
)

__all__ = [
    "DiskRefusal",
    "budget_message",
    "collect_garbage",
    "collect_garbage_throttled",
    "disk_refusal_at_failure",
    "install",
    "note_disk_refusal",
    "refusal_dump",
    "relieve_pressure",
    "report_budget_refusal",
]

# ---- 1. before refusing: collect garbage, throttled; snapshot the tree ----

# A collection frees arrays that only reference cycles still hold, which is worth one try
# before spilling or refusing.  But a full collection of a large heap takes a while (0.3 s and
# more in a test runner with tens of thousands of objects), and a tight budget can be hit
# thousands of times a second: collections are spaced at least GC_MIN_INTERVAL_S apart, and at
# least GC_TIME_FACTOR times as long as the last one took, so they never take more than about
# a tenth of the process's time.
GC_MIN_INTERVAL_S = 0.5
GC_TIME_FACTOR = 10.0

_next_allowed = 0.0


def collect_garbage() -> None:
    """A full collection.  Finalizers it runs allocate outside the active manager (the one
    under pressure, or closing)."""
    previous = _native.set_handler(None)
    try:
        gc.collect()
    finally:
        _native.set_handler(previous)


def collect_garbage_throttled() -> bool:
    """Collect garbage unless a collection ran too recently; whether it ran."""
    global _next_allowed
    start = time.monotonic()
    if start < _next_allowed:
        return False
    _next_allowed = start + GC_MIN_INTERVAL_S  # no other thread starts one meanwhile
    collect_garbage()
    end = time.monotonic()
    _next_allowed = end + max(GC_MIN_INTERVAL_S, GC_TIME_FACTOR * (end - start))
    # Until then the handler need not call back (time.monotonic is CLOCK_MONOTONIC).
    _native.set_pressure_quiet(_next_allowed, bool(_events.listeners))
    return True


def relieve_pressure(node_id: int, nbytes: int) -> bool:
    """Called by the handler before a budget refusal: collect garbage, at most twice a second;
    True when it ran, so the reservation is worth trying again."""
    collected = collect_garbage_throttled()
    _snapshot_refusal(node_id, nbytes)
    if _events.listeners:
        asked = manager_by_node_id(node_id)
        _events.emit(
            "over_budget",
            asked,
            requested_bytes=nbytes,
            spill=getattr(asked, "spill_policy", None),
        )
    return collected


# Per thread: the snapshots of the refusal under way, taken while its temporaries still live.
_refusals = threading.local()


def _snapshot_refusal(node_id: int, nbytes: int) -> None:
    """Record the tree as it is now, when an allocation under a ``spill="fail"`` policy is
    about to be refused (other policies place the array on disk instead: no dump needed)."""
    _refusals.last = None
    asked = manager_by_node_id(node_id)
    if asked is None or asked._node.spill_policy != _native.SPILL_FAIL:
        return
    refusing: Any = asked
    while refusing is not None:
        limit = int(refusing._node.max_bytes)
        if limit >= 0 and refusing._node.counters()["current_bytes"] + nbytes > limit:
            break
        refusing = refusing._parent
    tree = refusing or asked
    _refusals.last = (node_id, nbytes, tree._node.id, tree.debug_dump())


def refusal_dump(node_id: int, nbytes: int, refused_id: int) -> str | None:
    """The dump recorded when this refusal happened (see ``_snapshot_refusal``), or None."""
    last: tuple[int, int, int, str] | None = getattr(_refusals, "last", None)
    _refusals.last = None
    if last is None or last[:3] != (node_id, nbytes, refused_id or last[2]):
        return None
    return last[3]


# ---- 2. when the disk refuses too: what was free, what was there ----


@dataclass(frozen=True, slots=True)
class DiskRefusal:
    """The disk as it was when placing an array there failed."""

    node_id: int
    nbytes: int
    free_bytes: int  # free on the spill directory's disk, -1 if unknown
    used_bytes: int  # this process's spill files there
    dump: str | None  # the tree of the refusing (or asked) manager


def note_disk_refusal(node_id: int, refused_id: int, nbytes: int, err: int) -> None:
    """Called by the handler the moment placing ``nbytes`` on disk failed: what is free and
    what is on disk is recorded now, while the arrays alive at the failure still are (NumPy
    frees a failed expression's temporaries before it raises)."""
    tree = manager_by_node_id(refused_id) or manager_by_node_id(node_id)
    _refusals.disk = DiskRefusal(
        node_id,
        nbytes,
        free_spill_bytes(),
        int(_native.spill_used()),
        tree.debug_dump() if tree is not None else None,
    )


def disk_refusal_at_failure(node_id: int, nbytes: int) -> DiskRefusal | None:
    """The record :func:`note_disk_refusal` made for this failure (this thread), or None."""
    last: DiskRefusal | None = getattr(_refusals, "disk", None)
    _refusals.disk = None
    if last is None or (last.node_id, last.nbytes) != (node_id, nbytes):
        return None
    return last


# ---- 3. the message ----


def budget_message(
    size: int,
    asked: Any,
    refused: Any,
    limit: int,
    used: int,
    dump: str | None = None,
) -> str:
    """The message of a :class:`MemoryBudgetError`: who refused, how much was in use, what
    to do, and the debug dump (``dump``, else the refusing manager's tree now)."""
    who = refused.name if refused else "an ancestor"
    where = asked.name if asked else "a manager"
    message = (
        f"cannot allocate {format_bytes(size)} in manager {where!r}: the budget of {who!r} is "
        f"{format_bytes(limit)} and {format_bytes(used)} of it is in use. Free or oc.spill() "
        f"arrays, raise max_bytes, or process the data in smaller pieces."
    )
    tree = refused or asked
    if dump is None and tree is not None:
        dump = tree.debug_dump()
    if dump is not None:
        message += "\n" + dump
    return message


def report_budget_refusal(
    size: int, asked: Any, refused_id: int, limit: int, used: int, dump: str | None = None
) -> str:
    """Tell listeners that the budget of node ``refused_id`` refused ``size`` bytes asked of
    ``asked``, and return the :class:`MemoryBudgetError` message (see :func:`budget_message`).
    The error NumPy raises, ``m.attach`` and ``oc.unspill`` all report a refusal here."""
    refused = manager_by_node_id(refused_id)
    if _events.listeners:
        _events.emit(
            "budget_refusal",
            asked,
            requested_bytes=size,
            refused=getattr(refused, "name", None),
            limit_bytes=limit,
            used_bytes=used,
        )
    return budget_message(size, asked, refused, limit, used, dump)


def _describe(failure: tuple[int, ...]) -> tuple[str, str, int] | None:
    """Which error a recorded failure becomes, with its message and errno; None for a plain
    out-of-memory failure of the system, which stays NumPy's error."""
    kind, err, node_id, refused_id, requested, limit, used = failure
    if kind == _native.FAIL_OS:
        return None
    asked = manager_by_node_id(node_id)
    name = asked.name if asked else "?"
    if kind == _native.FAIL_WORKSPACE_FULL:
        return (
            "full",
            f"workspace {name!r} has no room for {format_bytes(requested)} in its arena and its "
            "spill policy is 'fail'; raise initial_size or max_size, or use spill='external' "
            "or 'reallocate'",
            0,
        )
    if kind == _native.FAIL_CLOSED:
        return (
            "closed",
            f"manager {name!r} is closed but still active in this thread; NumPy allocations "
            "need an open manager (leave its `with` block or activate another one)",
            0,
        )
    disk = disk_refusal_at_failure(node_id, requested) if kind == _native.FAIL_SPILL else None
    why = ""
    if kind == _native.FAIL_SPILL:
        if disk is None:
            why = disk_refusal(err, requested)
        else:
            why = disk_refusal(err, requested, disk.free_bytes, disk.used_bytes)
    if kind == _native.FAIL_SPILL and refused_id == 0:
        where = "'zarr'" if asked is not None and asked.location == "zarr" else "'mmap'"
        return (
            "disk",
            f"cannot place {format_bytes(requested)} on disk for manager {name!r} "
            f"(location={where}): {why}",
            err,
        )
    dump = refusal_dump(node_id, requested, refused_id)
    if dump is None and disk is not None:
        dump = disk.dump  # the tree at the failure, not after its temporaries were freed
    message = report_budget_refusal(requested, asked, refused_id, limit, used, dump)
    if kind == _native.FAIL_SPILL:
        message += f"\nPlacing the array on disk instead failed too: {why}"
    return "budget", message, err


def _matches(failure: tuple[int, ...], shape: Any, dtype: Any) -> bool:
    """Whether the recorded failure is the one this error reports (not a stale record)."""
    try:
        nbytes = math.prod(int(d) for d in shape) * int(dtype.itemsize)
    except (TypeError, ValueError, AttributeError):
        return False
    requested = failure[4]
    return requested == nbytes or (nbytes == 0 and requested <= max(int(dtype.itemsize), 1))


# ---- 4. the error NumPy raises becomes oocarray's ----

_installed = False


def install() -> None:
    """Connect the handler's callbacks (steps 1 and 2) and make NumPy's out-of-memory error
    oocarray's when the handler refused (step 4).  ``oocarray`` runs it at import; running it
    again does nothing."""
    global _installed
    if _installed:
        return
    _native.set_pressure_callback(relieve_pressure)
    _native.set_disk_refusal_callback(note_disk_refusal)
    _installed = True
    try:
        from numpy._core._exceptions import _ArrayMemoryError
    except ImportError:  # a NumPy without the private class: errors stay plain MemoryError
        return

    class RaisedByNumPy(_ArrayMemoryError):
        """NumPy's out-of-memory error, with oocarray's message."""

        _oc_message: str

        def __init__(self, shape: Any, dtype: Any) -> None:
            _ArrayMemoryError.__init__(self, shape, dtype)

        def __str__(self) -> str:
            return str(getattr(self, "_oc_message", ""))

    def variant(error: type[OOCArrayError]) -> type[Any]:
        # NumPy's __init__(shape, dtype) and oocarray's message, whatever the error's own are.
        namespace = {"__init__": RaisedByNumPy.__init__, "__str__": RaisedByNumPy.__str__}
        cls = type(error.__name__, (error, RaisedByNumPy), namespace)
        cls.__module__ = "oocarray.errors"
        return cls

    variants = {
        "budget": variant(MemoryBudgetError),
        "closed": variant(ClosedError),
        "full": variant(WorkspaceFullError),
        "disk": variant(SpillError),
    }
    base_new = MemoryError.__new__

    def __new__(cls: type, *args: Any, **kwargs: Any) -> Any:
        if cls is _ArrayMemoryError and len(args) == 2:
            failure = _native.take_failure()
            described = _describe(failure) if failure and _matches(failure, *args) else None
            if described is not None:
                which, message, err = described
                cls_variant = variants[which]
                make = OSError.__new__ if issubclass(cls_variant, OSError) else Exception.__new__
                error = make(cls_variant, *args)
                error._oc_message = message
                error.errno = err
                if isinstance(error, SpillError):
                    error.strerror = message
                return error
        return base_new(cls, *args)

    # The patch (see the module's docstring): only __new__, only of NumPy's class itself.
    _ArrayMemoryError.__new__ = __new__  # type: ignore[method-assign]
