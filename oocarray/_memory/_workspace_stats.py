"""The counters of a workspace: :class:`WorkspaceStats`, as :meth:`Workspace.stats` returns
them."""

from __future__ import annotations

from dataclasses import dataclass, field

from oocarray._memory._stats import MemoryStats

__all__ = ["WorkspaceStats"]


@dataclass(frozen=True, slots=True)
class WorkspaceStats:
    """Counters of a workspace, as :meth:`Workspace.stats` returns them.

    Parameters
    ----------
    name
        The workspace's name.
    size_bytes
        The arena's size now.
    learned_bytes
        What the learning policy measured a cycle needs (0 before learning).
    cycles
        Cycles completed.
    arena_allocations, external_allocations, spilled_allocations
        Allocations served from the arena; outside it (any reason); outside it because the
        arena was full.
    escapes
        Arrays that outlived their cycle, over all cycles.
    pinned_bytes
        Arena memory kept for escaped arrays that are still alive.
    reallocations
        Times a new arena was mapped (first one included).
    memory
        The workspace's :class:`MemoryStats` as a manager.  The arena counts as its RAM;
        with ``location="zarr"`` its size counts in ``compressed_bytes`` (and
        ``spilled_bytes``) instead, the pages of it in RAM now in ``ram_bytes`` and its
        encoded pages in ``compressed_disk_bytes`` (both 0 again after each cycle).

    Examples
    --------
    >>> import numpy as np, oocarray as oc
    >>> ws = oc.Workspace("step")
    >>> for _ in range(2):
    ...     with ws:
    ...         tmp = np.ones(1000)
    ...         del tmp
    >>> s = ws.stats()
    >>> (s.name, s.cycles, s.escapes)
    ('step', 2, 0)
    >>> ws.close()
    """

    name: str
    size_bytes: int
    learned_bytes: int
    cycles: int
    arena_allocations: int
    external_allocations: int
    spilled_allocations: int
    escapes: int
    pinned_bytes: int
    reallocations: int
    memory: MemoryStats = field(repr=False)
