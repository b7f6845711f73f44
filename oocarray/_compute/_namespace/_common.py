"""What every part of the namespace shares: telling arrays from other values, turning the
compute layer's answers into arrays of the namespace, and normalising axes.

Arrays of the namespace are the compute layer's :class:`ChunkedArray` and :class:`Expr`.
Small results (a reduction's value) come back from the compute layer as NumPy values; they are
wrapped as expressions over that value (a :class:`Constant` leaf), so a result is always an
array of the namespace and nothing is written to disk for it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.lib.array_utils import normalize_axis_index

from oocarray._compute._array import Expr, LazyArray
from oocarray._compute._nodes import Constant, Node, as_node
from oocarray._storage import StoredArray

__all__ = [
    "array_result",
    "check_array",
    "normalize_axes",
    "tree",
]


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


def normalize_axes(axis: Any, ndim: int) -> tuple[int, ...]:
    """``axis`` (None, an int or a tuple of ints) as a tuple of distinct non-negative axes."""
    if axis is None:
        return tuple(range(ndim))
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    normalized = tuple(normalize_axis_index(a, ndim) for a in axes)
    if len(set(normalized)) != len(normalized):
        raise ValueError(f"repeated axis in {axis}")
    return normalized
