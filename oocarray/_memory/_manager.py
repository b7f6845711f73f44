"""The tree of memory managers.

A :class:`Manager` owns, counts and budgets every NumPy allocation made while it is active in
the current thread or context (through the native NEP 49 handler), and everything allocated
explicitly with ``m.empty()`` and friends.  Managers form a tree under :func:`system`; a
budget (``max_bytes``) covers a manager and everything below it.

Closing a manager never frees memory under a live array (:mod:`._closing` says how).  What a
manager counts is added up in :mod:`._stats`, its debug dump written by :mod:`._dump`, its
policies named in :mod:`._policies`.  Its methods for activation are in :mod:`._activation`,
for explicit allocation in :mod:`._allocation`, for taking arrays over in :mod:`._ownership`,
and for its counters, spilling and dump in :mod:`._accounting`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any, NoReturn

from oocarray import _native
from oocarray._memory import _config, _events, _physical, _spill_files, _tracing
from oocarray._memory._accounting import ManagerAccounting
from oocarray._memory._activation import ManagerActivation, active, nearest_open
from oocarray._memory._allocation import ManagerAllocation
from oocarray._memory._closing import close_manager
from oocarray._memory._compressed import effective
from oocarray._memory._html import manager_html
from oocarray._memory._ownership import ManagerOwnership
from oocarray._memory._policies import (
    LOCATIONS,
    SPILL_POLICIES,
    Location,
    OnClose,
    SpillPolicy,
    check_policies,
)
from oocarray._memory._registry import register, tree_lock
from oocarray._memory._stats import CUMULATIVE, MemoryStats, prune_children
from oocarray._memory._units import format_bytes, parse_size
from oocarray.errors import ClosedError

__all__ = [
    "Manager",
    "MemoryStats",
    "active_manager",
    "system",
]


class Manager(ManagerActivation, ManagerAllocation, ManagerOwnership, ManagerAccounting):
    """A scope that owns, counts and budgets NumPy memory.

    Parameters
    ----------
    name
        A name for dumps and errors; defaults to ``"manager-<id>"``.
    parent
        The parent manager; defaults to the active manager of this thread, else :func:`system`.
    max_bytes
        RAM budget of this manager and its subtree (int or ``"2G"``-style string), or ``None``.
        A child never gets more than its parent has left.
    location
        Where arrays are placed: ``"ram"``, or ``"mmap"`` for temporary files from the start
        (arrays under one page stay in RAM), or ``"zarr"``: arrays of 1 MiB or more start as
        compressed chunks in a private temporary file (none written yet: they read as zeros),
        touched pages come into RAM and count on the budget, and the manager's spills encode
        them again (smaller arrays are placed as with ``"mmap"``).  Default: the parent's
        (``"ram"`` for the system manager).
    spill
        What an allocation that would exceed the budget does (default: the parent's policy,
        ``"mmap"`` for the system manager): ``"mmap"`` places the new array
        in a temporary file (a page at least: leave the budget some headroom for small
        temporaries, each of which would otherwise get a file); ``"evict"`` first moves this
        budget's oldest arrays to disk
        (oldest allocation first; an unspilled array counts as new), then places the new one
        in RAM if that made room, else in a file; ``"zarr"`` does the same as ``"evict"`` but
        writes the arrays it moves as compressed chunks (byte shuffle + zstd level 1 on every
        core), paged back on touch at the same address (and so does :func:`oocarray.spill` of
        this manager's arrays); ``"fail"`` raises
        :class:`MemoryBudgetError`.  Garbage is collected first (at most twice a second).
    on_close
        What happens to arrays still referenced when the manager closes: ``"keep"`` hands them
        to the parent (counted in ``stats().escaped``), ``"spill"`` does the same and moves
        them to disk, ``"raise"`` raises :class:`ScopeLeakError` naming them.  Either way the
        arrays stay valid.

    Notes
    -----
    What a closed manager still owns (its escapes) belongs to its nearest open ancestor: that
    one's ``spill`` and ``location`` apply when such an array is resized or brought back, and
    the closed manager's own budget no longer does.  A NumPy allocation that reaches a closed
    manager (a generator or an asyncio task still running in a context where it was active)
    goes to its nearest open ancestor the same way; explicit ones (``m.empty``) raise
    :class:`ClosedError`.  Managers cannot be pickled: they own memory of this process.

    Examples
    --------
    >>> import numpy as np
    >>> import oocarray as oc
    >>> with oc.Manager("etl", max_bytes="64M") as m:
    ...     a = np.ones((256, 256))
    ...     oc.owner(a) is m
    True
    >>> m.closed, float(a.sum())
    (True, 65536.0)
    """

    _node: _native.Node
    _name: str
    _parent: Manager | None
    _on_close: str
    _children: list[Manager]

    def __init__(
        self,
        name: str | None = None,
        *,
        parent: Manager | None = None,
        max_bytes: int | str | None = None,
        location: Location | None = None,
        spill: SpillPolicy | None = None,
        on_close: OnClose = "keep",
    ) -> None:
        if name is not None and not isinstance(name, str):
            raise TypeError(f"name must be a str or None, got {name!r}")
        if parent is not None and not isinstance(parent, Manager):
            raise TypeError(f"parent must be a Manager or None, got {parent!r}")
        check_policies(on_close, location, spill)
        budget = parse_size(max_bytes, "max_bytes", allow_none=True)
        if location is not None:
            location = effective(location, "location")  # type: ignore[assignment]
        if spill is not None:
            spill = effective(spill, "spill")  # type: ignore[assignment]
        if parent is None:
            parent = active_manager() or system()
        if parent.closed:
            raise ClosedError(f"cannot create a manager under closed manager {parent.name!r}")
        self._init(
            name,
            parent,
            budget,
            on_close,
            parent.location if location is None else location,
            parent.spill_policy if spill is None else spill,
        )

    def _init(
        self,
        name: str | None,
        parent: Manager | None,
        budget: int | None,
        on_close: str,
        location: str,
        spill: str,
    ) -> None:
        self._node = _native.Node(
            parent._node if parent else None, -1 if budget is None else budget
        )
        self._node.location = LOCATIONS[location]
        self._node.spill_policy = SPILL_POLICIES[spill]
        self._location = location
        self._spill = spill
        self._name = name if name is not None else f"manager-{self._node.id}"
        self._parent = parent
        self._on_close = on_close
        self._children: list[Manager] = []
        self._closed = False
        self._budget_when_closed: int | None = None
        # Escapes that are not ndarrays (temporary chunked arrays), counted by close hooks.
        self._escaped = 0
        self._escaped_bytes = 0
        self._pruned: dict[str, int] = dict.fromkeys(CUMULATIVE, 0)
        self._close_hooks: list[Callable[[], tuple[int, int] | None]] = []
        register(self._node.id, self)
        if parent is not None:
            with tree_lock:
                prune_children(parent)
                parent._children.append(self)
        if _events.listeners:
            _events.emit("manager_opened", self, max_bytes=budget)

    # ---- identity and tree ----

    @property
    def name(self) -> str:
        """The manager's name, as given or ``"manager-<id>"``.

        Examples
        --------
        >>> import oocarray as oc
        >>> with oc.Manager("etl") as m:
        ...     m.name
        'etl'
        """
        return self._name

    @property
    def parent(self) -> Manager | None:
        """The parent manager (``None`` for the system manager).

        Examples
        --------
        >>> import oocarray as oc
        >>> with oc.Manager("outer") as outer, oc.Manager("inner") as inner:
        ...     inner.parent is outer
        True
        """
        return self._parent

    @property
    def children(self) -> tuple[Manager, ...]:
        """The open child managers, oldest first.

        Examples
        --------
        >>> import oocarray as oc
        >>> with oc.Manager("outer") as outer, outer.sub("inner"):
        ...     [child.name for child in outer.children]
        ['inner']
        """
        return tuple(c for c in self._children if not c.closed)

    @property
    def _handler(self) -> object:
        """The NumPy handler capsule that routes allocations here."""
        return self._node.handler

    @property
    def closed(self) -> bool:
        """Whether the manager has closed.

        Examples
        --------
        >>> import oocarray as oc
        >>> with oc.Manager() as m:
        ...     m.closed
        False
        >>> m.closed
        True
        """
        return self._closed

    @property
    def max_bytes(self) -> int | None:
        """The budget of this manager and its subtree, or ``None``.

        For the system manager this is ``oc.config().max_bytes``: setting one sets the other.
        A closed manager keeps reporting its budget, but no longer applies it.  Set it with an
        int or a ``"2G"``-style string.

        Examples
        --------
        >>> import oocarray as oc
        >>> with oc.Manager(max_bytes="1M") as m:
        ...     m.max_bytes = "2M"
        ...     m.max_bytes
        2097152
        """
        if self._closed:
            return self._budget_when_closed
        value = int(self._node.max_bytes)
        return None if value < 0 else value

    @max_bytes.setter
    def max_bytes(self, value: int | str | None) -> None:
        budget = parse_size(value, "max_bytes", allow_none=True)
        if self._parent is None:
            _config.configure(max_bytes=budget)  # one source of truth: oc.config()
        elif self._closed:
            self._budget_when_closed = budget
        else:
            self._node.max_bytes = -1 if budget is None else budget

    def __reduce__(self) -> NoReturn:
        raise TypeError(
            f"oocarray.{type(self).__name__} objects cannot be pickled: a manager owns memory "
            "of this process (NumPy's allocation handler points at it). Pickle the arrays "
            "instead, and create a manager in the other process"
        )

    @property
    def on_close(self) -> str:
        """The close policy: ``"keep"``, ``"spill"`` or ``"raise"``.

        Examples
        --------
        >>> import oocarray as oc
        >>> with oc.Manager(on_close="spill") as m:
        ...     m.on_close
        'spill'
        """
        return self._on_close

    @property
    def location(self) -> str:
        """Where new arrays are placed: ``"ram"``, ``"mmap"`` or ``"zarr"``.

        Examples
        --------
        >>> import oocarray as oc
        >>> with oc.Manager(location="mmap") as m:
        ...     m.location
        'mmap'
        """
        return self._location

    @property
    def spill_policy(self) -> str:
        """What an over-budget allocation does: ``"mmap"``, ``"evict"``, ``"zarr"`` or
        ``"fail"``.

        Examples
        --------
        >>> import oocarray as oc
        >>> with oc.Manager(spill="fail") as m:
        ...     m.spill_policy
        'fail'
        """
        return self._spill

    def _subtree(self) -> Iterator[Manager]:
        yield self
        for child in list(self._children):
            yield from child._subtree()

    def _check_open(self) -> None:
        if self.closed:
            raise ClosedError(
                f"manager {self.name!r} is closed; allocate in an open manager "
                "(its parent, or a new one)"
            )

    # ---- children ----

    def sub(self, name: str | None = None, **kwargs: Any) -> Manager:
        """Create a child scope: ``with m.sub("batch") as s: ...``.

        Parameters
        ----------
        name
            The child's name; defaults to ``"manager-<id>"``.
        **kwargs
            The other arguments of :class:`~oocarray.Manager` (``max_bytes``, ``location``,
            ``spill``, ``on_close``).

        Returns
        -------
        Manager
            The new child manager, open (not yet active).

        Raises
        ------
        ClosedError
            This manager is closed.

        Examples
        --------
        >>> import oocarray as oc
        >>> with oc.Manager("job") as m, m.sub("batch", max_bytes="1M") as s:
        ...     (s.parent is m, s.max_bytes)
        (True, 1048576)
        """
        return Manager(name, parent=self, **kwargs)

    # ---- closing ----

    def _add_close_hook(self, hook: Callable[[], tuple[int, int] | None]) -> None:
        """Run ``hook()`` when this manager closes.  It returns the count and bytes of what it
        handed to the parent as escapes (temporary chunked arrays still referenced), or None."""
        self._close_hooks.append(hook)

    def close(self) -> None:
        """Close the manager (and its open children): it refuses new allocations, and arrays
        still referenced are handled per ``on_close``.  Closing twice does nothing.

        Raises
        ------
        ScopeLeakError
            ``on_close="raise"`` and arrays of this subtree are still referenced.

        Examples
        --------
        >>> import oocarray as oc
        >>> m = oc.Manager()
        >>> m.close()
        >>> m.closed
        True
        """
        self._close(raise_leaks=True)

    def _close(self, *, raise_leaks: bool) -> None:
        close_manager(self, raise_leaks=raise_leaks)

    # ---- presentation ----

    def __repr__(self) -> str:
        s = self._memory_stats()
        state = "closed" if self.closed else "open"
        budget = "" if s.max_bytes is None else f", max_bytes={format_bytes(s.max_bytes)}"
        return (
            f"<oocarray.Manager {self.name!r} {state}: {format_bytes(s.current_bytes)} in "
            f"{s.current_count} arrays{budget}>"
        )

    def _repr_html_(self) -> str:
        """The manager and its subtree as an HTML table, with RAM bars against budgets."""
        with tree_lock:
            return manager_html(self)


_system: Manager | None = None
_system_lock = threading.Lock()


def system() -> Manager:
    """The root ("System") manager; its budget is ``oc.config().max_bytes``.

    Returns
    -------
    Manager
        The one system manager of this process, created on first use.

    Examples
    --------
    >>> import oocarray as oc
    >>> oc.system().name
    'System'
    """
    global _system
    if _system is None:
        with _system_lock:
            if _system is None:
                root = Manager.__new__(Manager)
                root._init("System", None, None, "keep", "ram", "mmap")
                _system = root
                _config.on_change(_apply_config)
    return _system


def _apply_config(settings: _config.Config) -> None:
    root = system()
    root._node.max_bytes = -1 if settings.max_bytes is None else settings.max_bytes
    _spill_files.apply_settings(settings)
    _physical.apply_settings(settings)
    if settings.trace:
        _tracing.enable()
    else:
        _tracing.disable()


def active_manager() -> Manager | None:
    """The manager active in the current thread/context, or ``None``.

    When the manager activated last has closed since (its block ended while this context
    went on, as a generator or an asyncio task may), its nearest open ancestor is active."""
    top = active()
    return None if top is None else nearest_open(top)  # type: ignore[return-value]
