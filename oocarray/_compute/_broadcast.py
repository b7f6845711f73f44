"""Lazy broadcasting: a node seen in a larger shape (new leading axes, length-1 axes
stretched), read only in the part of its own shape that a block needs, never copied.

Elementwise expressions broadcast their chunked operands with it, as NumPy broadcasts arrays
(``x - x.mean(axis=0, keepdims=True)``, a row against a matrix).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from oocarray._compute._nodes import BlockReads, Constant, Node, Region

__all__ = ["BROADCAST_BLOCK_ITEMS", "Broadcast", "broadcast_node"]

# The most elements a block of a broadcast gets along the axes it repeats (they cost no reads).
BROADCAST_BLOCK_ITEMS = 1 << 20


class Broadcast(Node):
    """``part`` broadcast to ``shape`` (new leading axes, length-1 axes stretched), lazily."""

    def __init__(self, part: Node, shape: tuple[int, ...]) -> None:
        self.part = part
        self.shape = shape
        self.dtype = part.dtype
        self.lead = len(shape) - part.ndim

    def children(self) -> Sequence[Node]:
        return (self.part,)

    def _repeated(self, axis: int) -> bool:
        """Whether ``axis`` repeats the part (a new axis, or one of length 1 stretched)."""
        inner = axis - self.lead
        return inner < 0 or self.part.shape[inner] != self.shape[axis]

    def chunks(self) -> tuple[int, ...] | None:
        found = self.part.chunks()
        if found is None:
            return None
        grid = [1 if self._repeated(a) else found[a - self.lead] for a in range(self.ndim)]
        for axis in reversed(range(self.ndim)):  # repeated axes: as long as a block allows
            if self._repeated(axis):
                room = BROADCAST_BLOCK_ITEMS // max(1, math.prod(grid))
                grid[axis] = max(1, min(self.shape[axis], room))
        return tuple(grid)

    def evaluate(self, region: Region, reads: BlockReads) -> np.ndarray:
        inner = tuple(
            slice(0, 1) if n == 1 else region[self.lead + axis]
            for axis, n in enumerate(self.part.shape)
        )
        block = np.broadcast_to(
            self.part.evaluate(inner, reads), tuple(s.stop - s.start for s in inner)
        )
        return np.broadcast_to(block, tuple(s.stop - s.start for s in region))


def broadcast_node(node: Node, shape: tuple[int, ...]) -> Node:
    """``node`` broadcast to ``shape`` (itself when it has that shape already)."""
    if node.shape == shape:
        return node
    if np.broadcast_shapes(node.shape, shape) != shape:
        raise ValueError(f"shape {node.shape} does not broadcast to {shape}")
    if isinstance(node, Constant):  # (a view: a constant's values are never copied)
        value = node.value if node.is_scalar else np.broadcast_to(node.value, node.shape)
        return Constant(value, shape)
    return Broadcast(node, shape)
