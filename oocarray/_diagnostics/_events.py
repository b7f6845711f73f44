"""Listeners on manager and workspace events: :func:`on_event` and :func:`remove_listener`.

One dispatcher sits in the memory layer's hook list (``_memory._events.listeners``) while at
least one listener is registered, and none otherwise, so that events cost nothing when nobody
listens.  Events are delivered in the thread where they happen, in order; an event raised
while a listener runs in the same thread (the listener allocates over a budget, say) is
delivered after it returns, never inside it.
"""

from __future__ import annotations

import threading
import time
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from oocarray._memory import Workspace, _events

__all__ = ["EVENT_KINDS", "MemoryEvent", "on_event", "remove_listener"]

EVENT_KINDS = (
    "manager_opened",
    "manager_closed",
    "escape",
    "cycle_end",
    "spill",
    "unspill",
    "over_budget",
    "budget_refusal",
)


@dataclass(frozen=True, slots=True)
class MemoryEvent:
    """Something that happened to a manager or a workspace, as listeners registered with
    :func:`on_event` receive it; every field is also an attribute.

    Parameters
    ----------
    kind
        ``"manager_opened"``, ``"manager_closed"`` (details ``escaped``, ``escaped_bytes``),
        ``"escape"`` (arrays outlived a scope or a cycle: ``count``, and ``bytes`` or
        ``cycle``), ``"cycle_end"`` (a workspace cycle ended: ``cycle``, ``requested_bytes``,
        ``arena_bytes``, ``next_arena_bytes``, ``overflowed``, ``escaped``,
        ``external_allocations``), ``"spill"`` / ``"unspill"`` (``bytes`` moved; a spill's
        ``reason``: ``"array"``, ``"manager"``, ``"on_close"``, ``"max_physical_bytes"``),
        ``"over_budget"`` (an allocation did not fit the budget: ``requested_bytes`` and the
        ``spill`` policy that decides what happens next), ``"budget_refusal"`` (a
        :class:`MemoryBudgetError` is raised: ``requested_bytes``, ``refused``,
        ``limit_bytes``, ``used_bytes``).
    manager
        The name of the manager or workspace, ``""`` for process-wide events.
    path
        Its place in the tree, e.g. ``"System/etl/batch"``.
    workspace
        Whether it is a workspace.
    time
        ``time.time()`` when the event was delivered.
    thread
        The name of the thread where it happened.
    details
        The kind's figures (read-only mapping).

    Examples
    --------
    >>> import numpy as np, oocarray as oc
    >>> events = []
    >>> listener = oc.on_event(events.append, "spill")
    >>> with oc.Manager("etl") as m:
    ...     a = np.ones(1_000_000)
    ...     _ = m.spill()
    >>> oc.remove_listener(listener)
    >>> e = events[0]
    >>> (e.kind, e.path, e.workspace, e.details["bytes"], e.details["reason"])
    ('spill', 'System/etl', False, 8000000, 'manager')
    """

    kind: str
    manager: str
    path: str
    workspace: bool
    time: float
    thread: str
    details: Mapping[str, Any] = field(default_factory=dict)

    def __str__(self) -> str:
        figures = ", ".join(f"{k}={v!r}" for k, v in self.details.items())
        return f"{self.kind} {self.path or '(process)'}" + (f": {figures}" if figures else "")


Callback = Callable[[MemoryEvent], object]

_lock = threading.Lock()
_callbacks: list[tuple[Callback, frozenset[str] | None]] = []
_local = threading.local()


def on_event(callback: Callback, kinds: str | tuple[str, ...] | None = None) -> Callback:
    """Call ``callback(event)`` for every :class:`MemoryEvent` (of ``kinds``, if given).

    The callback runs in the thread where the event happens, so it should be quick; an
    exception it raises is reported as a :class:`RuntimeWarning`, never passed to the code
    that caused the event.

    Parameters
    ----------
    callback : callable
        Called with each :class:`MemoryEvent`.
    kinds : str or tuple of str, optional
        Only events of these kinds (``"spill"``, ``("escape", "cycle_end")``); default: all.

    Returns
    -------
    callable
        ``callback`` itself, so ``on_event`` can be used as a decorator.

    Raises
    ------
    TypeError
        ``callback`` is not callable.
    ValueError
        An unknown kind.

    Examples
    --------
    >>> import numpy as np, oocarray as oc
    >>> seen = []
    >>> listener = oc.on_event(lambda e: seen.append((e.kind, e.manager)))
    >>> with oc.Manager("job"):
    ...     pass
    >>> oc.remove_listener(listener)
    >>> seen
    [('manager_opened', 'job'), ('manager_closed', 'job')]
    """
    if not callable(callback):
        raise TypeError(f"callback must be callable, got {callback!r}")
    wanted: frozenset[str] | None = None
    if kinds is not None:
        wanted = frozenset((kinds,) if isinstance(kinds, str) else kinds)
        unknown = wanted - set(EVENT_KINDS)
        if unknown:
            raise ValueError(
                f"unknown event kinds {sorted(unknown)}; expected some of {EVENT_KINDS}"
            )
    with _lock:
        _callbacks.append((callback, wanted))
        _events.listen(_dispatch)
    return callback


def remove_listener(callback: Callback) -> None:
    """Stop calling ``callback`` (registered with :func:`on_event`); unknown ones are ignored.

    Parameters
    ----------
    callback : callable
        The listener given to :func:`on_event`.

    Examples
    --------
    >>> import oocarray as oc
    >>> seen = []
    >>> listener = oc.on_event(seen.append)
    >>> oc.remove_listener(listener)
    >>> with oc.Manager("job"):
    ...     pass
    >>> seen
    []
    """
    with _lock:
        _callbacks[:] = [entry for entry in _callbacks if entry[0] is not callback]
        if not _callbacks:
            _events.unlisten(_dispatch)


def _path(manager: Any) -> str:
    names: list[str] = []
    m = manager
    while m is not None and len(names) < 64:
        names.append(str(m.name))
        m = m.parent
    return "/".join(reversed(names))


def _dispatch(kind: str, manager: Any, details: dict[str, Any]) -> None:
    event = MemoryEvent(
        kind=kind,
        manager="" if manager is None else str(manager.name),
        path="" if manager is None else _path(manager),
        workspace=isinstance(manager, Workspace),
        time=time.time(),
        thread=threading.current_thread().name,
        details=MappingProxyType(dict(details)),
    )
    pending: list[MemoryEvent] | None = getattr(_local, "pending", None)
    if pending is not None:  # inside a listener of this thread: deliver after it
        pending.append(event)
        return
    pending = _local.pending = [event]
    try:
        while pending:
            _deliver(pending.pop(0))
    finally:
        _local.pending = None


def _deliver(event: MemoryEvent) -> None:
    with _lock:
        callbacks = list(_callbacks)
    for callback, wanted in callbacks:
        if wanted is not None and event.kind not in wanted:
            continue
        try:
            callback(event)
        except Exception as error:
            warnings.warn(
                f"oocarray event listener {callback!r} raised {type(error).__name__}: {error} "
                f"(event {event.kind!r}); the event was delivered to the other listeners",
                RuntimeWarning,
                stacklevel=2,
            )
