"""The tree of memory managers.

A :class:`Manager` owns, counts and budgets every NumPy allocation made while it is active in
the current thread or context (through the native NEP 49 handler), and everything allocated
explicitly with ``m.empty()`` and friends.  Managers form a tree under :func:`system`; a
budget (``max_bytes``) covers a manager and everything below it.

Closing a manager never frees memory under a live array.  Arrays still referenced then are
*escapes*: they stay valid, and count as memory of the parent (``on_close="keep"``) or make
the close raise :class:`ScopeLeakError` (``on_close="raise"``).  Internally the closed manager
stays in the tree as a *ghost* that keeps owning those blocks until they are freed, so no
counter has to move and frees racing with the close stay exact.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Iterator
from types import TracebackType
from typing import Any, Literal, NoReturn, Self

import numpy as np
import numpy.typing as npt

from oocarray import _native
from oocarray._memory import _config, _events, _physical, _spill_files, _tracing
from oocarray._memory._activation import Activation, active, exit_entered, nearest_open
from oocarray._memory._compressed import effective
from oocarray._memory._escapes import describe_escapes
from oocarray._memory._gc import collect_garbage_throttled
from oocarray._memory._html import manager_html
from oocarray._memory._refusals import budget_message, note_disk_refusal, relieve_pressure
from oocarray._memory._registry import manager_by_node_id, open_owner, register
from oocarray._memory._shapes import parse_shape
from oocarray._memory._stats import CUMULATIVE, SUMMED, MemoryStats
from oocarray._memory._units import format_bytes, parse_size
from oocarray.errors import ClosedError, MemoryBudgetError, ScopeLeakError

__all__ = [
    "Manager",
    "MemoryStats",
    "active_manager",
    "manager_by_node_id",
    "require_array",
    "system",
]

OnClose = Literal["keep", "spill", "raise"]
SpillPolicy = Literal["mmap", "evict", "zarr", "fail"]
Location = Literal["ram", "mmap", "zarr"]
_ON_CLOSE: tuple[str, ...] = ("keep", "spill", "raise")
_SPILL_POLICIES = {
    "mmap": _native.SPILL_MMAP,
    "evict": _native.SPILL_EVICT,
    "zarr": _native.SPILL_ZARR,
    "fail": _native.SPILL_FAIL,
}
_LOCATIONS = {
    "ram": _native.LOCATION_RAM,
    "mmap": _native.LOCATION_MMAP,
    "zarr": _native.LOCATION_ZARR,
}

_tree_lock = threading.RLock()


class Manager:
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
        if not isinstance(on_close, str) or on_close not in _ON_CLOSE:
            raise ValueError(f"on_close must be one of {_ON_CLOSE}, got {on_close!r}")
        if location is not None and (not isinstance(location, str) or location not in _LOCATIONS):
            raise ValueError(
                f"location must be one of {tuple(_LOCATIONS)} or None (the parent's), "
                f"got {location!r}"
            )
        if spill is not None and (not isinstance(spill, str) or spill not in _SPILL_POLICIES):
            raise ValueError(
                f"spill must be one of {tuple(_SPILL_POLICIES)} or None (the parent's), "
                f"got {spill!r}"
            )
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
        self._node.location = _LOCATIONS[location]
        self._node.spill_policy = _SPILL_POLICIES[spill]
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
            with _tree_lock:
                parent._prune_children()
                parent._children.append(self)
        if _events.listeners:
            _events.emit("manager_opened", self, max_bytes=budget)

    # ---- identity and tree ----

    @property
    def name(self) -> str:
        """The manager's name."""
        return self._name

    @property
    def parent(self) -> Manager | None:
        """The parent manager (``None`` for the system manager)."""
        return self._parent

    @property
    def children(self) -> tuple[Manager, ...]:
        """Open child managers."""
        return tuple(c for c in self._children if not c.closed)

    @property
    def _handler(self) -> object:
        """The NumPy handler capsule that routes allocations here."""
        return self._node.handler

    @property
    def closed(self) -> bool:
        """Whether the manager has closed."""
        return self._closed

    @property
    def max_bytes(self) -> int | None:
        """The budget of this manager and its subtree, or ``None``.

        For the system manager this is ``oc.config().max_bytes``: setting one sets the other.
        A closed manager keeps reporting its budget, but no longer applies it.
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
        """The close policy: ``"keep"``, ``"spill"`` or ``"raise"``."""
        return self._on_close

    @property
    def location(self) -> str:
        """Where new arrays are placed: ``"ram"``, ``"mmap"`` or ``"zarr"``."""
        return self._location

    @property
    def spill_policy(self) -> str:
        """What an over-budget allocation does: ``"mmap"``, ``"evict"``, ``"zarr"`` or
        ``"fail"``."""
        return self._spill

    def _subtree(self) -> Iterator[Manager]:
        yield self
        for child in list(self._children):
            yield from child._subtree()

    def _prune_children(self) -> None:
        """Forget closed children that own nothing any more, keeping their totals."""
        keep = []
        for child in self._children:
            if (
                child.closed
                and child._node.counters()["live_count"] == 0
                and not child._children
                and not _handler_in_use(child)
            ):
                counters = child._node.counters()
                for key in CUMULATIVE:
                    self._pruned[key] += counters[key] + child._pruned[key]  # type: ignore[literal-required]
            else:
                keep.append(child)
        self._children = keep

    def _check_open(self) -> None:
        if self.closed:
            raise ClosedError(
                f"manager {self.name!r} is closed; allocate in an open manager "
                "(its parent, or a new one)"
            )

    # ---- activation ----

    def activate(self) -> Activation:
        """Make this manager active in the current thread without closing it on exit.

        Examples
        --------
        >>> import threading, numpy as np, oocarray as oc
        >>> m = oc.Manager("shared")
        >>> def work():
        ...     with m.activate():
        ...         np.empty(1000)
        >>> t = threading.Thread(target=work); t.start(); t.join()
        >>> m.stats().total_bytes
        8000
        >>> m.close()
        """
        return Activation(self)

    def __enter__(self) -> Self:
        Activation(self, from_enter=True).__enter__()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        exit_entered(self)
        # An escape report must not hide the exception that is already propagating.
        self._close(raise_leaks=exc_type is None)

    def sub(self, name: str | None = None, **kwargs: Any) -> Manager:
        """Create a child scope: ``with m.sub("batch") as s: ...``."""
        return Manager(name, parent=self, **kwargs)

    # ---- explicit allocation ----

    def empty(self, shape: object, dtype: npt.DTypeLike = float, *, order: str = "C") -> np.ndarray:
        """A new uninitialised array owned by this manager (like :func:`numpy.empty`)."""
        dims = parse_shape(shape)
        self._check_open()
        with self.activate():
            return np.empty(dims, dtype=dtype, order=order)  # type: ignore[call-overload,no-any-return]

    def zeros(self, shape: object, dtype: npt.DTypeLike = float, *, order: str = "C") -> np.ndarray:
        """A new zero-filled array owned by this manager (like :func:`numpy.zeros`)."""
        dims = parse_shape(shape)
        self._check_open()
        with self.activate():
            return np.zeros(dims, dtype=dtype, order=order)  # type: ignore[call-overload,no-any-return]

    def full(
        self,
        shape: object,
        fill_value: object,
        dtype: npt.DTypeLike | None = None,
        *,
        order: str = "C",
    ) -> np.ndarray:
        """A new array filled with ``fill_value``, owned by this manager."""
        dims = parse_shape(shape)
        self._check_open()
        with self.activate():
            return np.full(dims, fill_value, dtype=dtype, order=order)  # type: ignore[call-overload,no-any-return]

    def asarray(self, obj: object, dtype: npt.DTypeLike | None = None) -> np.ndarray:
        """``obj`` as an array owned by this manager: the array itself if it already is one,
        else a copy made in this manager."""
        self._check_open()
        if isinstance(obj, np.ndarray) and (dtype is None or obj.dtype == np.dtype(dtype)):
            info = _native.block_info(obj)
            if info is not None and info[0] == self._node.id:
                return obj
        with self.activate():
            return np.array(obj, dtype=dtype, copy=True)

    # ---- ownership ----

    def _owns_in_subtree(self, node_id: int) -> bool:
        return any(m._node.id == node_id for m in self._subtree())

    def _transfer(self, arr: np.ndarray, *, kept: bool) -> None:
        refused = _native.transfer(arr, self._node, kept)
        if refused is not None:
            refused_id, limit, used = refused
            info = _native.block_info(arr)
            size = info[2] if info else arr.nbytes
            if _events.listeners:
                _events.emit(
                    "budget_refusal",
                    self,
                    requested_bytes=size,
                    refused=getattr(manager_by_node_id(refused_id), "name", None),
                    limit_bytes=limit,
                    used_bytes=used,
                )
            raise MemoryBudgetError(
                budget_message(size, self, manager_by_node_id(refused_id), limit, used)
            )
        info = _native.block_info(arr)
        if info is not None:
            _tracing.set_owner(info[1], self._node.id)

    def attach(self, arr: np.ndarray) -> np.ndarray:
        """Take ownership of a managed array (counted against this manager's budget).

        Raises
        ------
        ValueError
            ``arr`` was not allocated by oocarray; copy it in with :meth:`asarray`.
        MemoryBudgetError
            The array does not fit in this manager's budget.
        """
        require_array(arr, "attach")
        self._check_open()
        if _native.block_info(arr) is None:
            raise ValueError(
                "attach() takes arrays allocated by oocarray; this one was not, "
                "so copy it in with m.asarray(arr)"
            )
        self._transfer(arr, kept=False)
        return arr

    def keep(self, arr: np.ndarray) -> np.ndarray:
        """Mark ``arr`` as an intended escape: it is handed to the parent when this manager
        closes, without counting as a leak.

        Raises
        ------
        ValueError
            ``arr`` is not owned by this manager or one of its descendants.
        """
        require_array(arr, "keep")
        info = _native.block_info(arr)
        if info is None or not self._owns_in_subtree(info[0]):
            holder = None if info is None else open_owner(info[0])
            raise ValueError(
                f"keep() takes arrays owned by manager {self.name!r} or its children; this one "
                f"is owned by {holder.name if holder else 'no manager'!r}"
            )
        self._transfer(arr, kept=True)
        return arr

    # ---- accounting ----

    def stats(self) -> MemoryStats:
        """Counters of this manager and its subtree (see :class:`MemoryStats`)."""
        return self._memory_stats()

    def _memory_stats(self) -> MemoryStats:
        with _tree_lock:
            counters = self._node.counters()
            totals = dict.fromkeys(SUMMED, 0)
            open_children = [c for c in self._children if not c.closed]
            open_below: set[int] = {id(d) for c in open_children for d in c._subtree()}
            own_count = 0
            own_disk = 0
            for m in self._subtree():
                c = m._node.counters()
                for key in SUMMED:
                    totals[key] += c[key]  # type: ignore[literal-required]
                for key in CUMULATIVE:
                    totals[key] += m._pruned[key]
                if id(m) not in open_below:
                    own_count += c["live_count"]
                    own_disk += c["spilled_bytes"] + c["mapped_bytes"]
            escaped, escaped_bytes = self._escaped_now()
            ram = counters["current_bytes"]
            own_ram = ram - sum(c._node.counters()["current_bytes"] for c in open_children)
            return MemoryStats(
                name=self.name,
                current_bytes=ram + totals["mapped_bytes"] + totals["spilled_bytes"],
                current_count=totals["live_count"],
                peak_bytes=counters["peak_bytes"],
                total_bytes=totals["total_bytes"],
                total_count=totals["total_count"],
                own_bytes=own_ram + own_disk,
                own_count=own_count,
                max_bytes=self.max_bytes,
                ram_bytes=ram,
                mmap_bytes=totals["mapped_bytes"],
                spilled_bytes=totals["spilled_bytes"],
                escaped=escaped,
                escaped_bytes=escaped_bytes,
                kept=counters["kept_count"],
                kept_bytes=counters["kept_bytes"],
                spills=totals["spill_count"],
                spill_moved_bytes=totals["spill_moved_bytes"],
                unspills=totals["unspill_count"],
                unspill_moved_bytes=totals["unspill_moved_bytes"],
                compressed_bytes=totals["compressed_bytes"],
                compressed_disk_bytes=totals["compressed_disk_bytes"],
            )

    def _add_close_hook(self, hook: Callable[[], tuple[int, int] | None]) -> None:
        """Run ``hook()`` when this manager closes.  It returns the count and bytes of what it
        handed to the parent as escapes (temporary chunked arrays still referenced), or None."""
        self._close_hooks.append(hook)

    def spill(self) -> int:
        """Move every array of this manager's subtree to disk, at the same addresses.

        Arrays under the region threshold (256 KiB) stay in RAM.  Returns the bytes moved.

        Raises
        ------
        SpillError
            The disk refused (``errno`` says why; ``ENOSPC`` when full); arrays moved before
            the failure stay on disk, the others stay in RAM, all stay valid.
        """
        return self._spill_subtree(skip_kept=False)

    def _spill_subtree(self, *, skip_kept: bool) -> int:
        try:
            moved = int(_native.spill_subtree(self._node, skip_kept))
        except OSError as error:
            raise _spill_files.spill_error(
                error, f"spilling manager {self.name!r}", self.stats().ram_bytes
            ) from error
        if moved and _events.listeners:
            _events.emit("spill", self, bytes=moved, reason="on_close" if skip_kept else "manager")
        return moved

    def reset_peak(self) -> None:
        """Restart peak tracking from the current bytes."""
        self._node.reset_peak()

    def debug_dump(self) -> str:
        """The subtree as text: per manager, its state, bytes, counts and budget.

        With ``oc.configure(trace=True)``, live traced allocations are listed with the place
        they were made.
        """
        lines: list[str] = []
        tracing = _config.config().trace
        with _tree_lock:
            self._dump_into(lines, "", "", tracing)
        return "\n".join(lines)

    def _dump_extra(self) -> str:
        return ""

    def _dump_into(self, lines: list[str], first: str, rest: str, tracing: bool) -> None:
        s = self._memory_stats()
        state = "closed" if self.closed else "open"
        budget = ""
        if s.max_bytes is not None:
            budget = f", RAM {format_bytes(s.ram_bytes)} of budget {format_bytes(s.max_bytes)}"
        extra = ""
        if s.escaped:
            extra += f", escaped into it {s.escaped} ({format_bytes(s.escaped_bytes)})"
        if s.kept:
            extra += f", kept {s.kept}"
        if s.mmap_bytes or s.spilled_bytes or s.spills:
            extra += (
                f"; RAM {format_bytes(s.ram_bytes)}, mmap {format_bytes(s.mmap_bytes)}, "
                f"spilled {format_bytes(s.spilled_bytes)}, spills {s.spills} "
                f"({format_bytes(s.spill_moved_bytes)}), unspills {s.unspills} "
                f"({format_bytes(s.unspill_moved_bytes)})"
            )
        lines.append(
            f"{first}{self.name} [{state}] {format_bytes(s.current_bytes)} in "
            f"{s.current_count} arrays{budget} (own {format_bytes(s.own_bytes)} in {s.own_count}), "
            f"peak {format_bytes(s.peak_bytes)}, total {format_bytes(s.total_bytes)} in "
            f"{s.total_count}{extra}{self._dump_extra()}"
        )
        if tracing:
            for record in _tracing.records_owned_by({self._node.id})[:10]:
                lines.append(f"{rest}  * {format_bytes(record.size)} allocated at:")
                lines.append(record.format(rest + "      "))
        children = list(self._children)
        for i, child in enumerate(children):
            last = i == len(children) - 1
            child._dump_into(
                lines, rest + ("└─ " if last else "├─ "), rest + ("   " if last else "│  "), tracing
            )

    # ---- closing ----

    def close(self) -> None:
        """Close the manager (and its open children): it refuses new allocations, and arrays
        still referenced are handled per ``on_close``.  Closing twice does nothing."""
        self._close(raise_leaks=True)

    def _close(self, *, raise_leaks: bool) -> None:
        if self._parent is None:
            raise ValueError("the system manager cannot be closed")
        with _tree_lock:
            if self.closed:
                return
            child_errors: list[ScopeLeakError] = []
            for child in self.children:
                try:
                    child._close(raise_leaks=raise_leaks)
                except ScopeLeakError as error:
                    child_errors.append(error)
            self._become_ghost()
            escaped, escaped_bytes = self._escapes()
            if escaped and self._on_close == "raise":
                collect_garbage_throttled()
                escaped, escaped_bytes = self._escapes()
            if escaped and self._on_close == "spill":
                self._spill_subtree(skip_kept=True)
            hooks, self._close_hooks = self._close_hooks, []
            parent = self._parent
            for hook in reversed(hooks):
                handed = hook()
                if handed is not None:
                    escaped, escaped_bytes = escaped + handed[0], escaped_bytes + handed[1]
                    parent._escaped += handed[0]
                    parent._escaped_bytes += handed[1]
            parent._prune_children()
        if _events.listeners:
            if escaped:
                _events.emit(
                    "escape", self, count=escaped, bytes=escaped_bytes, on_close=self._on_close
                )
            _events.emit("manager_closed", self, escaped=escaped, escaped_bytes=escaped_bytes)
        if raise_leaks and escaped and self._on_close == "raise":
            raise ScopeLeakError(self._leak_message(escaped, escaped_bytes))
        if raise_leaks and child_errors:
            raise child_errors[0]

    def _become_ghost(self) -> None:
        """Close: from now on what this subtree still owns belongs to the nearest open
        ancestor, whose policies its nodes take and whose budget alone applies.

        The native node is not marked closed: NumPy's handler may still point at it in
        contexts this thread cannot reach (an asyncio task, a suspended generator), and an
        allocation that arrives there must go on, under the ancestor's policies, rather than
        fail.  ``m.empty()`` and activation check :attr:`closed` in Python."""
        self._budget_when_closed = self.max_bytes
        self._closed = True
        heir = nearest_open(self)
        for m in self._subtree():
            m._node.max_bytes = -1
            m._node.location = _LOCATIONS[heir.location]
            m._node.spill_policy = _SPILL_POLICIES[heir.spill_policy]
        if any(_native.get_handler() is m._node.handler for m in self._subtree()):
            _native.set_handler(heir._node.handler)

    def _escaped_now(self) -> tuple[int, int]:
        """Arrays that closed children handed to this manager and that are still alive."""
        count, nbytes = self._escaped, self._escaped_bytes
        for child in self._children:
            if child.closed:
                c, b = child._escapes()
                count, nbytes = count + c, nbytes + b
        return count, nbytes

    def _escapes(self) -> tuple[int, int]:
        """Live arrays of this closed manager and its closed subtree, less those it keeps."""
        count = 0
        nbytes = 0
        for m in self._subtree():
            c = m._node.counters()
            ram = c["current_bytes"] - sum(
                ch._node.counters()["current_bytes"] for ch in m._children
            )
            count += c["live_count"]
            nbytes += ram + c["spilled_bytes"] + c["mapped_bytes"]
            if m is self:
                count -= c["kept_count"]
                nbytes -= c["kept_bytes"]
        return count, nbytes

    def _leak_message(self, escaped: int, escaped_bytes: int) -> str:
        return describe_escapes(
            f"manager {self.name!r} closed while {escaped} array(s) of "
            f"{format_bytes(escaped_bytes)} it owns were still referenced. The arrays stay valid; "
            "mark intended escapes with m.keep(arr) or oc.detach(arr), or delete them before the "
            "scope ends.",
            {m._node.id for m in self._subtree()},
            lambda info: not (info[3] & _native.FLAG_KEPT and info[0] == self._node.id),
        )

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
        with _tree_lock:
            return manager_html(self)


def require_array(arr: object, what: str) -> None:
    if not isinstance(arr, np.ndarray):
        raise TypeError(f"{what}() takes a numpy.ndarray, got {type(arr).__name__}")


def _handler_in_use(manager: Manager) -> bool:
    """Whether anything besides the manager's node holds its handler: a context where it is
    (or was) active, or an array it allocated.  NumPy may allocate through it while so."""
    # The node's own reference and getrefcount's argument: CPython reference counting is the
    # only way to see into contexts other than the current one.
    return sys.getrefcount(manager._node.handler) > 2


_system: Manager | None = None
_system_lock = threading.Lock()


def system() -> Manager:
    """The root ("System") manager; its budget is ``oc.config().max_bytes``.

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
                _native.set_pressure_callback(relieve_pressure)
                _native.set_disk_refusal_callback(note_disk_refusal)
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
