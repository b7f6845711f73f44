"""The standard's linear algebra functions, through NumPy's (the compute layer's blocked
products), and the ``linalg`` extension's functions that are not supported, refused clearly."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from oocarray._compute._array import Expr
from oocarray._compute._namespace._common import array_result, check_array, tree
from oocarray._compute._namespace._dtypes import check_dtype, promote
from oocarray._compute._rearrange import permute_dims

__all__ = [
    "matmul",
    "matrix_transpose",
    "outer",
    "tensordot",
    "unsupported_linalg",
    "vecdot",
    "vector_norm",
]


def _numeric_pair(x1: Any, x2: Any, name: str) -> None:
    for x in (x1, x2):
        check_dtype(check_array(x, name).dtype, "numeric", name)
    promote(x1, x2)


def matmul(x1: Any, x2: Any, /) -> Any:
    """The matrix product of ``x1`` and ``x2`` (NumPy's ``matmul``: stacks broadcast)."""
    _numeric_pair(x1, x2, "matmul")
    if x1.ndim == 0 or x2.ndim == 0:
        raise ValueError("matmul: 0-d arrays have no matrix product")
    return array_result(np.matmul(x1, x2))


def matrix_transpose(x: Any, /) -> Expr:
    """``x`` with its last two axes swapped, lazily."""
    check_array(x, "matrix_transpose")
    if x.ndim < 2:
        raise ValueError("matrix_transpose needs an array of at least 2 dimensions")
    order = [*range(x.ndim - 2), x.ndim - 1, x.ndim - 2]
    return Expr(permute_dims(tree(x), order))


def outer(x1: Any, x2: Any, /) -> Any:
    """The outer product of two vectors (NumPy's ``outer``): lazy, or small enough to hold."""
    _numeric_pair(x1, x2, "outer")
    if x1.ndim != 1 or x2.ndim != 1:
        raise ValueError(f"outer takes 1-d arrays, got {x1.ndim}-d and {x2.ndim}-d")
    return array_result(np.outer(x1, x2))


def tensordot(x1: Any, x2: Any, /, *, axes: Any = 2) -> Any:
    """The sum of products over ``axes`` of ``x1`` and ``x2`` (NumPy's ``tensordot``)."""
    _numeric_pair(x1, x2, "tensordot")
    return array_result(np.tensordot(x1, x2, axes=axes))


def vecdot(x1: Any, x2: Any, /, *, axis: int = -1) -> Any:
    """The dot products of vectors along ``axis`` (``x1`` conjugated; NumPy's ``vecdot``)."""
    _numeric_pair(x1, x2, "vecdot")
    found = np.vecdot(x1, x2, axis=axis)  # type: ignore[call-overload]
    return array_result(found)


def vector_norm(x: Any, /, *, axis: Any = None, keepdims: bool = False, ord: Any = 2) -> Any:
    """The vector ``ord``-norm along ``axis`` (all axes by default), in one streaming pass
    over ``|x|`` (for ``ord`` 2 and p, a pass over ``|x|**p``)."""
    check_dtype(check_array(x, "vector_norm").dtype, "floating-point", "vector_norm")
    magnitude = Expr(tree(np.absolute(x)))
    kw = {"axis": axis, "keepdims": keepdims}
    if ord == np.inf:
        return array_result(np.max(magnitude, **kw))
    if ord == -np.inf:
        return array_result(np.min(magnitude, **kw))
    if ord == 0:
        return array_result(np.sum(magnitude != 0, **kw).astype(magnitude.dtype))
    if ord == 1:
        return array_result(np.sum(magnitude, **kw))
    powered = np.sum(magnitude**ord, **kw)
    return array_result(np.asarray(powered ** (1.0 / ord), dtype=magnitude.dtype))


def unsupported_linalg(name: str) -> Callable[..., Any]:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(
            f"oocarray.array_api.linalg.{name} is not supported on chunked arrays (it needs "
            "the whole matrix at once): load a part with x[...] or np.asarray(x) and use "
            f"numpy.linalg.{name}"
        )

    refuse.__name__ = refuse.__qualname__ = name
    refuse.__doc__ = f"Not supported: raises ``NotImplementedError`` (see numpy.linalg.{name})."
    return refuse
