"""Lazy rearrangements of chunked arrays and expressions: nodes whose blocks are blocks of
their input moved to other axes or places, read only where a block needs them.

:class:`Transpose` permutes axes (``x.T``, ``np.transpose``, ``np.moveaxis``,
``np.swapaxes``, ``np.matrix_transpose``); its blocks follow the input's chunks, permuted, so
a transposed array is evaluated one input chunk at a time.  ``np.broadcast_to`` is the
elementwise expressions' lazy broadcast (``_broadcast``).

This module's :data:`FUNCTIONS` also registers the shape and indexing functions of
``_reshape`` (reshape, squeeze, expand_dims), ``_gather`` (flip, roll, tile, repeat, pad),
``_take`` (take, take_along_axis) and ``_masks`` (nonzero, argwhere, flatnonzero, extract,
compress).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from numpy.lib.array_utils import normalize_axis_index, normalize_axis_tuple

from oocarray._compute import _gather, _masks, _reshape, _take
from oocarray._compute._broadcast import broadcast_node
from oocarray._compute._nodes import BlockReads, Node, Region, as_node
from oocarray._compute._reshape import probe

__all__ = [
    "FUNCTIONS",
    "Transpose",
    "broadcast_arrays",
    "broadcast_to",
    "matrix_transpose",
    "moveaxis",
    "permute_dims",
    "swapaxes",
]


class Transpose(Node):
    """``part`` with its axes permuted: axis ``i`` of this node is axis ``axes[i]`` of it."""

    def __init__(self, part: Node, axes: Sequence[int]) -> None:
        self.part = part
        self.axes = tuple(axes)
        self.shape = tuple(part.shape[a] for a in self.axes)
        self.dtype = part.dtype

    def children(self) -> Sequence[Node]:
        return (self.part,)

    def chunks(self) -> tuple[int, ...] | None:
        found = self.part.chunks()
        return None if found is None else tuple(found[a] for a in self.axes)

    def evaluate(self, region: Region, reads: BlockReads) -> np.ndarray:
        inner: list[slice] = [slice(0, 0)] * len(self.axes)
        for own, axis in enumerate(self.axes):
            inner[axis] = region[own]
        shape = tuple(s.stop - s.start for s in inner)
        block = np.broadcast_to(self.part.evaluate(tuple(inner), reads), shape)
        return block.transpose(self.axes)


def _axes(axes: Any, ndim: int) -> tuple[int, ...]:
    if axes is None:
        return tuple(reversed(range(ndim)))
    order = tuple(normalize_axis_index(a, ndim) for a in axes)
    if sorted(order) != list(range(ndim)):
        raise ValueError(f"axes {tuple(axes)} are not a permutation of {ndim} axes")
    return order


def permute_dims(x: Any, axes: Any = None) -> Node:
    """``x`` with its axes in the order ``axes`` (reversed by default), lazily."""
    node = as_node(x)
    order = _axes(axes, node.ndim)
    if order == tuple(range(node.ndim)):
        return node
    if isinstance(node, Transpose):  # a transpose of a transpose is one permutation
        return permute_dims(node.part, [node.axes[a] for a in order])
    return Transpose(node, order)


def moveaxis(a: Any, source: Any, destination: Any) -> Node:
    """``np.moveaxis``: axes moved to new positions, the others keeping their order."""
    node = as_node(a)
    np.moveaxis(probe(node), source, destination)  # NumPy's errors
    sources = normalize_axis_tuple(source, node.ndim, "source")
    destinations = normalize_axis_tuple(destination, node.ndim, "destination")
    order = [n for n in range(node.ndim) if n not in sources]
    for where, axis in sorted(zip(destinations, sources, strict=True)):
        order.insert(where, axis)
    return permute_dims(node, order)


def swapaxes(a: Any, axis1: Any, axis2: Any) -> Node:
    """``np.swapaxes``: two axes interchanged."""
    node = as_node(a)
    first = normalize_axis_index(axis1, node.ndim)
    second = normalize_axis_index(axis2, node.ndim)
    order = list(range(node.ndim))
    order[first], order[second] = second, first
    return permute_dims(node, order)


def matrix_transpose(x: Any) -> Node:
    """``np.matrix_transpose``: the last two axes swapped (a stack of matrices transposed)."""
    node = as_node(x)
    np.matrix_transpose(probe(node))  # NumPy's error below 2 dimensions
    return swapaxes(node, -1, -2)


def broadcast_to(array: Any, shape: Any, subok: bool = False) -> Node:
    """``np.broadcast_to``: lazily, nothing repeated in memory beyond a block."""
    node = as_node(array)
    target = tuple(np.broadcast_to(probe(node), shape).shape)  # NumPy's errors
    return broadcast_node(node, target)


def broadcast_arrays(*args: Any, subok: bool = False) -> tuple[Node, ...]:
    """``np.broadcast_arrays``: each argument broadcast to their common shape, lazily."""
    nodes = [as_node(a) for a in args]
    shape = np.broadcast_shapes(*(n.shape for n in nodes))
    return tuple(broadcast_to(n, shape) for n in nodes)


def _reshape_function(
    a: Any, shape: Any = None, order: str = "C", *, newshape: Any = None, copy: Any = None
) -> Node:
    if shape is None and newshape is None:
        raise TypeError("reshape() missing 1 required positional argument: 'shape'")
    return _reshape.reshape(a, shape if shape is not None else newshape, order)


FUNCTIONS: dict[Any, Callable[..., Any]] = {
    np.transpose: lambda a, axes=None: permute_dims(a, axes),
    np.permute_dims: lambda a, axes=None: permute_dims(a, axes),
    np.moveaxis: moveaxis,
    np.swapaxes: swapaxes,
    np.matrix_transpose: matrix_transpose,
    np.linalg.matrix_transpose: matrix_transpose,
    np.broadcast_to: broadcast_to,
    np.broadcast_arrays: broadcast_arrays,
    np.expand_dims: _reshape.expand_dims,
    np.squeeze: _reshape.squeeze,
    np.reshape: _reshape_function,
    np.ravel: _reshape.ravel,
    np.flip: _gather.flip,
    np.flipud: lambda m: _gather.flip(m, 0),
    np.fliplr: lambda m: _gather.flip(m, 1),
    np.roll: _gather.roll,
    np.tile: _gather.tile,
    np.repeat: _gather.repeat,
    np.pad: _gather.pad,
    np.take: _take.take,
    np.take_along_axis: _take.take_along_axis,
    np.nonzero: _masks.nonzero,
    np.argwhere: _masks.argwhere,
    np.flatnonzero: _masks.flatnonzero,
    np.extract: _masks.extract,
    np.compress: _masks.compress,
}
