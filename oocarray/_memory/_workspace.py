"""Workspaces: arena memory reused by every cycle of a loop (ND4J's MemoryWorkspaces).

Each ``with ws:`` is one cycle.  NumPy allocations inside bump-allocate from the workspace's
arena, and the arena is reset when the cycle ends, so a loop that makes the same temporaries
every iteration gets the same memory every iteration: no page faults, no allocator churn.
An array from the cycle that is still alive when the cycle ends has *escaped*: its memory is
pinned (never reused while it lives) and, with ``on_escape="raise"``, the cycle exit raises
:class:`WorkspaceLeakError`.  Copy results out with :func:`oocarray.detach`.

A workspace's policies are in :mod:`._workspace_config`, its counters in
:mod:`._workspace_stats`.
"""

from __future__ import annotations

import errno
import os
import tempfile
import threading
import weakref
from dataclasses import replace
from types import TracebackType
from typing import Any, Literal, Self, cast

import numpy as np

from oocarray import _native
from oocarray._memory import _config, _events, _spill_files
from oocarray._memory._activation import Activation
from oocarray._memory._escapes import describe_escapes
from oocarray._memory._html import workspace_html
from oocarray._memory._manager import Manager, system
from oocarray._memory._policies import LOCATIONS
from oocarray._memory._registry import manager_by_node_id, tree_lock
from oocarray._memory._spill_files import disk_refusal
from oocarray._memory._units import format_bytes
from oocarray._memory._workspace_config import FULL_POLICIES, WorkspaceConfig
from oocarray._memory._workspace_stats import WorkspaceStats
from oocarray.errors import ClosedError, SpillError, WorkspaceLeakError

__all__ = ["Workspace", "destroy_workspaces"]

_MODES = {
    "": _native.WS_MODE_NORMAL,
    "bypass": _native.WS_MODE_BYPASS,
    "spill_everything": _native.WS_MODE_SPILL_EVERYTHING,
}
_PAGE = os.sysconf("SC_PAGESIZE")

_thread_workspaces = threading.local()


def _workspaces_of_this_thread() -> list[weakref.ref[Workspace]]:
    refs: list[weakref.ref[Workspace]] | None = getattr(_thread_workspaces, "refs", None)
    if refs is None:
        refs = []
        _thread_workspaces.refs = refs
    return refs


def _debug_mode() -> int:
    value = os.environ.get("OOCARRAY_WORKSPACES", "").strip().lower()
    if value not in _MODES:
        raise ValueError(
            f"OOCARRAY_WORKSPACES must be 'bypass', 'spill_everything' or empty, got {value!r}"
        )
    return _MODES[value]


