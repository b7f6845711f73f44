"""Turns NumPy's out-of-memory error into oocarray's, when the native handler refused.

When the handler returns NULL, NumPy raises its private ``_ArrayMemoryError``.  The handler
records why in a thread-local; here the creation of that exception consults the record and,
when it matches the request, makes a :class:`MemoryBudgetError` (or :class:`ClosedError`)
instead: still an instance of NumPy's class and of ``MemoryError``, with a message that says
which budget refused and carries the debug dump.

This is the package's one patch of a class it does not own, and it stays one: NumPy makes the
error in C, by its class, after the handler has returned, so there is no hook to hand it a
different class and no other place to put oocarray's message.  :func:`install` (run once by
``import oocarray``) replaces ``_ArrayMemoryError.__new__``, nothing else; errors NumPy makes
without a matching record of the handler (the system out of memory, or made by hand) are
NumPy's own, unchanged.  Without the private class (a NumPy that renamed it) nothing is
patched and refusals stay plain ``MemoryError``.  ``tests/memory/test_numpy_error_patch.py``
pins all of this.
"""

from __future__ import annotations

import math
from typing import Any

from oocarray import _native
from oocarray._memory import _events
from oocarray._memory._refusals import budget_message, disk_refusal_at_failure, refusal_dump
from oocarray._memory._registry import manager_by_node_id
from oocarray._memory._spill_files import disk_refusal
from oocarray._memory._units import format_bytes
from oocarray.errors import (
    ClosedError,
    MemoryBudgetError,
    OOCArrayError,
    SpillError,
    WorkspaceFullError,
)

__all__ = ["install"]

_installed = False


def install() -> None:
    global _installed
    if _installed:
        return
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
    _installed = True


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
    if _events.listeners:
        _events.emit(
            "budget_refusal",
            asked,
            requested_bytes=requested,
            refused=getattr(manager_by_node_id(refused_id), "name", None),
            limit_bytes=limit,
            used_bytes=used,
        )
    message = budget_message(requested, asked, manager_by_node_id(refused_id), limit, used, dump)
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
