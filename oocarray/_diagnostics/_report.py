"""``oc.memory_report()``: where this process's memory is, in one object."""

from __future__ import annotations

import dataclasses
import os
import time
from dataclasses import dataclass
from typing import Any

from oocarray._diagnostics._usage import ManagerUsage, SpillUsage, manager_usage, spill_usage
from oocarray._memory import Config, _html, config, format_bytes
from oocarray._memory._physical import ResidentMemory, resident_memory

__all__ = ["MemoryReport", "memory_report", "report_html"]

_BAR_WIDTH = 10


@dataclass(frozen=True, slots=True)
class MemoryReport:
    """A snapshot of the process's memory: resident memory, budgets, managers, disk.

    :func:`memory_report` takes one; every field is also an attribute.

    Parameters
    ----------
    time
        ``time.time()`` when it was taken.
    pid
        The process.
    resident
        Resident memory split anonymous / shared / file-backed
        (:class:`~oocarray._memory._physical.ResidentMemory`).
    config
        The settings in force (``oc.config()``): the budgets.
    managers
        The manager tree from the system manager down, with workspaces
        (:class:`~oocarray._memory._usage.ManagerUsage`).
    spill
        The spill directory, the bytes of spill files and the temporary chunked arrays
        (:class:`~oocarray._diagnostics._usage.SpillUsage`).

    Examples
    --------
    >>> import numpy as np, oocarray as oc
    >>> with oc.Manager("etl", max_bytes="64M") as m:
    ...     a = np.ones((1024, 1024))
    ...     report = oc.memory_report()
    >>> report.find("etl").current_bytes
    8388608
    >>> report.resident.total_bytes > 0
    True
    """

    time: float
    pid: int
    resident: ResidentMemory
    config: Config
    managers: ManagerUsage
    spill: SpillUsage

    @property
    def managed_bytes(self) -> int:
        """Live bytes of every managed array, in RAM or on disk.

        Examples
        --------
        >>> import numpy as np, oocarray as oc
        >>> with oc.Manager():
        ...     a = np.ones(1000)
        ...     oc.memory_report().managed_bytes >= 8000
        True
        """
        return self.managers.current_bytes

    def find(self, name: str) -> ManagerUsage:
        """The manager or workspace called ``name`` (or with that path): an open one before a
        closed one that still owns escaped arrays, and the newest of several.

        Parameters
        ----------
        name
            A manager's name, or its path from the system manager (``"System/etl/batch"``).

        Returns
        -------
        ManagerUsage
            That manager's figures at the time of the report.

        Raises
        ------
        KeyError
            No manager of that name or path is in the report.

        Examples
        --------
        >>> import numpy as np, oocarray as oc
        >>> with oc.Manager("etl"):
        ...     a = np.ones(1000)
        ...     usage = oc.memory_report().find("etl")
        >>> (usage.name, usage.current_bytes, usage.count)
        ('etl', 8000, 1)
        """
        found = [u for _, u in self.managers.walk() if name in (u.name, u.path)]
        if not found:
            raise KeyError(f"no manager named {name!r} in the report")
        open_ones = [u for u in found if u.open]
        return (open_ones or found)[-1]

    def to_dict(self) -> dict[str, Any]:
        """Plain data (dicts, lists, numbers, strings), for JSON or logging.

        Returns
        -------
        dict
            The report's fields, nested as dicts, with ``total_bytes``, ``managed_bytes`` and
            ``temporary_bytes`` added.

        Examples
        --------
        >>> import json, oocarray as oc
        >>> data = oc.memory_report().to_dict()
        >>> (data["managers"]["name"], isinstance(json.dumps(data), str))
        ('System', True)
        """
        data = dataclasses.asdict(self)
        data["resident"]["total_bytes"] = self.resident.total_bytes
        data["managed_bytes"] = self.managed_bytes
        data["spill"]["temporary_bytes"] = self.spill.temporary_bytes
        return data

    def __str__(self) -> str:
        r, c, m, s = self.resident, self.config, self.managers, self.spill
        pss = "" if r.pss_bytes is None else f", proportional {format_bytes(r.pss_bytes)}"
        lines = [
            f"oocarray memory report (pid {self.pid}, "
            f"{time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(self.time))})",
            f"Resident memory  {format_bytes(r.total_bytes)}: anonymous "
            f"{format_bytes(r.anon_bytes)}, shared {format_bytes(r.shmem_bytes)}, file-backed "
            f"{format_bytes(r.file_bytes)} (peak {format_bytes(r.peak_bytes)}, swapped "
            f"{format_bytes(r.swap_bytes)}{pss})",
            f"Managed arrays   {format_bytes(m.current_bytes)} in {m.count} arrays: RAM "
            f"{format_bytes(m.ram_bytes)}, placed on disk {format_bytes(m.mmap_bytes)}, "
            f"spilled {format_bytes(m.spilled_bytes)}",
            f"Budgets          max_bytes {_size(c.max_bytes)}, max_physical_bytes "
            f"{_size(c.max_physical_bytes)}, max_spill_bytes {_size(c.max_spill_bytes)}",
            f"Spill directory  {s.directory}: spill files {format_bytes(s.file_bytes)}, "
            f"{len(s.temporaries)} temporary array{'' if len(s.temporaries) == 1 else 's'} "
            f"{format_bytes(s.temporary_bytes)}"
            + ("" if s.free_bytes < 0 else f", {format_bytes(s.free_bytes)} free"),
            "",
            *_tree_lines(m),
        ]
        if s.temporaries:
            lines += ["", "Temporary arrays"]
            lines += [
                f"  {format_bytes(t.stored_bytes):>10}  {t.path}  (owner {t.owner})"
                for t in s.temporaries
            ]
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        return report_html(self)


