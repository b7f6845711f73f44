"""Reading the figures diagnostics show: the manager tree's usage, and what is on disk in the
spill directory (resident memory is the memory layer's
:class:`~oocarray._memory._physical.ResidentMemory`)."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from dataclasses import dataclass

from oocarray import _native
from oocarray._memory import Manager, Workspace, _config, _spill_files, system
from oocarray._memory._registry import tree_lock
from oocarray._storage import _temp_dirs, _temporaries

__all__ = [
    "ManagerUsage",
    "SpillUsage",
    "TemporaryUsage",
    "manager_usage",
    "spill_usage",
]

_DEFAULT_NAME = re.compile(r"manager-\d+")


@dataclass(frozen=True, slots=True)
class ManagerUsage:
    """What one manager or workspace of the tree holds, with its subtree below it.

    Attributes
    ----------
    name, path
        The manager's name, and its place in the tree (``"System/etl/batch"``).
    kind
        ``"system"``, ``"manager"`` or ``"workspace"``.
    open
        False for a closed manager that still owns arrays that escaped it.
    current_bytes, ram_bytes, mmap_bytes, spilled_bytes, count
        Live bytes of the subtree (RAM + mmap + spilled) and where they are; live arrays.
    own_bytes
        Live bytes owned by this manager itself (not its open children).
    peak_bytes
        Highest RAM bytes of the subtree.
    max_bytes
        The budget, or ``None``.
    escaped, escaped_bytes
        Arrays that outlived closed children and were handed to this manager.
    spills, spill_moved_bytes
        Arrays moved to disk in the subtree, and their bytes.
    arena_bytes, learned_bytes, cycles, pinned_bytes, external_allocations
        A workspace's arena, learned cycle size, cycles done, arena memory pinned by escaped
        arrays, and allocations outside the arena; ``None`` for other managers.
    children
        The child managers and workspaces, oldest first.
    """

    name: str
    path: str
    kind: str
    open: bool
    current_bytes: int
    ram_bytes: int
    mmap_bytes: int
    spilled_bytes: int
    count: int
    own_bytes: int
    peak_bytes: int
    max_bytes: int | None
    escaped: int
    escaped_bytes: int
    spills: int
    spill_moved_bytes: int
    arena_bytes: int | None = None
    learned_bytes: int | None = None
    cycles: int | None = None
    pinned_bytes: int | None = None
    external_allocations: int | None = None
    children: tuple[ManagerUsage, ...] = ()

    @property
    def named(self) -> bool:
        """Whether the manager was given a name (not ``"manager-<id>"``)."""
        return not _DEFAULT_NAME.fullmatch(self.name)

    def walk(self) -> Iterator[tuple[int, ManagerUsage]]:
        """This manager and every one below it, depth first, with its depth."""
        stack: list[tuple[int, ManagerUsage]] = [(0, self)]
        while stack:
            depth, usage = stack.pop()
            yield depth, usage
            stack.extend((depth + 1, child) for child in reversed(usage.children))


def manager_usage(manager: Manager | None = None) -> ManagerUsage:
    """The usage tree from ``manager`` down (the whole tree by default)."""
    top = system() if manager is None else manager
    with tree_lock:
        prefix = "/".join(reversed(_ancestor_names(top.parent)))
        return _usage(top, prefix)


def _ancestor_names(m: Manager | None) -> list[str]:
    names: list[str] = []
    while m is not None:
        names.append(m.name)
        m = m.parent
    return names


def _usage(m: Manager, prefix: str) -> ManagerUsage:
    path = f"{prefix}/{m.name}" if prefix else m.name
    extra: dict[str, int] = {}
    if isinstance(m, Workspace):
        ws = m.stats()
        s = ws.memory
        extra = {
            "arena_bytes": ws.size_bytes,
            "learned_bytes": ws.learned_bytes,
            "cycles": ws.cycles,
            "pinned_bytes": ws.pinned_bytes,
            "external_allocations": ws.external_allocations,
        }
    else:
        s = m.stats()
    kind = "system" if m.parent is None else "workspace" if isinstance(m, Workspace) else "manager"
    children = tuple(_usage(child, path) for child in list(m._children))
    return ManagerUsage(
        name=m.name,
        path=path,
        kind=kind,
        open=not m.closed,
        current_bytes=s.current_bytes,
        ram_bytes=s.ram_bytes,
        mmap_bytes=s.mmap_bytes,
        spilled_bytes=s.spilled_bytes,
        count=s.current_count,
        own_bytes=s.own_bytes,
        peak_bytes=s.peak_bytes,
        max_bytes=s.max_bytes,
        escaped=s.escaped,
        escaped_bytes=s.escaped_bytes,
        spills=s.spills,
        spill_moved_bytes=s.spill_moved_bytes,
        children=children,
        **extra,
    )


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

    Attributes
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
    """

    directory: str
    file_bytes: int
    temporaries: tuple[TemporaryUsage, ...]
    free_bytes: int

    @property
    def temporary_bytes(self) -> int:
        """Disk space of all temporary chunked arrays."""
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
