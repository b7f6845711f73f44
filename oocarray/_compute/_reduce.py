"""Reductions in one streaming pass: a partial result per block, merged in block order.

Each reduction keeps an accumulator shaped like its result with ``keepdims=True``; a block's
partial lands on the cells its region covers along the axes that are kept.  Merging runs on the
calling thread in block order, so results do not depend on which worker finished first.

Here: the base class, the axes, the fast column sums and the reductions whose partials combine
with one ufunc (sums, products, logical tests, extremes), their positions (``argmin``,
``argmax``) and histograms; means and variances are in ``_compute._moments``, and
:func:`~oocarray._compute._reduction_kinds.make_reduction` makes the one a NumPy name asks for.
"""

from __future__ import annotations

import math
import warnings
from typing import Any, ClassVar

import numpy as np

from oocarray._compute._nodes import Node

__all__ = ["Reduction", "normalize_axes"]

Region = tuple[slice, ...]


def normalize_axes(axis: Any, ndim: int) -> tuple[int, ...]:
    """``axis`` (None, an int or a tuple of ints) as sorted non-negative axes."""
    if axis is None:
        return tuple(range(ndim))
    items = axis if isinstance(axis, tuple) else (axis,)
    out = []
    for item in items:
        if not isinstance(item, int | np.integer) or isinstance(item, bool):
            raise TypeError(f"axis must be None, an int or a tuple of ints, got {axis!r}")
        if not -ndim <= int(item) < ndim:
            raise np.exceptions.AxisError(int(item), ndim)
        out.append(int(item) % ndim)
    if len(set(out)) != len(out):
        raise ValueError(f"duplicate value in 'axis': {axis!r}")
    return tuple(sorted(out))


def _leading_matrix(values: np.ndarray, axes: tuple[int, ...]) -> np.ndarray | None:
    """A C-contiguous real float block reduced over its leading axes as a (rows, columns)
    matrix (a view), else None."""
    if (
        not isinstance(values, np.ndarray)
        or values.dtype not in (np.float32, np.float64)
        or not axes
        or axes != tuple(range(len(axes)))
        or not values.flags.c_contiguous
    ):
        return None
    return values.reshape(math.prod(values.shape[: len(axes)]), -1)


