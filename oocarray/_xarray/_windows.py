"""Sliding windows and their reductions, lazily and block by block (``rolling(...)``).

xarray's ``rolling(time=k).mean()`` (without numbagg or bottleneck) pads the data, takes
``np.lib.stride_tricks.sliding_window_view`` of it and reduces the window axes (``sum``,
``max``, ``nanstd``...); ``_mean`` and ``min_periods`` add a count of valid values in each
window and a ``where``.  :class:`SlidingWindows` is the windows as a lazy node;
:class:`WindowReduction` is a reduction over all of its window axes, a lazy node too: each
block of the result reads its region of the data plus the window's overlap (a halo) and
reduces there, so the whole chain stays one streaming, element-wise pass, with no
accumulator of the result's size in between (as a deferred reduction would hold).

Examples
--------
>>> import numpy as np, oocarray as oc
>>> from oocarray._compute import Expr
>>> x = oc.from_numpy(np.arange(10.0), chunks=4)
>>> windows = sliding_window_view(x, 3)
>>> np.asarray(Expr(WindowReduction(windows._tree(), "sum", {"axis": 1}))).tolist()
[3.0, 6.0, 9.0, 12.0, 15.0, 18.0, 21.0, 24.0]
"""

from __future__ import annotations

import itertools
import math
import warnings
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
from numpy.lib.array_utils import normalize_axis_tuple

from oocarray._compute import ChunkedArray, Expr
from oocarray._compute._nodes import BlockReads, Node, Region, as_node

__all__ = ["SlidingWindows", "WindowReduction", "reduce_windows", "sliding_window_view"]


class SlidingWindows(Node):
    """``np.lib.stride_tricks.sliding_window_view(part, window_shape, axis)``, lazily: the
    window axes are appended, each window read from the part's region plus its overlap."""

    def __init__(self, part: Node, window_shape: tuple[int, ...], axes: tuple[int, ...]) -> None:
        self.part, self.windows, self.axes = part, window_shape, axes
        shape = list(part.shape)
        for axis, w in zip(axes, window_shape, strict=True):
            if w > shape[axis]:
                raise ValueError("window shape cannot be larger than input array shape")
            shape[axis] -= w - 1
        self.shape = (*shape, *window_shape)
        self.dtype = part.dtype

    def children(self) -> Sequence[Node]:
        return (self.part,)

    def chunks(self) -> tuple[int, ...] | None:
        found = self.part.chunks() or self.part.shape
        return (*found, *self.windows)

    def read_with_halo(self, own: Region, reads: BlockReads) -> np.ndarray:
        """The part's values for the windows starting in ``own`` (its region extended by
        each window's length less one along the window axes)."""
        wanted = list(own)
        for axis, w in zip(self.axes, self.windows, strict=True):
            wanted[axis] = slice(own[axis].start, own[axis].stop + w - 1)
        return np.broadcast_to(
            self.part.evaluate(tuple(wanted), reads), tuple(s.stop - s.start for s in wanted)
        )

    def evaluate(self, region: Region, reads: BlockReads) -> np.ndarray:
        ndim = self.part.ndim
        block = self.read_with_halo(region[:ndim], reads)
        view = np.lib.stride_tricks.sliding_window_view(block, self.windows, axis=self.axes)
        key: tuple[Any, ...] = (Ellipsis, *region[ndim:])
        windows: np.ndarray = view[key]
        return windows


def sliding_window_view(
    x: Any, window_shape: Any, axis: Any = None, *, subok: bool = False, writeable: bool = False
) -> Expr:
    """``np.lib.stride_tricks.sliding_window_view`` of an oocarray array, lazily."""
    node = as_node(x._tree() if hasattr(x, "_tree") else x)
    shape = (window_shape,) if np.isscalar(window_shape) else tuple(window_shape)
    if axis is None:
        axis = tuple(range(len(shape)))
    axes = normalize_axis_tuple(axis, node.ndim)
    if len(set(axes)) != len(axes):
        raise NotImplementedError("sliding_window_view over one axis twice on oocarray arrays")
    return Expr(SlidingWindows(node, tuple(int(w) for w in shape), axes))


# Per reduction: the ufunc that folds one shifted piece into the running result, and whether
# NaNs are skipped (``nan*``).  The moments (mean, var, std) build on the sum.
_FOLDS: dict[str, tuple[np.ufunc, bool]] = {
    "sum": (np.add, False),
    "nansum": (np.add, True),
    "prod": (np.multiply, False),
    "nanprod": (np.multiply, True),
    "max": (np.maximum, False),
    "amax": (np.maximum, False),
    "min": (np.minimum, False),
    "amin": (np.minimum, False),
    "nanmax": (np.fmax, False),  # fmax/fmin skip NaN, and leave all-NaN windows NaN
    "nanmin": (np.fmin, False),
}
_MOMENTS = frozenset(("mean", "nanmean", "var", "nanvar", "std", "nanstd"))
REDUCTIONS = frozenset((*_FOLDS, *_MOMENTS))
_OPTIONS = frozenset(("axis", "dtype", "ddof", "keepdims", "out"))


