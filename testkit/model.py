"""The model behind both state machines, ``tests/memory/test_state_machine.py`` (the manager
tree) and ``tests/reliability/test_system_machine.py`` (the whole library): what every live
object must contain, who owns it, where it lives and how many bytes it counts.

One model: a manager is a :class:`Node`, a live allocation a :class:`Block`, a chunked array on
disk a :class:`Store`; each machine uses the fields its rules follow.  Kept apart from the
machines so that they read as their rules.  Nothing here allocates under a manager: expected
contents are made with NumPy's own allocator."""

from __future__ import annotations

import contextlib
import functools
import math
import mmap
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import oocarray as oc
from oocarray import _native

PAGE = mmap.PAGESIZE
MiB = 1 << 20

# What oocarray raises for an allocation that does not fit, a closed scope, a leak: the steps
# catch only these (a bug raising anything else fails the step).  The manager machine makes no
# workspaces and no compressed spill: it catches the first three only.
Failure = tuple[type[BaseException], str]
Attempt = Callable[..., tuple[Any, Failure | None]]
MANAGER_ERRORS: tuple[type[BaseException], ...] = (
    MemoryError,  # MemoryBudgetError, WorkspaceFullError
    oc.ClosedError,
    oc.ScopeLeakError,
)
EXPECTED_ERRORS = (*MANAGER_ERRORS, oc.WorkspaceLeakError, oc.SpillError)


def attempt_catching(errors: tuple[type[BaseException], ...]) -> Attempt:
    """An ``attempt(call, *args, **kwargs)`` that returns ``(call(...), None)`` or
    ``(None, (class, message))`` for ``errors``.  The exception object is not kept: its frames
    would keep arrays alive, and the model counts on memory being released as soon as the last
    reference goes."""

    def attempt(call: Any, *args: Any, **kwargs: Any) -> tuple[Any, Failure | None]:
        try:
            return call(*args, **kwargs), None
        except errors as error:
            return None, (type(error), str(error))

    return attempt


attempt = attempt_catching(EXPECTED_ERRORS)


def checked(step: Any) -> Any:
    """Marks the machine (``self.broken``) broken while a step runs, so that a failing step is
    not masked by the end-of-run checks in ``teardown``."""

    @functools.wraps(step)
    def run(self: Any, *args: Any, **kwargs: Any) -> None:
        self.broken = True
        step(self, *args, **kwargs)
        self.broken = False

    return run


def unmanaged(arr: Any) -> np.ndarray:
    """A copy made by NumPy's own allocator, also while a manager is active."""
    previous = _native.set_handler(None)
    try:
        return np.array(arr, order="K", copy=True)
    finally:
        _native.set_handler(previous)


@contextlib.contextmanager
def outside_managers() -> Iterator[None]:
    """NumPy's own allocator for what the checks allocate, also where a manager is active:
    the checks must not take from the budgets they check (nor race a prefetch thread)."""
    previous = _native.set_handler(None)
    try:
        yield
    finally:
        _native.set_handler(previous)


def block_bytes(nbytes: int) -> int:
    """What the handler counts for an array of ``nbytes``: NumPy asks for 1 byte at least."""
    return max(nbytes, 1)


def all_bytes(arr: np.ndarray) -> np.ndarray:
    """The bytes of the whole allocation under ``arr`` (an array or a view of it)."""
    while not arr.flags.owndata:
        assert arr.base is not None
        arr = arr.base
    return arr.reshape(-1, order="A").view(np.uint8)


def apply_chain(arr: np.ndarray, chain: tuple[Any, ...]) -> np.ndarray:
    for op in chain:
        arr = arr.T if op == "T" else arr[op]
    return arr


def pattern(shape: tuple[int, ...], dtype: np.dtype, k: int) -> np.ndarray:
    """Deterministic values that differ from element to element (and with ``k``), unmanaged."""
    previous = _native.set_handler(None)
    try:
        n = math.prod(shape)
        values = (np.arange(n, dtype=np.int64) * 7 + k * 13) % 251 - 100
        if dtype.kind == "b":
            return np.asarray(values % 3 == 0).reshape(shape)
        if dtype.kind == "u":
            values = values + 100
        if dtype.kind == "c":
            return (values + 1j * (values % 5)).astype(dtype).reshape(shape)
        return values.astype(dtype).reshape(shape)
    finally:
        _native.set_handler(previous)


