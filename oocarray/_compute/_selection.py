"""Exact order statistics of chunked arrays along reduced axes, by counting passes.

Values are compared through order keys: unsigned 64-bit integers whose order is NumPy's sort
order of the values (for floats the sign bit is flipped, and all bits of negatives, so the
keys of floats sort as the floats; NaN is left out).  Selecting the ``k``-th smallest value of a
column then narrows an integer interval of keys:

1. a pass counts each column's values and finds its smallest and largest key;
2. each histogram pass counts, for every wanted (column, rank), the values in each of up to
   4096 equal bins of its interval and keeps the bin holding the rank (each pass divides the
   interval's width by the number of bins, so 64-bit keys take at most six);
3. once the candidates left in all intervals fit in memory, a last pass gathers them and the
   rank is picked exactly (one lexicographic sort of all candidates, by target then key).

Every column and every rank goes through one pass at a time (a :class:`Reduction` of the
engine), and ranks whose intervals coincide share their counts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from oocarray._compute._engine import evaluate
from oocarray._compute._limits import require_memory, working_bytes
from oocarray._compute._nodes import Node
from oocarray._compute._reduce import Reduction

__all__ = ["ColumnSummary", "from_keys", "order_keys", "select_ranks", "summarize"]

Region = tuple[slice, ...]

MAX_BINS = 4096
MIN_BINS = 16
# Rows of a block's column matrix turned into keys at once (bounds a partial's temporaries).
SLICE_ITEMS = 1 << 18
_HIGH_BIT = np.uint64(1 << 63)
_ALL_ONES = np.uint64((1 << 64) - 1)


def order_keys(values: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
    """``values`` as uint64 keys in NumPy's sort order, and where they are not NaN (None: no
    NaN can occur)."""
    kind = values.dtype.kind
    if kind == "b":
        return values.astype(np.uint64), None
    if kind == "u":
        return values.astype(np.uint64), None
    if kind == "i":
        return values.astype(np.int64).view(np.uint64) ^ _HIGH_BIT, None
    if kind != "f":
        raise TypeError(f"order keys of {values.dtype} values")
    bits_type = np.dtype(f"u{values.dtype.itemsize}")
    bits = np.ascontiguousarray(values).view(bits_type)
    sign = bits_type.type(1 << (8 * values.dtype.itemsize - 1))
    negative = (bits & sign) != 0
    keys = np.where(negative, ~bits, bits | sign).astype(np.uint64)
    return keys, ~np.isnan(values)


def from_keys(keys: np.ndarray, dtype: np.dtype[Any]) -> np.ndarray:
    """The values of order ``keys`` (the inverse of :func:`order_keys`)."""
    kind = dtype.kind
    if kind in "bu":
        return keys.astype(dtype)
    if kind == "i":
        return (keys ^ _HIGH_BIT).view(np.int64).astype(dtype)
    bits_type = np.dtype(f"u{dtype.itemsize}")
    bits = keys.astype(bits_type)
    sign = bits_type.type(1 << (8 * dtype.itemsize - 1))
    positive = (bits & sign) != 0
    return np.where(positive, bits ^ sign, ~bits).view(dtype)


def column_matrix(block: np.ndarray, region: Region, axes: tuple[int, ...]) -> np.ndarray:
    """A block as a (reduced items, kept cells) matrix, kept cells in C order."""
    shape = tuple(s.stop - s.start for s in region)
    moved = np.moveaxis(np.broadcast_to(block, shape), axes, tuple(range(len(axes))))
    return moved.reshape(math.prod(shape[a] for a in axes), -1)


def _row_slices(matrix: np.ndarray) -> list[slice]:
    rows = max(1, SLICE_ITEMS // max(1, matrix.shape[1]))
    return [slice(i, i + rows) for i in range(0, matrix.shape[0], rows)] or [slice(0, 0)]


@dataclass
class ColumnSummary:
    """Per kept cell (reduced axes kept as length 1): values that are not NaN, and the
    smallest and largest of their order keys."""

    valid: np.ndarray
    low: np.ndarray
    high: np.ndarray


class _Summary(Reduction):
    def __init__(self, expr: Node, axes: tuple[int, ...]) -> None:
        super().__init__("order statistics", expr, axes, True)
        self.valid = np.zeros(self.kept_shape, np.int64)
        self.low = np.full(self.kept_shape, _ALL_ONES, np.uint64)
        self.high = np.zeros(self.kept_shape, np.uint64)

    def partial(self, block: np.ndarray, region: Region) -> Any:
        matrix = column_matrix(block, region, self.axes)
        kept = tuple(1 if i in self.axes else s.stop - s.start for i, s in enumerate(region))
        width = matrix.shape[1]
        valid = np.zeros(width, np.int64)
        low = np.full(width, _ALL_ONES, np.uint64)
        high = np.zeros(width, np.uint64)
        for rows in _row_slices(matrix):
            keys, finite = order_keys(matrix[rows])
            if finite is None:
                valid += keys.shape[0]
                np.minimum(low, keys.min(axis=0, initial=_ALL_ONES), out=low)
                np.maximum(high, keys.max(axis=0, initial=0), out=high)
            else:
                valid += finite.sum(axis=0)
                np.minimum(low, np.where(finite, keys, _ALL_ONES).min(axis=0), out=low)
                np.maximum(high, np.where(finite, keys, 0).max(axis=0), out=high)
        return valid.reshape(kept), low.reshape(kept), high.reshape(kept)

    def merge(self, partial: Any, region: Region) -> None:
        valid, low, high = partial
        target = self.target(region)
        self.valid[target] += valid
        self.low[target] = np.minimum(self.low[target], low)
        self.high[target] = np.maximum(self.high[target], high)

    def finish(self) -> ColumnSummary:
        return ColumnSummary(self.valid, self.low, self.high)


def summarize(expr: Node, axes: tuple[int, ...], progress: bool) -> ColumnSummary:
    """One pass: each kept cell's count of values that are not NaN and key range."""
    summary = _Summary(expr, axes)
    evaluate([summary], [], progress, "quantile")
    return summary.finish()


