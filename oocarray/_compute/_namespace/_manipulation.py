"""The standard's manipulation and indexing functions.

Broadcasting, joining (``concat``, ``stack``), new and dropped axes (``expand_dims``,
``squeeze``, ``unstack``) and axis permutations are lazy nodes here or in the compute layer;
the rest (``flip``, ``roll``, ``reshape``, ``repeat``, ``tile``, ``take``...) go through
NumPy's functions, answered by the compute layer's out-of-core rearrangements.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.lib.array_utils import normalize_axis_index

from oocarray._compute._array import Expr
from oocarray._compute._broadcast import broadcast_node
from oocarray._compute._namespace._common import (
    array_result,
    check_array,
    normalize_axes,
    tree,
)
from oocarray._compute._namespace._dtypes import promote
from oocarray._compute._nodes import BlockReads, Concat, ExpandDims, Node, Region
from oocarray._compute._rearrange import permute_dims as _permute

__all__ = [
    "Select",
    "broadcast_arrays",
    "broadcast_to",
    "concat",
    "expand_dims",
    "flip",
    "moveaxis",
    "permute_dims",
    "repeat",
    "reshape",
    "roll",
    "squeeze",
    "stack",
    "take",
    "take_along_axis",
    "tile",
    "unstack",
]


class Select(Node):
    """``part`` at position ``index`` of ``axis``, that axis dropped (``x[..., i, ...]``)."""

    def __init__(self, part: Node, axis: int, index: int) -> None:
        self.part = part
        self.axis = axis
        self.index = index
        self.shape = (*part.shape[:axis], *part.shape[axis + 1 :])
        self.dtype = part.dtype

    def children(self) -> Sequence[Node]:
        return (self.part,)

    def chunks(self) -> tuple[int, ...] | None:
        found = self.part.chunks()
        return None if found is None else (*found[: self.axis], *found[self.axis + 1 :])

    def evaluate(self, region: Region, reads: BlockReads) -> np.ndarray:
        inner = (*region[: self.axis], slice(self.index, self.index + 1), *region[self.axis :])
        block = np.broadcast_to(
            self.part.evaluate(inner, reads), tuple(s.stop - s.start for s in inner)
        )
        return block[(slice(None),) * self.axis + (0,)]


def broadcast_to(x: Any, /, shape: tuple[int, ...]) -> Expr:
    """``x`` broadcast to ``shape``, lazily (nothing is copied)."""
    check_array(x, "broadcast_to")
    return Expr(broadcast_node(tree(x), tuple(shape)))


def broadcast_arrays(*arrays: Any) -> list[Expr]:
    """The arrays broadcast to their common shape, lazily."""
    for a in arrays:
        check_array(a, "broadcast_arrays")
    shape = np.broadcast_shapes(*(a.shape for a in arrays))
    return [Expr(broadcast_node(tree(a), shape)) for a in arrays]


def _joined(arrays: Any, function: str) -> tuple[list[Node], np.dtype[Any]]:
    if not isinstance(arrays, tuple | list) or not arrays:
        raise ValueError(f"{function} takes a non-empty tuple or list of arrays")
    for a in arrays:
        check_array(a, function)
    dtype = promote(*arrays)
    return [tree(a if a.dtype == dtype else a.astype(dtype)) for a in arrays], dtype


def concat(arrays: Any, /, *, axis: int | None = 0) -> Expr:
    """The arrays joined along ``axis`` (flattened first when ``axis`` is None), lazily.

    Examples
    --------
    >>> import numpy as np, oocarray as oc, oocarray.array_api as xp
    >>> a = oc.from_numpy(np.zeros((1, 2), np.int8), chunks=1)
    >>> b = oc.from_numpy(np.ones((2, 2), np.int16), chunks=1)
    >>> c = xp.concat([a, b]); c.shape, c.dtype
    ((3, 2), dtype('int16'))
    """
    parts, _ = _joined(arrays, "concat")
    if axis is None:
        parts = [tree(reshape(Expr(p), (-1,))) for p in parts]
        axis = 0
    ndim = parts[0].ndim
    if ndim == 0:
        raise ValueError("concat: 0-d arrays cannot be joined")
    own = normalize_axis_index(axis, ndim)
    rest = {p.shape[:own] + p.shape[own + 1 :] for p in parts}
    if any(p.ndim != ndim for p in parts) or len(rest) != 1:
        raise ValueError(f"concat: shapes {[p.shape for p in parts]} differ off axis {axis}")
    return Expr(Concat(parts, own))


def stack(arrays: Any, /, *, axis: int = 0) -> Expr:
    """The arrays (of one shape) stacked along a new ``axis``, lazily."""
    parts, _ = _joined(arrays, "stack")
    if len({p.shape for p in parts}) != 1:
        raise ValueError(f"stack: the arrays differ in shape: {[p.shape for p in parts]}")
    own = normalize_axis_index(axis, parts[0].ndim + 1)
    return Expr(Concat([ExpandDims(p, own) for p in parts], own))


def expand_dims(x: Any, /, *, axis: int = 0) -> Expr:
    """``x`` with a new axis of length 1 at ``axis``, lazily."""
    check_array(x, "expand_dims")
    own = normalize_axis_index(axis, x.ndim + 1)
    return Expr(ExpandDims(tree(x), own))


def squeeze(x: Any, /, axis: int | tuple[int, ...]) -> Expr:
    """``x`` without the length-1 axes ``axis``, lazily."""
    check_array(x, "squeeze")
    axes = normalize_axes(axis, x.ndim)
    for a in axes:
        if x.shape[a] != 1:
            raise ValueError(f"squeeze: axis {a} has length {x.shape[a]}, not 1")
    node = tree(x)
    for a in sorted(axes, reverse=True):
        node = Select(node, a, 0)
    return Expr(node)


def unstack(x: Any, /, *, axis: int = 0) -> tuple[Expr, ...]:
    """The arrays along ``axis`` of ``x``, each lazy."""
    check_array(x, "unstack")
    if x.ndim == 0:
        raise ValueError("unstack needs an array of at least one dimension")
    own = normalize_axis_index(axis, x.ndim)
    node = tree(x)
    return tuple(Expr(Select(node, own, i)) for i in range(x.shape[own]))


def permute_dims(x: Any, /, axes: tuple[int, ...]) -> Expr:
    """``x`` with its axes in the order ``axes``, lazily."""
    check_array(x, "permute_dims")
    return Expr(_permute(tree(x), axes))


def moveaxis(x: Any, source: Any, destination: Any, /) -> Expr:
    """``x`` with axes ``source`` moved to ``destination``, lazily."""
    check_array(x, "moveaxis")
    sources = normalize_axes(source, x.ndim)
    targets = normalize_axes(destination, x.ndim)
    if len(sources) != len(targets):
        raise ValueError("moveaxis: source and destination need as many axes")
    order = [a for a in range(x.ndim) if a not in sources]
    for target, axis in sorted(zip(targets, sources, strict=True)):
        order.insert(target, axis)
    return Expr(_permute(tree(x), order))


def flip(x: Any, /, *, axis: Any = None) -> Any:
    """``x`` with the order of elements along ``axis`` reversed (NumPy's ``flip``)."""
    check_array(x, "flip")
    return array_result(np.flip(x, axis=axis))


def roll(x: Any, /, shift: Any, *, axis: Any = None) -> Any:
    """``x`` with its elements shifted along ``axis`` (NumPy's ``roll``)."""
    check_array(x, "roll")
    return array_result(np.roll(x, shift, axis=axis))


def reshape(x: Any, /, shape: tuple[int, ...], *, copy: bool | None = None) -> Any:
    """``x`` in another shape, C order (NumPy's ``reshape``)."""
    check_array(x, "reshape")
    if copy is False and tuple(shape) != x.shape:
        raise ValueError("reshape(copy=False) of a chunked array is not a view: use copy=None")
    return array_result(np.reshape(x, tuple(shape)))


def repeat(x: Any, repeats: Any, /, *, axis: int | None = None) -> Any:
    """Each element of ``x`` repeated ``repeats`` times along ``axis`` (NumPy's ``repeat``)."""
    check_array(x, "repeat")
    return array_result(np.repeat(x, repeats, axis=axis))


def tile(x: Any, repetitions: tuple[int, ...], /) -> Any:
    """``x`` repeated ``repetitions`` times along each axis (NumPy's ``tile``)."""
    check_array(x, "tile")
    return array_result(np.tile(x, repetitions))


def take(x: Any, indices: Any, /, *, axis: int | None = None) -> Any:
    """The elements of ``x`` at ``indices`` along ``axis`` (NumPy's ``take``)."""
    check_array(x, "take")
    check_array(indices, "take")
    if axis is None and x.ndim != 1:
        raise ValueError("take: axis must be given for arrays of more than one dimension")
    return array_result(np.take(x, indices, axis=0 if axis is None else axis))


def take_along_axis(x: Any, indices: Any, /, *, axis: int = -1) -> Any:
    """The elements of ``x`` at ``indices`` matched along ``axis`` (NumPy's
    ``take_along_axis``)."""
    check_array(x, "take_along_axis")
    check_array(indices, "take_along_axis")
    return array_result(np.take_along_axis(x, indices, axis=axis))
