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

import contextvars
import gc
import mmap
import operator
import sys
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Literal, NoReturn, Self

import numpy as np
import numpy.typing as npt

from oocarray import _config, _native, _physical, _spill_files, _tracing
from oocarray._escapes import describe_escapes
from oocarray._units import format_bytes, parse_size
from oocarray.errors import ClosedError, MemoryBudgetError, ScopeLeakError

__all__ = [
    "Manager",
    "MemoryStats",
    "active_manager",
    "detach",
    "location",
    "manager_by_node_id",
    "owner",
    "system",
]

OnClose = Literal["keep", "spill", "raise"]
SpillPolicy = Literal["mmap", "evict", "fail"]
Location = Literal["ram", "mmap"]
_ON_CLOSE: tuple[str, ...] = ("keep", "spill", "raise")
_SPILL_POLICIES = {
    "mmap": _native.SPILL_MMAP,
    "evict": _native.SPILL_EVICT,
    "fail": _native.SPILL_FAIL,
}
_LOCATIONS = {"ram": _native.LOCATION_RAM, "mmap": _native.LOCATION_MMAP}

# Garbage collection before a budget refusal or an escape report is throttled to this interval.
_GC_MIN_INTERVAL_S = 0.5


@dataclass(frozen=True, slots=True)
class MemoryStats:
    """Counters of a manager and its subtree; bytes are exact, as NumPy requested them.

    Attributes
    ----------
    name
        The manager's name.
    current_bytes, current_count
        Bytes and number of live arrays owned by the manager or its descendants, wherever
        they are (``ram_bytes + mmap_bytes + spilled_bytes``).
    peak_bytes
        Highest ``ram_bytes`` since creation or :meth:`Manager.reset_peak`.
    total_bytes, total_count
        Everything ever allocated in the subtree.
    own_bytes, own_count
        Live arrays owned by this manager itself, including those that escaped into it from
        closed children.
    max_bytes
        The budget, or ``None``.
    ram_bytes, mmap_bytes, spilled_bytes
        Where the live bytes are: in RAM (what ``max_bytes`` limits), placed in temporary
        files from the start (``location="mmap"`` or the ``"mmap"`` spill policy), or moved
        there by a spill.
    spills, spill_moved_bytes, unspills, unspill_moved_bytes
        How many arrays, and how many bytes, were moved to disk and back.
    escaped, escaped_bytes
        Arrays that were still alive when a child scope closed and were handed to this manager.
    kept, kept_bytes
        Arrays marked with :meth:`Manager.keep` and still alive.
    """

    name: str
    current_bytes: int
    current_count: int
    peak_bytes: int
    total_bytes: int
    total_count: int
    own_bytes: int
    own_count: int
    max_bytes: int | None
    ram_bytes: int
    mmap_bytes: int
    spilled_bytes: int
    escaped: int
    escaped_bytes: int
    kept: int
    kept_bytes: int
    spills: int
    spill_moved_bytes: int
    unspills: int
    unspill_moved_bytes: int


# Node counters that only grow; a pruned child's are kept by its parent.
_CUMULATIVE = (
    "total_bytes",
    "total_count",
    "spill_count",
    "spill_moved_bytes",
    "unspill_count",
    "unspill_moved_bytes",
)
# Node counters that stats() adds up over a subtree.
_SUMMED = ("live_count", "spilled_bytes", "mapped_bytes", *_CUMULATIVE)

_registry: weakref.WeakValueDictionary[int, Manager] = weakref.WeakValueDictionary()
_tree_lock = threading.RLock()
_last_gc = 0.0


def _collect_garbage_throttled() -> bool:
    global _last_gc
    now = time.monotonic()
    if now - _last_gc < _GC_MIN_INTERVAL_S:
        return False
    _last_gc = now
    # Finalizers run by the collection allocate outside the manager that is under pressure.
    previous = _native.set_handler(None)
    try:
        gc.collect()
    finally:
        _native.set_handler(previous)
    return True


def _parse_shape(shape: object) -> tuple[int, ...]:
    """``shape`` as a tuple of ints; like NumPy, any integer, integer sequence or integer
    array (``np.array([2, 3])``, a 0-d one) is a shape."""
    example = "e.g. (1024, 64), 1024 or np.array([1024, 64])"
    if isinstance(shape, (str, bytes, bool, np.bool_)):
        raise TypeError(f"shape must be an int or a sequence of ints, {example}; got {shape!r}")
    try:
        dims: tuple[object, ...] = (operator.index(shape),)  # type: ignore[arg-type]
    except TypeError:
        if not isinstance(shape, (Sequence, np.ndarray)):
            raise TypeError(
                f"shape must be an int or a sequence of ints, {example}; got {shape!r}"
            ) from None
        dims = tuple(shape)
    result = []
    for d in dims:
        if isinstance(d, (bool, np.bool_)):
            raise TypeError(f"shape entries must be ints, {example}; got {shape!r}")
        try:
            size = operator.index(d)  # type: ignore[arg-type]
        except TypeError:
            raise TypeError(f"shape entries must be ints, {example}; got {shape!r}") from None
        if size < 0:
            raise ValueError(f"shape entries must not be negative; got {shape!r}")
        result.append(size)
    return tuple(result)


