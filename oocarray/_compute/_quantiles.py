"""Exact quantiles, percentiles and medians of chunked arrays (and their nan variants).

Where each block holds whole lines along the reduced axes, NumPy's own function reduces each
block (one blockwise pass).  Otherwise the order statistics a result needs are selected
exactly by counting passes (``_selection``): which ranks, and how they are interpolated, is
decided by NumPy's own method table, index and interpolation helpers
(``numpy.lib._function_base_impl``), so every method gives NumPy's ranks and results.
"""

from __future__ import annotations

import math
import threading
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

# NumPy's quantile machinery, used so ranks and interpolation are NumPy's to the last bit.
from numpy.lib import _function_base_impl as _numpy_quantiles

from oocarray._compute._engine import evaluate
from oocarray._compute._limits import unsupported
from oocarray._compute._nodes import BlockReads, Node, as_node
from oocarray._compute._order_keys import from_keys
from oocarray._compute._reduce import Reduction, normalize_axes
from oocarray._compute._selection import select_ranks, summarize

__all__ = ["FUNCTIONS", "median", "quantile"]

Region = tuple[slice, ...]
_CATCHING = threading.Lock()
_METHODS: dict[str, dict[str, Any]] = _numpy_quantiles._QuantileMethods  # type: ignore[attr-defined]


def _whole_lines(expr: Node, axes: tuple[int, ...]) -> bool:
    """Whether each block of a pass over ``expr`` holds whole lines along ``axes``."""
    chunks = expr.chunks()
    if chunks is None:  # the engine's blocks are then single rows
        return 0 not in axes or expr.shape[0] <= 1
    return all(chunks[a] >= expr.shape[a] for a in axes)


class _PerBlock(Reduction):
    """NumPy's function applied to each block, whose reduced axes are whole; the warnings it
    gives are given again once, on the calling thread."""

    def __init__(
        self,
        expr: Node,
        axes: tuple[int, ...],
        function: Callable[..., Any],
        lead: tuple[int, ...],
        dtype: np.dtype[Any],
        keepdims: bool,
        **kwargs: Any,
    ) -> None:
        super().__init__(function.__name__, expr, axes, keepdims)
        self.function = function
        self.kwargs = kwargs
        self.lead = lead
        self.acc = np.empty((*lead, *self.kept_shape), dtype)
        self.warned: dict[str, type[Warning]] = {}

    def partial(self, block: np.ndarray, region: Region) -> Any:
        shape = tuple(s.stop - s.start for s in region)
        block = np.broadcast_to(block, shape)
        if not self._may_warn(block):
            # Floating-point errors are the one other source of warnings here; NumPy's
            # errstate is per thread, so they are caught without touching the filters.
            errors: list[str] = []
            with np.errstate(all="call", call=lambda kind, _flag: errors.append(kind)):
                result = self._call(block)
            if not errors:
                return np.asarray(result), []
        # Run again to catch NumPy's own warnings.  catch_warnings swaps the process's
        # filters and hook: worker threads inside it together would restore each other's,
        # losing or leaking warnings; they take turns.
        with _CATCHING, warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            result = self._call(block)
        return np.asarray(result), [(str(w.message), w.category) for w in caught]

    def _call(self, block: np.ndarray) -> Any:
        return self.function(block, axis=self.axes, keepdims=True, **self.kwargs)

    def _may_warn(self, block: np.ndarray) -> bool:
        """Whether NumPy warns of an all-NaN line in this block (the nan variants do)."""
        if not self.function.__name__.startswith("nan") or block.dtype.kind not in "fc":
            return False
        return bool(np.isnan(block).all(axis=self.axes).any())

    def merge(self, partial: Any, region: Region) -> None:
        result, caught = partial
        self.acc[(Ellipsis, *self.target(region))] = result  # type: ignore[index]
        for message, category in caught:
            self.warned.setdefault(message, category)

    def finish(self) -> Any:
        for message, category in self.warned.items():
            warnings.warn(message, category, stacklevel=4)
        return _shaped(self.acc, self.lead, self.axes, self.keepdims)


def _shaped(
    result: np.ndarray, lead: tuple[int, ...], axes: tuple[int, ...], keepdims: bool
) -> Any:
    """A result shaped ``(*lead, *kept)`` as NumPy gives it: reduced axes dropped unless
    ``keepdims``, a scalar when 0-d."""
    if not keepdims:
        kept = result.shape[len(lead) :]
        result = result.reshape((*lead, *(n for i, n in enumerate(kept) if i not in axes)))
    return result[()] if result.ndim == 0 else result


def _probe(function: Callable[..., Any], dtype: np.dtype[Any], *args: Any, **kwargs: Any) -> Any:
    """``function`` on two values of ``dtype``: the dtype NumPy's result has."""
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        return np.asarray(function(np.zeros(2, dtype), *args, **kwargs)).dtype


