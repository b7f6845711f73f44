"""Lazy rearrangements of chunked arrays and expressions: nodes whose blocks are blocks of
their input moved to other axes or places, read only where a block needs them.

:class:`Transpose` permutes axes (``x.T``, ``np.transpose``); its blocks follow the input's
chunks, permuted, so a transposed array is evaluated one input chunk at a time.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from numpy.lib.array_utils import normalize_axis_index

from oocarray._compute._nodes import BlockReads, Node, Region, as_node

__all__ = ["FUNCTIONS", "Transpose", "permute_dims"]


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


FUNCTIONS: dict[Any, Callable[..., Any]] = {
    np.transpose: lambda a, axes=None: permute_dims(a, axes),
    np.permute_dims: lambda a, axes=None: permute_dims(a, axes),
}