class Workspace(Manager):
    """A manager whose memory is an arena reused by every cycle (``with ws:``) of a loop.

    Parameters
    ----------
    name
        A name for dumps and errors.
    config
        A :class:`WorkspaceConfig`; or give its fields as keyword arguments.
    parent
        The parent manager (default: the active one, else :func:`system`); the arena counts
        against its budget (with ``location="zarr"``, only the arena's pages in RAM do).
    max_bytes
        Budget of the workspace: arena plus external allocations.  What an external
        allocation over it does follows the parent's ``spill`` policy, as for a child manager.
        With ``location="zarr"`` the arena's size is not reserved on it: the pages touched
        are, and over it written ones are encoded and dropped (see :class:`WorkspaceConfig`).
    **policies
        The fields of :class:`WorkspaceConfig` (``initial_size``, ``learning``, ``spill``,
        ...), when ``config`` is not given.

    Raises
    ------
    TypeError
        Both ``config`` and policies are given, or a policy is unknown.
    ClosedError
        The parent manager is closed.
    WorkspaceLeakError
        On leaving a cycle, with ``on_escape="raise"``, when arrays of the cycle are still
        referenced.

    Examples
    --------
    >>> import numpy as np, oocarray as oc
    >>> x = np.ones(1_000_000, np.float32)
    >>> ws = oc.Workspace("step")
    >>> for _ in range(3):
    ...     with ws:
    ...         y = x * 2 + 1
    ...         total = float((y - x).sum())
    ...         del y
    >>> ws.stats().cycles, total
    (3, 2000000.0)
    >>> ws.close()

    The debug switch ``OOCARRAY_WORKSPACES=bypass`` makes workspaces act as plain managers;
    ``=spill_everything`` makes every allocation external.  Both are read when a workspace is
    created.
    """

    def __init__(
        self,
        name: str | None = None,
        config: WorkspaceConfig | None = None,
        *,
        parent: Manager | None = None,
        max_bytes: int | str | None = None,
        **policies: Any,
    ) -> None:
        if config is not None and not isinstance(config, WorkspaceConfig):
            raise TypeError(f"config must be a WorkspaceConfig, got {config!r}")
        if config is not None and policies:
            raise TypeError("give either config or policy keyword arguments, not both")
        unknown = set(policies) - set(WorkspaceConfig.__dataclass_fields__)
        if unknown:
            raise TypeError(
                f"unknown workspace policies {sorted(unknown)}; "
                f"expected some of {sorted(WorkspaceConfig.__dataclass_fields__)}"
            )
        given = config if config is not None else WorkspaceConfig(**policies)
        mode = _debug_mode()
        super().__init__(name, parent=parent, max_bytes=max_bytes, location=given.location)
        inherited = cast(Literal["ram", "mmap", "zarr"], self.location)
        self.config = replace(given, location=inherited)
        self._node.make_workspace(FULL_POLICIES[given.spill], LOCATIONS[self.location], mode)
        self._mode = mode
        self._target_bytes = _round_page(int(self.config.initial_size))
        self._learned_bytes = 0
        self._cycles = 0
        self._cycle_escapes = 0
        self._cycle_thread: int | None = None
        self._cycle_lock = threading.Lock()
        self._cycle_activation: Activation | None = None
        self._cycle_number = 0
        _workspaces_of_this_thread().append(weakref.ref(self))

    # ---- cycles ----

    def __enter__(self) -> Self:
        if self.closed:
            raise ClosedError(f"workspace {self.name!r} is closed; create a new one")
        me = threading.get_ident()
        with self._cycle_lock:
            if self._cycle_thread is not None:
                where = "this thread" if self._cycle_thread == me else "another thread"
                raise RuntimeError(
                    f"workspace {self.name!r} is already in a cycle in {where}; a workspace is "
                    "entered by one thread at a time and cycles of one workspace do not nest "
                    "(use a second workspace)"
                )
            self._cycle_thread = me
        try:
            activation = Activation(self)
            activation.__enter__()
        except BaseException:
            self._cycle_thread = None
            raise
        self._cycle_activation = activation
        self._cycle_number = self._node.ws_begin(self._target_bytes)
        try:
            self._check_arena_placed()
        except BaseException:
            self._node.ws_end()
            activation.__exit__()
            self._cycle_activation = None
            self._cycle_thread = None
            raise
        return self

    def _check_arena_placed(self) -> None:
        """With ``location="mmap"`` or ``"zarr"``, raise :class:`SpillError` when the arena's
        file could not be made: a cycle must not fall back to RAM silently.  (An arena the
        budget refused is not an error: the cycle then runs outside it, under the budget's
        spill policy.)"""
        target = self._target_bytes
        if self.location == "ram" or target == 0 or self._mode == _native.WS_MODE_BYPASS:
            return
        if self.location == "zarr":
            code = self._node.ws_stats()["arena_error"]
            if code:
                raise SpillError(
                    code,
                    f"cannot create the {format_bytes(target)} compressed arena of workspace "
                    f"{self.name!r} (location='zarr'): {disk_refusal(code, target)}",
                )
            return
        if self._node.ws_stats()["arena_bytes"] >= target or self._budget_refuses(target):
            return
        error = _file_refusal(target)  # the native call keeps its errno: ask the disk again
        if error is not None:
            code = error.errno or errno.EIO
            raise SpillError(
                code,
                f"cannot create the {format_bytes(target)} arena file of workspace "
                f"{self.name!r} (location='mmap'): {disk_refusal(code, target)}",
            ) from error

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        arena_escapes, external_escapes, requested, overflowed = self._node.ws_end()
        assert self._cycle_activation is not None
        self._cycle_activation.__exit__()
        self._cycle_activation = None
        self._cycle_thread = None
        self._cycles += 1
        self._learn(requested, overflowed)
        escaped = arena_escapes + external_escapes
        if _events.listeners:
            self._emit_cycle_end(escaped, requested, overflowed)
        if self._mode == _native.WS_MODE_BYPASS:
            return
        self._cycle_escapes += escaped
        if escaped and self.config.on_escape == "raise" and exc_type is None:
            raise WorkspaceLeakError(self._cycle_leak_message(escaped))

    def _emit_cycle_end(self, escaped: int, requested: int, overflowed: bool) -> None:
        if escaped and self._mode != _native.WS_MODE_BYPASS:
            _events.emit(
                "escape", self, count=escaped, cycle=self._cycles, on_escape=self.config.on_escape
            )
        ws = self._node.ws_stats()
        _events.emit(
            "cycle_end",
            self,
            cycle=self._cycles,
            requested_bytes=requested,
            arena_bytes=ws["arena_bytes"],
            next_arena_bytes=self._target_bytes,
            overflowed=overflowed,
            escaped=escaped,
            external_allocations=ws["external_allocations"],
        )

    def _budget_refuses(self, nbytes: int) -> bool:
        """Whether a budget on the way up would refuse ``nbytes`` more RAM now."""
        m: Manager | None = self
        while m is not None:
            limit = int(m._node.max_bytes)
            if limit >= 0 and m._node.counters()["current_bytes"] + nbytes > limit:
                return True
            m = m.parent
        return False

    def _learn(self, requested: int, overflowed: bool) -> None:
        cfg = self.config
        wanted = self._size_for(requested)
        if cfg.learning == "first_loop" and self._cycles == 1:
            self._learned_bytes = requested
            self._target_bytes = max(self._target_bytes, wanted)
        elif cfg.learning == "over_time" and wanted > self._target_bytes:
            self._learned_bytes = requested
            self._target_bytes = wanted
        if overflowed and cfg.spill == "reallocate" and wanted > self._target_bytes:
            self._target_bytes = wanted

    def _size_for(self, requested: int) -> int:
        cfg = self.config
        size = requested
        if cfg.allocation == "overallocate":
            size = int(requested * (1 + cfg.overallocation))
        if cfg.max_size is not None:
            size = min(size, int(cfg.max_size))
        return _round_page(size)

    def _cycle_leak_message(self, escaped: int) -> str:
        return describe_escapes(
            f"{escaped} array(s) allocated in cycle {self._cycles} of workspace {self.name!r} "
            "were still referenced when the cycle ended. Their memory is pinned and stays "
            "valid, but it cannot be reused: copy results out with oc.detach(arr) and delete "
            "the rest (or move the cycle body into a function) before the cycle ends.",
            {self._node.id},
            lambda info: info[5] == self._cycle_number,
            lambda info: " (arena)" if info[3] & _native.FLAG_ARENA else " (external)",
        )

    # ---- accounting ----

    def stats(self) -> WorkspaceStats:  # type: ignore[override]
        """The workspace's counters.

        Returns
        -------
        WorkspaceStats
            Arena size, learned bytes, cycles, allocations, escapes, and the
            :class:`MemoryStats` of the workspace as a manager.

        Examples
        --------
        >>> import numpy as np, oocarray as oc
        >>> ws = oc.Workspace("step")
        >>> with ws:
        ...     tmp = np.ones(1000)
        ...     del tmp
        >>> (ws.stats().cycles, ws.stats().escapes)
        (1, 0)
        >>> ws.close()
        """
        ws = self._node.ws_stats()
        return WorkspaceStats(
            name=self.name,
            size_bytes=ws["arena_bytes"],
            learned_bytes=self._learned_bytes,
            cycles=self._cycles,
            arena_allocations=ws["arena_allocations"],
            external_allocations=ws["external_allocations"],
            spilled_allocations=ws["spilled_allocations"],
            escapes=self._cycle_escapes,
            pinned_bytes=ws["pinned_bytes"],
            reallocations=ws["reallocations"],
            memory=self._memory_stats(),
        )

    def _dump_extra(self) -> str:
        s = self.stats()
        return (
            f"; workspace: arena {format_bytes(s.size_bytes)}, learned "
            f"{format_bytes(s.learned_bytes)}, cycles {s.cycles}, pinned "
            f"{format_bytes(s.pinned_bytes)}, external {s.external_allocations}"
        )

    def close(self) -> None:
        """Release the arena (kept, pinned, while escaped arrays live) and close.

        Raises
        ------
        RuntimeError
            A cycle is running in the workspace.

        Examples
        --------
        >>> import oocarray as oc
        >>> ws = oc.Workspace("step")
        >>> ws.close()
        >>> ws.closed
        True
        """
        self.destroy()

    def destroy(self) -> None:
        """Release the arena and close the workspace; escaped arrays stay valid.

        Same as :meth:`close`.

        Raises
        ------
        RuntimeError
            A cycle is running in the workspace.

        Examples
        --------
        >>> import oocarray as oc
        >>> ws = oc.Workspace("step")
        >>> ws.destroy()
        >>> ws.closed
        True
        """
        if self._cycle_thread is not None:
            raise RuntimeError(f"workspace {self.name!r} is in a cycle; end it before closing")
        super().close()

    def _close(self, *, raise_leaks: bool) -> None:
        # Also the path of a parent manager closing its open children: the arena goes with the
        # workspace (pinned while escaped arrays live), unless a cycle is running in it.
        if not self.closed and self._cycle_thread is None:
            self._node.ws_destroy()
        super()._close(raise_leaks=raise_leaks)

    def __repr__(self) -> str:
        s = self.stats()
        state = "closed" if self.closed else "open"
        return (
            f"<oocarray.Workspace {self.name!r} {state}: arena {format_bytes(s.size_bytes)}, "
            f"{s.cycles} cycles>"
        )

    def _repr_html_(self) -> str:
        """The arena and cycle figures, the policies and the subtree, as HTML."""
        with tree_lock:
            return workspace_html(self, self.stats(), self.config)


