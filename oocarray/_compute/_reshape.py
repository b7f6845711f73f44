"""Reshapes of chunked arrays and expressions: lazy where the block grid lines up, else written
once into a temporary chunked array.

In C order a reshape keeps every element's flat position, so a block of the result is a set of
runs of flat positions, and a run of the input's flat positions is a few rectangles of the
input (:func:`flat_rectangles`: at most ``2 * ndim - 1``).  :class:`Reshape` evaluates any
region that way.  Lazily, its blocks are made of whole bands of input chunks along the first
axis that are also whole rows of the result (a flat length that is a multiple of both): each
input chunk is then read by one block.  When that block would be too large (input chunks
that split the trailing axes of a large array, or rows that do not line up), :func:`reshape`
streams the result once into a temporary chunked array instead, in bands of output rows that
fit the working memory, so no call loads the whole array.

Adding and removing axes of length one (:func:`squeeze`, :func:`expand_dims`, and reshapes
that only do that) keep the input's chunks and are always lazy.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.lib.array_utils import normalize_axis_tuple

from oocarray._compute._engine import StoreTarget, evaluate
from oocarray._compute._limits import working_bytes
from oocarray._compute._nodes import BlockReads, ExpandDims, Node, Region, Source, as_node
from oocarray._compute._temporaries import temporary

__all__ = [
    "Reshape",
    "Squeeze",
    "expand_dims",
    "flat_rectangles",
    "probe",
    "ravel",
    "reshape",
    "squeeze",
]

# The largest lazy reshape block.
LAZY_BLOCK_BYTES = 64 << 20
# The chunks of a streamed reshape's temporary: bands of output rows of about this size.
STREAM_BAND_BYTES = 16 << 20


def probe(node: Node) -> np.ndarray:
    """An array of ``node``'s shape and dtype that holds one element (every stride 0): NumPy's
    functions that return views of it check arguments and give shapes as they would for the
    real array, without allocating it."""
    return np.broadcast_to(np.zeros((), node.dtype), node.shape)


def _shape_of(region: Region) -> tuple[int, ...]:
    return tuple(s.stop - s.start for s in region)


def flat_rectangles(shape: tuple[int, ...], start: int, stop: int) -> list[Region]:
    """Regions of an array of ``shape`` whose elements, each region in C order and the regions
    one after another, are its flat positions ``[start, stop)``."""
    if start >= stop:
        return []
    if not shape:
        return [()]
    if len(shape) == 1:
        return [(slice(start, stop),)]
    row = math.prod(shape[1:])
    inner = shape[1:]
    first, last = start // row, (stop - 1) // row
    if first == last:
        local = flat_rectangles(inner, start - first * row, stop - first * row)
        return [(slice(first, first + 1), *r) for r in local]
    out: list[Region] = []
    if start % row:
        out += [(slice(first, first + 1), *r) for r in flat_rectangles(inner, start % row, row)]
        first += 1
    whole_end = stop // row
    if whole_end > first:
        out.append((slice(first, whole_end), *(slice(0, n) for n in inner)))
    if stop % row:
        out += [
            (slice(whole_end, whole_end + 1), *r) for r in flat_rectangles(inner, 0, stop % row)
        ]
    return out


class Reshape(Node):
    """``part`` reshaped in C order to ``shape`` (the same size)."""

    def __init__(self, part: Node, shape: tuple[int, ...], chunks: tuple[int, ...] | None) -> None:
        self.part = part
        self.shape = shape
        self.dtype = part.dtype
        self._chunks = chunks

    def children(self) -> Sequence[Node]:
        return (self.part,)

    def chunks(self) -> tuple[int, ...] | None:
        return self._chunks

    def evaluate(self, region: Region, reads: BlockReads) -> np.ndarray:
        shape = _shape_of(region)
        if 0 in shape:
            return np.empty(shape, self.dtype)
        # The axes from ``split`` on are whole: each run of flat positions covers them and a
        # range along the axis before them, at one position of the axes before that.
        split = len(shape)
        while split > 0 and shape[split - 1] == self.shape[split - 1]:
            split -= 1
        strides = [math.prod(self.shape[a + 1 :]) for a in range(len(self.shape))]
        if split == 0:
            starts: Any = [0]
            run = self.size
        else:
            run = shape[split - 1] * strides[split - 1]
            offset = region[split - 1].start * strides[split - 1]
            leading = [range(s.start, s.stop) for s in region[: split - 1]]
            starts = (
                offset + sum(i * strides[a] for a, i in enumerate(index))
                for index in itertools.product(*leading)
            )
        pieces = []
        for start in starts:
            for rect in flat_rectangles(self.part.shape, start, start + run):
                block = np.broadcast_to(self.part.evaluate(rect, reads), _shape_of(rect))
                pieces.append(block.reshape(-1))
        flat = pieces[0] if len(pieces) == 1 else np.concatenate(pieces)
        return flat.reshape(shape)


class Squeeze(Node):
    """``part`` without its axes ``axes`` (each of length 1)."""

    def __init__(self, part: Node, axes: Sequence[int]) -> None:
        self.part = part
        self.axes = tuple(sorted(axes))
        self.shape = tuple(n for a, n in enumerate(part.shape) if a not in self.axes)
        self.dtype = part.dtype

    def children(self) -> Sequence[Node]:
        return (self.part,)

    def chunks(self) -> tuple[int, ...] | None:
        found = self.part.chunks()
        if found is None:
            return None
        return tuple(c for a, c in enumerate(found) if a not in self.axes)

    def evaluate(self, region: Region, reads: BlockReads) -> np.ndarray:
        inner: list[slice] = []
        own = iter(region)
        for axis in range(self.part.ndim):
            inner.append(slice(0, 1) if axis in self.axes else next(own))
        block = np.broadcast_to(self.part.evaluate(tuple(inner), reads), _shape_of(tuple(inner)))
        return block.reshape(_shape_of(region))


def squeeze(x: Any, axis: Any = None) -> Node:
    """``np.squeeze``: axes of length 1 removed (all of them, or ``axis``), lazily.

    Examples
    --------
    >>> import numpy as np, oocarray as oc
    >>> x = oc.from_numpy(np.zeros((1, 4, 1)), chunks=(1, 2, 1))
    >>> np.squeeze(x).shape, np.squeeze(x, axis=0).shape, np.expand_dims(x, (0, -1)).shape
    ((4,), (4, 1), (1, 1, 4, 1, 1))
    """
    node = as_node(x)
    np.squeeze(probe(node), axis=axis)  # NumPy's errors: AxisError, an axis not of length 1
    if axis is None:
        axes = [a for a, n in enumerate(node.shape) if n == 1]
    else:
        axes = list(normalize_axis_tuple(axis, node.ndim))
    return Squeeze(node, axes) if axes else node


def expand_dims(x: Any, axis: Any) -> Node:
    """``np.expand_dims``: new axes of length 1 at ``axis`` (an int or a tuple), lazily."""
    node = as_node(x)
    out_ndim = np.expand_dims(probe(node), axis).ndim  # NumPy's errors
    for position in sorted(normalize_axis_tuple(axis, out_ndim)):
        node = ExpandDims(node, position)
    return node


def _without_ones(shape: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(n for n in shape if n != 1)


def _lazy_chunks(node: Node, shape: tuple[int, ...]) -> tuple[int, ...] | bool | None:
    """The block grid of a lazy reshape of ``node`` to ``shape``: whole rows of the result
    that are whole bands of input chunks.  None: no preference (no chunked input); False:
    that block would exceed :data:`LAZY_BLOCK_BYTES` or the working memory."""
    found = node.chunks()
    if found is None or not node.shape or not shape:
        return None
    band = max(1, min(found[0], node.shape[0])) * math.prod(node.shape[1:])
    row = math.prod(shape[1:])
    if band == 0 or row == 0:
        return None
    block = math.lcm(band, row)
    if block * node.dtype.itemsize > min(LAZY_BLOCK_BYTES, working_bytes() // 4):
        return False
    return (max(1, block // row), *shape[1:])


def _band_grid(shape: tuple[int, ...], itemsize: int, limit_bytes: int) -> tuple[int, ...]:
    """Chunks of whole trailing axes, as many as fit ``limit_bytes``: C-order bands."""
    grid = list(shape)
    items = max(1, limit_bytes // max(1, itemsize))
    for axis in range(len(shape) - 1, -1, -1):
        inner = math.prod(grid[axis + 1 :])
        if inner * max(1, shape[axis]) > items:
            grid[axis] = max(1, items // max(1, inner))
            for earlier in range(axis):
                grid[earlier] = 1
            break
    return tuple(max(1, g) for g in grid)


def reshape(x: Any, shape: Any, order: str = "C") -> Node:
    """``np.reshape`` in C order (``-1`` allowed): lazy when the blocks line up, else streamed
    once into a temporary chunked array (see the module's description).

    Examples
    --------
    >>> import numpy as np, oocarray as oc
    >>> x = oc.from_numpy(np.arange(12).reshape(6, 2), chunks=(3, 2))
    >>> y = np.reshape(x, (3, -1))  # blocks of 3 input rows are rows of y: lazy
    >>> y.shape, y[2]
    ((3, 4), array([ 8,  9, 10, 11]))
    """
    if order not in ("C", "A", "K"):
        raise TypeError(
            f"np.reshape(..., order={order!r}) is not supported on chunked arrays: they "
            "reshape in C order; transpose first (x.T.reshape(...)) for Fortran order"
        )
    node = as_node(x)
    new_shape = tuple(np.reshape(probe(node), shape).shape)  # NumPy's -1 and errors
    if new_shape == node.shape:
        return node
    if _without_ones(new_shape) == _without_ones(node.shape):
        # Only axes of length 1 differ: drop them all, then add the new ones, keeping chunks.
        core = squeeze(node) if 1 in node.shape else node
        ones = tuple(a for a, n in enumerate(new_shape) if n == 1)
        return expand_dims(core, ones) if ones else core
    if node.size == 0:
        return Reshape(node, new_shape, None)
    grid = _lazy_chunks(node, new_shape)
    if grid is not False:
        return Reshape(node, new_shape, grid if isinstance(grid, tuple) else None)
    return _materialize(Reshape(node, new_shape, None))


def _materialize(node: Node) -> Node:
    """``node`` written once into a temporary chunked array, in C-order bands of the result
    that fit the working memory (each input region read as few rectangles)."""
    limit = max(1, min(STREAM_BAND_BYTES, working_bytes() // 8))
    grid = _band_grid(node.shape, node.dtype.itemsize, limit)
    out = temporary(node.shape, node.dtype, chunks=grid)
    evaluate([], [StoreTarget(node, out.__setitem__, grid)], progress=True, name="reshape")
    return Source(out)


def ravel(x: Any, order: str = "C") -> Node:
    """``np.ravel``: the elements in C order along one axis (see :func:`reshape`)."""
    return reshape(x, -1, order)
