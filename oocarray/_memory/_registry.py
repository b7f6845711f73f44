"""Managers by the id of their native node: the handler reports node ids, Python needs the
manager objects (held weakly: a manager that is gone is not kept alive by being known); and the
lock that guards the tree's shape."""

from __future__ import annotations

import threading
import weakref
from typing import Any

__all__ = ["manager_by_node_id", "open_owner", "register", "tree_lock"]

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


# Guards the shape of the tree: each manager's list of children, closing, pruning.  Reentrant:
# closing a manager closes its children, and stats are read while a close holds it.
tree_lock = threading.RLock()
