"""Managers by the id of their native node: the handler reports node ids, Python needs the
manager objects (held weakly: a manager that is gone is not kept alive by being known)."""

from __future__ import annotations

import weakref
from typing import Any

__all__ = ["manager_by_node_id", "open_owner", "register"]

_registry: weakref.WeakValueDictionary[int, Any] = weakref.WeakValueDictionary()


def register(node_id: int, manager: Any) -> None:
    _registry[node_id] = manager


def manager_by_node_id(node_id: int) -> Any:
    return _registry.get(node_id)


def open_owner(node_id: int) -> Any:
    """The manager owning a node's blocks now: the node's manager, or its nearest open
    ancestor once it has closed."""
    m = manager_by_node_id(node_id)
    while m is not None and m.closed:
        m = m.parent
    return m
