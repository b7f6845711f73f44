"""The passes of exact order statistics (``_selection``), as reductions of the engine: the
summary of each column's values, the counts of their bins, and the gathering of the values
left in the chosen bins.  Float columns go through native kernels that read each value once;
other dtypes through NumPy, a slice of a block at a time (``KeySlices``)."""

from __future__ import annotations

import math
import queue
import threading
from dataclasses import dataclass
from typing import Any

import numpy as np

from oocarray import _native
from oocarray._compute._nodes import Node
from oocarray._compute._order_keys import KeySlices, column_matrix, value_bins
from oocarray._compute._reduce import Reduction
from oocarray._memory import active_manager, system

__all__ = [
    "NATIVE_KEYED",
    "TALLIES",
    "BinCounts",
    "Binning",
    "ColumnSummary",
    "FirstCounts",
    "Gather",
    "Summary",
]

Region = tuple[slice, ...]

# Summarized, counted and gathered by the native kernels (``_native.key_summary``,
# ``bin_counts``, ``key_gather``); other dtypes by NumPy.
NATIVE_KEYED = (np.dtype(np.float32), np.dtype(np.float64))
# The workers' tallies a counting pass makes at most (``BinCounts``).
TALLIES = 2
# The values a gathering pass makes room for in its first block (later blocks: what the one
# before found, and a quarter more).
GATHER_ROOM = 1024
_ALL_ONES = np.uint64((1 << 64) - 1)


@dataclass
class ColumnSummary:
    """Per kept cell (reduced axes kept as length 1): values that are not NaN, and the
    smallest and largest of their order keys; and the first counting pass's counts where the
    summary's pass made them too."""

    valid: np.ndarray
    low: np.ndarray
    high: np.ndarray
    first: FirstCounts | None = None


@dataclass
class FirstCounts:
    """Counts of every value of each kept cell (``(*kept, bins)``), in bins by value over a
    sample's range (``binning``'s arrays shaped ``(1, *kept)``)."""

    binning: Binning
    counts: np.ndarray


class Summary(Reduction):
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
        if matrix.dtype in NATIVE_KEYED:
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


class Targets(Reduction):
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


class Binning:
    """How a pass puts the values of a target's interval into bins.

    By key (``scale`` None): bin ``(key - low) >> shift``.  By value (floats, the first
    pass): bin ``floor((value - start) * scale)`` clipped to the bins, in float64, which
    follows the values' spread rather than their exponents; a monotonic function of the
    value, so each bin is an interval of keys (found afterwards by
    ``_selection._value_bin_keys``).
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


class BinCounts(Targets):
    def __init__(
        self,
        expr: Node,
        axes: tuple[int, ...],
        low: np.ndarray,
        high: np.ndarray,
        own: np.ndarray,
        binning: Binning,
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
        if matrix.dtype in NATIVE_KEYED:
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


class Gather(Targets):
    def __init__(
        self, expr: Node, axes: tuple[int, ...], low: np.ndarray, high: np.ndarray, own: np.ndarray
    ) -> None:
        super().__init__(expr, axes, low, high, own)
        self.cells = np.arange(math.prod(self.kept_shape), dtype=np.int64).reshape(self.kept_shape)
        self.found: list[tuple[np.ndarray, np.ndarray]] = []
        self.room = GATHER_ROOM

    def partial(self, block: np.ndarray, region: Region) -> Any:
        matrix = column_matrix(block, region, self.axes)
        own = self.state(self.own, region)
        cells = self.cells[self.target(region)].reshape(-1)
        total = math.prod(self.kept_shape)
        if matrix.dtype in NATIVE_KEYED:
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
        """The same keys, found by the native kernel (floats) in one reading of the block
        where they fit the room of the block before and a quarter more (blocks of one array
        hold about as many; the kernel counts what it had no room for, and reads again)."""
        matrix = np.ascontiguousarray(matrix)
        arguments = (
            np.ascontiguousarray(own, np.uint8),
            np.ascontiguousarray(self.state(self.low, region), np.uint64),
            np.ascontiguousarray(self.state(self.high, region), np.uint64),
            cells[None, :] + (np.arange(self.slots, dtype=np.int64) * total)[:, None],
        )
        room = self.room
        groups, keys = np.empty(room, np.int64), np.empty(room, np.uint64)
        found = _native.key_gather(matrix, *arguments, groups, keys)
        if found > room:
            groups, keys = np.empty(found, np.int64), np.empty(found, np.uint64)
            _native.key_gather(matrix, *arguments, groups, keys)
        self.room = max(self.room, found + found // 4)  # (a guess: threads may race on it)
        return groups[:found], keys[:found]  # (detached by the engine: copies of that length)

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
