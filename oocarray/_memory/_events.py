"""Hooks for the layers above: what happens in the memory layer, and who holds an array.

The memory layer knows nothing of diagnostics; it only calls what was put in these lists.
``listeners`` get ``(kind, manager, details)`` for each event (``manager`` may be ``None`` for
process-wide ones); ``holder_hints`` get ``(obj, ignore_ids)`` and return lines that name what
still references ``obj`` (for leak reports).  Call sites test the list before building
anything (``if _events.listeners: _events.emit(...)``): with nothing registered an event costs
one truth test.  Listeners come and go through :func:`listen` and :func:`unlisten`, which also
tell the native handler whether to call Python at every over-budget allocation (for its
``"over_budget"`` event).  Events of the native allocation path itself are not reported here.

Kinds: ``"manager_opened"``, ``"manager_closed"``, ``"escape"``, ``"cycle_end"``,
``"spill"``, ``"unspill"``, ``"over_budget"``, ``"budget_refusal"``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from oocarray import _native

__all__ = ["emit", "holder_hints", "listen", "listeners", "unlisten"]

Listener = Callable[[str, Any, dict[str, Any]], None]

listeners: list[Listener] = []
holder_hints: list[Callable[[object, set[int]], list[str]]] = []


def listen(listener: Listener) -> None:
    """Add ``listener`` (once)."""
    if listener not in listeners:
        listeners.append(listener)
    _native.set_pressure_quiet(0.0, True)


def unlisten(listener: Listener) -> None:
    """Remove ``listener``, if there."""
    if listener in listeners:
        listeners.remove(listener)
    _native.set_pressure_quiet(0.0, bool(listeners))


def emit(kind: str, manager: Any, **details: Any) -> None:
    """Call every listener with one event (a listener must not raise)."""
    for listener in list(listeners):
        listener(kind, manager, details)