@dataclass(eq=False)
class Node:
    """The model of one manager: a plain manager, a workspace, the system manager at the root,
    or the manager of one chunk-backed ndarray (``kind="paged"``).

    A closed manager stays in the tree as a ghost that keeps owning its live blocks."""

    mgr: oc.Manager
    parent: Node | None
    kind: str = "manager"
    max_bytes: int | None = None
    spill: str = "mmap"
    location: str = "ram"
    on_close: str = "keep"
    closed: bool = False
    children: list[Node] = field(default_factory=list)
    # workspaces
    on_escape: str = "pin"
    ws_spill: str = "external"
    cycles: int = 0
    escapes: int = 0
    # moves to disk and back counted on this node (the owner at the time of the move)
    spills: int = 0
    spill_moved: int = 0
    unspills: int = 0
    unspill_moved: int = 0
    allocated_count: int = 0  # successful allocations in the subtree: a lower bound of totals
    allocated_bytes: int = 0
    model_peak: int = 0  # highest modelled RAM: a lower bound of peak_bytes
    over_allowance: int = 0  # RAM allowed above max_bytes after it was lowered below use
    last_total: tuple[int, int] = (0, 0)

    def __repr__(self) -> str:
        return f"Node({self.mgr.name}, {self.kind})"

    def ancestors(self) -> list[Node]:
        out: list[Node] = []
        p: Node | None = self
        while p is not None:
            out.append(p)
            p = p.parent
        return out

    def is_under(self, other: Node) -> bool:
        return other in self.ancestors()

    def open_owner(self) -> Node:
        """The nearest open manager at or above this one (the root is never closed)."""
        p = self
        while p.closed:
            assert p.parent is not None, "the root of the tree was closed"
            p = p.parent
        return p

    def subtree(self) -> list[Node]:
        return [self, *(d for c in self.children for d in c.subtree())]

    def workspace_above(self) -> Node | None:
        """The workspace this node is (or is under), if any."""
        return next((p for p in self.ancestors() if p.kind == "workspace"), None)


@dataclass(eq=False)
class Block:
    """One live allocation: the arrays that hold it (the array and views of it, each with the
    chain of view operations from the array) and what it must contain."""

    holders: list[list[Any]]  # [array, view chain]: lists, so the gc finds the arrays
    expected: np.ndarray  # a copy made outside any manager, laid out like the original array
    owner: Node
    size: int
    # followed by the manager machine only
    place: str = "ram"  # "ram", "mapped" (in a file from the start) or "spilled"
    region: bool = False  # a page-aligned mapping, not a malloc block
    seq: int = 0  # position in the registry of regions: the eviction order
    kept: bool = False
    alloc_id: int = 0

    def __repr__(self) -> str:
        return (
            f"Block({self.expected.shape}, {self.expected.dtype}, {self.size} B, "
            f"{self.place}, {self.owner})"
        )

    @property
    def array(self) -> np.ndarray:
        arr: np.ndarray = self.holders[0][0]
        return arr


@dataclass(eq=False)
class Store:
    """One chunked array on disk, its open handle, and (at most) one chunk-backed ndarray."""

    path: str
    fmt: str  # "zarr", "npy" or "h5"
    codec: str
    chunks: tuple[int, ...]
    handle: oc.ChunkedArray
    expected: np.ndarray
    view: np.ndarray | None = None
    view_mode: str = "r"
    view_node: Node | None = None
    paged: bool = True  # as_ndarray pages it (zarr, chunked HDF5), else maps the file
    view_block: Block | None = None  # an empty array's "view" is a plain allocation
    flushed: bool = True  # no write through the view since the last flush

    def __repr__(self) -> str:
        return f"Store({self.fmt}, {self.expected.shape}, {self.expected.dtype}, {self.codec})"

    @property
    def dataset(self) -> str | None:
        return "x" if self.fmt == "h5" else None

    def chunk_bytes(self) -> int:
        return math.prod(self.chunks) * self.expected.dtype.itemsize

    def view_units_bytes(self) -> int:
        """Bytes the view may hold resident: every fill unit of it."""
        if self.view is None or self.view.nbytes == 0:
            return 0
        chunk = self.chunk_bytes()
        if chunk % PAGE == 0:
            unit = chunk * max(1, -(-(64 << 10) // chunk))
        else:
            unit = max(64 << 10, -(-chunk // PAGE) * PAGE)
        return -(-self.view.nbytes // unit) * unit