def _small_case(
    function: Callable[..., Any], expr: Node, axes: tuple[int, ...], *args: Any, **kwargs: Any
) -> tuple[bool, Any]:
    """NumPy's own answer where there is nothing to stream: no values (its errors and
    warnings, from an empty array of the same shape) or one value (a 0-d array)."""
    reduced = math.prod(expr.shape[a] for a in axes)
    if expr.size and reduced and expr.ndim:
        return False, None
    data = np.zeros(expr.shape, expr.dtype) if expr.size == 0 else np.asarray(_read_all(expr))
    axis = None if expr.ndim == 0 else axes
    return True, function(data, *args, axis=axis, **kwargs)


def _read_all(expr: Node) -> np.ndarray:
    return np.asarray(expr.evaluate(tuple(slice(0, n) for n in expr.shape), BlockReads()))


def _check_common(name: str, out: Any, weights: Any) -> None:
    if out is not None:
        raise unsupported(f"np.{name}(..., out=)")
    if weights is not None:
        raise TypeError(
            f"np.{name}(..., weights=) is not supported on chunked arrays; load a part with "
            "x[...] to weigh it, or leave weights out"
        )


def quantile(
    name: str,
    a: Any,
    q: Any,
    axis: Any = None,
    method: str = "linear",
    keepdims: bool = False,
    progress: bool = True,
) -> Any:
    """``np.quantile``-like ``name`` (quantile, percentile, nanquantile, nanpercentile) of a
    chunked array or expression: exact (every NumPy ``method``), out of core.

    Examples
    --------
    >>> import numpy as np, oocarray as oc
    >>> data = np.arange(40.0).reshape(10, 4) ** 2
    >>> x = oc.from_numpy(data, chunks=(3, 2))  # axis 0 is split: counting passes
    >>> np.percentile(x, [10, 50], axis=0)[:, 0]
    array([ 14.4, 328. ])
    >>> np.array_equal(np.quantile(x, 0.3, method="lower"), np.quantile(data, 0.3, method="lower"))
    True
    """
    expr = as_node(a)
    function = getattr(np, name)
    if expr.dtype.kind == "c":
        raise TypeError("a must be an array of real numbers")
    weak_q = type(q) in (int, float)
    fraction = np.true_divide(q, 100) if name.endswith("percentile") else q
    fraction = np.asanyarray(fraction)
    if not _numpy_quantiles._quantile_is_valid(fraction):  # type: ignore[attr-defined]
        raise ValueError(
            "Percentiles must be in the range [0, 100]"
            if name.endswith("percentile")
            else "Quantiles must be in the range [0, 1]"
        )
    if fraction.ndim > 1:
        raise ValueError("q must be a scalar or 1d")
    if method not in _METHODS:
        raise ValueError(f"{method!r} is not a valid method. Use one of: {_METHODS.keys()}")
    axes = normalize_axes(axis, expr.ndim)
    small, value = _small_case(function, expr, axes, q, method=method, keepdims=keepdims)
    if small:
        return value
    dtype = _probe(function, expr.dtype, q, method=method)
    if _whole_lines(expr, axes):
        per_block = _PerBlock(
            expr, axes, function, fraction.shape, dtype, keepdims, q=q, method=method
        )
        evaluate([per_block], [], progress, name)
        return per_block.finish()
    skip_nan = name.startswith("nan") and expr.dtype.kind == "f"
    summary = summarize(expr, axes, progress)
    reduced = math.prod(expr.shape[a] for a in axes)
    counts = summary.valid.reshape(-1) if skip_nan else np.full(summary.valid.size, reduced)
    has_nan = summary.valid.reshape(-1) < reduced
    props = _METHODS[method]
    dummy = np.empty(0, expr.dtype)
    plans: dict[int, Any] = {}
    for n in np.unique(counts).tolist():
        if n == 0:
            continue
        virtual = np.asanyarray(props["get_virtual_index"](n, fraction))
        integral = props["fix_gamma"] is None or (
            method == "linear" and np.issubdtype(virtual.dtype, np.integer)
        )
        if integral:
            plans[n] = (virtual.astype(np.intp), None, None)
        else:
            before, after = _numpy_quantiles._get_indexes(dummy, virtual, n)  # type: ignore[attr-defined]
            gamma = _numpy_quantiles._get_gamma(virtual, before, props)  # type: ignore[attr-defined]
            plans[n] = (before, after, gamma)
    size = max(1, fraction.size)
    cells = summary.valid.size
    interpolating = any(p[1] is not None for p in plans.values())
    slots = 2 * size if interpolating else size
    ranks = np.full((slots, cells), -1, np.int64)
    skip = np.zeros(cells, bool) if skip_nan else has_nan
    for n, (before, after, _) in plans.items():
        columns = (counts == n) & ~skip
        ranks[:size, columns] = (np.asarray(before).reshape(-1, 1) % n).clip(0, n - 1)
        if after is not None:
            ranks[size:, columns] = (np.asarray(after).reshape(-1, 1) % n).clip(0, n - 1)
    kept = summary.valid.shape
    keys = select_ranks(expr, axes, summary, ranks.reshape(slots, *kept), progress)
    values = from_keys(keys.reshape(slots, cells), expr.dtype)
    result = np.full((*fraction.shape, cells), np.nan if dtype.kind in "fc" else 0, dtype)
    with np.errstate(all="ignore"):
        for n, (_, after, gamma) in plans.items():
            columns = np.flatnonzero((counts == n) & ~skip)
            if not len(columns):
                continue
            low = values[:size, columns].reshape(*fraction.shape, len(columns))
            if after is None:
                result[..., columns] = low
                continue
            high = values[size:, columns].reshape(*fraction.shape, len(columns))
            weight = float(gamma) if weak_q else gamma.reshape((*gamma.shape, 1))
            result[..., columns] = _numpy_quantiles._lerp(low, high, weight)  # type: ignore[attr-defined]
    if skip_nan and (counts == 0).any():
        warnings.warn("All-NaN slice encountered", RuntimeWarning, stacklevel=3)
    return _shaped(result.reshape(*fraction.shape, *kept), fraction.shape, axes, keepdims)


