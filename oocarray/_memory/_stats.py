"""What a manager reports about its memory: :class:`MemoryStats`, added up over its subtree
from the native nodes' counters, with the escapes of closed children and the totals of the
children it has forgotten."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

__all__ = [
    "CUMULATIVE",
    "SUMMED",
    "MemoryStats",
    "escaped_into",
    "escapes_of_closed",
    "prune_children",
    "subtree_stats",
]


@dataclass(frozen=True, slots=True)
class MemoryStats:
    """Counters of a manager and its subtree; bytes are exact, as NumPy requested them.

    :meth:`Manager.stats` returns them; every field is also an attribute.

    Parameters
    ----------
    name
        The manager's name.
    current_bytes, current_count
        Bytes and number of live arrays owned by the manager or its descendants, wherever
        they are (``ram_bytes + mmap_bytes + spilled_bytes``).
    peak_bytes
        Highest ``ram_bytes`` since creation or :meth:`Manager.reset_peak`.
    total_bytes, total_count
        Everything ever allocated in the subtree.
    own_bytes, own_count
        Live arrays owned by this manager itself, including those that escaped into it from
        closed children.
    max_bytes
        The budget, or ``None``.
    ram_bytes, mmap_bytes, spilled_bytes
        Where the live bytes are: in RAM (what ``max_bytes`` limits), placed in temporary
        files from the start (``location="mmap"`` or the ``"mmap"`` spill policy), or moved
        there by a spill.
    spills, spill_moved_bytes, unspills, unspill_moved_bytes
        How many arrays, and how many bytes, were moved to disk and back.
    compressed_bytes, compressed_disk_bytes
        Compressed spill (``spill="zarr"``, ``location="zarr"``): the logical bytes of arrays
        held as compressed chunks (included in ``spilled_bytes``), and the bytes their chunks
        take on disk.  Pages of such arrays brought back by touches count in ``ram_bytes``
        too, until the next spill drops them.
    escaped, escaped_bytes
        Arrays that were still alive when a child scope closed and were handed to this manager.
    kept, kept_bytes
        Arrays marked with :meth:`Manager.keep` and still alive.

    Examples
    --------
    >>> import numpy as np, oocarray as oc
    >>> with oc.Manager("etl", max_bytes="1M") as m:
    ...     a = np.zeros(1000)
    ...     s = m.stats()
    >>> (s.name, s.current_bytes, s.ram_bytes, s.max_bytes)
    ('etl', 8000, 8000, 1048576)
    """

    name: str
    current_bytes: int
    current_count: int
    peak_bytes: int
    total_bytes: int
    total_count: int
    own_bytes: int
    own_count: int
    max_bytes: int | None
    ram_bytes: int
    mmap_bytes: int
    spilled_bytes: int
    escaped: int
    escaped_bytes: int
    kept: int
    kept_bytes: int
    spills: int
    spill_moved_bytes: int
    unspills: int
    unspill_moved_bytes: int
    compressed_bytes: int = 0
    compressed_disk_bytes: int = 0


# Node counters that only grow; a pruned child's are kept by its parent.
CUMULATIVE = (
    "total_bytes",
    "total_count",
    "spill_count",
    "spill_moved_bytes",
    "unspill_count",
    "unspill_moved_bytes",
)
# Node counters that stats() adds up over a subtree.
SUMMED = (
    "live_count",
    "spilled_bytes",
    "mapped_bytes",
    "compressed_bytes",
    "compressed_disk_bytes",
    *CUMULATIVE,
)


def subtree_stats(manager: Any) -> MemoryStats:
    """The counters of ``manager`` and its subtree (the caller holds the tree lock)."""
    counters = manager._node.counters()
    totals = dict.fromkeys(SUMMED, 0)
    open_children = [c for c in manager._children if not c.closed]
    open_below: set[int] = {id(d) for c in open_children for d in c._subtree()}
    own_count = 0
    own_disk = 0
    for m in manager._subtree():
        c = m._node.counters()
        for key in SUMMED:
            totals[key] += c[key]
        for key in CUMULATIVE:
            totals[key] += m._pruned[key]
        if id(m) not in open_below:
            own_count += c["live_count"]
            own_disk += c["spilled_bytes"] + c["mapped_bytes"]
    escaped, escaped_bytes = escaped_into(manager)
    ram = counters["current_bytes"]
    own_ram = ram - sum(c._node.counters()["current_bytes"] for c in open_children)
    return MemoryStats(
        name=manager.name,
        current_bytes=ram + totals["mapped_bytes"] + totals["spilled_bytes"],
        current_count=totals["live_count"],
        peak_bytes=counters["peak_bytes"],
        total_bytes=totals["total_bytes"],
        total_count=totals["total_count"],
        own_bytes=own_ram + own_disk,
        own_count=own_count,
        max_bytes=manager.max_bytes,
        ram_bytes=ram,
        mmap_bytes=totals["mapped_bytes"],
        spilled_bytes=totals["spilled_bytes"],
        escaped=escaped,
        escaped_bytes=escaped_bytes,
        kept=counters["kept_count"],
        kept_bytes=counters["kept_bytes"],
        spills=totals["spill_count"],
        spill_moved_bytes=totals["spill_moved_bytes"],
        unspills=totals["unspill_count"],
        unspill_moved_bytes=totals["unspill_moved_bytes"],
        compressed_bytes=totals["compressed_bytes"],
        compressed_disk_bytes=totals["compressed_disk_bytes"],
    )


def escaped_into(manager: Any) -> tuple[int, int]:
    """Arrays that closed children handed to ``manager`` and that are still alive."""
    count, nbytes = manager._escaped, manager._escaped_bytes
    for child in manager._children:
        if child.closed:
            c, b = escapes_of_closed(child)
            count, nbytes = count + c, nbytes + b
    return count, nbytes


def escapes_of_closed(manager: Any) -> tuple[int, int]:
    """Live arrays of a closed manager and its closed subtree, less those it keeps."""
    count = 0
    nbytes = 0
    for m in manager._subtree():
        c = m._node.counters()
        ram = c["current_bytes"] - sum(ch._node.counters()["current_bytes"] for ch in m._children)
        count += c["live_count"]
        nbytes += ram + c["spilled_bytes"] + c["mapped_bytes"]
        if m is manager:
            count -= c["kept_count"]
            nbytes -= c["kept_bytes"]
    return count, nbytes


def prune_children(manager: Any) -> None:
    """Forget closed children that own nothing any more, keeping their totals."""
    keep = []
    for child in manager._children:
        if (
            child.closed
            and child._node.counters()["live_count"] == 0
            and not child._children
            and not _handler_in_use(child)
        ):
            counters = child._node.counters()
            for key in CUMULATIVE:
                manager._pruned[key] += counters[key] + child._pruned[key]
        else:
            keep.append(child)
    manager._children = keep


def _handler_in_use(manager: Any) -> bool:
    """Whether anything besides the manager's node holds its handler: a context where it is
    (or was) active, or an array it allocated.  NumPy may allocate through it while so."""
    # The node's own reference and getrefcount's argument: CPython reference counting is the
    # only way to see into contexts other than the current one.
    return sys.getrefcount(manager._node.handler) > 2