class WindowReduction(Node):
    """``np.<name>(windows, axis=<all window axes>)`` of a :class:`SlidingWindows` node,
    block by block: the result has the data's (trimmed) shape and chunks.

    The windows are reduced as ``prod(window_shape)`` shifted views of the block with its
    halo, folded element-wise (contiguous passes, no strided copy of the windows), and the
    ``nan*`` moments from counts and sums: by hand because NumPy's ``nanvar`` and friends
    warn for all-NaN windows from the engine's worker threads, where warnings cannot be
    filtered safely, and copy every window first.
    """

    def __init__(self, windows: SlidingWindows, name: str, options: dict[str, Any]) -> None:
        if name not in REDUCTIONS:
            raise ValueError(f"{name} is not a window reduction")
        self.windows, self.name = windows, name
        self.ddof = int(options.get("ddof", 0))
        self.shape = windows.shape[: windows.part.ndim]
        self.dtype = _result_dtype(windows, name, options)
        self.work_dtype = np.dtype(options.get("dtype") or self.dtype)

    def children(self) -> Sequence[Node]:
        return (self.windows.part,)

    def chunks(self) -> tuple[int, ...] | None:
        return self.windows.part.chunks() or None

    def evaluate(self, region: Region, reads: BlockReads) -> np.ndarray:
        block = self.windows.read_with_halo(region, reads)
        own = tuple(s.stop - s.start for s in region)
        with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
            if self.name in _FOLDS:
                ufunc, skip_nan = _FOLDS[self.name]
                if skip_nan and block.dtype.kind in "fc":  # NaN as the identity, once
                    block = np.where(
                        np.isnan(block), np.asarray(ufunc.identity, block.dtype), block
                    )
                found = _fold(ufunc, self._shifted(block, own), self.work_dtype)
            else:
                found = self._moment(block, own)
        return found.astype(self.dtype, copy=False)

    def _shifted(self, array: np.ndarray, own: tuple[int, ...]) -> Iterator[np.ndarray]:
        """``array`` (the block with its halo) shifted by each position in the window."""
        axes, windows = self.windows.axes, self.windows.windows
        for offsets in itertools.product(*(range(w) for w in windows)):
            key = [slice(None)] * array.ndim
            for axis, offset in zip(axes, offsets, strict=True):
                key[axis] = slice(offset, offset + own[axis])
            yield array[tuple(key)]

    def _moment(self, block: np.ndarray, own: tuple[int, ...]) -> np.ndarray:
        """Mean, variance or standard deviation in two passes (the mean, then the squared
        deviations from it, as NumPy computes them); NaNs left out of the ``nan*`` ones."""
        work = self.work_dtype
        skip_nan = self.name.startswith("nan") and block.dtype.kind in "fc"
        if skip_nan:
            valid = ~np.isnan(block)
            block = np.where(valid, block, np.zeros((), block.dtype))
            count = _fold(np.add, self._shifted(valid, own), work)
        else:
            count = np.asarray(math.prod(self.windows.windows), work)
        total = _fold(np.add, self._shifted(block, own), work)
        mean: np.ndarray = np.divide(total, count, out=total)
        if self.name.endswith("mean"):
            return mean
        squares, deviation = np.zeros_like(mean), np.empty_like(mean)  # (one buffer: fewer faults)
        present_pieces = self._shifted(valid, own) if skip_nan else itertools.repeat(None)
        for values, present in zip(self._shifted(block, own), present_pieces, strict=False):
            np.subtract(values, mean, out=deviation, casting="unsafe")
            np.multiply(deviation, deviation, out=deviation)
            if present is not None:  # (a NaN's place counts nothing)
                np.multiply(deviation, present, out=deviation)
            np.add(squares, deviation, out=squares)
        denominator = count - self.ddof
        variance = np.divide(squares, denominator, out=squares)
        variance[np.broadcast_to(denominator <= 0, variance.shape)] = np.nan
        result: np.ndarray = (
            np.sqrt(variance, out=variance) if self.name.endswith("std") else variance
        )
        return result


def _fold(ufunc: np.ufunc, pieces: Iterator[np.ndarray], dtype: np.dtype[Any]) -> np.ndarray:
    """``ufunc`` folded over the pieces into a new array of ``dtype``."""
    result: np.ndarray | None = None
    for piece in pieces:
        if result is None:
            result = np.array(piece, dtype=dtype)
        else:
            ufunc(result, piece, out=result, casting="unsafe")
    assert result is not None  # (a window has at least one position)
    return result


def _result_dtype(windows: SlidingWindows, name: str, options: dict[str, Any]) -> np.dtype[Any]:
    """The dtype NumPy's reduction gives for the windows' dtype (probed on one window)."""
    probe = np.ones((1,) * windows.part.ndim + windows.windows, windows.dtype)
    axes = tuple(range(windows.part.ndim, probe.ndim))
    extra = {k: v for k, v in options.items() if k in ("dtype", "ddof")}
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")  # (a probe of one window may have too few values)
        found: np.dtype[Any] = np.dtype(getattr(np, name)(probe, axis=axes, **extra).dtype)
    return found


def reduce_windows(func: Any, args: Sequence[Any], kwargs: dict[str, Any]) -> Expr | None:
    """``func(*args, **kwargs)`` as a :class:`WindowReduction` when it is a NumPy reduction
    of sliding windows over exactly their window axes; None otherwise (it runs as before)."""
    name = getattr(func, "__name__", "")
    if name not in REDUCTIONS or getattr(np, name, None) is not func or len(args) != 1:
        return None
    if not isinstance(args[0], ChunkedArray | Expr) or set(kwargs) - _OPTIONS:
        return None
    if kwargs.get("out") is not None or kwargs.get("keepdims"):
        return None
    if kwargs.get("ddof") and name not in ("var", "nanvar", "std", "nanstd"):
        return None
    node = as_node(args[0]._tree())
    if not isinstance(node, SlidingWindows) or kwargs.get("axis") is None:
        return None
    window_axes = set(range(node.part.ndim, node.ndim))
    if set(normalize_axis_tuple(kwargs["axis"], node.ndim)) != window_axes:
        return None
    if node.dtype.kind not in "biuf":
        return None
    options = {k: v for k, v in kwargs.items() if v is not None and v is not np._NoValue}
    return Expr(WindowReduction(node, name, options))
