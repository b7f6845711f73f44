"""The standard's statistical and utility functions: the compute layer's streaming
reductions (one pass over the chunks), and scans and differences through NumPy's functions.

Results are arrays of the namespace: a reduction's value (small: the shape left after
reducing) is an expression over that value.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from oocarray._compute._namespace._common import array_result, check_array, normalize_axes
from oocarray._compute._namespace._dtypes import check_dtype

__all__ = [
    "all",
    "any",
    "cumulative_prod",
    "cumulative_sum",
    "diff",
    "max",
    "mean",
    "min",
    "prod",
    "std",
    "sum",
    "var",
]


def _reduce(
    function: Any, x: Any, name: str, category: str | None, axis: Any, keepdims: bool, **kw: Any
) -> Any:
    check_array(x, name)
    if category is not None:
        check_dtype(x.dtype, category, name)
    axes = normalize_axes(axis, x.ndim)
    return array_result(function(x, axis=axes, keepdims=keepdims, **kw))


def max(x: Any, /, *, axis: Any = None, keepdims: bool = False) -> Any:
    """The largest values along ``axis`` (all axes by default), in one pass.

    Examples
    --------
    >>> import numpy as np, oocarray as oc, oocarray.array_api as xp
    >>> x = oc.from_numpy(np.arange(6).reshape(2, 3), chunks=(1, 2))
    >>> np.asarray(xp.max(x, axis=1))
    array([2, 5])
    """
    return _reduce(np.max, x, "max", "real numeric", axis, keepdims)


def min(x: Any, /, *, axis: Any = None, keepdims: bool = False) -> Any:
    """The smallest values along ``axis``, in one pass."""
    return _reduce(np.min, x, "min", "real numeric", axis, keepdims)


def mean(x: Any, /, *, axis: Any = None, keepdims: bool = False) -> Any:
    """The mean along ``axis`` of a floating-point array, in one pass."""
    return _reduce(np.mean, x, "mean", "floating-point", axis, keepdims)


def sum(x: Any, /, *, axis: Any = None, dtype: Any = None, keepdims: bool = False) -> Any:
    """The sum along ``axis``, in one pass (integers sum in the default integer dtype)."""
    return _reduce(np.sum, x, "sum", "numeric", axis, keepdims, dtype=dtype)


def prod(x: Any, /, *, axis: Any = None, dtype: Any = None, keepdims: bool = False) -> Any:
    """The product along ``axis``, in one pass."""
    return _reduce(np.prod, x, "prod", "numeric", axis, keepdims, dtype=dtype)


def std(x: Any, /, *, axis: Any = None, correction: float = 0.0, keepdims: bool = False) -> Any:
    """The standard deviation along ``axis`` (``correction``: NumPy's ``ddof``), in one pass
    (chunk moments merged with Chan's formula)."""
    return _reduce(np.std, x, "std", "real floating-point", axis, keepdims, ddof=correction)


def var(x: Any, /, *, axis: Any = None, correction: float = 0.0, keepdims: bool = False) -> Any:
    """The variance along ``axis`` (``correction``: NumPy's ``ddof``), in one pass."""
    return _reduce(np.var, x, "var", "real floating-point", axis, keepdims, ddof=correction)


def all(x: Any, /, *, axis: Any = None, keepdims: bool = False) -> Any:
    """Whether every element along ``axis`` is true (nonzero), in one pass."""
    return _reduce(np.all, x, "all", None, axis, keepdims)


def any(x: Any, /, *, axis: Any = None, keepdims: bool = False) -> Any:
    """Whether any element along ``axis`` is true (nonzero), in one pass."""
    return _reduce(np.any, x, "any", None, axis, keepdims)


def _scan_axis(x: Any, axis: int | None, name: str) -> int:
    if axis is None:
        if x.ndim > 1:
            raise ValueError(f"{name}: axis must be given for arrays of more than one dimension")
        return 0
    return axis


def _cumulative(function: Any, name: str, what: str) -> Any:
    def cumulative(
        x: Any, /, *, axis: int | None = None, dtype: Any = None, include_initial: bool = False
    ) -> Any:
        check_dtype(check_array(x, name).dtype, "numeric", name)
        if x.ndim == 0:
            raise ValueError(f"{name} needs an array of at least one dimension")
        axis = _scan_axis(x, axis, name)
        return array_result(function(x, axis=axis, dtype=dtype, include_initial=include_initial))

    cumulative.__name__ = cumulative.__qualname__ = name
    cumulative.__doc__ = f"Running {what} along ``axis`` (NumPy's ``{name}``, out of core)."
    return cumulative


cumulative_sum = _cumulative(np.cumulative_sum, "cumulative_sum", "sums")
cumulative_prod = _cumulative(np.cumulative_prod, "cumulative_prod", "products")


def diff(x: Any, /, *, axis: int = -1, n: int = 1, prepend: Any = None, append: Any = None) -> Any:
    """The ``n``-th differences along ``axis`` (NumPy's ``diff``, out of core)."""
    check_array(x, "diff")
    if x.ndim == 0:
        raise ValueError("diff needs an array of at least one dimension")
    extra = {k: v for k, v in (("prepend", prepend), ("append", append)) if v is not None}
    for value in extra.values():
        check_array(value, "diff")
        if value.dtype != x.dtype:
            raise TypeError("diff: prepend and append must have x's dtype")
    return array_result(np.diff(x, n=n, axis=axis, **extra))
