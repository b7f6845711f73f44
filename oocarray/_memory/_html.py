"""HTML for notebooks: managers (the tree with bars against budgets) and workspaces, and the
styling the other layers' HTML shares (tables, bars, escaping).

``Manager._repr_html_`` and ``Workspace._repr_html_`` call these with the manager tree's lock
held.  Every name and path is escaped.
"""

from __future__ import annotations

import html
from typing import Protocol

from oocarray._memory._units import format_bytes
from oocarray._memory._usage import ManagerUsage, TreeNode, WorkspaceFigures, usage_tree

__all__ = [
    "CELL",
    "COLORS",
    "LEFT",
    "TABLE",
    "bar",
    "escape",
    "manager_html",
    "pairs",
    "tree_rows",
    "workspace_html",
]

TABLE = "border-collapse:collapse;font-family:monospace;font-size:12px"
CELL = "padding:2px 8px;text-align:right;white-space:nowrap"
LEFT = "padding:2px 8px;text-align:left;white-space:nowrap"
COLORS = {"ram": "#4c78a8", "over": "#e45756", "disk": "#f58518", "empty": "#e8e8e8"}


def escape(text: object) -> str:
    return html.escape(str(text), quote=True)


def bar(used: int, limit: int | None, title: str) -> str:
    """A horizontal bar: ``used`` against ``limit`` (red past it)."""
    if not limit:
        return "<span style='color:#888'>no budget</span>"
    fraction = used / limit
    width = max(0.0, min(1.0, fraction)) * 100
    color = COLORS["over"] if fraction > 1 else COLORS["ram"]
    return (
        f"<div class='oc-bar' title='{escape(title)}' style='display:inline-block;width:120px;"
        f"height:10px;background:{COLORS['empty']};vertical-align:middle'>"
        f"<div style='width:{width:.1f}%;height:100%;background:{color}'></div></div>"
        f" {fraction:.0%}"
    )


def tree_rows(root: ManagerUsage) -> str:
    rows = []
    for depth, u in root.walk():
        name = escape(u.name)
        if u.kind == "workspace":
            name += " <i style='color:#888'>workspace</i>"
        if not u.open:
            name += " <i style='color:#888'>(closed)</i>"
        budget = "" if u.max_bytes is None else format_bytes(u.max_bytes)
        title = f"{u.path}: RAM {format_bytes(u.ram_bytes)} of {budget or 'no budget'}"
        rows.append(
            "<tr>"
            f"<td style='{LEFT};padding-left:{8 + 16 * depth}px'>{name}</td>"
            f"<td style='{CELL}'>{format_bytes(u.current_bytes)}</td>"
            f"<td style='{CELL}'>{u.count}</td>"
            f"<td style='{CELL}'>{format_bytes(u.ram_bytes)}</td>"
            f"<td style='{CELL}'>{format_bytes(u.mmap_bytes + u.spilled_bytes)}</td>"
            f"<td style='{CELL}'>{format_bytes(u.peak_bytes)}</td>"
            f"<td style='{CELL}'>{budget}</td>"
            f"<td style='{LEFT}'>{bar(u.ram_bytes, u.max_bytes, title)}</td>"
            "</tr>"
        )
    head = "".join(
        f"<th style='{CELL if i else LEFT}'>{h}</th>"
        for i, h in enumerate(
            ("manager", "holds", "arrays", "RAM", "on disk", "peak RAM", "budget", "RAM / budget")
        )
    )
    return f"<table class='oc-managers' style='{TABLE}'><tr>{head}</tr>{''.join(rows)}</table>"


def pairs(caption: str, items: list[tuple[str, str]]) -> str:
    rows = "".join(
        f"<tr><th style='{LEFT}'>{escape(k)}</th><td style='{LEFT}'>{escape(v)}</td></tr>"
        for k, v in items
    )
    return f"<table style='{TABLE}'><caption>{escape(caption)}</caption>{rows}</table>"


def manager_html(manager: TreeNode) -> str:
    """The manager and its subtree as an HTML table, with RAM bars against budgets."""
    state = "closed" if manager.closed else "open"
    return (
        f"<div class='oc-manager'><b>oocarray.Manager</b> {escape(repr(manager.name))} ({state})"
        f"{tree_rows(usage_tree(manager))}</div>"
    )


class Policies(Protocol):
    """A workspace's configuration, as its HTML shows it."""

    @property
    def learning(self) -> str: ...
    @property
    def allocation(self) -> str: ...
    @property
    def spill(self) -> str: ...
    @property
    def location(self) -> str | None: ...
    @property
    def on_escape(self) -> str: ...


def workspace_html(workspace: TreeNode, figures: WorkspaceFigures, config: Policies) -> str:
    """The workspace's arena and cycle figures (its ``stats()``), its policies, and its
    subtree."""
    s = figures
    cfg = config
    items = [
        ("arena", format_bytes(s.size_bytes)),
        ("learned cycle size", format_bytes(s.learned_bytes)),
        ("cycles", str(s.cycles)),
        ("arena allocations", str(s.arena_allocations)),
        ("external allocations", str(s.external_allocations)),
        ("escapes", str(s.escapes)),
        ("pinned", format_bytes(s.pinned_bytes)),
        (
            "policies",
            f"learning={cfg.learning}, allocation={cfg.allocation}, spill={cfg.spill}, "
            f"location={cfg.location}, on_escape={cfg.on_escape}",
        ),
    ]
    state = "closed" if workspace.closed else "open"
    return (
        f"<div class='oc-workspace'><b>oocarray.Workspace</b> {escape(repr(workspace.name))} "
        f"({state}){pairs('workspace', items)}{tree_rows(usage_tree(workspace))}</div>"
    )
