"""Reading the figures diagnostics show: the manager tree's usage (:class:`ManagerUsage`, from
the memory layer), resident memory (the memory layer's
:class:`~oocarray._memory._physical.ResidentMemory`), and what is on disk in the spill
directory."""

from __future__ import annotations

import os
from dataclasses import dataclass

from oocarray import _native
from oocarray._memory import Manager, _config, _spill_files, system
from oocarray._memory._physical import ResidentMemory, resident_memory
from oocarray._memory._registry import tree_lock
from oocarray._memory._usage import ManagerUsage, usage_tree
from oocarray._storage import _temp_dirs, _temporaries

__all__ = [
    "ManagerUsage",
    "ResidentMemory",
    "SpillUsage",
    "TemporaryUsage",
    "manager_usage",
    "resident_memory",
    "spill_usage",
]


def manager_usage(manager: Manager | None = None) -> ManagerUsage:
    """The usage tree from ``manager`` down (the whole tree by default)."""
    with tree_lock:
        return usage_tree(system() if manager is None else manager)


@dataclass(frozen=True, slots=True)
class TemporaryUsage:
    """A temporary chunked array (``oc.temp``, ``from_numpy``, ``from_dask``) of this process.

    Attributes
    ----------
    path
        Its directory in the spill directory.
    stored_bytes
        Disk space its files take.
    owner
        The manager that owns it (``"System"`` when no other does).
    """

    path: str
    stored_bytes: int
    owner: str


@dataclass(frozen=True, slots=True)
class SpillUsage:
    """What oocarray keeps on disk for this process.

    ``MemoryReport.spill`` holds one; every field is also an attribute.

    Parameters
    ----------
    directory
        The private spill directory (``<spill_dir>/oocarray-<uid>``).
    file_bytes
        Space reserved by spill files of arrays on disk (counted against
        ``max_spill_bytes``).
    temporaries
        Temporary chunked arrays of this process, with their disk space.
    free_bytes
        Space left for this user on the spill directory's disk, or -1 if unknown.

    Examples
    --------
    >>> import numpy as np, oocarray as oc
    >>> x = oc.from_numpy(np.ones(1000))
    >>> spill = oc.memory_report().spill
    >>> any(t.path == x.path for t in spill.temporaries)
    True
    """

    directory: str
    file_bytes: int
    temporaries: tuple[TemporaryUsage, ...]
    free_bytes: int

    @property
    def temporary_bytes(self) -> int:
        """Disk space of all temporary chunked arrays, in bytes.

        Examples
        --------
        >>> import numpy as np, oocarray as oc
        >>> x = oc.from_numpy(np.ones(1000))
        >>> oc.memory_report().spill.temporary_bytes >= x.stored_bytes()
        True
        """
        return sum(t.stored_bytes for t in self.temporaries)


def spill_usage() -> SpillUsage:
    """Read the spill directory's usage for this process."""
    try:
        directory = _spill_files.private_dir()
    except OSError:
        directory = os.path.join(
            _config.config().spill_dir or _spill_files.default_base(), f"oocarray-{os.getuid()}"
        )
    try:
        info = os.statvfs(directory)
        free = info.f_bavail * info.f_frsize
    except OSError:
        free = -1
    return SpillUsage(directory, int(_native.spill_used()), _temporaries_of(directory), free)


def _temporaries_of(directory: str) -> tuple[TemporaryUsage, ...]:
    session = _temp_dirs._sessions.get((os.getpid(), directory))
    if session is None:
        return ()
    owners: dict[str, str] = {}
    with _temporaries._temporaries_lock:
        for manager, arrays in list(_temporaries._temporaries.items()):
            for array in list(arrays):
                owners[os.path.realpath(array.path)] = manager.name
    found = []
    try:
        names = sorted(os.listdir(session.directory))
    except OSError:
        return ()
    for name in names:
        path = os.path.join(session.directory, name)
        found.append(
            TemporaryUsage(path, _disk_bytes(path), owners.get(os.path.realpath(path), "System"))
        )
    return tuple(found)


def _disk_bytes(path: str) -> int:
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_blocks * 512
            except OSError:
                continue
    return total
