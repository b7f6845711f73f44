"""A manager's accounting: its counters (``m.stats``, ``m.reset_peak``), its subtree moved to
disk (``m.spill``) and written out as text (``m.debug_dump``), as a mixin of
:class:`~oocarray.Manager` (whose methods they are); and what its budgets still allow
(:func:`budget_left`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from oocarray import _native
from oocarray._memory import _config, _events, _spill_files
from oocarray._memory._dump import dump_lines
from oocarray._memory._registry import tree_lock
from oocarray._memory._stats import MemoryStats, subtree_stats

__all__ = ["ManagerAccounting", "budget_left"]


class ManagerAccounting:
    """The counters of :class:`~oocarray.Manager` and what it does with its subtree as a
    whole."""

    _node: _native.Node

    if TYPE_CHECKING:

        @property
        def name(self) -> str: ...

        @property
        def parent(self) -> ManagerAccounting | None: ...

    def stats(self) -> MemoryStats:
        """Counters of this manager and its subtree.

        Returns
        -------
        MemoryStats
            A snapshot: current, peak, spilled and escaped bytes and counts, and the budget.

        Examples
        --------
        >>> import numpy as np, oocarray as oc
        >>> with oc.Manager() as m:
        ...     a = np.zeros(1000)
        ...     (m.stats().current_bytes, m.stats().current_count)
        (8000, 1)
        """
        return self._memory_stats()

    def _memory_stats(self) -> MemoryStats:
        with tree_lock:
            return subtree_stats(self)

    def spill(self) -> int:
        """Move every array of this manager's subtree to disk, at the same addresses.

        Arrays under the region threshold (256 KiB) stay in RAM.

        Returns
        -------
        int
            The bytes moved to disk.

        Raises
        ------
        SpillError
            The disk refused (``errno`` says why; ``ENOSPC`` when full); arrays moved before
            the failure stay on disk, the others stay in RAM, all stay valid.

        Examples
        --------
        >>> import numpy as np, oocarray as oc
        >>> with oc.Manager() as m:
        ...     a = np.ones(1_000_000)
        ...     (m.spill(), oc.location(a), float(a.sum()))
        (8000000, 'mmap', 1000000.0)
        """
        return self._spill_subtree(skip_kept=False)

    def _spill_subtree(self, *, skip_kept: bool) -> int:
        try:
            moved = int(_native.spill_subtree(self._node, skip_kept))
        except OSError as error:
            raise _spill_files.spill_error(
                error, f"spilling manager {self.name!r}", self.stats().ram_bytes
            ) from error
        if moved and _events.listeners:
            _events.emit("spill", self, bytes=moved, reason="on_close" if skip_kept else "manager")
        return moved

    def reset_peak(self) -> None:
        """Restart peak tracking from the current bytes.

        Examples
        --------
        >>> import numpy as np, oocarray as oc
        >>> with oc.Manager() as m:
        ...     a = np.zeros(1000)
        ...     del a
        ...     m.reset_peak()
        ...     m.stats().peak_bytes
        0
        """
        self._node.reset_peak()

    def debug_dump(self) -> str:
        """The subtree as text: per manager, its state, bytes, counts and budget.

        With ``oc.configure(trace=True)``, live traced allocations are listed with the place
        they were made.

        Returns
        -------
        str
            One or more lines per manager, children indented under their parent.

        Examples
        --------
        >>> import oocarray as oc
        >>> with oc.Manager("etl") as m:
        ...     "etl" in m.debug_dump()
        True
        """
        lines: list[str] = []
        tracing = _config.config().trace
        with tree_lock:
            dump_lines(self, lines, "", "", tracing)
        return "\n".join(lines)

    def _dump_extra(self) -> str:
        return ""


def budget_left(manager: ManagerAccounting) -> int | None:
    """What the manager (and every ancestor with a budget) still allows; None: no limit.
    A workspace on the way counts through the managers above it."""
    left = None
    node: ManagerAccounting | None = manager
    while node is not None:
        stats = node.stats()
        max_bytes = getattr(stats, "max_bytes", None)
        if max_bytes is not None:
            room = max(0, max_bytes - stats.ram_bytes)
            left = room if left is None else min(left, room)
        node = node.parent
    return left
