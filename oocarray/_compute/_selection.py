"""Exact order statistics of chunked arrays along reduced axes, by counting passes.

Values are compared through order keys (``_order_keys``: unsigned integers that sort as
NumPy sorts the values; NaN left out).  Selecting the ``k``-th smallest value of a column then
narrows an interval of keys:

1. a pass counts each column's values and finds its smallest and largest key;
2. each histogram pass counts, for every wanted (column, rank), the values in each of up to
   4096 bins of its interval and keeps the bin holding the rank.  The first pass over floats
   bins by value (equal widths of the values' range: few passes for data spread over many
   exponents); later ones by key (equal widths of keys: each divides the interval's width
   by the number of bins, so 64-bit keys take at most six);
3. once the candidates left in all intervals fit in memory, a last pass gathers them and the
   rank is picked exactly (one lexicographic sort of all candidates, by target then key).

Every column and every rank goes through one pass at a time (a :class:`Reduction` of the
engine), and ranks whose intervals coincide share their counts.  The counts of one pass take
``columns x bins x 24`` bytes for each distinct interval per column; the bins shrink (to 16)
to fit the budget.
"""

from __future__ import annotations

import math
import queue
import threading
from dataclasses import dataclass
from typing import Any

import numpy as np

from oocarray import _native
from oocarray._compute._engine import evaluate
from oocarray._compute._limits import require_memory, working_bytes
from oocarray._compute._nodes import BlockReads, Node
from oocarray._compute._order_keys import (
    KeySlices,
    column_matrix,
    from_keys,
    position_type,
    value_bins,
)
from oocarray._compute._reduce import Reduction
from oocarray._memory import active_manager, system

__all__ = ["ColumnSummary", "candidate_limit", "select_ranks", "summarize"]

Region = tuple[slice, ...]

MAX_BINS = 4096
# Summarized, counted and gathered by the native kernels (``_native.key_summary``,
# ``bin_counts``, ``key_gather``); other dtypes by NumPy.
_NATIVE_KEYED = (np.dtype(np.float32), np.dtype(np.float64))
MIN_BINS = 16
MIN_CANDIDATES = 4096
# The sample whose range the summary's pass bins values over: slabs spread along the first
# reduced axis.
SAMPLE_SLABS = 4
SAMPLE_BYTES = 4 << 20
# Memory per bin of a column's counts: the count, its cumulative sum, a comparison, and the
# workers' tallies.
TALLIES = 2
COUNT_BYTES = 24 + 8 * TALLIES
_ALL_ONES = np.uint64((1 << 64) - 1)


@dataclass
class ColumnSummary:
    """Per kept cell (reduced axes kept as length 1): values that are not NaN, and the
    smallest and largest of their order keys; and the first counting pass's counts where the
    summary's pass made them too."""

    valid: np.ndarray
    low: np.ndarray
    high: np.ndarray
    first: _FirstCounts | None = None


@dataclass
class _FirstCounts:
    """Counts of every value of each kept cell (``(*kept, bins)``), in bins by value over a
    sample's range (``binning``'s arrays shaped ``(1, *kept)``)."""

    binning: _Binning
    counts: np.ndarray


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
        if matrix.dtype in _NATIVE_KEYED:
            _native.key_summary(np.ascontiguousarray(matrix), valid, low, high)
            return valid.reshape(kept), low.reshape(kept), high.reshape(kept)
        slices = KeySlices(matrix, transposed=False)
        largest = np.iinfo(slices.key_type).max
        for _, keys, finite in slices:
            if finite is None:
                valid += keys.shape[0]
                np.minimum(low, keys.min(axis=0, initial=largest), out=low)
                np.maximum(high, keys.max(axis=0, initial=0), out=high)
            else:
                valid += np.count_nonzero(finite, axis=0)
                np.minimum(low, keys.min(axis=0, initial=largest, where=finite), out=low)
                np.maximum(high, keys.max(axis=0, initial=0, where=finite), out=high)
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
    """One pass: each kept cell's count of values that are not NaN and key range.  For floats
    with more values than a gathering pass takes, the same pass makes the first counting
    pass's counts, by value over the range of a sample (values beyond it counted in the end
    bins): one pass less, unless the ranks fall in those end bins."""
    summary = _Summary(expr, axes)
    counting = _sampled_counting(expr, axes)
    evaluate([summary] if counting is None else [summary, counting], [], progress, "quantile")
    result = summary.finish()
    if counting is not None:
        result.first = _FirstCounts(counting.binning, counting.finish()[0])
    return result