def _file_refusal(nbytes: int) -> OSError | None:
    """Why a temporary file of ``nbytes`` cannot be made in the spill directory now, or None."""
    limit = _config.config().max_spill_bytes
    if limit is not None and _native.spill_used() + nbytes > limit:
        return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    try:
        with tempfile.TemporaryFile(dir=_spill_files.private_dir()) as probe:
            os.posix_fallocate(probe.fileno(), 0, nbytes)
    except OSError as error:
        return error
    return None


def _round_page(n: int) -> int:
    return (n + _PAGE - 1) // _PAGE * _PAGE


def destroy_workspaces() -> int:
    """Destroy every workspace created by the current thread.

    Returns
    -------
    int
        How many were open.

    Examples
    --------
    >>> import oocarray as oc
    >>> _ = oc.destroy_workspaces()
    >>> ws = oc.Workspace("step")
    >>> (oc.destroy_workspaces(), ws.closed)
    (1, True)
    """
    refs = _workspaces_of_this_thread()
    count = 0
    for ref in list(refs):
        ws = ref()
        if ws is not None and not ws.closed:
            ws.destroy()
            count += 1
    refs.clear()
    return count


def detach_from_workspace(arr: np.ndarray, info: tuple[int, ...]) -> np.ndarray | None:
    """A copy of a workspace array in the workspace's parent manager, or None if ``arr`` is
    not a workspace array."""
    if not info[3] & (_native.FLAG_ARENA | _native.FLAG_CYCLE_EXTERNAL):
        return None
    ws = manager_by_node_id(info[0])
    parent = ws.parent if ws is not None and ws.parent is not None else system()
    while parent.closed and parent.parent is not None:
        parent = parent.parent
    with parent.activate():
        return np.array(arr, copy=True)
