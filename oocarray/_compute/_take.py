"""``np.take`` and ``np.take_along_axis``, lazily: blocks read only the input windows their
indices fall in.

``np.take`` is a :class:`~._gather.Gather` whose map along ``axis`` lists the indices (given
as NumPy values, or a chunked array small enough to load).  ``np.take_along_axis`` has
indices per element, which may be a chunked array or an expression themselves (an argsort's
result): :class:`TakeAlong` evaluates the indices of a block, groups the positions they name
into windows as a gather does, and reads one region of the input per window.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.lib.array_utils import normalize_axis_index

from oocarray._compute._gather import AxisMap, Gather, windows
from oocarray._compute._limits import working_bytes
from oocarray._compute._nodes import BlockReads, Constant, Node, Region, as_node
from oocarray._compute._reshape import ravel, reshape, squeeze

__all__ = ["TakeAlong", "load_small", "take", "take_along_axis"]


def _shape_of(region: Region) -> tuple[int, ...]:
    return tuple(s.stop - s.start for s in region)


def _listed(positions: np.ndarray, start: int, stop: int) -> np.ndarray:
    return positions[start:stop]


def load_small(value: Any, what: str) -> Any:
    """A chunked array or expression given as indices, loaded when it fits the working
    memory (indices are small); NumPy values and lists as they are."""
    if not isinstance(value, Node) and not hasattr(value, "chunks"):
        return value
    node = as_node(value)
    if node.nbytes > working_bytes() // 4:
        raise TypeError(
            f"{what} takes indices as a NumPy array or a chunked array that fits in memory; "
            f"these ({node.nbytes} bytes) do not"
        )
    region = tuple(slice(0, n) for n in node.shape)
    if 0 in node.shape:
        return np.empty(node.shape, node.dtype)
    return np.array(np.broadcast_to(node.evaluate(region, BlockReads()), node.shape))


def take(a: Any, indices: Any, axis: Any = None, out: Any = None, mode: str = "raise") -> Node:
    """``np.take``: the elements (``axis=None``: of the flattened array) or the slices along
    ``axis`` at ``indices``, lazily (negative indices count from the end).

    Examples
    --------
    >>> import numpy as np, oocarray as oc
    >>> x = oc.from_numpy(np.arange(12).reshape(3, 4), chunks=(2, 2))
    >>> np.take(x, [3, -4], axis=1)[...]
    array([[ 3,  0],
           [ 7,  4],
           [11,  8]])
    """
    if out is not None:
        raise TypeError("np.take(..., out=) is not supported on chunked arrays")
    wanted = load_small(indices, "np.take")
    node = as_node(a)
    if axis is None:
        node, axis = ravel(node), 0
    elif node.ndim == 0:  # NumPy takes a 0-d array as one of shape (1,)
        node = reshape(node, (1,))
    axis = normalize_axis_index(axis, node.ndim)
    n = node.shape[axis]
    # NumPy's checks and errors (index type, bounds, an empty axis), on a stand-in array: the
    # axis, and one or none of each other axis (NumPy checks no index where the axes before it
    # hold nothing, and refuses an empty axis only where the result would hold something).
    stand_in = tuple(n if i == axis else min(size, 1) for i, size in enumerate(node.shape))
    np.take(np.broadcast_to(np.zeros((), np.bool_), stand_in), wanted, axis=axis, mode=mode)  # type: ignore[call-overload]
    flat = np.asarray(wanted).astype(np.int64).ravel()
    if mode == "wrap" and n:
        flat %= n
    elif mode == "clip":
        flat = np.clip(flat, 0, max(n - 1, 0))
    else:
        flat = np.where(flat < 0, flat + n, flat)
    gathered = Gather(
        node,
        [
            AxisMap(len(flat), functools.partial(_listed, flat)) if i == axis else None
            for i in range(node.ndim)
        ],
    )
    shape = np.shape(wanted)
    if len(shape) == 1:
        return gathered
    if not shape:
        return squeeze(gathered, axis)
    return reshape(gathered, (*node.shape[:axis], *shape, *node.shape[axis + 1 :]))


class TakeAlong(Node):
    """``np.take_along_axis(part, indices, axis)``: along ``axis``, the elements of ``part`` at
    the positions ``indices`` holds (both broadcast on the other axes)."""

    def __init__(self, part: Node, indices: Node, axis: int, shape: tuple[int, ...]) -> None:
        self.part = part
        self.indices = indices
        self.axis = axis
        self.shape = shape
        self.dtype = part.dtype
        self._part_chunks = part.chunks()

    def children(self) -> Sequence[Node]:
        return (self.indices, self.part)

    def _region_of(self, node: Node, region: Region) -> Region:
        return tuple(
            slice(0, 1) if n == 1 and m != 1 else s
            for n, m, s in zip(node.shape, self.shape, region, strict=True)
        )

    def evaluate(self, region: Region, reads: BlockReads) -> np.ndarray:
        shape = _shape_of(region)
        out = np.empty(shape, self.dtype)
        if 0 in shape:
            return out
        own = self._region_of(self.indices, region)
        positions = np.broadcast_to(self.indices.evaluate(own, reads), _shape_of(own))
        n = self.part.shape[self.axis]
        positions = np.where(positions < 0, positions + n, positions).astype(np.int64)
        if positions.size and (positions.min() < 0 or positions.max() >= n):
            bad = positions[(positions < 0) | (positions >= n)].flat[0]
            raise IndexError(f"index {bad} is out of bounds for axis {self.axis} with size {n}")
        chunk = (self._part_chunks or (1,) * self.ndim)[self.axis]
        found = windows(np.unique(positions), chunk)
        outer = self._region_of(self.part, region)
        for window, _, _ in found:
            inner = (*outer[: self.axis], window, *outer[self.axis + 1 :])
            block = np.broadcast_to(self.part.evaluate(inner, reads), _shape_of(inner))
            inside = (positions >= window.start) & (positions < window.stop)
            local = np.where(inside, positions - window.start, 0)
            values = np.take_along_axis(block, local, axis=self.axis)
            np.copyto(out, values, where=np.broadcast_to(inside, shape))
        return out


def take_along_axis(arr: Any, indices: Any, axis: Any = -1) -> Node:
    """``np.take_along_axis``: lazily, with indices a NumPy array, a chunked array or an
    expression (such as an argsort's result)."""
    node = as_node(arr)
    index = as_node(indices)
    if axis is None:
        if index.ndim != 1:
            raise ValueError("when axis=None, `indices` must have a single dimension.")
        node, axis = ravel(node), 0
    if index.dtype.kind not in "iu":
        raise IndexError("`indices` must be an integer array")
    if index.ndim != node.ndim:
        raise ValueError("`indices` and `arr` must have the same number of dimensions")
    axis = normalize_axis_index(axis, node.ndim)
    others = [
        np.broadcast_shapes((node.shape[a],), (index.shape[a],))[0] if a != axis else index.shape[a]
        for a in range(node.ndim)
    ]
    shape = tuple(int(n) for n in others)
    # NumPy checks the indices it uses: none where the result is empty.
    used = math.prod(shape) > 0
    if used and node.shape[axis] == 0 and not isinstance(index, Constant):
        raise IndexError(f"index 0 is out of bounds for axis {axis} with size 0")
    if used and isinstance(index, Constant):  # NumPy indices: checked now, as NumPy does
        values = index.value
        if isinstance(values, np.ndarray) and values.size:
            n = node.shape[axis]
            if values.min() < -n or values.max() >= n:
                bad = values[(values < -n) | (values >= n)].flat[0]
                raise IndexError(f"index {bad} is out of bounds for axis {axis} with size {n}")
    return TakeAlong(node, index, axis, shape)
