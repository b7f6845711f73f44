"""Hooks for the layers above: what happens in the memory layer, and who holds an array.

The memory layer knows nothing of diagnostics; it only calls what was put in these lists.
``listeners`` get ``(kind, manager, details)`` for each event (``manager`` may be ``None`` for
process-wide ones); ``holder_hints`` get ``(obj, ignore_ids)`` and return lines that name what
still references ``obj`` (for leak reports).  Call sites test the list before building
anything (``if _events.listeners: _events.emit(...)``): with nothing registered an event costs
one truth test.  Events of the native allocation path itself are not reported here.

Kinds: ``"manager_opened"``, ``"manager_closed"``, ``"escape"``, ``"cycle_end"``,
``"spill"``, ``"unspill"``, ``"over_budget"``, ``"budget_refusal"``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["emit", "holder_hints", "listeners"]

Listener = Callable[[str, Any, dict[str, Any]], None]

listeners: list[Listener] = []
holder_hints: list[Callable[[object, set[int]], list[str]]] = []


def emit(kind: str, manager: Any, **details: Any) -> None:
    """Call every listener with one event (a listener must not raise)."""
    for listener in list(listeners):
        listener(kind, manager, details)
