"""The distinct values of a chunked array in one streaming pass, in bounded memory.

Each block becomes a small sorted table (its distinct values, their counts and, when asked for,
the flat index of each value's first occurrence); tables merge on the calling thread, several
at a time (a stable sort of concatenated sorted runs, which merges them in linear time).  When
the merged table outgrows its share of the budget it is spilled to temporary chunked arrays
and a new one started; at the end the spilled runs are merged externally, a window of each run
at a time, into the result (NumPy arrays when they fit, else temporary chunked arrays).

NaNs follow NumPy: with ``equal_nan`` they collapse into one entry (the first NaN in sort
order, counted for all), without it each is an entry of its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from oocarray._compute._limits import working_bytes
from oocarray._compute._nodes import Node
from oocarray._compute._reduce import Reduction
from oocarray._compute._temporaries import temporary
from oocarray._storage import StoredArray

__all__ = ["Table", "UniqueCount"]

Region = tuple[slice, ...]
COUNT = np.dtype(np.intp)

# Integer blocks whose values span at most this many times their length are counted with
# np.bincount (linear) rather than sorted.
_BINCOUNT_SPAN = 4


@dataclass(slots=True)
class Table:
    """Sorted distinct values with their counts and (or None) first flat indices; each field an
    ndarray, or a temporary chunked array once too large for memory."""

    values: Any
    counts: Any
    firsts: Any

    def __len__(self) -> int:
        return int(self.values.shape[0])

    @property
    def nbytes(self) -> int:
        item = int(self.values.dtype.itemsize) + COUNT.itemsize * (1 + (self.firsts is not None))
        return len(self) * item

    def window(self, start: int, stop: int) -> Table:
        return Table(
            np.asarray(self.values[start:stop]),
            np.asarray(self.counts[start:stop]),
            None if self.firsts is None else np.asarray(self.firsts[start:stop]),
        )


def _empty(dtype: np.dtype[Any], first: bool) -> Table:
    return Table(np.empty(0, dtype), np.empty(0, COUNT), np.empty(0, COUNT) if first else None)


def combine(tables: list[Table], equal_nan: bool) -> Table:
    """One sorted table of distinct values from several (each sorted): counts added, the first
    index of a value its smallest (of a collapsed NaN, that of the first NaN in sort order)."""
    nonempty = [t for t in tables if len(t)]
    if len(nonempty) <= 1:
        return nonempty[0] if nonempty else tables[0]
    tables = nonempty
    values = np.concatenate([t.values for t in tables])
    counts = np.concatenate([t.counts for t in tables])
    firsts = None
    if tables[0].firsts is not None:
        firsts = np.concatenate([t.firsts for t in tables])
        order = np.lexsort((firsts, values))
    else:
        order = np.argsort(values, kind="stable")  # merges the sorted runs
    values, counts = values[order], counts[order]
    starts = group_starts(values, equal_nan)
    return Table(
        values[starts],
        np.add.reduceat(counts, starts),
        None if firsts is None else firsts[order][starts],
    )


def group_starts(values: np.ndarray, equal_nan: bool) -> np.ndarray:
    """Where each run of equal values of a sorted array starts (NumPy's rule for NaNs)."""
    if values.size == 0:
        return np.empty(0, np.intp)
    new = np.empty(values.shape, dtype=bool)
    new[0] = True
    np.not_equal(values[1:], values[:-1], out=new[1:])
    if equal_nan and values.dtype.kind in "fc" and np.isnan(values[-1]):
        if values.dtype.kind == "c":  # NaNs sort last, but not all equal to each other
            first_nan = int(np.searchsorted(np.isnan(values), True, side="left"))
        else:
            first_nan = int(np.searchsorted(values, values[-1], side="left"))
        new[first_nan + 1 :] = False
    return np.flatnonzero(new)


def block_table(
    block: np.ndarray, region: Region, shape: tuple[int, ...], equal_nan: bool, first: bool
) -> Table:
    """A block's table; first indices are flat indices into the whole array (of ``shape``)."""
    flat = block.reshape(-1)
    if not first:
        counted = _bincount_table(flat)
        if counted is not None:
            return counted
        values, counts = np.unique(flat, return_counts=True, equal_nan=equal_nan)
        return Table(values, counts.astype(COUNT, copy=False), None)
    values, index, counts = np.unique(
        flat, return_index=True, return_counts=True, equal_nan=equal_nan
    )
    if block.ndim:
        local = np.unravel_index(index, block.shape)
        index = np.ravel_multi_index(
            tuple(c + s.start for c, s in zip(local, region, strict=True)), shape
        )
    return Table(values, counts.astype(COUNT, copy=False), index.astype(COUNT, copy=False))


def _bincount_table(flat: np.ndarray) -> Table | None:
    """The table of an integer block whose values lie close together, by counting."""
    if flat.dtype.kind not in "biu" or flat.size == 0:
        return None
    dtype = flat.dtype
    if dtype.kind == "b":
        flat = flat.view(np.uint8)
    low, high = flat.min(), flat.max()
    span = int(high) - int(low) + 1
    if span > _BINCOUNT_SPAN * flat.size + 1024:
        return None
    if flat.dtype.itemsize == 8:  # no wrap: every difference is below the span
        shifted = (flat - low).astype(np.intp, copy=False)
    else:  # small types: widen first (a difference could wrap)
        shifted = flat.astype(np.intp)
        shifted -= int(low)
    counts = np.bincount(shifted, minlength=span)
    present = np.flatnonzero(counts)
    values = (present.astype(flat.dtype) + low).astype(dtype, copy=False)
    return Table(values, counts[present].astype(COUNT, copy=False), None)


class UniqueCount(Reduction):
    """The distinct values of ``expr`` with their counts (and first indices): a streaming pass
    that spills its table when it outgrows ``limit`` bytes."""

    def __init__(self, expr: Node, equal_nan: bool, first: bool, name: str = "unique") -> None:
        super().__init__(name, expr, tuple(range(expr.ndim)), True)
        self.equal_nan, self.first = equal_nan, first
        self.limit = max(64 << 10, working_bytes() // 8)
        self.table = _empty(expr.dtype, first)
        self.pending: list[Table] = []
        self.pending_bytes = 0
        self.runs: list[Table] = []

    def partial(self, block: np.ndarray, region: Region) -> Any:
        table = block_table(block, region, self.expr.shape, self.equal_nan, self.first)
        # (a tuple of arrays: the engine copies them out of the worker's arena)
        return (table.values, table.counts, table.firsts)

    def merge(self, partial: Any, region: Region) -> None:
        table = Table(*partial)
        self.pending.append(table)
        self.pending_bytes += table.nbytes
        if self.pending_bytes >= max(self.limit // 2, self.table.nbytes // 2):
            self._fold()

    def _fold(self) -> None:
        """Merge the pending tables into the table; spill the table when too large."""
        if self.pending:
            self.table = combine([self.table, *self.pending], self.equal_nan)
            self.pending, self.pending_bytes = [], 0
        if self.table.nbytes > self.limit:
            self.runs.append(spill(self.table, self.limit))
            self.table = _empty(self.expr.dtype, self.first)

    def finish(self) -> Table:
        self._fold()
        self.table.values = self.table.values.astype(self.expr.dtype, copy=False)
        if not self.runs:
            return self.table
        # (the merged result may be kept in memory up to a quarter of what the budget leaves)
        output_limit = max(self.limit, working_bytes() // 4)
        return merge_runs([*self.runs, self.table], self.equal_nan, self.limit, output_limit)


def spill(table: Table, limit: int) -> Table:
    """``table`` written to temporary chunked arrays."""
    chunk = max(1024, limit // 4 // max(1, table.values.dtype.itemsize))
    fields: list[StoredArray | None] = []
    for values in (table.values, table.counts, table.firsts):
        if values is None:
            fields.append(None)
            continue
        stored = temporary((len(values),), values.dtype, chunks=(chunk,))
        stored[...] = values
        fields.append(stored)
    return Table(*fields)


class _Output:
    """The merged table, kept in memory until it outgrows ``limit`` bytes, then written to
    temporary chunked arrays of ``capacity`` entries (copied to their exact length at the
    end)."""

    def __init__(self, capacity: int, limit: int) -> None:
        self.capacity, self.limit = capacity, limit
        self.pieces: list[Table] = []
        self.stored: Table | None = None
        self.length = 0

    def add(self, table: Table) -> None:
        if self.stored is None:
            self.pieces.append(table)
            if sum(p.nbytes for p in self.pieces) <= self.limit:
                return
            first = self.pieces[0]
            self.stored = Table(
                *(
                    None if f is None else temporary((self.capacity,), f.dtype)
                    for f in (first.values, first.counts, first.firsts)
                )
            )
            pieces, self.pieces = self.pieces, []
        else:
            pieces = [table]
        for piece in pieces:
            self._write(piece)

    def _write(self, piece: Table) -> None:
        assert self.stored is not None
        end = self.length + len(piece)
        for stored, values in zip(
            (self.stored.values, self.stored.counts, self.stored.firsts),
            (piece.values, piece.counts, piece.firsts),
            strict=True,
        ):
            if stored is not None:
                stored[self.length : end] = values
        self.length = end

    def result(self, dtype: np.dtype[Any], first: bool) -> Table:
        if self.stored is None:
            if not self.pieces:
                return _empty(dtype, first)
            return Table(
                np.concatenate([p.values for p in self.pieces]),
                np.concatenate([p.counts for p in self.pieces]),
                np.concatenate([p.firsts for p in self.pieces]) if first else None,
            )
        return Table(
            *(
                None if f is None else _exact(f, self.length, self.limit)
                for f in (self.stored.values, self.stored.counts, self.stored.firsts)
            )
        )


def _exact(stored: StoredArray, length: int, limit: int) -> StoredArray:
    """The first ``length`` entries of ``stored`` in a temporary array of their own."""
    out = temporary((length,), stored.dtype)
    step = max(1, limit // max(1, stored.dtype.itemsize))
    for start in range(0, length, step):
        stop = min(length, start + step)
        out[start:stop] = stored[start:stop]
    return out


def merge_runs(runs: list[Table], equal_nan: bool, limit: int, output_limit: int) -> Table:
    """The sorted runs merged into one table, a window of each at a time: what every window
    holds up to the smallest of their last values is final, and is merged and written out."""
    runs = [r for r in runs if len(r)]
    dtype = runs[0].values.dtype
    first = runs[0].firsts is not None
    entry = dtype.itemsize + COUNT.itemsize * (1 + first)
    step = max(256, limit // (3 * entry * len(runs)))
    output = _Output(sum(len(r) for r in runs), output_limit)
    positions = [0] * len(runs)
    windows = [r.window(0, step) for r in runs]
    while runs:
        for i, run in enumerate(runs):  # a window running low is read again, further on
            if len(windows[i]) < step // 2 and positions[i] + len(windows[i]) < len(run):
                windows[i] = run.window(positions[i], positions[i] + step)
        open_ends = [
            w.values[-1]
            for w, r, p in zip(windows, runs, positions, strict=True)
            if p + len(w) < len(r)
        ]
        # The smallest last value in sort order (NaNs last, as np.sort puts them).
        bound = np.sort(np.array(open_ends, dtype))[0] if open_ends else None
        taken = []
        for i, window in enumerate(windows):
            cut = len(window)
            if bound is not None:
                cut = int(np.searchsorted(window.values, bound, side="right"))
            taken.append(window.window(0, cut))
            windows[i] = window.window(cut, len(window))
            positions[i] += cut
        output.add(combine(taken, equal_nan))
        left = [i for i, r in enumerate(runs) if positions[i] < len(r)]
        runs = [runs[i] for i in left]
        windows = [windows[i] for i in left]
        positions = [positions[i] for i in left]
    return output.result(dtype, first)
