"""Closing a manager: escapes, ghosts, close hooks.

Closing a manager never frees memory under a live array.  Arrays still referenced then are
*escapes*: they stay valid, and count as memory of the parent (``on_close="keep"``), are moved
to disk (``"spill"``), or make the close raise :class:`ScopeLeakError` (``"raise"``).
Internally the closed manager stays in the tree as a *ghost* that keeps owning those blocks
until they are freed, so no counter has to move and frees racing with the close stay exact.
"""

from __future__ import annotations

from typing import Any

from oocarray import _native
from oocarray._memory import _events
from oocarray._memory._activation import nearest_open
from oocarray._memory._escapes import describe_escapes
from oocarray._memory._policies import LOCATIONS, SPILL_POLICIES
from oocarray._memory._refusals import collect_garbage
from oocarray._memory._registry import tree_lock
from oocarray._memory._stats import escapes_of_closed, prune_children
from oocarray._memory._units import format_bytes
from oocarray.errors import ScopeLeakError

__all__ = ["close_manager"]


def close_manager(manager: Any, *, raise_leaks: bool) -> None:
    """Close ``manager`` and its open children (``Manager._close``); with ``raise_leaks``,
    raise :class:`ScopeLeakError` for escapes under ``on_close="raise"``, else only report."""
    if manager._parent is None:
        raise ValueError("the system manager cannot be closed")
    with tree_lock:
        if manager.closed:
            return
        child_errors: list[ScopeLeakError] = []
        for child in manager.children:
            try:
                child._close(raise_leaks=raise_leaks)
            except ScopeLeakError as error:
                child_errors.append(error)
        _become_ghost(manager)
        escaped, escaped_bytes = escapes_of_closed(manager)
        if escaped and manager._on_close == "raise":
            # About to raise: arrays only garbage in reference cycles holds are no escapes,
            # whenever the last collection ran (a throttled one made the error depend on time).
            collect_garbage()
            escaped, escaped_bytes = escapes_of_closed(manager)
        if escaped and manager._on_close == "spill":
            manager._spill_subtree(skip_kept=True)
        hooks, manager._close_hooks = manager._close_hooks, []
        parent = manager._parent
        for hook in reversed(hooks):
            handed = hook()
            if handed is not None:
                escaped, escaped_bytes = escaped + handed[0], escaped_bytes + handed[1]
                parent._escaped += handed[0]
                parent._escaped_bytes += handed[1]
        prune_children(parent)
    if _events.listeners:
        if escaped:
            _events.emit(
                "escape", manager, count=escaped, bytes=escaped_bytes, on_close=manager._on_close
            )
        _events.emit("manager_closed", manager, escaped=escaped, escaped_bytes=escaped_bytes)
    if raise_leaks and escaped and manager._on_close == "raise":
        raise ScopeLeakError(_leak_message(manager, escaped, escaped_bytes))
    if raise_leaks and child_errors:
        raise child_errors[0]


def _become_ghost(manager: Any) -> None:
    """Close: from now on what this subtree still owns belongs to the nearest open
    ancestor, whose policies its nodes take and whose budget alone applies.

    The native node is not marked closed: NumPy's handler may still point at it in
    contexts this thread cannot reach (an asyncio task, a suspended generator), and an
    allocation that arrives there must go on, under the ancestor's policies, rather than
    fail.  ``m.empty()`` and activation check ``Manager.closed`` in Python."""
    manager._budget_when_closed = manager.max_bytes
    manager._closed = True
    heir = nearest_open(manager)
    for m in manager._subtree():
        m._node.max_bytes = -1
        m._node.location = LOCATIONS[heir.location]
        m._node.spill_policy = SPILL_POLICIES[heir.spill_policy]
    if any(_native.get_handler() is m._node.handler for m in manager._subtree()):
        _native.set_handler(heir._node.handler)


def _leak_message(manager: Any, escaped: int, escaped_bytes: int) -> str:
    return describe_escapes(
        f"manager {manager.name!r} closed while {escaped} array(s) of "
        f"{format_bytes(escaped_bytes)} it owns were still referenced. The arrays stay valid; "
        "mark intended escapes with m.keep(arr) or oc.detach(arr), or delete them before the "
        "scope ends.",
        {m._node.id for m in manager._subtree()},
        lambda info: not (info[3] & _native.FLAG_KEPT and info[0] == manager._node.id),
    )
