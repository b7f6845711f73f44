"""The manager tree's usage, as figures to show: :class:`ManagerUsage`.

Built from what each manager and workspace reports (``stats()``), walking its children; the
caller holds the tree's lock (``Manager._repr_html_`` and the diagnostics' ``manager_usage``
do), so the tree does not change during the walk.  Managers are taken by what they answer
(:class:`TreeNode`), which keeps this module below the manager's own.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol

from oocarray._memory._stats import MemoryStats

__all__ = ["ManagerUsage", "TreeNode", "usage_tree"]

_DEFAULT_NAME = re.compile(r"manager-\d+")


class WorkspaceFigures(Protocol):
    """What a workspace's ``stats()`` adds to a manager's."""

    @property
    def size_bytes(self) -> int: ...
    @property
    def learned_bytes(self) -> int: ...
    @property
    def cycles(self) -> int: ...
    @property
    def pinned_bytes(self) -> int: ...
    @property
    def external_allocations(self) -> int: ...
    @property
    def arena_allocations(self) -> int: ...
    @property
    def escapes(self) -> int: ...
    @property
    def memory(self) -> MemoryStats: ...


class TreeNode(Protocol):
    """A manager or workspace, as the usage tree reads it."""

    @property
    def name(self) -> str: ...
    @property
    def parent(self) -> TreeNode | None: ...
    @property
    def closed(self) -> bool: ...
    @property
    def _children(self) -> Sequence[TreeNode]: ...
    def stats(self) -> MemoryStats | WorkspaceFigures: ...


@dataclass(frozen=True, slots=True)
class ManagerUsage:
    """What one manager or workspace of the tree holds, with its subtree below it.

    ``MemoryReport.managers`` is the tree's root; every field is also an attribute.

    Parameters
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

    Examples
    --------
    >>> import numpy as np, oocarray as oc
    >>> with oc.Manager("etl", max_bytes="1M"):
    ...     a = np.ones(1000)
    ...     usage = oc.memory_report().find("etl")
    >>> (usage.kind, usage.open, usage.ram_bytes, usage.max_bytes)
    ('manager', True, 8000, 1048576)
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
        """Whether the manager was given a name (not ``"manager-<id>"``).

        Examples
        --------
        >>> import oocarray as oc
        >>> with oc.Manager("etl"), oc.Manager():
        ...     report = oc.memory_report()
        >>> [(u.name == "etl", u.named) for _, u in report.find("etl").walk()]
        [(True, True), (False, False)]
        """
        return not _DEFAULT_NAME.fullmatch(self.name)

    def walk(self) -> Iterator[tuple[int, ManagerUsage]]:
        """This manager and every one below it, depth first, with its depth.

        Yields
        ------
        tuple of (int, ManagerUsage)
            The depth below this manager (0 for itself) and the manager's figures.

        Examples
        --------
        >>> import oocarray as oc
        >>> with oc.Manager("etl") as m, m.sub("batch"):
        ...     report = oc.memory_report()
        >>> [(depth, u.name) for depth, u in report.find("etl").walk()]
        [(0, 'etl'), (1, 'batch')]
        """
        stack: list[tuple[int, ManagerUsage]] = [(0, self)]
        while stack:
            depth, usage = stack.pop()
            yield depth, usage
            stack.extend((depth + 1, child) for child in reversed(usage.children))


def usage_tree(top: TreeNode) -> ManagerUsage:
    """The usage tree from ``top`` down; the caller holds the manager tree's lock."""
    names: list[str] = []
    above = top.parent
    while above is not None:
        names.append(above.name)
        above = above.parent
    return _usage(top, "/".join(reversed(names)))


def _usage(m: TreeNode, prefix: str) -> ManagerUsage:
    path = f"{prefix}/{m.name}" if prefix else m.name
    extra: dict[str, int] = {}
    figures = m.stats()
    if isinstance(figures, MemoryStats):
        s = figures
    else:  # a workspace's
        s = figures.memory
        extra = {
            "arena_bytes": figures.size_bytes,
            "learned_bytes": figures.learned_bytes,
            "cycles": figures.cycles,
            "pinned_bytes": figures.pinned_bytes,
            "external_allocations": figures.external_allocations,
        }
    kind = "system" if m.parent is None else "manager" if not extra else "workspace"
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
