"""Lazy broadcasting: a node seen in a larger shape (new leading axes, length-1 axes
stretched), read only in the part of its own shape that a block needs, never copied.

Elementwise expressions broadcast their chunked operands with it, as NumPy broadcasts arrays
(``x - x.mean(axis=0, keepdims=True)``, a row against a matrix).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from oocarray._compute._nodes import BlockReads, Constant, Node, Region

__all__ = ["Broadcast", "broadcast_node"]

# Largest chunk given to an axis a broadcast stretches (the engine joins blocks along the
# first axis up to its block size, so this only bounds the other axes).
_STRETCHED_CHUNK = 1024


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
    if isinstance(node, Constant):  # (a view: a constant's values are never copied)
        value = node.value if node.is_scalar else np.broadcast_to(node.value, node.shape)
        return Constant(value, shape)
    return Broadcast(node, shape)
