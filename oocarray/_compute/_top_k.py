"""The ``k`` largest (or smallest) values of a chunked array and where they are, in one pass.

Sorting a whole axis to keep ``k`` of its values costs an external sort; when ``k`` is small a
streaming reduction does it in one read: each block keeps its own best ``k`` along the axis
(``np.argpartition``, linear in the block), and merging keeps the best ``k`` of what is kept
so far and the block's, so memory is ``k`` values and indices per line, never the axis.  The
order is NumPy's sort order (NaN after every number, so NaN counts as the largest), which is
what :func:`numpy.sort` and :func:`numpy.partition` on the same data agree with.
"""

from __future__ import annotations

import operator
from typing import Any

import numpy as np
from numpy.lib.array_utils import normalize_axis_index

from oocarray._compute._engine import evaluate
from oocarray._compute._limits import require_memory
from oocarray._compute._nodes import Node, Region, as_node
from oocarray._compute._reduce import Reduction

__all__ = ["TopK", "top_k"]


class TopK(Reduction):
    """The best ``k`` values along ``axis`` (``None``: of the flattened array) and their indices
    along it (flat indices for ``None``)."""

    def __init__(self, expr: Node, k: int, axis: int | None, largest: bool) -> None:
        axes = tuple(range(expr.ndim)) if axis is None else (axis,)
        super().__init__("top_k", expr, axes, keepdims=False)
        self.axis = axis
        self.k = k
        self.largest = largest
        # target region's (start, stop) pairs -> (values, indices), the reduced axis last
        self.kept: dict[tuple[tuple[int, int], ...], tuple[np.ndarray, np.ndarray]] = {}

    def _best(self, values: np.ndarray) -> np.ndarray:
        """Positions along the last axis of each line's best ``min(k, length)`` values, in
        increasing order; of values equal to the last one kept, the first ones.

        ``np.argpartition`` finds k of them in one linear pass but keeps any of several equal
        values at the cut (which index came back would depend on the chunking): lines where
        values equal to the cut were left out are chosen again by position."""
        length = values.shape[-1]
        if length <= self.k:
            return np.broadcast_to(np.arange(length), values.shape).copy()
        rank = length - self.k if self.largest else self.k - 1
        parted = np.argpartition(values, rank, axis=-1)
        chosen = parted[..., rank:] if self.largest else parted[..., : self.k]
        cut = np.take_along_axis(values, parted[..., rank : rank + 1], axis=-1)
        chosen_equal = np.count_nonzero(
            _equal(np.take_along_axis(values, chosen, axis=-1), cut), axis=-1
        )
        tied = np.count_nonzero(_equal(values, cut), axis=-1) > chosen_equal
        if tied.any():
            chosen[tied] = self._first_of_ties(values[tied], cut[tied])
        return np.sort(chosen, axis=-1)

    def _first_of_ties(self, values: np.ndarray, cut: np.ndarray) -> np.ndarray:
        """The best k positions of each line (2-d), the first of those equal to ``cut``."""
        with np.errstate(invalid="ignore"):
            better = values > cut if self.largest else values < cut
        if values.dtype.kind in "fc":  # NaN sorts above every number
            nan, nan_cut = np.isnan(values), np.isnan(cut)
            better |= (nan & ~nan_cut) if self.largest else (~nan & nan_cut)
        equal = _equal(values, cut)
        wanted = self.k - better.sum(axis=-1, keepdims=True)
        chosen = better | (equal & (np.cumsum(equal, axis=-1) <= wanted))
        return np.nonzero(chosen)[-1].reshape(len(values), self.k)

    def partial(self, block: np.ndarray, region: Region) -> Any:
        shape = tuple(s.stop - s.start for s in region)
        block = np.broadcast_to(block, shape)
        if self.axis is None:
            lines = block.reshape(1, -1)
            local = self._best(lines)[0]
            position = np.unravel_index(local, shape)
            indices = np.ravel_multi_index(
                tuple(p + s.start for p, s in zip(position, region, strict=True)),
                self.expr.shape,
            )
            return lines[0, local][None], np.asarray(indices, dtype=np.int64)[None]
        # (contiguous lines: a partition of strided ones is slower than the copy)
        lines = np.ascontiguousarray(np.moveaxis(block, self.axis, -1))
        local = self._best(lines)
        values = np.take_along_axis(lines, local, axis=-1)
        return values, local.astype(np.int64) + region[self.axis].start

    def merge(self, partial: Any, region: Region) -> None:
        target = tuple((s.start, s.stop) for s in self.target(region))
        values, indices = partial
        if target in self.kept:
            kept_values, kept_indices = self.kept[target]
            values = np.concatenate([kept_values, values], axis=-1)
            indices = np.concatenate([kept_indices, indices], axis=-1)
            # by index, so that ties keep the first (flat indices of blocks interleave)
            by_index = np.argsort(indices, axis=-1, kind="stable")
            values = np.take_along_axis(values, by_index, axis=-1)
            indices = np.take_along_axis(indices, by_index, axis=-1)
        best = self._best(values)
        self.kept[target] = (
            np.take_along_axis(values, best, axis=-1),
            np.take_along_axis(indices, best, axis=-1),
        )

    def finish(self) -> tuple[np.ndarray, np.ndarray]:
        if self.axis is None:
            if not self.kept:
                return np.empty(0, self.expr.dtype), np.empty(0, np.int64)
            (values, indices), *_ = self.kept.values()  # (one target: the whole array)
            return self._ordered(values[0], indices[0])
        lines = tuple(n for i, n in enumerate(self.expr.shape) if i != self.axis)
        values = np.empty((*lines, self.k), dtype=self.expr.dtype)
        indices = np.empty((*lines, self.k), dtype=np.int64)
        for target, (kept_values, kept_indices) in self.kept.items():
            place = tuple(slice(*bounds) for i, bounds in enumerate(target) if i != self.axis)
            values[place], indices[place] = self._ordered(kept_values, kept_indices)
        return np.moveaxis(values, -1, self.axis), np.moveaxis(indices, -1, self.axis)

    def _ordered(self, values: np.ndarray, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Each line best first; equal values by index (lines are kept in index order)."""
        if self.largest:
            # descending, and among equal values the smaller index first: sort the reversed
            # lines ascending (stably), then reverse back
            order = np.argsort(values[..., ::-1], axis=-1, kind="stable")[..., ::-1]
            order = values.shape[-1] - 1 - order
        else:
            order = np.argsort(values, axis=-1, kind="stable")
        return np.take_along_axis(values, order, axis=-1), np.take_along_axis(
            indices, order, axis=-1
        )


def _equal(values: np.ndarray, cut: np.ndarray) -> np.ndarray:
    """Where ``values`` equal ``cut``, NaN equal to NaN."""
    with np.errstate(invalid="ignore"):
        equal: np.ndarray = values == cut
    if values.dtype.kind in "fc":
        equal |= np.isnan(values) & np.isnan(cut)
    return equal


def top_k(
    x: Any, k: int, axis: int | None = -1, *, largest: bool = True, progress: bool = True
) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` largest (or smallest) values along ``axis`` and their indices, in one pass.

    Parameters
    ----------
    x : ChunkedArray, Expr or array_like
        The data; only ``k`` values and indices per line are held at once.
    k : int
        How many values, from 0 to the axis' length.
    axis : int or None
        The axis to select along; ``None`` selects from the flattened array (indices are then
        flat indices, as :func:`numpy.argmax` gives).
    largest : bool
        The largest values, best first (default); ``False``: the smallest, smallest first.
    progress : bool
        Show a progress bar on long passes.

    Returns
    -------
    values, indices : numpy.ndarray
        ``x``'s shape with ``axis`` of length ``k`` (1-d for ``axis=None``).  The order is
        NumPy's sort order (NaN above every number); equal values come by increasing index.

    Examples
    --------
    >>> import numpy as np
    >>> import oocarray as oc
    >>> x = oc.from_numpy(np.array([[3, 9, 1, 7], [4, 4, 8, 0]]), chunks=(1, 2))
    >>> values, indices = oc.top_k(x, 2, axis=1)
    >>> values.tolist(), indices.tolist()
    ([[9, 7], [8, 4]], [[1, 3], [2, 0]])
    """
    node = as_node(x)
    try:
        k = operator.index(k)
    except TypeError:
        raise TypeError(f"top_k() takes an integer k, got {k!r}") from None
    if axis is not None:
        if node.ndim == 0:
            raise ValueError("top_k() along an axis needs an array of one or more axes")
        axis = normalize_axis_index(axis, node.ndim)
    length = node.size if axis is None else node.shape[axis]
    if not 0 <= k <= length:
        raise ValueError(f"top_k() takes k from 0 to {length} here, got {k}")
    lines = 1 if axis is None else node.size // max(1, length)
    # the kept candidates with their indices, and as many of a block's while merging
    peak = 2 * lines * k * (node.dtype.itemsize + 8)
    require_memory(
        "top_k",
        peak,
        smallest_bytes=peak,
        hint="for k near the axis' length, np.sort (an external sort) is the way",
    )
    reduction = TopK(node, k, axis, largest)
    if k and length:
        evaluate([reduction], [], progress, name="top_k")
    return reduction.finish()