class _Targets(Reduction):
    """A pass over the intervals of the targets (ranks of a column), shaped (S, *kept)."""

    def __init__(
        self, expr: Node, axes: tuple[int, ...], low: np.ndarray, high: np.ndarray, own: np.ndarray
    ) -> None:
        super().__init__("order statistics", expr, axes, True)
        self.low, self.high, self.own = low, high, own
        self.slots = low.shape[0]

    def state(self, array: np.ndarray, region: Region) -> np.ndarray:
        return array[(slice(None), *self.target(region))].reshape(self.slots, -1)

    def inside(
        self, keys: np.ndarray, finite: np.ndarray | None, low: np.ndarray, high: np.ndarray
    ) -> np.ndarray:
        mask = (keys >= low) & (keys <= high)
        return mask if finite is None else mask & finite


class _BinCounts(_Targets):
    def __init__(
        self,
        expr: Node,
        axes: tuple[int, ...],
        low: np.ndarray,
        high: np.ndarray,
        shift: np.ndarray,
        own: np.ndarray,
        bins: int,
    ) -> None:
        super().__init__(expr, axes, low, high, own)
        self.shift = shift
        self.bins = bins
        self.counts = np.zeros((*low.shape, bins), np.int64)

    def partial(self, block: np.ndarray, region: Region) -> Any:
        matrix = column_matrix(block, region, self.axes)
        width = matrix.shape[1]
        low, high = self.state(self.low, region), self.state(self.high, region)
        shift, own = self.state(self.shift, region), self.state(self.own, region)
        counts = np.zeros((self.slots, width * self.bins), np.int64)
        offsets = np.arange(width, dtype=np.intp) * self.bins
        slots = [s for s in range(self.slots) if own[s].any()]
        for rows in _row_slices(matrix):
            keys, finite = order_keys(matrix[rows])
            for s in slots:
                mask = self.inside(keys, finite, low[s], high[s]) & own[s]
                where = ((keys - low[s]) >> shift[s]).astype(np.intp) + offsets
                counts[s] += np.bincount(where[mask], minlength=width * self.bins)
        kept = tuple(1 if i in self.axes else s.stop - s.start for i, s in enumerate(region))
        return counts.reshape(self.slots, *kept, self.bins)

    def merge(self, partial: Any, region: Region) -> None:
        self.counts[(slice(None), *self.target(region), slice(None))] += partial

    def finish(self) -> np.ndarray:
        return self.counts


class _Gather(_Targets):
    def __init__(
        self, expr: Node, axes: tuple[int, ...], low: np.ndarray, high: np.ndarray, own: np.ndarray
    ) -> None:
        super().__init__(expr, axes, low, high, own)
        self.cells = np.arange(math.prod(self.kept_shape), dtype=np.int64).reshape(self.kept_shape)
        self.found: list[tuple[np.ndarray, np.ndarray]] = []

    def partial(self, block: np.ndarray, region: Region) -> Any:
        matrix = column_matrix(block, region, self.axes)
        low, high, own = (self.state(a, region) for a in (self.low, self.high, self.own))
        cells = self.cells[self.target(region)].reshape(-1)
        total = math.prod(self.kept_shape)
        groups, keys_found = [], []
        for rows in _row_slices(matrix):
            keys, finite = order_keys(matrix[rows])
            for s in range(self.slots):
                if not own[s].any():
                    continue
                mask = self.inside(keys, finite, low[s], high[s]) & own[s]
                keys_found.append(keys[mask])
                groups.append(np.broadcast_to(cells + s * total, mask.shape)[mask])
        if not groups:
            return np.empty(0, np.int64), np.empty(0, np.uint64)
        return np.concatenate(groups), np.concatenate(keys_found)

    def merge(self, partial: Any, region: Region) -> None:
        if len(partial[0]):
            self.found.append(partial)

    def finish(self) -> tuple[np.ndarray, np.ndarray]:
        """The gathered keys sorted by (target group, key), and their groups."""
        if not self.found:
            return np.empty(0, np.int64), np.empty(0, np.uint64)
        groups = np.concatenate([g for g, _ in self.found])
        keys = np.concatenate([k for _, k in self.found])
        self.found.clear()
        order = np.lexsort((keys, groups))
        return groups[order], keys[order]