def _column_sums(matrix: np.ndarray) -> np.ndarray:
    """Column sums of a C-contiguous (rows, columns) float matrix.

    NumPy reduces axis 0 by adding each row into the result, which is slow for narrow rows
    and accumulates error row after row.  Viewing ``k`` rows as one wide row first (about
    2048 items) sums k interleaved strands at full vector speed (3-5x faster here, for W5's
    64 float32 columns) and splits the error k ways; the strands are then added.
    """
    rows, columns = matrix.shape
    strands = max(1, min(rows, _WIDE_ROW_ITEMS // max(1, columns)))
    whole = rows - rows % strands  # the rows left over are added on their own
    wide = matrix[:whole].reshape(whole // strands, strands * columns)
    sums: np.ndarray = np.add.reduce(wide, axis=0).reshape(strands, columns).sum(axis=0)
    return sums + matrix[whole:].sum(axis=0) if whole < rows else sums


# Items in one wide row of :func:`_column_sums` (8 KiB of float32).
_WIDE_ROW_ITEMS = 2048


class Reduction:
    """One reduction of an expression; subclasses say how a block becomes a partial, how partials
    merge, and how the accumulator becomes the result."""

    def __init__(self, name: str, expr: Node, axes: tuple[int, ...], keepdims: bool) -> None:
        self.name = name
        self.expr = expr
        self.axes = axes
        self.keepdims = keepdims
        self.kept_shape = tuple(1 if i in axes else n for i, n in enumerate(expr.shape))

    def target(self, region: Region) -> Region:
        """Where a block's partial lands in the accumulator."""
        return tuple(slice(0, 1) if i in self.axes else s for i, s in enumerate(region))

    def partial(self, block: np.ndarray, region: Region) -> Any:
        raise NotImplementedError

    def sharing_key(self) -> Any:
        """Reductions of a pass with the same key take one partial per block, computed by the
        one of highest :attr:`sharing_rank`; None: a partial of its own."""
        return None

    sharing_rank = 0
    # Whether a partial calls BLAS (a pass of several workers then limits BLAS to one thread
    # each: see _blas.py).
    calls_blas = False

    def merge(self, partial: Any, region: Region) -> None:
        raise NotImplementedError

    def finish(self) -> Any:
        raise NotImplementedError

    def shaped(self, result: np.ndarray) -> Any:
        """The accumulator as NumPy shapes a result: reduced axes dropped unless keepdims, and a
        scalar for a full reduction (also of a 0-d array with keepdims, as NumPy gives)."""
        if self.keepdims and result.ndim:
            return result
        squeezed = result.reshape(
            tuple(n for i, n in enumerate(self.kept_shape) if i not in self.axes)
        )
        return squeezed[()] if squeezed.ndim == 0 else squeezed


def _probe_dtype(function: Any, input_dtype: np.dtype[Any], **kwargs: Any) -> np.dtype[Any]:
    """The dtype ``function`` gives on ``input_dtype`` (``kwargs`` may hold its own ``dtype``)."""
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return np.asarray(function(np.ones(1, input_dtype), **kwargs)).dtype


class Accumulate(Reduction):
    """sum, prod, any, all, count_nonzero and nansum, nanprod: partials combine with one ufunc."""

    FUNCTIONS: ClassVar[dict[str, Any]] = {
        "sum": (np.sum, np.add, 0),
        "nansum": (np.nansum, np.add, 0),
        "prod": (np.prod, np.multiply, 1),
        "nanprod": (np.nanprod, np.multiply, 1),
        "any": (np.any, np.logical_or, False),
        "all": (np.all, np.logical_and, True),
        "count_nonzero": (np.count_nonzero, np.add, 0),
    }

    def __init__(
        self, name: str, expr: Node, axes: tuple[int, ...], keepdims: bool, dtype: Any
    ) -> None:
        super().__init__(name, expr, axes, keepdims)
        self.function, self.combine, identity = self.FUNCTIONS[name]
        self.kwargs: dict[str, Any] = {}
        if dtype is not None:
            if name in ("any", "all", "count_nonzero"):
                raise TypeError(f"{name}() takes no dtype")
            self.kwargs["dtype"] = np.dtype(dtype)
        if name == "count_nonzero":
            result = np.dtype(np.intp)
        else:
            result = _probe_dtype(self.function, expr.dtype, **self.kwargs)
        self.result_dtype = result
        self.acc = np.full(self.kept_shape, identity, dtype=result)

    def partial(self, block: np.ndarray, region: Region) -> Any:
        if self.function is np.sum and block.dtype == self.result_dtype:
            matrix = _leading_matrix(block, self.axes)
            if matrix is not None and len(self.axes) < block.ndim:
                kept = (1,) * len(self.axes) + block.shape[len(self.axes) :]
                return _column_sums(matrix).reshape(kept)
        return np.asarray(self.function(block, axis=self.axes, keepdims=True, **self.kwargs))

    def merge(self, partial: Any, region: Region) -> None:
        target = self.target(region)
        # Partials already infinite or NaN combine to NaN (inf - inf, inf * 0) without the
        # warning NumPy's whole-array call may not give (complex products, most of all).
        with np.errstate(invalid="ignore"):
            self.acc[target] = self.combine(self.acc[target], partial)

    def finish(self) -> Any:
        return self.shaped(self.acc)


class Extreme(Reduction):
    """min, max, nanmin, nanmax."""

    FUNCTIONS: ClassVar[dict[str, Any]] = {
        "min": (np.min, np.minimum),
        "max": (np.max, np.maximum),
        # np.nanmin is np.fmin.reduce plus a warning for all-NaN slices, which a block may
        # hold where the whole array has none: the warning is judged at the end.  (No
        # catch_warnings here: it swaps the process's filters, and worker threads inside it
        # together restore each other's.)
        "nanmin": (np.fmin.reduce, np.fmin),
        "nanmax": (np.fmax.reduce, np.fmax),
    }

    def __init__(self, name: str, expr: Node, axes: tuple[int, ...], keepdims: bool) -> None:
        super().__init__(name, expr, axes, keepdims)
        if any(expr.shape[a] == 0 for a in axes):
            raise ValueError(f"zero-size array to reduction operation {name} which has no identity")
        self.function, self.combine = self.FUNCTIONS[name]
        self.acc = np.empty(self.kept_shape, dtype=expr.dtype)
        self.seen = np.zeros(self.kept_shape, dtype=bool)

    def partial(self, block: np.ndarray, region: Region) -> Any:
        return np.asarray(self.function(block, axis=self.axes, keepdims=True))

    def merge(self, partial: Any, region: Region) -> None:
        target = self.target(region)
        seen = self.seen[target]
        self.acc[target] = np.where(seen, self.combine(self.acc[target], partial), partial)
        self.seen[target] = True

    def finish(self) -> Any:
        if self.name.startswith("nan") and self.acc.dtype.kind in "fc" and np.isnan(self.acc).any():
            warnings.warn("All-NaN slice encountered", RuntimeWarning, stacklevel=3)
        return self.shaped(self.acc)


class ArgExtreme(Reduction):
    """argmin, argmax and the nan variants: the first index of the extreme value, along one
    axis or over the flattened array; NaN counts as the extreme unless skipped."""

    def __init__(self, name: str, expr: Node, axis: Any, keepdims: bool) -> None:
        if axis is not None and not isinstance(axis, int | np.integer):
            raise TypeError(f"{name}() takes one axis (an int) or None, got {axis!r}")
        axes = normalize_axes(axis, expr.ndim)
        super().__init__(name, expr, axes, keepdims)
        # (only an empty reduced axis is an error: other empty axes give an empty result)
        if any(expr.shape[a] == 0 for a in axes):
            raise ValueError(f"attempt to get {name.removeprefix('nan')} of an empty sequence")
        self.flat = axis is None
        self.skip_nan = name.startswith("nan")
        self.is_max = name.endswith("max")
        self.value = np.empty(self.kept_shape, dtype=expr.dtype)
        self.index = np.full(self.kept_shape, -1, dtype=np.intp)
        # NumPy's nanargmin/nanargmax: NaN becomes +inf (-inf) and the plain arg-extreme of
        # that is the answer (so [nan, inf] gives 0), unless a whole slice is NaN.
        self.fill_nan = self.skip_nan and expr.dtype.kind in "fc"
        self.valid = np.zeros(self.kept_shape, dtype=bool)

    def _better(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """Where ``a`` beats ``b`` strictly (ties go to the earlier index, merged separately)."""
        better = a > b if self.is_max else a < b
        if a.dtype.kind in "fc":
            if self.skip_nan:
                better = better | (np.isnan(b) & ~np.isnan(a))
            else:
                better = better | (np.isnan(a) & ~np.isnan(b))
        return better

    def partial(self, block: np.ndarray, region: Region) -> Any:
        shape = tuple(s.stop - s.start for s in region)
        block = np.broadcast_to(block, shape)
        if not self.fill_nan:
            return (*self._arg_partial(block, region, shape), None)
        nan = np.isnan(block)
        filled = np.where(nan, -np.inf if self.is_max else np.inf, block).astype(block.dtype)
        valid = ~nan.all(axis=self.axes, keepdims=True)
        return (*self._arg_partial(filled, region, shape), valid)

    def _arg_partial(self, block: np.ndarray, region: Region, shape: tuple[int, ...]) -> Any:
        if self.flat:
            work = block.reshape(-1)
            local = self._local_arg(work)
            value = work[local]
            unravelled = np.unravel_index(local, shape)
            index = np.ravel_multi_index(
                tuple(int(u) + s.start for u, s in zip(unravelled, region, strict=True)),
                self.expr.shape,
            )
            return np.full(self.kept_shape_of(block), value), np.full(
                self.kept_shape_of(block), index
            )
        axis = self.axes[0]
        local = self._local_arg(block, axis)
        value = np.take_along_axis(block, np.expand_dims(local, axis), axis)
        return value, np.expand_dims(local, axis) + region[axis].start

    def kept_shape_of(self, block: np.ndarray) -> tuple[int, ...]:
        return tuple(1 if i in self.axes else n for i, n in enumerate(block.shape))

    def _local_arg(self, values: np.ndarray, axis: int | None = None) -> Any:
        if not self.skip_nan:
            return np.argmax(values, axis=axis) if self.is_max else np.argmin(values, axis=axis)
        if values.dtype.kind not in "fc":
            return np.argmax(values, axis=axis) if self.is_max else np.argmin(values, axis=axis)
        fill = -np.inf if self.is_max else np.inf
        filled = np.where(np.isnan(values), fill, values)
        return np.argmax(filled, axis=axis) if self.is_max else np.argmin(filled, axis=axis)

    def merge(self, partial: Any, region: Region) -> None:
        with np.errstate(invalid="ignore"):  # NaN and complex NaN compare without a warning
            self._merge(partial, region)

    def _merge(self, partial: Any, region: Region) -> None:
        value_b, index_b, valid_b = partial
        target = self.target(region)
        if valid_b is not None:
            self.valid[target] |= valid_b
        value_a = self.value[target]
        index_a = self.index[target]
        fresh = index_a < 0
        equal = (value_b == value_a) | (
            np.isnan(value_b) & np.isnan(value_a) if value_a.dtype.kind in "fc" else False
        )
        take = fresh | self._better(value_b, value_a) | (equal & (index_b < index_a))
        self.value[target] = np.where(take, value_b, value_a)
        self.index[target] = np.where(take, index_b, index_a)

    def finish(self) -> Any:
        if self.fill_nan and not self.valid.all():
            raise ValueError("All-NaN slice encountered")
        return self.shaped(self.index)


class Histogram(Reduction):
    """Counts per bin over the whole array, with the bins fixed before the pass."""

    def __init__(self, expr: Node, bins: Any, bin_range: Any, density: bool) -> None:
        super().__init__("histogram", expr, tuple(range(expr.ndim)), False)
        self.bins = bins
        self.range = bin_range
        self.density = density
        self.edges = np.histogram_bin_edges(np.empty(0, expr.dtype), bins=bins, range=bin_range)
        self.counts = np.zeros(len(self.edges) - 1, dtype=np.intp)

    def partial(self, block: np.ndarray, region: Region) -> Any:
        shape = tuple(s.stop - s.start for s in region)
        values = np.broadcast_to(block, shape).reshape(-1)
        if isinstance(self.bins, int | np.integer):
            return np.histogram(values, bins=self.bins, range=self.range)[0]
        return np.histogram(values, bins=self.edges)[0]

    def merge(self, partial: Any, region: Region) -> None:
        self.counts += partial

    def finish(self) -> Any:
        if self.density:
            widths = np.diff(self.edges)
            return self.counts / widths / self.counts.sum(), self.edges
        return self.counts, self.edges
