"""Budget refusals: the message, and the tree as it was when the handler refused.

NumPy creates its out-of-memory exception after the temporaries of the failed expression were
freed, so the debug dump is taken when the handler is about to refuse, per thread."""

from __future__ import annotations

import threading
from typing import Any

from oocarray import _native
from oocarray._memory import _events
from oocarray._memory._gc import collect_garbage_throttled
from oocarray._memory._registry import manager_by_node_id
from oocarray._memory._units import format_bytes

__all__ = ["budget_message", "refusal_dump", "relieve_pressure"]


def budget_message(
    size: int,
    asked: Any,
    refused: Any,
    limit: int,
    used: int,
    dump: str | None = None,
) -> str:
    who = refused.name if refused else "an ancestor"
    where = asked.name if asked else "a manager"
    message = (
        f"cannot allocate {format_bytes(size)} in manager {where!r}: the budget of {who!r} is "
        f"{format_bytes(limit)} and {format_bytes(used)} of it is in use. Free or oc.spill() "
        f"arrays, raise max_bytes, or process the data in smaller pieces."
    )
    tree = refused or asked
    if dump is None and tree is not None:
        dump = tree.debug_dump()
    if dump is not None:
        message += "\n" + dump
    return message


def relieve_pressure(node_id: int, nbytes: int) -> bool:
    """Called by the handler before a budget refusal: collect garbage, at most twice a second;
    True when it ran, so the reservation is worth trying again."""
    collected = collect_garbage_throttled()
    _snapshot_refusal(node_id, nbytes)
    if _events.listeners:
        asked = manager_by_node_id(node_id)
        _events.emit(
            "over_budget",
            asked,
            requested_bytes=nbytes,
            spill=getattr(asked, "spill_policy", None),
        )
    return collected


_refusals = threading.local()


def _snapshot_refusal(node_id: int, nbytes: int) -> None:
    """Record the tree as it is now, when an allocation under a ``spill="fail"`` policy is
    about to be refused (other policies place the array on disk instead: no dump needed)."""
    _refusals.last = None
    asked = manager_by_node_id(node_id)
    if asked is None or asked._node.spill_policy != _native.SPILL_FAIL:
        return
    refusing: Any = asked
    while refusing is not None:
        limit = int(refusing._node.max_bytes)
        if limit >= 0 and refusing._node.counters()["current_bytes"] + nbytes > limit:
            break
        refusing = refusing._parent
    tree = refusing or asked
    _refusals.last = (node_id, nbytes, tree._node.id, tree.debug_dump())


def refusal_dump(node_id: int, nbytes: int, refused_id: int) -> str | None:
    """The dump recorded when this refusal happened (see ``_snapshot_refusal``), or None."""
    last: tuple[int, int, int, str] | None = getattr(_refusals, "last", None)
    _refusals.last = None
    if last is None or last[:3] != (node_id, nbytes, refused_id or last[2]):
        return None
    return last[3]
