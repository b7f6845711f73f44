"""What a manager reports about its memory: :class:`MemoryStats`."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["CUMULATIVE", "SUMMED", "MemoryStats"]


@dataclass(frozen=True, slots=True)
class MemoryStats:
    """Counters of a manager and its subtree; bytes are exact, as NumPy requested them.

    Attributes
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
