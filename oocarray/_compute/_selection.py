"""Exact order statistics of chunked arrays along reduced axes, by counting passes.

Values are compared through order keys (``_order_keys``: unsigned integers that sort as
NumPy sorts the values; NaN left out).  Selecting the ``k``-th smallest value of a column then
narrows an interval of keys:

1. a pass counts each column's values and finds its smallest and largest key (for floats
   with many values, the same pass makes the first histogram pass's counts, over the range of
   a sample read beforehand: values beyond it fall in the end bins);
2. each histogram pass counts, for every wanted (column, rank), the values in each of up to
   4096 bins of its interval and keeps the bin holding the rank.  The first pass over floats
   bins by value (equal widths of the values' range: few passes for data spread over many
   exponents); later ones by key (equal widths of keys: each divides the interval's width
   by the number of bins, so 64-bit keys take at most six);
3. once the candidates left in all intervals fit in memory, a last pass gathers them and the
   rank is picked exactly (one lexicographic sort of all candidates, by target then key).

Every column and every rank goes through one pass at a time (a reduction of the engine, in
``_selection_passes``), and ranks whose intervals coincide share their counts.  The counts of
one pass take ``columns x bins x COUNT_BYTES`` bytes for each distinct interval per column
(the workers' tallies included); the bins shrink (to 16) to fit the budget.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from oocarray._compute._engine import evaluate
from oocarray._compute._limits import require_memory, working_bytes
from oocarray._compute._nodes import BlockReads, Node
from oocarray._compute._order_keys import (
    from_keys,
    position_type,
    value_bins,
)
from oocarray._compute._selection_passes import (
    TALLIES,
    BinCounts,
    Binning,
    ColumnSummary,
    FirstCounts,
    Gather,
    Summary,
)

__all__ = ["candidate_limit", "select_ranks", "summarize"]

Region = tuple[slice, ...]

MAX_BINS = 4096
MIN_BINS = 16
MIN_CANDIDATES = 4096
# The sample whose range the summary's pass bins values over: slabs spread along the first
# reduced axis.
SAMPLE_SLABS = 4
SAMPLE_BYTES = 4 << 20
# Memory per bin of a column's counts: the count, its cumulative sum, a comparison, and the
# workers' tallies.
COUNT_BYTES = 24 + 8 * TALLIES


def summarize(expr: Node, axes: tuple[int, ...], progress: bool) -> ColumnSummary:
    """One pass: each kept cell's count of values that are not NaN and key range.  For floats
    with more values than a gathering pass takes, the same pass makes the first counting
    pass's counts, by value over the range of a sample (values beyond it counted in the end
    bins): one pass less, unless the ranks fall in those end bins."""
    summary = Summary(expr, axes)
    counting = _sampled_counting(expr, axes)
    evaluate([summary] if counting is None else [summary, counting], [], progress, "quantile")
    result = summary.finish()
    if counting is not None:
        result.first = FirstCounts(counting.binning, counting.finish()[0])
    return result


def _sampled_counting(expr: Node, axes: tuple[int, ...]) -> BinCounts | None:
    """The first counting pass of a float expression, binned over a sample's range."""
    if expr.dtype.kind != "f" or expr.size <= candidate_limit():
        return None
    sample = _sample_range(expr, axes)
    if sample is None:
        return None
    kept, cells = sample.valid.shape, sample.valid.size
    bins = _bins_that_fit(cells, working_bytes())
    if cells * bins * COUNT_BYTES > working_bytes():
        return None  # (select_ranks says why there is no room)
    low, high = sample.low[None], sample.high[None]
    binning = _binning(expr.dtype, low, high, bins, by_value=True)
    return BinCounts(expr, axes, low, high, np.ones((1, *kept), bool), binning, whole=True)


def _bins_that_fit(counted_cells: int, memory: int) -> int:
    """The most bins, a power of two from MAX_BINS down to MIN_BINS, whose counts for
    ``counted_cells`` fit ``memory`` (MIN_BINS where none do)."""
    bins = MAX_BINS
    while bins > MIN_BINS and counted_cells * bins * COUNT_BYTES > memory:
        bins //= 2
    return bins


def _sample_range(expr: Node, axes: tuple[int, ...]) -> ColumnSummary | None:
    """Each kept cell's key range over SAMPLE_SLABS slabs spread along the first reduced axis
    (None where a slab of one index would hold more than SAMPLE_BYTES)."""
    axis = axes[0]
    n = expr.shape[axis]
    index_bytes = expr.size // n * expr.dtype.itemsize
    if index_bytes * SAMPLE_SLABS > SAMPLE_BYTES:
        return None
    length = max(1, min(n // (2 * SAMPLE_SLABS), SAMPLE_BYTES // (SAMPLE_SLABS * index_bytes)))
    sample = Summary(expr, axes)
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


def _value_bin_keys(
    dtype: np.dtype[Any],
    low: np.ndarray,
    high: np.ndarray,
    binning: Binning,
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


def _bit_length(width: np.ndarray) -> np.ndarray:
    length = np.zeros(width.shape, np.uint64)
    for bit in range(64):
        length += (width >> np.uint64(bit)) > 0
    return length


def _binning(
    dtype: np.dtype[Any], low: np.ndarray, high: np.ndarray, bins: int, by_value: bool
) -> Binning:
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
        return Binning(bins, start=start, scale=scale)
    shift = np.maximum(_bit_length(high - low), np.uint64(bins.bit_length() - 1))
    shift -= np.uint64(bins.bit_length() - 1)
    return Binning(bins, shift=shift)


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
        bins = _bins_that_fit(owners * cells, memory)
        if first and summary.first is not None:
            # counted in the summary's pass: every value of each cell, whatever its slot
            made = summary.first.binning
            bins = made.bins
            assert made.start is not None and made.scale is not None
            binning = Binning(
                bins,
                start=np.broadcast_to(made.start, shape),
                scale=np.broadcast_to(made.scale, shape),
            )
            counts = {s: summary.first.counts for s in range(slots) if own[s].any()}
        else:
            binning = _binning(expr.dtype, low, high, bins, by_value)
            counting = BinCounts(expr, axes, low, high, own, binning, whole=first)
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
        gathering = Gather(expr, axes, low, high, own)
        evaluate([gathering], [], progress, "quantile")
        groups, found = gathering.finish()
        flat_cells = np.arange(cells, dtype=np.int64).reshape(shape[1:])
        group = owner.astype(np.int64) * cells + flat_cells
        group_start = np.searchsorted(groups, group, side="left")
        picked = np.minimum(group_start + rank, max(len(found) - 1, 0))
        if len(found):
            keys = np.where(done, keys, found[picked])
    return keys
