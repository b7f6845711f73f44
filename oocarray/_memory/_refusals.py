"""Budget refusals: the message, and the tree as it was when the handler refused.

NumPy creates its out-of-memory exception after the temporaries of the failed expression were
freed, so the debug dump is taken when the handler is about to refuse, per thread."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from oocarray import _native
from oocarray._memory import _events
from oocarray._memory._gc import collect_garbage_throttled
from oocarray._memory._registry import manager_by_node_id
from oocarray._memory._spill_files import free_spill_bytes
from oocarray._memory._units import format_bytes

__all__ = [
    "DiskRefusal",
    "budget_message",
    "disk_refusal_at_failure",
    "note_disk_refusal",
    "refusal_dump",
    "relieve_pressure",
]


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


@dataclass(frozen=True, slots=True)
class DiskRefusal:
    """The disk as it was when placing an array there failed."""

    node_id: int
    nbytes: int
    free_bytes: int  # free on the spill directory's disk, -1 if unknown
    used_bytes: int  # this process's spill files there
    dump: str | None  # the tree of the refusing (or asked) manager


def note_disk_refusal(node_id: int, refused_id: int, nbytes: int, err: int) -> None:
    """Called by the handler the moment placing ``nbytes`` on disk failed: what is free and
    what is on disk is recorded now, while the arrays alive at the failure still are (NumPy
    frees a failed expression's temporaries before it raises)."""
    tree = manager_by_node_id(refused_id) or manager_by_node_id(node_id)
    _refusals.disk = DiskRefusal(
        node_id,
        nbytes,
        free_spill_bytes(),
        int(_native.spill_used()),
        tree.debug_dump() if tree is not None else None,
    )


def disk_refusal_at_failure(node_id: int, nbytes: int) -> DiskRefusal | None:
    """The record :func:`note_disk_refusal` made for this failure (this thread), or None."""
    last: DiskRefusal | None = getattr(_refusals, "disk", None)
    _refusals.disk = None
    if last is None or (last.node_id, last.nbytes) != (node_id, nbytes):
        return None
    return last