class _Activation:
    """Routes NumPy allocations of the current thread/context to a manager until exit.

    The activations of a context form a stack (a context variable).  Exits may come in any
    order (a generator closed inside another block, ``__exit__`` calls out of order): an exit
    removes its own entry wherever it is, and the handler is then recomputed from what is left
    (the top entry, or the handler in force before the first entry), never restored from a
    saved value that may belong to a manager closed since.
    """

    __slots__ = ("_from_enter", "_manager")

    def __init__(self, manager: Manager, *, from_enter: bool = False) -> None:
        self._manager = manager
        self._from_enter = from_enter

    def __enter__(self) -> Manager:
        manager = self._manager
        if manager.closed:
            raise ClosedError(
                f"manager {manager.name!r} is closed and cannot be activated; "
                "create a new manager or use its parent"
            )
        baseline, stack = _activations.get()
        if not stack:
            baseline = _native.get_handler()
        _activations.set((baseline, (*stack, self)))
        _native.set_handler(manager._node.handler)
        _native.take_failure()
        return manager

    def __exit__(self, *exc: object) -> None:
        baseline, stack = _activations.get()
        remaining = tuple(a for a in stack if a is not self)
        if len(remaining) == len(stack):
            return  # entered in another context: this one never routed to it
        _activations.set((baseline, remaining))
        _route_to_top()


# The handler in force before the first activation of this context, and the activations.
_activations: contextvars.ContextVar[tuple[object, tuple[_Activation, ...]]] = (
    contextvars.ContextVar("oocarray_activations", default=(None, ()))
)


def _route_to_top() -> None:
    """Point this context's handler at its top activation's manager, or at the nearest open
    ancestor when that one has closed; back to the original handler when none is left."""
    baseline, stack = _activations.get()
    if stack:
        _native.set_handler(_nearest_open(stack[-1]._manager)._node.handler)
    else:
        _native.set_handler(baseline)


