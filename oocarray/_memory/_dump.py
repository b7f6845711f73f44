"""A manager's subtree as text (``m.debug_dump()``, and the tree in budget errors)."""

from __future__ import annotations

from typing import Any

from oocarray._memory import _tracing
from oocarray._memory._units import format_bytes

__all__ = ["dump_lines"]


def dump_lines(manager: Any, lines: list[str], first: str, rest: str, tracing: bool) -> None:
    """Append one line per manager of the subtree (``first`` before this one's, ``rest``
    before its children's), with its live traced allocations when ``tracing``.  The caller
    holds the tree lock."""
    s = manager._memory_stats()
    state = "closed" if manager.closed else "open"
    budget = ""
    if s.max_bytes is not None:
        budget = f", RAM {format_bytes(s.ram_bytes)} of budget {format_bytes(s.max_bytes)}"
    extra = ""
    if s.escaped:
        extra += f", escaped into it {s.escaped} ({format_bytes(s.escaped_bytes)})"
    if s.kept:
        extra += f", kept {s.kept}"
    if s.mmap_bytes or s.spilled_bytes or s.spills:
        extra += (
            f"; RAM {format_bytes(s.ram_bytes)}, mmap {format_bytes(s.mmap_bytes)}, "
            f"spilled {format_bytes(s.spilled_bytes)}, spills {s.spills} "
            f"({format_bytes(s.spill_moved_bytes)}), unspills {s.unspills} "
            f"({format_bytes(s.unspill_moved_bytes)})"
        )
    lines.append(
        f"{first}{manager.name} [{state}] {format_bytes(s.current_bytes)} in "
        f"{s.current_count} arrays{budget} (own {format_bytes(s.own_bytes)} in {s.own_count}), "
        f"peak {format_bytes(s.peak_bytes)}, total {format_bytes(s.total_bytes)} in "
        f"{s.total_count}{extra}{manager._dump_extra()}"
    )
    if tracing:
        for record in _tracing.records_owned_by({manager._node.id})[:10]:
            lines.append(f"{rest}  * {format_bytes(record.size)} allocated at:")
            lines.append(record.format(rest + "      "))
    children = list(manager._children)
    for i, child in enumerate(children):
        last = i == len(children) - 1
        branch, below = ("└─ ", "   ") if last else ("├─ ", "│  ")
        dump_lines(child, lines, rest + branch, rest + below, tracing)
