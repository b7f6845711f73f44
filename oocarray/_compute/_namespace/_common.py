"""What every part of the namespace shares: telling arrays from other values, turning the
compute layer's answers into arrays of the namespace, and broadcasting lazily.

Arrays of the namespace are the compute layer's :class:`ChunkedArray` and :class:`Expr`.
Small results (a reduction's value) come back from the compute layer as NumPy values; they are
wrapped as expressions over that value (a :class:`Constant` leaf), so a result is always an
array of the namespace and nothing is written to disk for it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.lib.array_utils import normalize_axis_index

from oocarray._compute._array import Expr, LazyArray
from oocarray._compute._nodes import BlockReads, Constant, Node, Region, as_node
from oocarray._storage import StoredArray

__all__ = [
    "Broadcast",
    "array_result",
    "as_lazy",
    "broadcast_node",
    "check_array",
    "normalize_axes",
    "tree",
]

# Largest chunk given to an axis a broadcast stretches (the engine joins blocks along the
# first axis up to its block size, so this only bounds the other axes).
_STRETCHED_CHUNK = 1024


def check_array(x: Any, function: str) -> Any:
    """``x`` when it is an array of the namespace, else a ``TypeError`` naming ``function``."""
    if not isinstance(x, LazyArray):
        raise TypeError(
            f"{function} takes arrays of oocarray.array_api (chunked arrays and expressions), "
            f"got {type(x).__name__}: make one with oocarray.array_api.asarray"
        )
    return x


def tree(x: LazyArray) -> Node:
    """The expression tree of an array of the namespace."""
    return as_node(x._tree())


def array_result(value: Any) -> Any:
    """An answer of the compute layer as an array of the namespace (tuples kept)."""
    if isinstance(value, LazyArray):
        return value
    if isinstance(value, Node):
        return Expr(value)
    if isinstance(value, tuple):
        return tuple(array_result(v) for v in value)
    if isinstance(value, StoredArray):
        raise TypeError(f"unexpected stored array type {type(value).__name__}")
    array = np.asarray(value)
    return Expr(Constant(array, array.shape))


def as_lazy(value: Any) -> Any:
    """A lazy value as an :class:`Expr`, other values as they are."""
    if isinstance(value, Node):
        return Expr(value)
    return value


class Broadcast(Node):
    """``part`` broadcast to ``shape`` (new leading axes, length-1 axes stretched), lazily."""

    def __init__(self, part: Node, shape: tuple[int, ...]) -> None:
        self.part = part
        self.shape = shape
        self.dtype = part.dtype
        self.lead = len(shape) - part.ndim

    def children(self) -> Sequence[Node]:
        return (self.part,)

    def chunks(self) -> tuple[int, ...] | None:
        found = self.part.chunks()
        if found is None:
            return None
        own = [1 if i == 0 else min(n, _STRETCHED_CHUNK) for i, n in enumerate(self.shape)]
        for axis, (chunk, n) in enumerate(zip(found, self.part.shape, strict=True)):
            if n != 1 or self.shape[self.lead + axis] == 1:
                own[self.lead + axis] = chunk
        return tuple(own)

    def evaluate(self, region: Region, reads: BlockReads) -> np.ndarray:
        inner = tuple(
            slice(0, 1) if n == 1 else region[self.lead + axis]
            for axis, n in enumerate(self.part.shape)
        )
        return np.broadcast_to(
            self.part.evaluate(inner, reads), tuple(s.stop - s.start for s in inner)
        )


def broadcast_node(node: Node, shape: tuple[int, ...]) -> Node:
    """``node`` broadcast to ``shape`` (itself when it has that shape already)."""
    if node.shape == shape:
        return node
    if np.broadcast_shapes(node.shape, shape) != shape:
        raise ValueError(f"shape {node.shape} does not broadcast to {shape}")
    if isinstance(node, Constant):
        return Constant(np.broadcast_to(np.asarray(node.value), shape), shape)
    return Broadcast(node, shape)


def normalize_axes(axis: Any, ndim: int) -> tuple[int, ...]:
    """``axis`` (None, an int or a tuple of ints) as a tuple of distinct non-negative axes."""
    if axis is None:
        return tuple(range(ndim))
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    normalized = tuple(normalize_axis_index(a, ndim) for a in axes)
    if len(set(normalized)) != len(normalized):
        raise ValueError(f"repeated axis in {axis}")
    return normalized
