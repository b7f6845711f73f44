"""Questions about one array: who owns it, where it lives, and releasing it from every scope."""

from __future__ import annotations

import mmap

import numpy as np

from oocarray import _native
from oocarray._memory._arguments import require_array
from oocarray._memory._manager import Manager, system
from oocarray._memory._registry import open_owner
from oocarray._memory._workspace import detach_from_workspace

__all__ = ["detach", "location", "owner"]


def owner(arr: np.ndarray) -> Manager | None:
    """The manager that owns the memory under ``arr`` (a view's base counts), or ``None``.

    Arrays that escaped a closed scope report the open manager they were handed to.

    Parameters
    ----------
    arr
        Any NumPy array.

    Returns
    -------
    Manager or None
        The owning manager, or ``None`` when oocarray does not manage the memory.

    Raises
    ------
    TypeError
        ``arr`` is not a :class:`numpy.ndarray`.

    Examples
    --------
    >>> import numpy as np, oocarray as oc
    >>> with oc.Manager("etl") as m:
    ...     a = np.ones(10)
    ...     oc.owner(a[2:]).name
    'etl'
    """
    require_array(arr, "owner")
    info = _native.block_info(arr)
    return None if info is None else open_owner(info[0])


def location(arr: np.ndarray) -> str | None:
    """Where the memory under ``arr`` lives.

    Parameters
    ----------
    arr
        Any NumPy array.

    Returns
    -------
    str or None
        ``"ram"``, ``"mmap"`` (a spilled or file-placed array, or a view of a memory-mapped
        file), ``"zarr"`` (compressed chunks paged back on touch), ``"workspace"``, or ``None``
        when oocarray does not manage it.

    Raises
    ------
    TypeError
        ``arr`` is not a :class:`numpy.ndarray`.

    Examples
    --------
    >>> import numpy as np, oocarray as oc
    >>> with oc.Manager(location="mmap"):
    ...     on_disk = np.zeros(100_000)
    >>> with oc.Manager(location="ram"):
    ...     in_ram = np.zeros(100_000)
    >>> (oc.location(on_disk), oc.location(in_ram))
    ('mmap', 'ram')
    """
    require_array(arr, "location")
    info = _native.block_info(arr)
    if info is None:
        return "mmap" if _is_memory_mapped(arr) else None
    if info[3] & _native.FLAG_ARENA:
        return "workspace"
    if info[3] & _native.FLAG_ZSPILLED:
        return "zarr"
    return "mmap" if info[3] & (_native.FLAG_SPILLED | _native.FLAG_MAPPED) else "ram"


def _is_memory_mapped(arr: np.ndarray) -> bool:
    base: object = arr
    while base is not None:
        if isinstance(base, (np.memmap, mmap.mmap)):
            return True
        base = base.base if isinstance(base, np.ndarray) else getattr(base, "obj", None)
    return False


def detach(arr: np.ndarray) -> np.ndarray:
    """Release ``arr`` from every scope: it is owned by the system manager from now on and is
    never reported as an escape.  A workspace array is copied out to the workspace's parent
    manager instead, and the copy is returned.  Unmanaged arrays are returned unchanged.

    Parameters
    ----------
    arr
        Any NumPy array.

    Returns
    -------
    numpy.ndarray
        ``arr`` itself, or its copy outside the workspace for a workspace array.

    Raises
    ------
    TypeError
        ``arr`` is not a :class:`numpy.ndarray`.
    MemoryBudgetError
        The system manager's budget refuses it.

    Examples
    --------
    >>> import numpy as np, oocarray as oc
    >>> with oc.Manager(on_close="raise"):
    ...     kept = oc.detach(np.arange(10))
    >>> oc.owner(kept) is oc.system()
    True
    """
    require_array(arr, "detach")
    info = _native.block_info(arr)
    if info is None:
        return arr
    copy = detach_from_workspace(arr, info)
    if copy is not None:
        return copy
    system()._transfer(arr, kept=False)
    return arr
