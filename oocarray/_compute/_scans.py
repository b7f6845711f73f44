"""Scans of chunked arrays out of core: cumulative sums and products, and differences.

A scan along a chunked axis runs in two passes.  The first (a streaming reduction) totals each
segment of the axis, a segment being one chunk along it; the exclusive prefix of those totals is
each segment's carry.  The second pass is lazy: a block of the result is the block's own scan
from the start of its segment, combined with that segment's carry, so any block is computed on
its own, only when asked for.  Integer results wrap on overflow exactly as NumPy's (addition and
multiplication modulo 2**bits are associative); float results equal NumPy's within rounding.

``np.diff`` is a lazy node whose block reads ``n`` more elements along the axis.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from numpy.lib.array_utils import normalize_axis_index

from oocarray._compute._engine import evaluate
from oocarray._compute._limits import require_memory, unsupported
from oocarray._compute._nodes import Apply, BlockReads, Concat, Constant, Node, Region, as_node
from oocarray._compute._reduce import Reduction

__all__ = ["FUNCTIONS", "Diff", "Ravel", "Scan", "scan"]

# name: (NumPy's function, the ufunc it accumulates with, its identity)
_SCANS: dict[str, tuple[Callable[..., Any], np.ufunc, int]] = {
    "cumsum": (np.cumsum, np.add, 0),
    "cumprod": (np.cumprod, np.multiply, 1),
    "cumulative_sum": (np.cumulative_sum, np.add, 0),
    "cumulative_prod": (np.cumulative_prod, np.multiply, 1),
    "nancumsum": (np.nancumsum, np.add, 0),
    "nancumprod": (np.nancumprod, np.multiply, 1),
}


def _full(block: np.ndarray, region: Region) -> np.ndarray:
    return np.broadcast_to(block, tuple(s.stop - s.start for s in region))


class Ravel(Node):
    """``part`` flattened in C order; a block reads only the elements it covers (whole rows
    where it covers them, the parts of rows at its ends)."""

    # Flattened blocks are whole rows of the part's chunks when those are at most this many
    # times a chunk, else a chunk's worth of elements (rows too long to read whole).
    WHOLE_ROWS_CHUNKS = 16

    def __init__(self, part: Node) -> None:
        self.part = part
        self.shape = (part.size,)
        self.dtype = part.dtype

    def children(self) -> Sequence[Node]:
        return (self.part,)

    def chunks(self) -> tuple[int, ...] | None:
        found = self.part.chunks() or (1, *self.part.shape[1:])
        found = tuple(max(1, min(c, n)) for c, n in zip(found, self.part.shape, strict=True))
        rows = found[0] * math.prod(self.part.shape[1:])
        chunk = math.prod(found)
        return (max(1, rows if rows <= self.WHOLE_ROWS_CHUNKS * chunk else chunk),)

    def evaluate(self, region: Region, reads: BlockReads) -> np.ndarray:
        (want,) = region
        return self._range((), want.start, want.stop, reads)

    def _range(self, prefix: Region, start: int, stop: int, reads: BlockReads) -> np.ndarray:
        """Elements ``start:stop`` (flat, C order) of the part at the leading indices
        ``prefix`` (one index per slice)."""
        rest = self.part.shape[len(prefix) :]
        if not rest:
            return _full(self.part.evaluate(prefix, reads), prefix).reshape(-1)
        row = math.prod(rest[1:])
        pieces = []
        position = start
        while position < stop:
            first = position // row
            if position % row == 0 and stop >= (first + 1) * row:  # whole rows
                last = stop // row
                rows = (*prefix, slice(first, last), *(slice(0, n) for n in rest[1:]))
                pieces.append(_full(self.part.evaluate(rows, reads), rows).reshape(-1))
                position = last * row
            else:  # part of one row
                end = min(stop, (first + 1) * row)
                inner = (*prefix, slice(first, first + 1))
                pieces.append(self._range(inner, position - first * row, end - first * row, reads))
                position = end
        if len(pieces) == 1:
            return pieces[0]
        return np.concatenate(pieces) if pieces else np.empty(0, self.dtype)


class _SegmentTotals(Reduction):
    """Pass 1 of a scan: the total of each segment (``length`` elements along ``axis``)."""

    def __init__(
        self, expr: Node, axis: int, length: int, ufunc: np.ufunc, dtype: np.dtype[Any]
    ) -> None:
        super().__init__("scan", expr, (axis,), True)
        self.axis, self.length, self.ufunc, self.dtype = axis, length, ufunc, dtype
        shape = list(expr.shape)
        shape[axis] = -(-expr.shape[axis] // length)
        identity = 0 if ufunc is np.add else 1
        self.totals = np.full(shape, identity, dtype=dtype)

    def _segments(self, region: Region) -> tuple[int, int, list[int]]:
        span = region[self.axis]
        first, last = span.start // self.length, -(-span.stop // self.length)
        starts = [max(span.start, k * self.length) - span.start for k in range(first, last)]
        return first, last, starts

    def partial(self, block: np.ndarray, region: Region) -> Any:
        _, _, starts = self._segments(region)
        with np.errstate(over="ignore", invalid="ignore"):
            return self.ufunc.reduceat(block, starts, axis=self.axis, dtype=self.dtype)

    def merge(self, partial: Any, region: Region) -> None:
        first, last, _ = self._segments(region)
        target = list(region)
        target[self.axis] = slice(first, last)
        place = tuple(target)
        with np.errstate(over="ignore", invalid="ignore"):
            self.totals[place] = self.ufunc(self.totals[place], partial)

    def finish(self) -> np.ndarray:
        """The carries: each segment's exclusive prefix of the totals."""
        if self.totals.shape[self.axis] == 0:
            return self.totals
        with np.errstate(over="ignore", invalid="ignore"):
            inclusive = self.ufunc.accumulate(self.totals, axis=self.axis, dtype=self.dtype)
        carries = np.roll(inclusive, 1, axis=self.axis)
        first = [slice(None)] * inclusive.ndim
        first[self.axis] = slice(0, 1)
        carries[tuple(first)] = 0 if self.ufunc is np.add else 1
        return carries


