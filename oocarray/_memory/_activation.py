"""Activation: which manager the current thread or context routes NumPy allocations to, and
the methods of :class:`~oocarray.Manager` that make it so (``m.activate()``, ``with m:``)."""

from __future__ import annotations

import contextvars
from types import TracebackType
from typing import TYPE_CHECKING, Any, Protocol, Self, TypeVar

from oocarray import _native
from oocarray.errors import ClosedError

__all__ = ["Activation", "ManagerActivation", "active", "exit_entered", "nearest_open"]


class Activated(Protocol):
    """What activation needs of a manager."""

    @property
    def name(self) -> str: ...
    @property
    def closed(self) -> bool: ...
    @property
    def parent(self) -> Any: ...
    @property
    def _handler(self) -> object: ...


M = TypeVar("M", bound=Activated)


class Activation:
    """Routes NumPy allocations of the current thread/context to a manager until exit.

    The activations of a context form a stack (a context variable).  Exits may come in any
    order (a generator closed inside another block, ``__exit__`` calls out of order): an exit
    removes its own entry wherever it is, and the handler is then recomputed from what is left
    (the top entry, or the handler in force before the first entry), never restored from a
    saved value that may belong to a manager closed since.
    """

    __slots__ = ("_from_enter", "_manager")

    def __init__(self, manager: Activated, *, from_enter: bool = False) -> None:
        self._manager = manager
        self._from_enter = from_enter

    def __enter__(self) -> Activated:
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
        _native.set_handler(manager._handler)
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
_activations: contextvars.ContextVar[tuple[object, tuple[Activation, ...]]] = (
    contextvars.ContextVar("oocarray_activations", default=(None, ()))
)


def _route_to_top() -> None:
    """Point this context's handler at its top activation's manager, or at the nearest open
    ancestor when that one has closed; back to the original handler when none is left."""
    baseline, stack = _activations.get()
    if stack:
        _native.set_handler(nearest_open(stack[-1]._manager)._handler)
    else:
        _native.set_handler(baseline)


def nearest_open(manager: M) -> M:
    while manager.closed and manager.parent is not None:
        manager = manager.parent
    return manager


def active() -> Activated | None:
    """The manager of this context's top activation, or None (it may have closed since)."""
    _, stack = _activations.get()
    return stack[-1]._manager if stack else None


def exit_entered(manager: Activated) -> None:
    """Ends the activation that ``with manager:`` made in this context, wherever it is."""
    _, stack = _activations.get()
    for activation in reversed(stack):
        if activation._manager is manager and activation._from_enter:
            activation.__exit__()
            return


class ManagerActivation:
    """The activation methods of :class:`~oocarray.Manager`: ``m.activate()``, and ``with m:``,
    which also closes the manager when its block ends."""

    if TYPE_CHECKING:

        @property
        def name(self) -> str: ...

        @property
        def closed(self) -> bool: ...

        @property
        def parent(self) -> Any: ...

        @property
        def _handler(self) -> object: ...

        def _close(self, *, raise_leaks: bool) -> None: ...

    def activate(self) -> Activation:
        """Make this manager active in the current thread without closing it on exit.

        Returns
        -------
        Activation
            A context manager: NumPy allocations inside its ``with`` block are owned by this
            manager; leaving it makes the previously active manager active again.

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