def _sampled_counting(expr: Node, axes: tuple[int, ...]) -> _BinCounts | None:
    """The first counting pass of a float expression, binned over a sample's range."""
    if expr.dtype.kind != "f" or expr.size <= candidate_limit():
        return None
    sample = _sample_range(expr, axes)
    if sample is None:
        return None
    kept, cells = sample.valid.shape, sample.valid.size
    bins = MAX_BINS
    while bins > MIN_BINS and cells * bins * COUNT_BYTES > working_bytes():
        bins //= 2
    low, high = sample.low[None], sample.high[None]
    binning = _binning(expr.dtype, low, high, bins, by_value=True)
    return _BinCounts(expr, axes, low, high, np.ones((1, *kept), bool), binning, whole=True)


def _sample_range(expr: Node, axes: tuple[int, ...]) -> ColumnSummary | None:
    """Each kept cell's key range over SAMPLE_SLABS slabs spread along the first reduced axis
    (None where a slab of one index would hold more than SAMPLE_BYTES)."""
    axis = axes[0]
    n = expr.shape[axis]
    index_bytes = expr.size // n * expr.dtype.itemsize
    if index_bytes * SAMPLE_SLABS > SAMPLE_BYTES:
        return None
    length = max(1, min(n // (2 * SAMPLE_SLABS), SAMPLE_BYTES // (SAMPLE_SLABS * index_bytes)))
    sample = _Summary(expr, axes)
    for k in range(SAMPLE_SLABS):
        start = min((2 * k + 1) * n // (2 * SAMPLE_SLABS), n - length)
        region = tuple(
            slice(start, start + length) if i == axis else slice(0, size)
            for i, size in enumerate(expr.shape)
        )
        sample.merge(
            sample.partial(np.asarray(expr.evaluate(region, BlockReads())), region), region
        )
    return sample.finish()


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

    def key_state(self, region: Region) -> tuple[np.ndarray, np.ndarray]:
        """The intervals of a block's targets, as keys of the values' own width."""
        width = np.dtype(
            np.uint8 if self.expr.dtype.kind == "b" else f"u{self.expr.dtype.itemsize}"
        )
        low, high = self.state(self.low, region), self.state(self.high, region)
        return low.astype(width), high.astype(width)

    def inside(
        self, keys: np.ndarray, finite: np.ndarray | None, low: np.ndarray, high: np.ndarray
    ) -> np.ndarray:
        mask = keys >= low
        mask &= keys <= high
        if finite is not None:
            mask &= finite
        return mask


class _Binning:
    """How a pass puts the values of a target's interval into bins.

    By key (``scale`` None): bin ``(key - low) >> shift``.  By value (floats, the first
    pass): bin ``floor((value - start) * scale)`` clipped to the bins, in float64, which
    follows the values' spread rather than their exponents; a monotonic function of the
    value, so each bin is an interval of keys (found afterwards by :func:`_value_bin_keys`).
    """

    def __init__(
        self,
        bins: int,
        shift: np.ndarray | None = None,
        start: np.ndarray | None = None,
        scale: np.ndarray | None = None,
    ) -> None:
        self.bins, self.shift, self.start, self.scale = bins, shift, start, scale

    def by_value(self) -> bool:
        return self.scale is not None


class _BinCounts(_Targets):
    def __init__(
        self,
        expr: Node,
        axes: tuple[int, ...],
        low: np.ndarray,
        high: np.ndarray,
        own: np.ndarray,
        binning: _Binning,
        whole: bool = False,
    ) -> None:
        super().__init__(expr, axes, low, high, own)
        self.binning = binning
        # Every interval is its column's whole range (the first pass): the values in it are
        # those that are not NaN, and by value their keys are not needed.
        self.whole = whole and binning.by_value()
        self.bins = binning.bins
        # Where a block's counts are a contiguous part of the counts (columns of one row of
        # kept cells), the native kernel adds to a tally of its worker's: a block's own counts
        # are as large as its values (columns x bins), and making, copying and merging them
        # took as long as counting.  At most TALLIES, made on the workers under the manager of
        # the caller (not in the worker's cyclic workspace); a block finding none free has its
        # own counts.
        self._manager = active_manager() or system()
        self._tallies: list[dict[int, np.ndarray]] = []
        self._free_tallies: queue.SimpleQueue[dict[int, np.ndarray]] = queue.SimpleQueue()
        self._tallies_lock = threading.Lock()
        # Counts only for the slots that own an interval somewhere (often one: the first
        # pass, where a column's targets all share its whole range).
        self.counts = {
            s: np.zeros((*low.shape[1:], self.bins), np.int64)
            for s in range(self.slots)
            if own[s].any()
        }

    def partial(self, block: np.ndarray, region: Region) -> Any:
        matrix = column_matrix(block, region, self.axes)
        if matrix.dtype in _NATIVE_KEYED:
            return self._native_partial(matrix, region)
        width = matrix.shape[1]
        low, high = self.key_state(region)
        own = self.state(self.own, region)
        binning = self.binning
        if binning.by_value():
            start = self.state(binning.start, region)  # type: ignore[arg-type]
            scale = self.state(binning.scale, region)  # type: ignore[arg-type]
        else:
            shift = self.state(binning.shift, region).astype(low.dtype)  # type: ignore[arg-type]
        cells = width * self.bins
        offsets = (np.arange(width, dtype=np.intp) * self.bins)[:, None]
        slots = [s for s in range(self.slots) if own[s].any()]
        # One more cell, where values outside the intervals are counted (and dropped).
        counts = {s: np.zeros(cells + 1, np.int64) for s in slots}
        slices = KeySlices(matrix, value_positions=binning.by_value(), with_keys=not self.whole)
        for values, keys, finite in slices:
            where = slices.where[: keys.size].reshape(keys.shape)
            for s in slots:
                if self.whole:
                    mask = slices.mask[: keys.size].reshape(keys.shape)
                    np.copyto(mask, own[s][:, None])
                    if finite is not None:
                        mask &= finite
                else:
                    mask = slices.inside(keys, finite, low[s][:, None], high[s][:, None])
                    mask &= own[s][:, None]
                inside = np.count_nonzero(mask)
                if inside < mask.size // 4:  # few (later passes): bin only those
                    column = np.nonzero(mask)[0]
                    if binning.by_value():
                        found = value_bins(
                            values[mask], start[s][column], scale[s][column], self.bins
                        ).astype(np.intp)
                    else:
                        found = ((keys[mask] - low[s][column]) >> shift[s][column]).astype(np.intp)
                    found += column * self.bins
                    np.add.at(counts[s], found, 1)
                    continue
                if binning.by_value():
                    assert slices.position is not None
                    position = slices.position[: keys.size].reshape(keys.shape)
                    value_bins(values, start[s][:, None], scale[s][:, None], self.bins, position)
                    with np.errstate(invalid="ignore"):  # NaN values: masked out below
                        np.copyto(where, position, casting="unsafe")
                else:
                    scratch = slices.scratch(keys)
                    np.subtract(keys, low[s][:, None], out=scratch)
                    np.right_shift(scratch, shift[s][:, None], out=scratch)
                    np.copyto(where, scratch, casting="unsafe")
                where += offsets
                # Most values are inside: the others go to the last cell (no copy of the many)
                np.logical_not(mask, out=mask)
                where[mask] = cells
                np.add.at(counts[s], where.reshape(-1), 1)
        kept = tuple(1 if i in self.axes else s.stop - s.start for i, s in enumerate(region))
        # Only the slots that count here, in 32 bits (a block has fewer than 2**31 values).
        return {s: counts[s][:cells].astype(np.int32).reshape(*kept, self.bins) for s in slots}

    def _native_partial(self, matrix: np.ndarray, region: Region) -> Any:
        """The same counts, each value read once by the native kernel (floats): what the
        NumPy path below does in a dozen passes over each slice and ``np.add.at``."""
        matrix = np.ascontiguousarray(matrix)
        width = matrix.shape[1]
        own = self.state(self.own, region).astype(np.uint8)
        binning = self.binning
        kept = tuple(1 if i in self.axes else s.stop - s.start for i, s in enumerate(region))
        target = (*self.target(region), slice(None))
        tally = self._tally() if self._contiguous(target) else None
        out = {}
        for s in range(self.slots):
            if not own[s].any():
                continue
            if tally is None:
                counts = np.zeros((width, self.bins), np.int64)
            else:
                counts = tally[s][target].reshape(width, self.bins)  # a view: added to
            if binning.by_value():
                # (by value, every interval is its column's whole range: the first pass)
                assert self.whole
                start = np.ascontiguousarray(self.state(binning.start, region)[s], np.float64)  # type: ignore[arg-type]
                scale = np.ascontiguousarray(self.state(binning.scale, region)[s], np.float64)  # type: ignore[arg-type]
                _native.bin_counts(matrix, counts, own[s], start, scale, None, None, None)
            else:
                low = np.ascontiguousarray(self.state(self.low, region)[s], np.uint64)
                high = np.ascontiguousarray(self.state(self.high, region)[s], np.uint64)
                shift = np.ascontiguousarray(self.state(binning.shift, region)[s], np.uint64)  # type: ignore[arg-type]
                _native.bin_counts(matrix, counts, own[s], None, None, low, high, shift)
            out[s] = counts.reshape(*kept, self.bins)
        if tally is not None:
            self._free_tallies.put(tally)
            return {}
        return out

    def _contiguous(self, target: tuple[slice, ...]) -> bool:
        return all(counts[target].flags.c_contiguous for counts in self.counts.values())

    def _tally(self) -> dict[int, np.ndarray] | None:
        """A tally no other worker is adding to, made if there are fewer than TALLIES."""
        try:
            return self._free_tallies.get_nowait()
        except queue.Empty:
            pass
        with self._tallies_lock:
            if len(self._tallies) >= TALLIES:
                return None
            with self._manager.activate():
                tally = {s: np.zeros_like(counts) for s, counts in self.counts.items()}
            self._tallies.append(tally)
        return tally

    def merge(self, partial: Any, region: Region) -> None:
        target = self.target(region)
        for s, counts in partial.items():
            self.counts[s][(*target, slice(None))] += counts

    def finish(self) -> dict[int, np.ndarray]:
        """Counts per bin, by slot that owns intervals: shaped (*kept, bins)."""
        for tally in self._tallies:
            for s, counts in tally.items():
                self.counts[s] += counts
        self._tallies.clear()
        return self.counts


def _value_bin_keys(
    dtype: np.dtype[Any],
    low: np.ndarray,
    high: np.ndarray,
    binning: _Binning,
    bin_index: np.ndarray,
) -> np.ndarray:
    """The smallest key in ``[low, high + 1]`` whose value's bin (by value) is at least
    ``bin_index``: a bisection of the keys (the bin is monotonic in the key)."""
    start, scale = binning.start, binning.scale
    assert start is not None and scale is not None
    lower = low.copy()
    upper = high + np.uint64(1)
    while (open_ := lower < upper).any():
        middle = lower + (upper - lower) // np.uint64(2)
        values = from_keys(middle, dtype)
        with np.errstate(invalid="ignore"):  # (closed targets' keys may be NaN's: unused)
            bins = value_bins(values, start, scale, binning.bins).astype(np.intp)
        at_least = bins >= bin_index
        upper = np.where(open_ & at_least, middle, upper)
        lower = np.where(open_ & ~at_least, middle + np.uint64(1), lower)
    return lower


class _Gather(_Targets):
    def __init__(
        self, expr: Node, axes: tuple[int, ...], low: np.ndarray, high: np.ndarray, own: np.ndarray
    ) -> None:
        super().__init__(expr, axes, low, high, own)
        self.cells = np.arange(math.prod(self.kept_shape), dtype=np.int64).reshape(self.kept_shape)
        self.found: list[tuple[np.ndarray, np.ndarray]] = []

    def partial(self, block: np.ndarray, region: Region) -> Any:
        matrix = column_matrix(block, region, self.axes)
        own = self.state(self.own, region)
        cells = self.cells[self.target(region)].reshape(-1)
        total = math.prod(self.kept_shape)
        if matrix.dtype in _NATIVE_KEYED:
            return self._native_partial(matrix, region, own, cells, total)
        low, high = self.key_state(region)
        groups, keys_found = [], []
        slices = KeySlices(matrix)
        for _, keys, finite in slices:
            for s in range(self.slots):
                if not own[s].any():
                    continue
                mask = slices.inside(keys, finite, low[s][:, None], high[s][:, None])
                mask &= own[s][:, None]
                keys_found.append(keys[mask].astype(np.uint64))
                groups.append(np.broadcast_to((cells + s * total)[:, None], mask.shape)[mask])
        if not groups:
            return np.empty(0, np.int64), np.empty(0, np.uint64)
        return np.concatenate(groups), np.concatenate(keys_found)

    def _native_partial(
        self, matrix: np.ndarray, region: Region, own: np.ndarray, cells: np.ndarray, total: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """The same keys, each value read once by the native kernel (floats): counted, then
        written to arrays of that length."""
        matrix = np.ascontiguousarray(matrix)
        arguments = (
            np.ascontiguousarray(own, np.uint8),
            np.ascontiguousarray(self.state(self.low, region), np.uint64),
            np.ascontiguousarray(self.state(self.high, region), np.uint64),
            cells[None, :] + (np.arange(self.slots, dtype=np.int64) * total)[:, None],
        )
        found = _native.key_gather(matrix, *arguments, None, None)
        groups, keys = np.empty(found, np.int64), np.empty(found, np.uint64)
        if found:
            _native.key_gather(matrix, *arguments, groups, keys)
        return groups, keys

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


def _binning(
    dtype: np.dtype[Any], low: np.ndarray, high: np.ndarray, bins: int, by_value: bool
) -> _Binning:
    """Bins by value over each interval's values (floats, where that spreads them), else by
    key."""
    if by_value:
        with np.errstate(all="ignore"):
            largest = float(np.finfo(dtype).max)
            start = from_keys(low, dtype).astype(np.float64).clip(-largest, largest)
            stop = from_keys(high, dtype).astype(np.float64).clip(-largest, largest)
            scale = bins / (stop - start)
        finite = np.isfinite(scale.astype(position_type(dtype)))
        scale = np.where(finite & (stop > start), scale, 0.0)
        return _Binning(bins, start=start, scale=scale)
    shift = np.maximum(_bit_length(high - low), np.uint64(bins.bit_length() - 1))
    shift -= np.uint64(bins.bit_length() - 1)
    return _Binning(bins, shift=shift)


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


def _locate(
    counts: dict[int, np.ndarray], owner: np.ndarray, done: np.ndarray, rank: np.ndarray, bins: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For each target not done: the bin holding its rank in its owner's counts, the values
    before that bin, and the values in it."""
    chosen = np.zeros(rank.shape, np.intp)
    before = np.zeros(rank.shape, np.int64)
    inside = np.zeros(rank.shape, np.int64)
    for slot_owning, owned in counts.items():
        cumulative = np.cumsum(owned, axis=-1)
        for s in range(rank.shape[0]):
            columns = (owner[s] == slot_owning) & ~done[s]
            if not columns.any():
                continue
            found = np.minimum((cumulative <= rank[s][..., None]).sum(axis=-1), bins - 1)
            earlier = np.take_along_axis(cumulative, np.maximum(found - 1, 0)[..., None], -1)
            chosen[s] = np.where(columns, found, chosen[s])
            before[s] = np.where(columns & (found > 0), earlier[..., 0], before[s])
            inside[s] = np.where(
                columns, np.take_along_axis(owned, found[..., None], -1)[..., 0], inside[s]
            )
    return chosen, before, inside


def candidate_limit() -> int:
    """How many values the last pass may gather (each costs about 24 bytes there, and as
    much again to sort them)."""
    return max(MIN_CANDIDATES, working_bytes() // 64)


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
    limit = candidate_limit()
    require_memory(
        "quantile",
        cells * MIN_BINS * COUNT_BYTES,
        smallest_bytes=cells * MIN_BINS * COUNT_BYTES,
        hint="or store the array with the reduced axes whole in each chunk (then each block "
        "is reduced on its own)",
    )
    by_value = expr.dtype.kind == "f"
    first = True
    while True:
        owner = _owners(low, high, done)
        own = (owner == np.arange(slots).reshape((-1,) + (1,) * (len(shape) - 1))) & ~done
        if int(count[own].sum()) <= limit:
            break
        owners = int(own.reshape(slots, -1).any(axis=1).sum())
        bins = MAX_BINS
        while bins > MIN_BINS and owners * cells * bins * COUNT_BYTES > memory:
            bins //= 2
        if first and summary.first is not None:
            # counted in the summary's pass: every value of each cell, whatever its slot
            made = summary.first.binning
            bins = made.bins
            assert made.start is not None and made.scale is not None
            binning = _Binning(
                bins,
                start=np.broadcast_to(made.start, shape),
                scale=np.broadcast_to(made.scale, shape),
            )
            counts = {s: summary.first.counts for s in range(slots) if own[s].any()}
        else:
            binning = _binning(expr.dtype, low, high, bins, by_value)
            counting = _BinCounts(expr, axes, low, high, own, binning, whole=first)
            evaluate([counting], [], progress, "quantile")
            counts = counting.finish()
        chosen, before, inside = _locate(counts, owner, done, rank, bins)
        if binning.by_value():
            start = _value_bin_keys(expr.dtype, low, high, binning, chosen)
            end = _value_bin_keys(expr.dtype, low, high, binning, chosen + 1) - np.uint64(1)
        else:
            shift = binning.shift
            assert shift is not None
            start = low + (chosen.astype(np.uint64) << shift)
            end = start + np.minimum((np.uint64(1) << shift) - np.uint64(1), high - start)
        rank = np.where(done, rank, rank - before)
        count = np.where(done, count, inside)
        low = np.where(done, low, start)
        high = np.where(done, high, end)
        done |= low == high
        by_value = first = False  # later passes bin by key: they need not depend on the spread
    keys = np.where(want, low, np.uint64(0))
    if (own & ~done).any():
        gathering = _Gather(expr, axes, low, high, own)
        evaluate([gathering], [], progress, "quantile")
        groups, found = gathering.finish()
        flat_cells = np.arange(cells, dtype=np.int64).reshape(shape[1:])
        group = owner.astype(np.int64) * cells + flat_cells
        group_start = np.searchsorted(groups, group, side="left")
        picked = np.minimum(group_start + rank, max(len(found) - 1, 0))
        if len(found):
            keys = np.where(done, keys, found[picked])
    return keys