class Scan(Node):
    """A cumulative sum or product of ``part`` along ``axis``, from the carries of pass 1.

    ``include_initial``: the result has one more element along the axis, the identity first
    (``np.cumulative_sum(..., include_initial=True)``)."""

    def __init__(
        self,
        part: Node,
        axis: int,
        length: int,
        carries: np.ndarray,
        ufunc: np.ufunc,
        dtype: np.dtype[Any],
        include_initial: bool,
    ) -> None:
        self.part, self.axis, self.length, self.carries = part, axis, length, carries
        self.ufunc, self.dtype, self.include_initial = ufunc, dtype, include_initial
        shape = list(part.shape)
        shape[axis] += int(include_initial)
        self.shape = tuple(shape)

    def children(self) -> Sequence[Node]:
        return (self.part,)

    def chunks(self) -> tuple[int, ...] | None:
        found = self.part.chunks()
        return found if found is not None else self.part.shape

    def _inclusive(self, region: Region, reads: BlockReads) -> np.ndarray:
        """The scan at ``region`` of the input: its segment's carry combined with the scan of
        the input from the segment's start."""
        span = region[self.axis]
        segment = span.start // self.length
        start = segment * self.length
        wider = list(region)
        wider[self.axis] = slice(start, span.stop)
        block = _full(self.part.evaluate(tuple(wider), reads), tuple(wider))
        with np.errstate(over="ignore", invalid="ignore"):
            local = self.ufunc.accumulate(block, axis=self.axis, dtype=self.dtype)
            if segment:
                # (The first segment's carry is the identity: combined with it, -0.0 would
                # become 0.0 and a complex infinity 0+infj would become nan+infj.)
                place = list(region)
                place[self.axis] = slice(segment, segment + 1)
                local = self.ufunc(local, self.carries[tuple(place)], dtype=self.dtype)
        keep = [slice(None)] * local.ndim
        keep[self.axis] = slice(span.start - start, None)
        result: np.ndarray = local[tuple(keep)]
        return result

    def evaluate(self, region: Region, reads: BlockReads) -> np.ndarray:
        if not self.include_initial:
            return self._inclusive(region, reads)
        span = region[self.axis]
        inner = list(region)
        inner[self.axis] = slice(max(span.start - 1, 0), span.stop - 1)
        pieces = []
        if span.start == 0:
            shape = [s.stop - s.start for s in region]
            shape[self.axis] = 1
            pieces.append(np.full(shape, 0 if self.ufunc is np.add else 1, dtype=self.dtype))
        if inner[self.axis].stop > inner[self.axis].start:
            pieces.append(self._inclusive(tuple(inner), reads))
        return np.concatenate(pieces, axis=self.axis) if len(pieces) > 1 else pieces[0]


