"""Reductions kept lazy inside expressions, and evaluated together in one pass.

xarray reduces chunked data group by group (a ``groupby`` without flox selects each group with
an integer array and reduces it), then stacks the results and asks for the values once.  A
:class:`Deferred` node stands for one reduction's result inside an expression, so those
reductions wait until the values are asked for; :func:`resolve` then evaluates every pending
one of the expressions asked for in one call of the engine.

A reduction over the positions a gather picks along a reduced axis (a group's rows) is
rewritten as :class:`GatheredRows`: a reduction of the gather's input that feeds the inner
reduction only the rows of each input block that the group lists.  The reductions of every
group of one input then share one pass, so each input chunk is read and decoded once for all
the groups instead of once per group that touches it.
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from oocarray._compute._engine import evaluate
from oocarray._compute._gather import Gather
from oocarray._compute._moments import Moments
from oocarray._compute._nodes import BlockReads, Constant, Node, as_node
from oocarray._compute._reduce import Accumulate, Extreme, Reduction
from oocarray._compute._reduction_kinds import make_reduction

__all__ = ["DEFERRABLE", "Deferred", "GatheredRows", "defer", "resolve"]

# The reductions :func:`defer` keeps lazy: those whose partials ignore where a block lies.
DEFERRABLE = frozenset(
    (*Accumulate.FUNCTIONS, *Extreme.FUNCTIONS, "mean", "var", "std", "nanmean", "nanvar", "nanstd")
)

Region = tuple[slice, ...]


class Deferred(Node):
    """The result of a reduction not evaluated yet, as a leaf of an expression.

    ``make`` gives the reduction of ``source`` (made again if the node is evaluated after a
    failure); ``shape`` and ``dtype`` are its result's.  ``source`` is not a child: blocks of
    the node read its held value, never its input.  The value is computed once, by
    :func:`resolve` with every other pending reduction of the expressions computed, or alone
    when a block is evaluated first; it is then held (a reduction's result is small).
    """

    def __init__(
        self,
        source: Node,
        make: Callable[[], Reduction],
        shape: tuple[int, ...],
        dtype: np.dtype[Any],
        quiet: bool = False,
    ) -> None:
        self.quiet = quiet
        self.source = source
        self.make = make
        self.shape = tuple(shape)
        self.dtype = np.dtype(dtype)
        self._value: np.ndarray | None = None
        self._lock = threading.Lock()

    @property
    def resolved(self) -> bool:
        return self._value is not None

    def settle(self, value: Any) -> None:
        """Holds the reduction's result (called once, by :func:`resolve`)."""
        self._value = np.asarray(value, dtype=self.dtype).reshape(self.shape)

    def value(self) -> np.ndarray:
        """The result, evaluated alone (and held) if no :func:`resolve` did it first."""
        with self._lock:
            if self._value is None:
                resolve([self], progress=False)
            assert self._value is not None
            return self._value

    def evaluate(self, region: Region, reads: BlockReads) -> np.ndarray:
        return self.value()[region]

    def __getstate__(self) -> dict[str, Any]:
        # Sent to another process (a Dask worker): the held result travels, not the reduction
        # (its maker is a closure, and a worker must not read the whole input again).
        return {
            "shape": self.shape,
            "dtype": self.dtype,
            "quiet": self.quiet,
            "_value": self.value(),
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self.source = Constant(self._value, self.shape)
        self.make = _unreachable
        self._lock = threading.Lock()


def _unreachable() -> Reduction:
    raise AssertionError("an unpickled Deferred holds its result")


def defer(
    name: str,
    value: Any,
    axis: Any = None,
    keepdims: bool = False,
    dtype: Any = None,
    ddof: int = 0,
    quiet: bool = False,
) -> Deferred:
    """The reduction ``name`` (a NumPy function name in :data:`DEFERRABLE`) of ``value`` as
    a :class:`Deferred` node; bad arguments raise here, as NumPy would.  ``quiet``: no
    warning for cells with nothing to reduce (all-NaN slices), as xarray asks of its
    nan-reductions (evaluated later, outside the ``catch_warnings`` of xarray's call).

    Examples
    --------
    >>> import numpy as np, oocarray as oc
    >>> from oocarray._compute._deferred import defer
    >>> x = oc.from_numpy(np.arange(12.0).reshape(4, 3), chunks=(2, 3))
    >>> means = oc.Expr(defer("mean", x, axis=0))
    >>> (means * 2)[...]
    array([ 9., 11., 13.])
    """
    if name not in DEFERRABLE:
        raise TypeError(f"{name} is not a reduction oocarray defers")
    source = as_node(value)
    made = [make_reduction(name, source, axis, keepdims, dtype, ddof)]
    first = made[0]

    def make() -> Reduction:
        return made.pop() if made else make_reduction(name, source, axis, keepdims, dtype, ddof)

    kept = first.kept_shape
    shape = kept if keepdims else tuple(n for i, n in enumerate(kept) if i not in first.axes)
    return Deferred(source, make, shape, getattr(first, "result_dtype", source.dtype), quiet)


def _pending(roots: Iterable[Node]) -> list[Deferred]:
    """The unresolved :class:`Deferred` nodes of the trees, each once, in tree order."""
    found: dict[int, Deferred] = {}
    stack = list(roots)
    seen: set[int] = set()
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, Deferred):
            if not node.resolved:
                found[id(node)] = node
            continue
        stack.extend(node.children())
    return list(found.values())


class GatheredRows(Reduction):
    """``inner`` (a reduction of a gather along reduced axis ``axis``) evaluated on the
    gather's input: each input block gives the inner reduction only the rows the gather picks
    (in input order, repeats included: these reductions ignore order), so several gathers of
    one input share its pass.  The inner reduction's partials and result are unchanged."""

    def __init__(self, inner: Reduction, part: Node, axis: int, positions: np.ndarray) -> None:
        super().__init__(inner.name, part, inner.axes, inner.keepdims)
        self.inner = inner
        self.axis = axis
        # Rows in input order: a block finds its rows by two binary searches.
        self.order = np.argsort(positions, kind="stable")
        self.sorted = positions[self.order]

    def _rows(self, start: int, stop: int) -> np.ndarray:
        low, high = np.searchsorted(self.sorted, [start, stop])
        rows: np.ndarray = self.sorted[low:high] - start
        return rows

    def partial(self, block: np.ndarray, region: Region) -> Any:
        window = region[self.axis]
        rows = self._rows(window.start, window.stop)
        if not len(rows):
            return None
        before = (slice(None),) * self.axis
        if bool((np.diff(rows) == 1).all()):  # one run of rows (the usual group): a view
            picked = block[(*before, slice(int(rows[0]), int(rows[-1]) + 1))]
        else:
            picked = np.take(block, rows, axis=self.axis)
        inner_region = (*region[: self.axis], slice(0, len(rows)), *region[self.axis + 1 :])
        return self.inner.partial(np.ascontiguousarray(picked), inner_region)

    def merge(self, partial: Any, region: Region) -> None:
        if partial is not None:
            self.inner.merge(partial, region)

    def finish(self) -> Any:
        return self.inner.finish()


def gathered_rows(reduction: Reduction) -> Reduction:
    """``reduction`` as a :class:`GatheredRows` of its input where it reduces a gather of
    listed positions along one reduced axis (rows from a group's integer index), else
    itself.  Only reductions whose partials ignore where a block lies qualify."""
    expr = reduction.expr
    if type(reduction) not in (Moments, Accumulate, Extreme) or not isinstance(expr, Gather):
        return reduction
    mapped = [axis for axis, m in enumerate(expr.maps) if m is not None]
    if len(mapped) != 1 or mapped[0] not in reduction.axes or expr.fills[mapped[0]] is not None:
        return reduction
    axis = mapped[0]
    axis_map = expr.maps[axis]
    assert axis_map is not None
    positions = np.asarray(axis_map.positions(0, axis_map.length), dtype=np.int64)
    if not len(positions) or int(positions.min()) < 0:
        return reduction
    return GatheredRows(reduction, expr.part, axis, positions)


# NumPy's warnings for cells with nothing to reduce (what quiet Deferred nodes leave out).
_EMPTY_SLICE = r"(Mean of empty slice|Degrees of freedom <= 0 for slice)"


def resolve(roots: Sequence[Node], progress: bool = True) -> None:
    """Evaluates every pending :class:`Deferred` of the trees ``roots`` in one call of the
    engine (reductions of one input share its pass); nested ones first."""
    pending = _pending(roots)
    if not pending:
        return
    # A pending reduction's own input may hold pending reductions: those go first.
    resolve([node.source for node in pending], progress)
    reductions = [node.make() for node in pending]
    evaluate([gathered_rows(r) for r in reductions], [], progress)
    for node, reduction in zip(pending, reductions, strict=True):
        with warnings.catch_warnings():
            if node.quiet:
                warnings.filterwarnings("ignore", _EMPTY_SLICE, RuntimeWarning)
            node.settle(reduction.finish())