def memory_report() -> MemoryReport:
    """Take a :class:`MemoryReport` of this process now.

    Reads ``/proc/self/status`` and ``/proc/self/smaps_rollup``, walks the manager tree from
    :func:`oc.system() <oocarray.system>` and lists the spill directory: milliseconds, not
    for a hot loop (:class:`MemoryMonitor` samples cheaply).

    Returns
    -------
    MemoryReport
        The snapshot; ``print`` it for a table, or show it in a notebook.

    Examples
    --------
    >>> import oocarray as oc
    >>> report = oc.memory_report()
    >>> report.managers.name, report.config == oc.config()
    ('System', True)
    >>> print(report)  # doctest: +ELLIPSIS
    oocarray memory report (pid ...)
    Resident memory ...
    """
    return MemoryReport(
        time=time.time(),
        pid=os.getpid(),
        resident=resident_memory(rollup=True),
        config=config(),
        managers=manager_usage(),
        spill=spill_usage(),
    )


def _size(value: int | None) -> str:
    return "none" if value is None else format_bytes(value)


def bar(used: int, limit: int | None, width: int = _BAR_WIDTH) -> str:
    """``[####......]  40%`` of ``limit``, or empty without one."""
    if not limit:
        return ""
    fraction = used / limit
    filled = min(width, round(fraction * width))
    return f"[{'#' * filled}{'.' * (width - filled)}] {fraction:4.0%}"


def _tree_lines(root: ManagerUsage) -> list[str]:
    rows: list[tuple[str, ...]] = []
    prefixes: list[bool] = []  # per depth: whether the ancestor there was a last child
    entries = list(root.walk())
    for i, (depth, u) in enumerate(entries):
        del prefixes[depth:]
        last = not any(d == depth for d, _ in _until_shallower(entries, i + 1, depth))
        if depth == 0:
            lead = ""
        else:
            lead = "".join("   " if done else "│  " for done in prefixes[1:depth])
            lead += "└─ " if last else "├─ "
        prefixes.append(last)
        label = u.name + ("" if u.open else " (closed)")
        if u.kind == "workspace":
            label += f" [workspace: arena {format_bytes(u.arena_bytes or 0)}, {u.cycles} cycles]"
        budget = "" if u.max_bytes is None else format_bytes(u.max_bytes)
        rows.append(
            (
                lead + label,
                format_bytes(u.current_bytes),
                str(u.count),
                format_bytes(u.ram_bytes),
                format_bytes(u.mmap_bytes + u.spilled_bytes),
                format_bytes(u.peak_bytes),
                budget,
                bar(u.ram_bytes, u.max_bytes),
            )
        )
    header = ("Managers", "holds", "arrays", "RAM", "on disk", "peak RAM", "budget", "RAM/budget")
    widths = [max(len(row[k]) for row in [header, *rows]) for k in range(len(header))]
    out = []
    for row in [header, *rows]:
        cells = [row[0].ljust(widths[0])] + [
            cell.rjust(widths[k + 1]) for k, cell in enumerate(row[1:-1])
        ]
        out.append(("  ".join(cells) + "  " + row[-1]).rstrip())
    return out


def _until_shallower(
    entries: list[tuple[int, ManagerUsage]], start: int, depth: int
) -> list[tuple[int, ManagerUsage]]:
    """The entries after ``start`` up to the next one shallower than ``depth``."""
    out = []
    for entry in entries[start:]:
        if entry[0] < depth:
            break
        out.append(entry)
    return out


def report_html(report: MemoryReport) -> str:
    """A memory report: resident memory with a stacked bar, budgets, the tree, the disk."""
    r, c, s = report.resident, report.config, report.spill
    total = max(r.total_bytes, 1)
    parts = [
        ("anonymous", r.anon_bytes, _html.COLORS["ram"]),
        ("shared", r.shmem_bytes, "#72b7b2"),
        ("file-backed", r.file_bytes, _html.COLORS["disk"]),
    ]
    stacked = "".join(
        f"<div title='{_html.escape(name)} {format_bytes(n)}' style='width:{100 * n / total:.1f}%;"
        f"height:100%;background:{color};display:inline-block'></div>"
        for name, n, color in parts
    )
    legend = ", ".join(
        f"<span style='color:{color}'>&#9632;</span> {name} {format_bytes(n)}"
        for name, n, color in parts
    )
    resident = (
        f"<div>Resident memory <b>{format_bytes(r.total_bytes)}</b> (peak "
        f"{format_bytes(r.peak_bytes)}): {legend}</div>"
        f"<div style='width:360px;height:12px;background:{_html.COLORS['empty']};"
        f"font-size:0'>{stacked}</div>"
    )
    budgets = _html.pairs(
        "settings",
        [
            ("max_bytes", "none" if c.max_bytes is None else format_bytes(c.max_bytes)),
            (
                "max_physical_bytes",
                "none" if c.max_physical_bytes is None else format_bytes(c.max_physical_bytes),
            ),
            (
                "max_spill_bytes",
                "none" if c.max_spill_bytes is None else format_bytes(c.max_spill_bytes),
            ),
            ("spill directory", s.directory),
            ("spill files", format_bytes(s.file_bytes)),
            (
                "temporary arrays",
                f"{len(s.temporaries)} ({format_bytes(s.temporary_bytes)} on disk)",
            ),
            ("disk free", "unknown" if s.free_bytes < 0 else format_bytes(s.free_bytes)),
        ],
    )
    return (
        f"<div class='oc-report'><b>oocarray memory report</b> (pid {report.pid}){resident}"
        f"{budgets}{_html.tree_rows(report.managers)}</div>"
    )