def _probe(
    function: Callable[..., Any], ndim: int, input_dtype: np.dtype[Any], **kwargs: Any
) -> Any:
    """NumPy's answer on a one-element array of this ndim: its errors, and the result dtype."""
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return function(np.ones((1,) * ndim, input_dtype), **kwargs)


def scan(
    name: str,
    x: Any,
    axis: Any = None,
    dtype: Any = None,
    out: Any = None,
    include_initial: bool = False,
) -> Any:
    """``np.<name>(x, axis, dtype)`` for ``name`` in cumsum, cumprod, cumulative_sum,
    cumulative_prod, nancumsum and nancumprod: one pass totalling segments now, the result lazy
    (an expression).

    Examples
    --------
    >>> import numpy as np, oocarray as oc
    >>> x = oc.from_numpy(np.arange(1, 9), chunks=(3,))
    >>> np.cumsum(x).compute().tolist()
    [1, 3, 6, 10, 15, 21, 28, 36]
    >>> np.cumulative_prod(x, include_initial=True)[:4].tolist()
    [1, 1, 2, 6]
    """
    if out is not None:
        raise unsupported(f"np.{name}(..., out=)")
    function, ufunc, identity = _SCANS[name]
    node = as_node(x)
    if name.startswith("nan") and node.dtype.kind in "fc":  # NaNs count as the identity

        def nan_as_identity(block: np.ndarray) -> np.ndarray:
            return np.where(np.isnan(block), np.asarray(identity, block.dtype), block)

        node = Apply(nan_as_identity, [node], node.shape, node.dtype, name=f"{name} NaNs")
    kwargs: dict[str, Any] = {"axis": axis, "dtype": dtype}
    if name.startswith("cumulative"):
        kwargs["include_initial"] = include_initial
    if node.ndim == 0:  # one element: NumPy's answer (and errors) on it
        return function(np.asarray(node.evaluate((), BlockReads())), **kwargs)
    result_dtype = np.asarray(_probe(function, node.ndim, node.dtype, **kwargs)).dtype
    if axis is None and node.ndim > 1:
        node, axis = Ravel(node), 0
    axis = normalize_axis_index(0 if axis is None else axis, node.ndim)
    chunks = node.chunks()
    length = max(1, chunks[axis] if chunks is not None else node.shape[axis])
    totals_bytes = (node.size // max(1, node.shape[axis])) * -(-node.shape[axis] // length)
    totals_bytes *= result_dtype.itemsize
    require_memory(  # the totals, their scan and the carries, one per chunk along the axis
        f"np.{name}",
        3 * totals_bytes,
        smallest_bytes=3 * totals_bytes,
        hint="store the array with longer chunks along the axis (a scan keeps a total per chunk)",
    )
    totals = _SegmentTotals(node, axis, length, ufunc, result_dtype)
    evaluate([totals], [], progress=True, name=name)
    return Scan(node, axis, length, totals.finish(), ufunc, result_dtype, include_initial)


class Diff(Node):
    """``np.diff(part, n, axis)``: a block reads ``n`` more elements along the axis."""

    def __init__(self, part: Node, n: int, axis: int, dtype: np.dtype[Any]) -> None:
        self.part, self.n, self.axis, self.dtype = part, n, axis, dtype
        shape = list(part.shape)
        shape[axis] = max(0, shape[axis] - n)
        self.shape = tuple(shape)

    def children(self) -> Sequence[Node]:
        return (self.part,)

    def evaluate(self, region: Region, reads: BlockReads) -> np.ndarray:
        wider = list(region)
        span = region[self.axis]
        wider[self.axis] = slice(span.start, span.stop + self.n)
        block = _full(self.part.evaluate(tuple(wider), reads), tuple(wider))
        return np.diff(block, n=self.n, axis=self.axis)


_NO_VALUE: Any = np._NoValue


def _edge(value: Any, shape: tuple[int, ...], axis: int) -> Node:
    """A prepend= or append= value as a node: a scalar broadcast to one slice along ``axis``."""
    if isinstance(value, Node) or hasattr(value, "chunks"):
        node = as_node(value)
    else:
        array = np.asarray(value)
        if array.ndim == 0:
            edge = list(shape)
            edge[axis] = 1
            array = np.broadcast_to(array, tuple(edge))
        node = Constant(array, array.shape)
    other = shape[:axis] + shape[axis + 1 :]
    if node.ndim != len(shape) or node.shape[:axis] + node.shape[axis + 1 :] != other:
        raise ValueError(
            "all the input array dimensions except for the concatenation axis must match "
            f"exactly: {shape} and {node.shape} along axis {axis}"
        )
    return node


def diff(
    a: Any, n: int = 1, axis: int = -1, prepend: Any = _NO_VALUE, append: Any = _NO_VALUE
) -> Any:
    """``np.diff`` of a chunked array or expression, lazily.

    Examples
    --------
    >>> import numpy as np, oocarray as oc
    >>> x = oc.from_numpy(np.array([1, 4, 9, 16, 25]), chunks=(2,))
    >>> np.diff(x, prepend=0).compute().tolist()
    [1, 3, 5, 7, 9]
    """
    node = as_node(a)
    if n == 0:
        return node
    if n < 0:
        raise ValueError(f"order must be non-negative but got {n!r}")
    if node.ndim == 0:
        raise ValueError("diff requires input that is at least one dimensional")
    axis = normalize_axis_index(axis, node.ndim)
    parts = [node]
    if prepend is not _NO_VALUE:
        parts.insert(0, _edge(prepend, node.shape, axis))
    if append is not _NO_VALUE:
        parts.append(_edge(append, node.shape, axis))
    joined = Concat(parts, axis) if len(parts) > 1 else node
    probe = [1] * joined.ndim
    probe[axis] = n + 1
    dtype = np.diff(np.ones(probe, joined.dtype), n=n, axis=axis).dtype
    return Diff(joined, n, axis, dtype)


def _scan_function(name: str) -> Callable[..., Any]:
    if name.startswith("cumulative"):

        def cumulative(
            x: Any,
            /,
            *,
            axis: Any = None,
            dtype: Any = None,
            out: Any = None,
            include_initial: bool = False,
        ) -> Any:
            return scan(name, x, axis, dtype, out, include_initial)

        return cumulative

    def cumulate(a: Any, axis: Any = None, dtype: Any = None, out: Any = None) -> Any:
        return scan(name, a, axis, dtype, out)

    return cumulate


FUNCTIONS: dict[Any, Callable[..., Any]] = {
    **{_SCANS[name][0]: _scan_function(name) for name in _SCANS},
    np.diff: diff,
}
