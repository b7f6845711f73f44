"""Turns NumPy's out-of-memory error into oocarray's, when the native handler refused.

When the handler returns NULL, NumPy raises its private ``_ArrayMemoryError``.  The handler
records why in a thread-local; here the creation of that exception consults the record and,
when it matches the request, makes a :class:`MemoryBudgetError` (or :class:`ClosedError`)
instead: still an instance of NumPy's class and of ``MemoryError``, with a message that says
which budget refused and carries the debug dump.
"""

from __future__ import annotations

import errno
import math
import os
from typing import Any

from oocarray import _native
from oocarray._manager import _budget_message, manager_by_node_id
from oocarray._units import format_bytes
from oocarray.errors import ClosedError, MemoryBudgetError, OOCArrayError, WorkspaceFullError

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

    class ArrayBudgetError(MemoryBudgetError, _ArrayMemoryError):
        _oc_message: str

        def __init__(self, shape: Any, dtype: Any) -> None:
            _ArrayMemoryError.__init__(self, shape, dtype)

        def __str__(self) -> str:
            return str(getattr(self, "_oc_message", ""))

    class ArrayClosedError(ClosedError, _ArrayMemoryError):
        _oc_message: str

        def __init__(self, shape: Any, dtype: Any) -> None:
            _ArrayMemoryError.__init__(self, shape, dtype)

        def __str__(self) -> str:
            return str(getattr(self, "_oc_message", ""))

    class ArrayDiskError(OOCArrayError, _ArrayMemoryError):
        """A manager with location="mmap" could not place an array on disk."""

        _oc_message: str
        errno: int

        def __init__(self, shape: Any, dtype: Any) -> None:
            _ArrayMemoryError.__init__(self, shape, dtype)

        def __str__(self) -> str:
            return str(getattr(self, "_oc_message", ""))

    class ArrayWorkspaceFullError(WorkspaceFullError, _ArrayMemoryError):
        _oc_message: str

        def __init__(self, shape: Any, dtype: Any) -> None:
            _ArrayMemoryError.__init__(self, shape, dtype)

        def __str__(self) -> str:
            return str(getattr(self, "_oc_message", ""))

    ArrayWorkspaceFullError.__name__ = ArrayWorkspaceFullError.__qualname__ = "WorkspaceFullError"
    ArrayBudgetError.__name__ = ArrayBudgetError.__qualname__ = "MemoryBudgetError"
    ArrayClosedError.__name__ = ArrayClosedError.__qualname__ = "ClosedError"
    ArrayBudgetError.__module__ = ArrayClosedError.__module__ = "oocarray.errors"
    base_new = MemoryError.__new__

    def __new__(cls: type, *args: Any, **kwargs: Any) -> Any:
        if cls is _ArrayMemoryError and len(args) == 2:
            failure = _native.take_failure()
            if failure is not None and _matches(failure, *args):
                kind, err, node_id, refused_id, requested, limit, used = failure
                asked = manager_by_node_id(node_id)
                if kind == _native.FAIL_WORKSPACE_FULL:
                    full_error = Exception.__new__(ArrayWorkspaceFullError, *args)
                    name = asked.name if asked else "?"
                    full_error._oc_message = (
                        f"workspace {name!r} has no room for {format_bytes(requested)} in its "
                        "arena and its spill policy is 'fail'; raise initial_size or max_size, "
                        "or use spill='external' or 'reallocate'"
                    )
                    return full_error
                if kind == _native.FAIL_SPILL and refused_id == 0:
                    disk_error = Exception.__new__(ArrayDiskError, *args)
                    disk_error.errno = err
                    where = asked.name if asked else "?"
                    disk_error._oc_message = (
                        f"cannot place {format_bytes(requested)} on disk for manager {where!r} "
                        f"(location='mmap')." + _disk_failure(err).replace("instead ", "")
                    )
                    return disk_error
                if kind in (_native.FAIL_BUDGET, _native.FAIL_SPILL):
                    budget_error = Exception.__new__(ArrayBudgetError, *args)
                    budget_error._oc_message = _budget_message(
                        requested, asked, manager_by_node_id(refused_id), limit, used
                    )
                    if kind == _native.FAIL_SPILL:
                        budget_error._oc_message += _disk_failure(err)
                    return budget_error
                if kind == _native.FAIL_CLOSED:
                    closed_error = Exception.__new__(ArrayClosedError, *args)
                    name = asked.name if asked else "?"
                    closed_error._oc_message = (
                        f"manager {name!r} is closed but still active in this thread; NumPy "
                        "allocations need an open manager (leave its `with` block or activate "
                        "another one)"
                    )
                    return closed_error
        return base_new(cls, *args)

    _ArrayMemoryError.__new__ = __new__  # type: ignore[method-assign]
    _installed = True


def _disk_failure(err: int) -> str:
    reason = f"[{errno.errorcode.get(err, err)}] {os.strerror(err)}"
    return (
        f"\nPlacing the array on disk instead failed too: {reason} in the spill directory "
        "(free disk space, raise max_spill_bytes, or point spill_dir at a larger disk)."
    )


def _matches(failure: tuple[int, ...], shape: Any, dtype: Any) -> bool:
    """Whether the recorded failure is the one this error reports (not a stale record)."""
    try:
        nbytes = math.prod(int(d) for d in shape) * int(dtype.itemsize)
    except (TypeError, ValueError, AttributeError):
        return False
    requested = failure[4]
    return requested == nbytes or (nbytes == 0 and requested <= max(int(dtype.itemsize), 1))
