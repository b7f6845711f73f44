"""The standard's searching functions: argmax/argmin/count_nonzero stream over the chunks;
``where`` is lazy with the standard's promotion; ``nonzero`` and ``searchsorted`` go through
NumPy's functions (the out-of-core selection and sorting algorithms)."""

from __future__ import annotations

from typing import Any

import numpy as np

from oocarray._compute import _build
from oocarray._compute._array import Expr
from oocarray._compute._broadcast import broadcast_node
from oocarray._compute._namespace._common import (
    array_result,
    check_array,
    normalize_axes,
    tree,
)
from oocarray._compute._namespace._dtypes import check_dtype, is_python_scalar, promote
from oocarray._compute._namespace._elementwise import operands

__all__ = ["argmax", "argmin", "count_nonzero", "nonzero", "searchsorted", "where"]


def _arg(function: Any, x: Any, axis: int | None, keepdims: bool, name: str) -> Any:
    check_dtype(check_array(x, name).dtype, "real numeric", name)
    if axis is None and keepdims:
        flat = function(x)
        return array_result(np.reshape(np.asarray(flat), (1,) * x.ndim))
    return array_result(function(x, axis=axis, keepdims=keepdims))


def argmax(x: Any, /, *, axis: int | None = None, keepdims: bool = False) -> Any:
    """The index of the first largest value (flat without ``axis``), in one pass."""
    return _arg(np.argmax, x, axis, keepdims, "argmax")


def argmin(x: Any, /, *, axis: int | None = None, keepdims: bool = False) -> Any:
    """The index of the first smallest value (flat without ``axis``), in one pass."""
    return _arg(np.argmin, x, axis, keepdims, "argmin")


def count_nonzero(x: Any, /, *, axis: Any = None, keepdims: bool = False) -> Any:
    """How many elements along ``axis`` are nonzero, in one pass (default integer dtype)."""
    check_array(x, "count_nonzero")
    axes = normalize_axes(axis, x.ndim)
    counted = np.count_nonzero(x, axis=axes, keepdims=keepdims)
    return array_result(np.asarray(counted, dtype=np.int64))


def nonzero(x: Any, /) -> tuple[Any, ...]:
    """The indices of the nonzero elements, one array per axis (NumPy's ``nonzero``)."""
    check_array(x, "nonzero")
    if x.ndim == 0:
        raise ValueError("nonzero of a 0-d array is not defined")
    return tuple(array_result(i) for i in np.nonzero(x))


def searchsorted(x1: Any, x2: Any, /, *, side: str = "left", sorter: Any = None) -> Any:
    """Where the values of ``x2`` would go in the sorted 1-D ``x1`` (NumPy's
    ``searchsorted``)."""
    check_dtype(check_array(x1, "searchsorted").dtype, "real numeric", "searchsorted")
    check_dtype(check_array(x2, "searchsorted").dtype, "real numeric", "searchsorted")
    if x1.ndim != 1:
        raise ValueError("searchsorted: x1 must be 1-D")
    promote(x1, x2)
    found = np.searchsorted(x1, x2, side=side, sorter=sorter)  # type: ignore[call-overload]
    return array_result(found)


def where(condition: Any, x1: Any, x2: Any, /) -> Expr:
    """``x1`` where ``condition`` holds, else ``x2``, with broadcasting, lazily.

    Examples
    --------
    >>> import numpy as np, oocarray as oc, oocarray.array_api as xp
    >>> x = oc.from_numpy(np.arange(5.0), chunks=2)
    >>> np.asarray(xp.where(x > 2, x, 0.0))
    array([0., 0., 0., 3., 4.])
    """
    check_dtype(check_array(condition, "where").dtype, "boolean", "where")
    args, shape, _ = operands((x1, x2), "all", "where")
    full = np.broadcast_shapes(shape, condition.shape)
    leaves = [broadcast_node(tree(condition), full)] + [
        a if is_python_scalar(a) else broadcast_node(a, full) for a in args
    ]
    return Expr(_build.where(*leaves))
