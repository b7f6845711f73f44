"""dask's generic ``reduction`` and ``scan`` (``cumreduction``) on oocarray, for the chunk
manager: xarray runs ``first``/``last`` (``nanfirst``) on ``reduction``; ``scan`` is the
protocol's cumulative step (xarray 2026.9 calls it only from its dask-only ``push``).

A reduction is two lazy blockwise steps: the function on each block (one partial per block
along the reduced axes), then the aggregate over the partials along those axes.  A scan carries
across blocks: one pass computes each block's total (``preop``) and folds them in order with
``binop`` into a carry per block; the result stays lazy, each block ``binop(carry, func(block))``.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import Any

import numpy as np
from numpy.lib.array_utils import normalize_axis_index, normalize_axis_tuple

from oocarray._xarray._block_calls import Fixed, blockwise, node_of
from oocarray._xarray._lazy import OOCLazyArray

__all__ = ["reduction", "scan"]


class _Partial:
    """``func(block, axis=..., keepdims=True)``: one partial per block (picklable)."""

    def __init__(self, function: Callable[..., Any], axis: tuple[int, ...], **extra: Any) -> None:
        self.function, self.axis, self.extra = function, axis, extra
        self.__name__ = getattr(function, "__name__", "function")

    def __call__(self, block: np.ndarray) -> Any:
        return self.function(block, axis=self.axis, keepdims=True, **self.extra)


def reduction(
    arr: Any,
    func: Callable[..., Any],
    combine_func: Callable[..., Any] | None = None,
    aggregate_func: Callable[..., Any] | None = None,
    axis: int | Sequence[int] | None = None,
    dtype: Any = None,
    keepdims: bool = False,
) -> OOCLazyArray:
    """``aggregate_func(concatenated partials, axis, keepdims)`` where each partial is
    ``func(block, axis, keepdims=True)``; ``combine_func`` (dask's tree step) is not needed:
    the partials along the reduced axes are aggregated in one call."""
    node, _ = node_of(arr)
    axes = normalize_axis_tuple(tuple(range(node.ndim)) if axis is None else axis, node.ndim)
    index = tuple(range(node.ndim))
    one_each: dict[Hashable, Any] = dict.fromkeys(axes, 1)
    partials = blockwise(
        _Partial(func, axes), index, arr, index, dtype=dtype, adjust_chunks=one_each
    )
    aggregate = aggregate_func or func
    # Reduced axes the result keeps are new axes of one block: the partials along them are
    # read whole (contracted) for every call.
    kept = tuple((f"kept{a}" if a in axes else a) for a in index if a not in axes or keepdims)
    ones: dict[Any, Any] = {f"kept{a}": 1 for a in axes} if keepdims else {}
    return blockwise(
        _Aggregate(aggregate, axes, keepdims),
        kept,
        partials,
        index,
        dtype=dtype if dtype is not None else node.dtype,
        new_axes=ones,
    )


class _Aggregate:
    """``aggregate(partials, axis=..., keepdims=...)`` (picklable)."""

    def __init__(self, function: Callable[..., Any], axis: tuple[int, ...], keepdims: bool) -> None:
        self.function, self.axis, self.keepdims = function, axis, keepdims
        self.__name__ = getattr(function, "__name__", "function")

    def __call__(self, partials: np.ndarray) -> Any:
        return self.function(partials, axis=self.axis, keepdims=self.keepdims)


class _Continue:
    """``binop(carry, func(block, axis, dtype))``: a block of the scan (picklable)."""

    def __init__(
        self, func: Callable[..., Any], binop: Callable[..., Any], axis: int, dtype: Any
    ) -> None:
        self.func, self.binop, self.axis, self.dtype = func, binop, axis, dtype
        self.__name__ = getattr(func, "__name__", "function")

    def __call__(self, block: np.ndarray, carry: np.ndarray) -> Any:
        return self.binop(carry, self.func(block, axis=self.axis, dtype=self.dtype))


class _Last:
    """The last element along ``axis`` of ``func``'s scan of a block: its total when no
    ``preop`` is given (picklable)."""

    def __init__(self, func: Callable[..., Any], dtype: Any) -> None:
        self.func, self.dtype = func, dtype

    def __call__(self, block: np.ndarray, axis: Any, keepdims: bool) -> Any:
        scanned = np.asarray(self.func(block, axis=axis[0], dtype=self.dtype))
        return np.take(scanned, [-1], axis=axis[0])


def scan(
    func: Callable[..., Any],
    binop: Callable[..., Any],
    ident: Any,
    arr: Any,
    axis: int | None = None,
    dtype: Any = None,
    preop: Callable[..., Any] | None = None,
    **kwargs: Any,
) -> OOCLazyArray:
    """dask's ``cumreduction(func, binop, ident, x, axis, dtype, preop=)`` (any ``method``):
    the block totals are computed now, in one streaming pass (a total per block is held in
    memory), the scan itself stays lazy."""
    node, chunks = node_of(arr)
    if axis is None:
        raise TypeError("scan needs an axis (oocarray scans one axis of an N-d array)")
    axis = normalize_axis_index(axis, node.ndim)
    dtype = np.dtype(dtype if dtype is not None else node.dtype)
    index = tuple(range(node.ndim))
    total = _Partial(preop, (axis,)) if preop is not None else _Partial(_Last(func, dtype), (axis,))
    one: dict[Hashable, Any] = {axis: 1}
    totals = blockwise(total, index, arr, index, dtype=dtype, adjust_chunks=one)
    per_block = np.asarray(totals.compute())
    carries = np.empty_like(per_block)
    carry = np.full_like(np.take(per_block, [0], axis=axis), ident)
    for i in range(per_block.shape[axis]):
        place = [slice(None)] * node.ndim
        place[axis] = slice(i, i + 1)
        carries[tuple(place)] = carry
        carry = binop(carry, per_block[tuple(place)])
    carry_chunks = list(chunks)
    carry_chunks[axis] = (1,) * len(chunks[axis])
    return blockwise(
        _Continue(func, binop, axis, dtype),
        index,
        arr,
        index,
        Fixed(carries, tuple(carry_chunks)),  # one carry per block along axis
        index,
        dtype=dtype,
    )