def median(
    name: str, a: Any, axis: Any = None, keepdims: bool = False, progress: bool = True
) -> Any:
    """``np.median`` or ``np.nanmedian`` of a chunked array or expression, exactly.

    Examples
    --------
    >>> import numpy as np, oocarray as oc
    >>> x = oc.from_numpy(np.array([[1.0, np.nan], [3.0, 4.0], [8.0, 6.0]]), chunks=(1, 2))
    >>> np.median(x, axis=0), np.nanmedian(x, axis=0)
    (array([ 3., nan]), array([3., 5.]))
    """
    expr = as_node(a)
    function = getattr(np, name)
    axes = normalize_axes(axis, expr.ndim)
    small, value = _small_case(function, expr, axes, keepdims=keepdims)
    if small:
        return value
    dtype = _probe(function, expr.dtype)
    if _whole_lines(expr, axes):
        per_block = _PerBlock(expr, axes, function, (), dtype, keepdims)
        evaluate([per_block], [], progress, name)
        return per_block.finish()
    skip_nan = name == "nanmedian" and expr.dtype.kind == "f"
    summary = summarize(expr, axes, progress)
    reduced = math.prod(expr.shape[a] for a in axes)
    valid = summary.valid.reshape(-1)
    counts = valid if skip_nan else np.full(valid.size, reduced)
    missing = (counts == 0) | ((valid < reduced) & (not skip_nan))
    ranks = np.stack([(counts - 1) // 2, counts // 2])
    ranks[:, missing] = -1
    kept = summary.valid.shape
    keys = select_ranks(expr, axes, summary, ranks.reshape(2, *kept), progress)
    values = from_keys(keys.reshape(2, -1), expr.dtype)
    with np.errstate(all="ignore"):
        odd = np.mean(values[:1], axis=0)
        even = np.mean(values, axis=0)
        result = np.asarray(np.where(counts % 2 == 1, odd, even)).astype(dtype, copy=False)
        if dtype.kind in "fc":
            result[missing] = np.nan
    if skip_nan and (counts == 0).any():
        warnings.warn("All-NaN slice encountered", RuntimeWarning, stacklevel=3)
    return _shaped(result.reshape(kept), (), axes, keepdims)


def _quantile_function(name: str) -> Callable[..., Any]:
    def function(
        a: Any,
        q: Any,
        axis: Any = None,
        out: Any = None,
        overwrite_input: bool = False,
        method: str = "linear",
        keepdims: bool = False,
        *,
        weights: Any = None,
    ) -> Any:
        _check_common(name, out, weights)
        return quantile(name, a, q, axis, method, keepdims)

    function.__name__ = name
    return function


def _median_function(name: str) -> Callable[..., Any]:
    def function(
        a: Any,
        axis: Any = None,
        out: Any = None,
        overwrite_input: bool = False,
        keepdims: bool = False,
    ) -> Any:
        _check_common(name, out, None)
        return median(name, a, axis, keepdims)

    function.__name__ = name
    return function


FUNCTIONS: dict[Any, Callable[..., Any]] = {
    **{
        getattr(np, name): _quantile_function(name)
        for name in ("quantile", "percentile", "nanquantile", "nanpercentile")
    },
    np.median: _median_function("median"),
    np.nanmedian: _median_function("nanmedian"),
}