def _nearest_open(manager: Manager) -> Manager:
    while manager.closed and manager._parent is not None:
        manager = manager._parent
    return manager


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
        (arrays under one page stay in RAM).  Default: the parent's (``"ram"`` for the
        system manager).
    spill
        What an allocation that would exceed the budget does (default: the parent's policy,
        ``"mmap"`` for the system manager): ``"mmap"`` places the new array
        in a temporary file (a page at least: leave the budget some headroom for small
        temporaries, each of which would otherwise get a file); ``"evict"`` first moves this
        budget's oldest arrays to disk
        (oldest allocation first; an unspilled array counts as new), then places the new one
        in RAM if that made room, else in a file; ``"fail"`` raises
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
        self._pruned: dict[str, int] = dict.fromkeys(_CUMULATIVE, 0)
        self._close_hooks: list[Callable[[], tuple[int, int] | None]] = []
        _registry[self._node.id] = self
        if parent is not None:
            with _tree_lock:
                parent._prune_children()
                parent._children.append(self)

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
        """Where new arrays are placed: ``"ram"`` or ``"mmap"``."""
        return self._location

    @property
    def spill_policy(self) -> str:
        """What an over-budget allocation does: ``"mmap"``, ``"evict"`` or ``"fail"``."""
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
                for key in _CUMULATIVE:
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

    def activate(self) -> _Activation:
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
        return _Activation(self)

    def __enter__(self) -> Self:
        _Activation(self, from_enter=True).__enter__()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        _, stack = _activations.get()
        for activation in reversed(stack):
            if activation._manager is self and activation._from_enter:
                activation.__exit__()
                break
        # An escape report must not hide the exception that is already propagating.
        self._close(raise_leaks=exc_type is None)

    def sub(self, name: str | None = None, **kwargs: Any) -> Manager:
        """Create a child scope: ``with m.sub("batch") as s: ...``."""
        return Manager(name, parent=self, **kwargs)

    # ---- explicit allocation ----

    def empty(self, shape: object, dtype: npt.DTypeLike = float, *, order: str = "C") -> np.ndarray:
        """A new uninitialised array owned by this manager (like :func:`numpy.empty`)."""
        dims = _parse_shape(shape)
        self._check_open()
        with self.activate():
            return np.empty(dims, dtype=dtype, order=order)  # type: ignore[call-overload,no-any-return]

    def zeros(self, shape: object, dtype: npt.DTypeLike = float, *, order: str = "C") -> np.ndarray:
        """A new zero-filled array owned by this manager (like :func:`numpy.zeros`)."""
        dims = _parse_shape(shape)
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
        dims = _parse_shape(shape)
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
            raise MemoryBudgetError(
                _budget_message(size, self, manager_by_node_id(refused_id), limit, used)
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
        _require_array(arr, "attach")
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
        _require_array(arr, "keep")
        info = _native.block_info(arr)
        if info is None or not self._owns_in_subtree(info[0]):
            holder = owner(arr)
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
            totals = dict.fromkeys(_SUMMED, 0)
            open_children = [c for c in self._children if not c.closed]
            open_below: set[int] = {id(d) for c in open_children for d in c._subtree()}
            own_count = 0
            own_disk = 0
            for m in self._subtree():
                c = m._node.counters()
                for key in _SUMMED:
                    totals[key] += c[key]  # type: ignore[literal-required]
                for key in _CUMULATIVE:
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
            return int(_native.spill_subtree(self._node, skip_kept))
        except OSError as error:
            raise _spill_files.spill_error(
                error, f"spilling manager {self.name!r}", self.stats().ram_bytes
            ) from error

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
                _collect_garbage_throttled()
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
        heir = _nearest_open(self)
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


def _require_array(arr: object, what: str) -> None:
    if not isinstance(arr, np.ndarray):
        raise TypeError(f"{what}() takes a numpy.ndarray, got {type(arr).__name__}")


def _handler_in_use(manager: Manager) -> bool:
    """Whether anything besides the manager's node holds its handler: a context where it is
    (or was) active, or an array it allocated.  NumPy may allocate through it while so."""
    # The node's own reference and getrefcount's argument: CPython reference counting is the
    # only way to see into contexts other than the current one.
    return sys.getrefcount(manager._node.handler) > 2


def _budget_message(
    size: int,
    asked: Manager | None,
    refused: Manager | None,
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


def manager_by_node_id(node_id: int) -> Manager | None:
    return _registry.get(node_id)


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
                _native.set_pressure_callback(_relieve_pressure)
                _config.on_change(_apply_config)
    return _system


def _relieve_pressure(node_id: int, nbytes: int) -> bool:
    """Called by the handler before a budget refusal: collect garbage, at most twice a second;
    True when it ran, so the reservation is worth trying again."""
    collected = _collect_garbage_throttled()
    _snapshot_refusal(node_id, nbytes)
    return collected


# The debug dump taken when the handler was about to refuse an allocation, per thread: NumPy
# creates its exception later, after the temporaries of the failed expression were freed.
_refusals = threading.local()


def _snapshot_refusal(node_id: int, nbytes: int) -> None:
    """Record the tree as it is now, when an allocation under a ``spill="fail"`` policy is
    about to be refused (other policies place the array on disk instead: no dump needed)."""
    _refusals.last = None
    asked = manager_by_node_id(node_id)
    if asked is None or asked._node.spill_policy != _native.SPILL_FAIL:
        return
    refusing: Manager | None = asked
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
    _, stack = _activations.get()
    return _nearest_open(stack[-1]._manager) if stack else None


def _open_owner(node_id: int) -> Manager | None:
    m = manager_by_node_id(node_id)
    while m is not None and m.closed:
        m = m.parent
    return m


def owner(arr: np.ndarray) -> Manager | None:
    """The manager that owns the memory under ``arr`` (a view's base counts), or ``None``.

    Arrays that escaped a closed scope report the open manager they were handed to.
    """
    _require_array(arr, "owner")
    info = _native.block_info(arr)
    return None if info is None else _open_owner(info[0])


def location(arr: np.ndarray) -> str | None:
    """Where the memory under ``arr`` lives: ``"ram"``, ``"mmap"`` (a spilled or file-placed
    array, or a view of a memory-mapped file), ``"workspace"``, or ``None`` when oocarray does
    not manage it."""
    _require_array(arr, "location")
    info = _native.block_info(arr)
    if info is None:
        return "mmap" if _is_memory_mapped(arr) else None
    if info[3] & _native.FLAG_ARENA:
        return "workspace"
    return "mmap" if info[3] & (_native.FLAG_SPILLED | _native.FLAG_MAPPED) else "ram"


def _is_memory_mapped(arr: np.ndarray) -> bool:
    base: object = arr
    while base is not None:
        if isinstance(base, (np.memmap, mmap.mmap)):
            return True
        base = base.base if isinstance(base, np.ndarray) else getattr(base, "obj", None)
    return False


def detach(arr: np.ndarray) -> np.ndarray:
    """Release ``arr`` from every scope: it is owned by the system manager from now on and is
    never reported as an escape.  A workspace array is copied out to the workspace's parent
    manager instead, and the copy is returned.  Unmanaged arrays are returned unchanged.

    Examples
    --------
    >>> import numpy as np, oocarray as oc
    >>> with oc.Manager(on_close="raise"):
    ...     kept = oc.detach(np.arange(10))
    >>> oc.owner(kept) is oc.system()
    True
    """
    _require_array(arr, "detach")
    info = _native.block_info(arr)
    if info is None:
        return arr
    from oocarray._workspace import detach_from_workspace

    copy = detach_from_workspace(arr, info)
    if copy is not None:
        return copy
    system()._transfer(arr, kept=False)
    return arr
