"""``oc.spill()`` and ``oc.unspill()``: move a live array to disk and back, same address.

Every ``ndarray`` and view over the array keeps working throughout; reads of a spilled array
fault its data back from the file, page by page.  Writes that other threads make while the
array is being moved are not lost: a writer waits until the move has finished, then its write
lands in the new pages.  How it waits is the *move guard* (``OOCARRAY_MOVE_GUARD``):

``"uffd"``
    userfaultfd, which also holds writes made inside system calls (``readinto``,
    ``recv_into``): the default where the process may handle kernel-mode faults (root,
    ``CAP_SYS_PTRACE``, ``vm.unprivileged_userfaultfd=1`` or access to ``/dev/userfaultfd``).
``"uffd-user"``
    userfaultfd for user-mode writes only: a system call writing into an array while it moves
    fails with ``EFAULT``.  What an unprivileged process gets by default.
``"signal"``
    ``mprotect`` and a ``SIGSEGV`` handler, where userfaultfd is missing (seccomp, gVisor):
    user-mode writers wait, system calls may fail with ``EFAULT``.

``"auto"`` (the default) takes the first of these the process may use.
"""

from __future__ import annotations

import os
from typing import Literal

import numpy as np

from oocarray import _native
from oocarray._memory import _events, _spill_files
from oocarray._memory._arguments import require_array
from oocarray._memory._refusals import report_budget_refusal
from oocarray._memory._registry import open_owner
from oocarray.errors import MemoryBudgetError

__all__ = ["move_guard", "spill", "unspill"]

MoveGuard = Literal["uffd", "uffd-user", "signal"]
_GUARDS: dict[str, int] = {
    "auto": _native.GUARD_AUTO,
    "uffd": _native.GUARD_UFFD,
    "uffd-user": _native.GUARD_UFFD_USER,
    "signal": _native.GUARD_SIGNAL,
}
_GUARD_NAMES: dict[int, MoveGuard] = {
    _native.GUARD_UFFD: "uffd",
    _native.GUARD_UFFD_USER: "uffd-user",
    _native.GUARD_SIGNAL: "signal",
}


def parse_move_guard(value: str) -> int:
    """The native code of a move-guard name (``OOCARRAY_MOVE_GUARD``)."""
    try:
        return _GUARDS[value.strip().lower()]
    except KeyError:
        raise ValueError(
            f"OOCARRAY_MOVE_GUARD must be one of {sorted(_GUARDS)}, got {value!r}"
        ) from None


def move_guard() -> MoveGuard:
    """How moves of live arrays hold writers in this process: ``"uffd"`` (system calls that
    write into a moving array wait too), ``"uffd-user"`` or ``"signal"`` (only user-mode writes
    wait; a system call may fail with ``EFAULT`` meanwhile).

    Chosen once per process, when oocarray is imported: ``OOCARRAY_MOVE_GUARD`` names one, or
    ``"auto"`` (the default) takes the best the kernel allows.

    Returns
    -------
    str
        ``"uffd"``, ``"uffd-user"`` or ``"signal"``.

    Examples
    --------
    >>> import oocarray as oc
    >>> oc.move_guard() in ("uffd", "uffd-user", "signal")
    True
    """
    return _GUARD_NAMES[int(_native.move_guard())]


_native.set_move_guard(parse_move_guard(os.environ.get("OOCARRAY_MOVE_GUARD", "auto")))
_native.move_guard()  # decided now, before other code installs signal handlers


def _block(arr: np.ndarray, what: str) -> tuple[int, ...]:
    require_array(arr, what)
    info = _native.block_info(arr)
    if info is None:
        raise ValueError(
            f"{what}() takes arrays whose memory oocarray manages; this one was allocated "
            "outside any manager (copy it into one with m.asarray(arr))"
        )
    return info


def spill(arr: np.ndarray) -> int:
    """Move the memory under ``arr`` (or the array it views) to a temporary file, at the same
    address, and release its RAM.

    Arrays under the region threshold (256 KiB) are too small to move and stay in RAM.

    Parameters
    ----------
    arr
        An array whose memory oocarray manages.

    Returns
    -------
    int
        The bytes moved: 0 if the array was already on disk or is too small.

    Raises
    ------
    ValueError
        ``arr`` is not managed by oocarray.
    SpillError
        The disk refused (``errno`` ``ENOSPC`` when it is full or ``max_spill_bytes`` is
        reached); the array stays in RAM, unchanged.

    Examples
    --------
    >>> import numpy as np, oocarray as oc
    >>> with oc.Manager() as m:
    ...     a = np.arange(1_000_000.0)
    ...     moved = oc.spill(a)
    ...     (moved, oc.location(a), a[123_456], m.stats().spilled_bytes)
    (8000000, 'mmap', np.float64(123456.0), 8000000)
    """
    info = _block(arr, "spill")
    try:
        moved = int(_native.spill(arr))
    except OSError as error:
        raise _spill_files.spill_error(error, "spilling an array", info[2]) from error
    if moved and _events.listeners:
        _events.emit("spill", open_owner(info[0]), bytes=moved, reason="array")
    return moved


def unspill(arr: np.ndarray) -> int:
    """Bring the memory under ``arr`` back into RAM, at the same address.

    Parameters
    ----------
    arr
        An array whose memory oocarray manages.

    Returns
    -------
    int
        The bytes moved: 0 if the array was already in RAM.

    Raises
    ------
    MemoryBudgetError
        RAM for it does not fit the owner's budget; the array stays on disk, valid.
    SpillError
        The move failed; the array stays on disk, valid.
    ValueError
        ``arr`` is not managed by oocarray.

    Examples
    --------
    >>> import numpy as np, oocarray as oc
    >>> with oc.Manager() as m:
    ...     a = np.arange(1_000_000.0)
    ...     _ = oc.spill(a)
    ...     (oc.unspill(a), oc.location(a), a[123_456])
    (8000000, 'ram', np.float64(123456.0))
    """
    info = _block(arr, "unspill")
    try:
        result = _native.unspill(arr)
    except OSError as error:
        raise _spill_files.spill_error(error, "bringing an array back", info[2]) from error
    if isinstance(result, tuple):
        refused_id, limit, used = result
        raise MemoryBudgetError(
            report_budget_refusal(info[2], open_owner(info[0]), refused_id, limit, used)
        )
    if result and _events.listeners:
        _events.emit("unspill", open_owner(info[0]), bytes=int(result))
    return int(result)
