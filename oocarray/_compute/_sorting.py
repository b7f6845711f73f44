"""Sorting and selection of chunked arrays out of core: ``np.sort``, ``np.argsort``,
``np.partition``, ``np.argpartition``, ``np.searchsorted`` (and, from ``_quantiles``, the
quantile functions).

Along an axis whose lines fit in memory a sort is lazy: a :class:`SortAlong` node, whose
blocks hold whole lines (as few as fit) and are sorted on their own.  Along a flattened array
(``axis=None``, or a 1-d array), or lines too long for memory, it is an external merge sort
(``_external_sort``): the result is an ndarray when it fits the budget, else a temporary
chunked array.  A partition is a sort (a sorted array is partitioned at every ``kth``).

A lazy sort along an axis split into chunks reads its lines across those chunks: each input
chunk is decoded once per block of lines it holds (store such arrays with the sorted axis
whole in each chunk where sorts along it are frequent).  Lines too long for a lazy block but
that fit a few at a time (a tall array sorted along its chunked first axis) are sorted in
blocks of lines, in RAM, into a temporary chunked array, the input decoded once
(``_sort_blocks``).  Lines longer than memory are sorted one at a time.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from numpy.lib.array_utils import normalize_axis_index

from oocarray._compute import _quantiles
from oocarray._compute._engine import StoreTarget, evaluate
from oocarray._compute._external_sort import read_region, sort_flat
from oocarray._compute._limits import working_bytes
from oocarray._compute._nodes import BlockReads, Node, Region, Source, as_node
from oocarray._compute._sort_blocks import sort_line_blocks
from oocarray._compute._temporaries import temporary
from oocarray._storage import StoredArray

__all__ = ["FUNCTIONS", "SortAlong", "SortedLookup", "argsort", "searchsorted", "sort"]

_KINDS = (None, "quicksort", "mergesort", "heapsort", "stable")
# A lazy sort's block may take this fraction of the working memory.
LINE_SHARE = 6


class SortAlong(Node):
    """``part`` sorted (or argsorted) along ``axis``, block by block: each block holds whole
    lines along the axis, as many as ``block`` allows along the other axes."""

    def __init__(self, part: Node, axis: int, kind: Any, arg: bool, block: tuple[int, ...]) -> None:
        self.part = part
        self.axis = axis
        self.kind = kind
        self.arg = arg
        self.block = block
        self.shape = part.shape
        self.dtype = np.dtype(np.intp) if arg else part.dtype

    def children(self) -> Sequence[Node]:
        return (self.part,)

    def chunks(self) -> tuple[int, ...] | None:
        return self.block

    def evaluate(self, region: Region, reads: BlockReads) -> np.ndarray:
        whole = list(region)
        whole[self.axis] = slice(0, self.shape[self.axis])
        shape = tuple(s.stop - s.start for s in whole)
        lines = np.broadcast_to(self.part.evaluate(tuple(whole), reads), shape)
        function = np.argsort if self.arg else np.sort
        done = function(lines, axis=self.axis, kind=self.kind)
        wanted = [slice(None)] * len(shape)
        wanted[self.axis] = region[self.axis]
        return done[tuple(wanted)]


def _line_block(node: Node, axis: int) -> tuple[int, ...] | None:
    """The block of a lazy sort along ``axis``: whole lines, the other axes cut (from the
    node's chunks) until a block and its sorting fit a share of the budget; None when one
    line does not fit."""
    # A block holds its lines, their sorted copy (or order) and the block written out; the
    # engine runs fewer blocks at once where the budget is short.
    per_item = 3 * node.dtype.itemsize + 2 * np.dtype(np.intp).itemsize
    share = working_bytes() // LINE_SHARE
    block = list(node.chunks() or (1, *node.shape[1:]))
    block = [max(1, min(b, n)) for b, n in zip(block, node.shape, strict=True)]
    block[axis] = node.shape[axis]
    while math.prod(block) * per_item > share:
        others = [i for i in range(len(block)) if i != axis and block[i] > 1]
        if not others:
            return None
        widest = max(others, key=lambda i: block[i])
        block[widest] = (block[widest] + 1) // 2
    return tuple(block)


def _kind(name: str, kind: Any, stable: bool | None, order: Any) -> Any:
    if order is not None:
        raise TypeError(f"np.{name}(..., order=) is not supported on chunked arrays")
    if stable is not None:
        if kind is not None:
            raise ValueError("`kind` and `stable` parameters can't be provided at the same time")
        return "stable" if stable else None
    if kind not in _KINDS:
        raise ValueError(f"{name} kind must be one of {_KINDS[1:]}, got {kind!r}")
    return kind


def _sort(name: str, a: Any, axis: Any, kind: Any, arg: bool) -> Any:
    node = as_node(a)
    if axis is None:  # (a 0-d array sorts as a 1-element one, as in NumPy)
        return sort_flat(node, kind, arg)
    if node.ndim == 0:
        if arg:  # NumPy argsorts a 0-d array as a 1-element one
            normalize_axis_index(axis, 1)
            return np.zeros(1, np.intp)
        raise np.exceptions.AxisError(axis, 0)
    axis = normalize_axis_index(axis, node.ndim)
    if node.ndim == 1:
        return sort_flat(node, kind, arg)
    if node.size == 0:  # nothing to sort: NumPy's empty result (no blocks to plan)
        empty = np.empty(node.shape, node.dtype)
        return np.argsort(empty, axis=axis, kind=kind) if arg else np.sort(empty, axis, kind)
    block = _line_block(node, axis)
    if block is not None:
        return SortAlong(node, axis, kind, arg, block)
    in_blocks = sort_line_blocks(node, axis, kind, arg)
    if in_blocks is not None:
        return in_blocks
    return _sort_lines(node, axis, kind, arg)


def _sort_lines(node: Node, axis: int, kind: Any, arg: bool) -> Any:
    """Each line along ``axis`` sorted on its own, by the external merge sort, into a
    temporary chunked array (lines longer than memory)."""
    out = temporary(node.shape, np.intp if arg else node.dtype)
    others = [n if i != axis else 1 for i, n in enumerate(node.shape)]
    for index in np.ndindex(*others):
        line = _Line(node, axis, index)
        result = sort_flat(line, kind, arg)
        place = tuple(slice(i, i + 1) if d != axis else slice(None) for d, i in enumerate(index))
        length = node.shape[axis]
        step = max(1, working_bytes() // (4 * max(1, out.dtype.itemsize)))
        for start in range(0, length, step):
            part = result[start : start + step]
            target = list(place)
            target[axis] = slice(start, start + len(part))
            shape = [1] * node.ndim
            shape[axis] = len(part)
            out[tuple(target)] = np.asarray(part).reshape(shape)
    return out


class _Line(Node):
    """One line of ``part`` along ``axis`` (the other axes fixed at ``index``), as 1-d."""

    def __init__(self, part: Node, axis: int, index: tuple[int, ...]) -> None:
        self.part = part
        self.axis = axis
        self.index = index
        self.shape = (part.shape[axis],)
        self.dtype = part.dtype

    def children(self) -> Sequence[Node]:
        return (self.part,)

    def chunks(self) -> tuple[int, ...] | None:
        found = self.part.chunks()
        return None if found is None else (found[self.axis],)

    def evaluate(self, region: Region, reads: BlockReads) -> np.ndarray:
        inner = tuple(
            region[0] if d == self.axis else slice(i, i + 1) for d, i in enumerate(self.index)
        )
        return read_region(self.part, inner).reshape(-1)


def sort(a: Any, axis: Any = -1, kind: Any = None, order: Any = None, *, stable: Any = None) -> Any:
    """``np.sort`` of a chunked array or expression, out of core.

    Along an axis whose lines fit in memory the result is lazy (an expression sorted block by
    block); along lines too long for that but of which a few fit the budget, a temporary
    chunked array sorted a block of lines at a time; flattened (``axis=None``) or along a 1-d
    array it is an external merge sort whose result is an ndarray when it fits the budget,
    else a temporary chunked array.

    Examples
    --------
    >>> import numpy as np, oocarray as oc
    >>> x = oc.from_numpy(np.array([[3, 1, 2], [9, 7, 8]]), chunks=(1, 2))
    >>> np.sort(x, axis=1)[...]
    array([[1, 2, 3],
           [7, 8, 9]])
    >>> np.sort(x, axis=None)
    array([1, 2, 3, 7, 8, 9])
    """
    return _sort("sort", a, axis, _kind("sort", kind, stable, order), arg=False)


def argsort(
    a: Any, axis: Any = -1, kind: Any = None, order: Any = None, *, stable: Any = None
) -> Any:
    """``np.argsort`` of a chunked array or expression, as :func:`sort` (indices along the
    axis, or into the flattened array for ``axis=None``; ``kind="stable"`` keeps ties in
    order)."""
    return _sort("argsort", a, axis, _kind("argsort", kind, stable, order), arg=True)


def _check_kth(kth: Any, length: int) -> None:
    kth_array = np.asarray(kth)
    if kth_array.dtype.kind not in "iu":
        raise TypeError("Partition index must be integer")
    if kth_array.size and (kth_array.max() >= length or kth_array.min() < -length):
        bad = int(kth_array.max() if kth_array.max() >= length else kth_array.min())
        raise ValueError(f"kth(={bad}) out of bounds ({length})")


def _partition(arg: bool) -> Callable[..., Any]:
    name = "argpartition" if arg else "partition"

    def function(
        a: Any, kth: Any, axis: Any = -1, kind: str = "introselect", order: Any = None
    ) -> Any:
        if order is not None:
            raise TypeError(f"np.{name}(..., order=) is not supported on chunked arrays")
        if kind != "introselect":
            raise ValueError(f"{name} kind must be 'introselect', got {kind!r}")
        node = as_node(a)
        if axis is None:
            length = node.size
        else:
            if node.ndim == 0:
                raise np.exceptions.AxisError(axis, 0)
            length = node.shape[normalize_axis_index(axis, node.ndim)]
        _check_kth(kth, length)
        # A sorted line is partitioned at every kth.
        return _sort(name, node, axis, "stable" if arg else None, arg)

    function.__name__ = name
    return function


class SortedLookup:
    """Binary search of a sorted 1-d chunked array: chunk first elements are read (and
    remembered) only where the search needs them, then only the chunks that hold answers."""

    def __init__(self, array: StoredArray) -> None:
        if len(array.shape) != 1:
            raise ValueError("searchsorted needs a 1-d sorted array")
        self.array = array
        self.size = array.shape[0]
        self.chunk = max(1, array.chunks[0])
        self.count = math.ceil(self.size / self.chunk)
        self.firsts: dict[int, np.ndarray] = {}

    def _first(self, chunk: int) -> np.ndarray:
        found = self.firsts.get(chunk)
        if found is None:
            found = np.asarray(self.array[chunk * self.chunk : chunk * self.chunk + 1])
            self.firsts[chunk] = found
        return found

    def find(self, values: np.ndarray, side: Any) -> np.ndarray:
        flat = np.asarray(values).reshape(-1)
        low = np.zeros(len(flat), np.intp)
        high = np.full(len(flat), self.count, np.intp)
        # Chunks whose first element goes before each value (searchsorted's side): the
        # answer is in the last of them.
        while (active := low < high).any():
            middle = (low + high) // 2
            before = np.zeros(len(flat), bool)
            for chunk in np.unique(middle[active]).tolist():
                chosen = active & (middle == chunk)
                before[chosen] = np.searchsorted(self._first(chunk), flat[chosen], side) > 0
            low = np.where(active & before, middle + 1, low)
            high = np.where(active & ~before, middle, high)
        chunk_of = low - 1
        result = np.zeros(len(flat), np.intp)
        for chunk in np.unique(chunk_of[chunk_of >= 0]).tolist():
            chosen = chunk_of == chunk
            start = chunk * self.chunk
            block = self.array[start : min(start + self.chunk, self.size)]
            result[chosen] = start + np.searchsorted(block, flat[chosen], side)
        return result.reshape(np.shape(values))


class _Search(Node):
    """``np.searchsorted`` for lazy ``values``, block by block: ``find`` (a block of values
    -> their positions) searches a chunked sorted array or an ndarray."""

    def __init__(self, find: Callable[[np.ndarray], np.ndarray], values: Node) -> None:
        self.find = find
        self.values = values
        self.shape = values.shape
        self.dtype = np.dtype(np.intp)

    def children(self) -> Sequence[Node]:
        return (self.values,)

    def evaluate(self, region: Region, reads: BlockReads) -> np.ndarray:
        shape = tuple(s.stop - s.start for s in region)
        return self.find(np.broadcast_to(self.values.evaluate(region, reads), shape))


def searchsorted(a: Any, v: Any, side: Any = "left", sorter: Any = None) -> Any:
    """``np.searchsorted`` of a sorted 1-d chunked array: a binary search over its chunks'
    first elements, then a search inside only the chunks that hold answers.  Chunked or
    lazy ``v`` gives a lazy result.

    Examples
    --------
    >>> import numpy as np, oocarray as oc
    >>> x = oc.from_numpy(np.arange(0, 100, 2), chunks=8)
    >>> np.searchsorted(x, [3, 40, 1000])
    array([ 2, 20, 50])
    """
    if sorter is not None:
        raise TypeError(
            "np.searchsorted(..., sorter=) is not supported on chunked arrays: sort the array "
            "(np.sort) and search the sorted one"
        )
    if side not in ("left", "right"):
        raise ValueError(f"side must be 'left' or 'right' (got {side!r})")
    if isinstance(a, Node):
        a = _stored(a)
    if not isinstance(a, StoredArray):
        # An ndarray searched for chunked values: a lazy map over the values' blocks.
        sorted_values = np.asarray(a)
        node = as_node(v)
        return _Search(lambda block: np.searchsorted(sorted_values, block, side), node)
    lookup = SortedLookup(a)
    if isinstance(v, StoredArray | Node):
        return _Search(lambda block: lookup.find(block, side), as_node(v))
    values = np.asarray(v)
    if values.dtype.hasobject:
        raise TypeError("searchsorted takes numbers")
    found = lookup.find(values, side)
    return found[()] if values.ndim == 0 else found


def _stored(node: Node) -> StoredArray:
    """The array an expression searched in holds: its stored array, or its values written
    once, block by block, to a temporary one (the search then reads few of its chunks)."""
    if isinstance(node, Source):
        return node.array
    out = temporary(node.shape, node.dtype, chunks=node.chunks())
    evaluate([], [StoreTarget(node, out.__setitem__, tuple(out.chunks))], False, "searchsorted")
    return out


FUNCTIONS: dict[Any, Callable[..., Any]] = {
    np.sort: sort,
    np.argsort: argsort,
    np.partition: _partition(arg=False),
    np.argpartition: _partition(arg=True),
    np.searchsorted: searchsorted,
    **_quantiles.FUNCTIONS,
}
