"""HTML for notebooks: managers (the tree with bars against budgets), workspaces, chunked
arrays and memory reports.

The classes live in lower layers, which must not import this one: :func:`install` gives them
their ``_repr_html_`` when ``oocarray`` is imported (as ``_compute._ops.install`` gives
chunked arrays their operators).  Every name and path is escaped.
"""

from __future__ import annotations

import html

from oocarray._diagnostics._usage import ManagerUsage, manager_usage
from oocarray._memory import Manager, Workspace, format_bytes
from oocarray._storage import ChunkedArray

__all__ = [
    "COLORS",
    "chunked_html",
    "escape",
    "install",
    "manager_html",
    "pairs",
    "tree_rows",
    "workspace_html",
]

_TABLE = "border-collapse:collapse;font-family:monospace;font-size:12px"
_CELL = "padding:2px 8px;text-align:right;white-space:nowrap"
_LEFT = "padding:2px 8px;text-align:left;white-space:nowrap"
COLORS = {"ram": "#4c78a8", "over": "#e45756", "disk": "#f58518", "empty": "#e8e8e8"}


def escape(text: object) -> str:
    return html.escape(str(text), quote=True)


def _bar(used: int, limit: int | None, title: str) -> str:
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
            f"<td style='{_LEFT};padding-left:{8 + 16 * depth}px'>{name}</td>"
            f"<td style='{_CELL}'>{format_bytes(u.current_bytes)}</td>"
            f"<td style='{_CELL}'>{u.count}</td>"
            f"<td style='{_CELL}'>{format_bytes(u.ram_bytes)}</td>"
            f"<td style='{_CELL}'>{format_bytes(u.mmap_bytes + u.spilled_bytes)}</td>"
            f"<td style='{_CELL}'>{format_bytes(u.peak_bytes)}</td>"
            f"<td style='{_CELL}'>{budget}</td>"
            f"<td style='{_LEFT}'>{_bar(u.ram_bytes, u.max_bytes, title)}</td>"
            "</tr>"
        )
    head = "".join(
        f"<th style='{_CELL if i else _LEFT}'>{h}</th>"
        for i, h in enumerate(
            ("manager", "holds", "arrays", "RAM", "on disk", "peak RAM", "budget", "RAM / budget")
        )
    )
    return f"<table class='oc-managers' style='{_TABLE}'><tr>{head}</tr>{''.join(rows)}</table>"


def pairs(caption: str, items: list[tuple[str, str]]) -> str:
    rows = "".join(
        f"<tr><th style='{_LEFT}'>{escape(k)}</th><td style='{_LEFT}'>{escape(v)}</td></tr>"
        for k, v in items
    )
    return f"<table style='{_TABLE}'><caption>{escape(caption)}</caption>{rows}</table>"


def manager_html(manager: Manager) -> str:
    """The manager and its subtree as an HTML table, with RAM bars against budgets."""
    state = "closed" if manager.closed else "open"
    return (
        f"<div class='oc-manager'><b>oocarray.Manager</b> {escape(repr(manager.name))} ({state})"
        f"{tree_rows(manager_usage(manager))}</div>"
    )


def workspace_html(workspace: Workspace) -> str:
    """The workspace's arena and cycle figures, its policies, and its subtree."""
    s = workspace.stats()
    cfg = workspace.config
    figures = [
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
        f"({state}){pairs('workspace', figures)}{tree_rows(manager_usage(workspace))}</div>"
    )


def chunked_html(array: ChunkedArray) -> str:
    """Shape, dtype, chunks, codec, logical and stored bytes (with a bar), path, format."""
    if array.closed:
        stored = 0
    else:
        try:
            stored = array.stored_bytes()
        except Exception:  # a store that cannot say: the rest of the table is still useful
            stored = 0
    chunks = str(array.chunks) + (f" in shards {array.shards}" if array.shards else "")
    ratio = "" if not stored else f" ({array.nbytes / stored:.1f}x smaller on disk)"
    items = [
        ("shape", str(array.shape)),
        ("dtype", str(array.dtype)),
        ("chunks", chunks),
        ("codec", array.codec),
        ("logical", format_bytes(array.nbytes)),
        ("on disk", format_bytes(stored) + ratio),
        ("format", array.format + (" (temporary)" if array._temporary else "")),
        ("path", array.path),
        ("location", array.location),
        ("mode", "closed" if array.closed else "read-only" if array.readonly else "read-write"),
    ]
    rows = "".join(
        f"<tr><th style='{_LEFT}'>{escape(k)}</th><td style='{_LEFT}'>{escape(v)}</td></tr>"
        for k, v in items
    )
    stored_bar = _bar(stored, array.nbytes or None, "stored bytes against logical bytes")
    return (
        f"<div class='oc-chunked' style='{_TABLE}'><table>"
        f"<caption>oocarray.ChunkedArray</caption>{rows}"
        f"<tr><th style='{_LEFT}'>stored / logical</th><td style='{_LEFT}'>{stored_bar}</td></tr>"
        "</table></div>"
    )


def _manager_repr_html(self: Manager) -> str:
    return manager_html(self)


def _workspace_repr_html(self: Workspace) -> str:
    return workspace_html(self)


def _chunked_repr_html(self: ChunkedArray) -> str:
    return chunked_html(self)


def install() -> None:
    """Give managers, workspaces and chunked arrays their ``_repr_html_``."""
    Manager._repr_html_ = _manager_repr_html  # type: ignore[attr-defined]
    Workspace._repr_html_ = _workspace_repr_html  # type: ignore[attr-defined]
    ChunkedArray._repr_html_ = _chunked_repr_html  # type: ignore[method-assign]