def _bit_length(width: np.ndarray) -> np.ndarray:
    length = np.zeros(width.shape, np.uint64)
    for bit in range(64):
        length += (width >> np.uint64(bit)) > 0
    return length


def _owners(low: np.ndarray, high: np.ndarray, done: np.ndarray) -> np.ndarray:
    """For each target, the first slot of its column with the same interval (targets that
    coincide are counted once, by that slot)."""
    slots = np.arange(low.shape[0]).reshape((-1,) + (1,) * (low.ndim - 1))
    owner = np.broadcast_to(slots, low.shape).copy()
    for s in range(1, low.shape[0]):
        for earlier in reversed(range(s)):
            same = (low[earlier] == low[s]) & (high[earlier] == high[s]) & ~done[earlier]
            owner[s] = np.where(same & ~done[s], earlier, owner[s])
    return owner


def select_ranks(
    expr: Node,
    axes: tuple[int, ...],
    summary: ColumnSummary,
    ranks: np.ndarray,
    progress: bool,
) -> np.ndarray:
    """The order keys of the ``ranks``-th smallest values (NaN left out) of each kept cell.

    ``ranks`` is shaped ``(S, *kept)`` (kept: the expression's shape with the reduced axes of
    length 1); a negative rank wants nothing (its key is left 0).  Each rank must be below
    the cell's count of values that are not NaN."""
    slots = ranks.shape[0]
    cells = math.prod(summary.valid.shape)
    shape = ranks.shape
    want = ranks >= 0
    low = np.broadcast_to(summary.low, shape).copy()
    high = np.broadcast_to(summary.high, shape).copy()
    rank = np.where(want, ranks, 0).astype(np.int64)
    count = np.broadcast_to(summary.valid, shape).copy()
    done = ~want | (low == high)
    memory = working_bytes()
    candidate_limit = max(4096, memory // 64)
    bins = MAX_BINS
    while bins > MIN_BINS and slots * cells * bins * 32 > memory:
        bins //= 2
    require_memory(
        "quantile",
        slots * cells * bins * 32,
        smallest_bytes=slots * cells * MIN_BINS * 32,
        hint="or store the array with the reduced axes whole in each chunk (then each block "
        "is reduced on its own)",
    )
    index = tuple(np.indices(shape[1:]))
    while True:
        owner = _owners(low, high, done)
        own = (owner == np.arange(slots).reshape((-1,) + (1,) * (len(shape) - 1))) & ~done
        if int(count[own].sum()) <= candidate_limit:
            break
        shift = np.maximum(_bit_length(high - low), np.uint64(bins.bit_length() - 1))
        shift -= np.uint64(bins.bit_length() - 1)
        counting = _BinCounts(expr, axes, low, high, shift, own, bins)
        evaluate([counting], [], progress, "quantile")
        counts = counting.finish()[(owner, *index)]
        cumulative = np.cumsum(counts, axis=-1)
        chosen = (cumulative <= rank[..., None]).sum(axis=-1)
        before = np.where(
            chosen > 0,
            np.take_along_axis(cumulative, np.maximum(chosen - 1, 0)[..., None], -1)[..., 0],
            0,
        )
        inside = np.take_along_axis(counts, chosen[..., None], -1)[..., 0]
        start = low + (chosen.astype(np.uint64) << shift)
        span = (np.uint64(1) << shift) - np.uint64(1)
        end = start + np.minimum(span, high - start)
        rank = np.where(done, rank, rank - before)
        count = np.where(done, count, inside)
        low = np.where(done, low, start)
        high = np.where(done, high, end)
        done |= low == high
    keys = np.where(want, low, np.uint64(0))
    if (own & ~done).any():
        gathering = _Gather(expr, axes, low, high, own)
        evaluate([gathering], [], progress, "quantile")
        groups, found = gathering.finish()
        flat_cells = np.arange(cells, dtype=np.int64).reshape(shape[1:])
        group = owner.astype(np.int64) * cells + flat_cells
        first = np.searchsorted(groups, group, side="left")
        picked = np.minimum(first + rank, max(len(found) - 1, 0))
        if len(found):
            keys = np.where(done, keys, found[picked])
    return keys
