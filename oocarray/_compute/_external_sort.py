"""External merge sort of a chunked array or expression, flattened (C order).

Sorted runs that fit the budget are written to a temporary chunked array; then a k-way merge
streams them into the output.  The merge works in rounds, each a few vectorised NumPy calls
(no loop per element): every run holds a buffered head; the round's cut is the smallest last
buffered value (ties: the earliest run), every run gives up its buffered values below the cut
(and those equal to it, from runs up to the cut's run), and the pieces are merged by one
stable sort of their concatenation (a merge of sorted runs, for NumPy's timsort).  Every
value that can still come later is at least the cut, so what a round gives is final, and
equal values leave in the order of their runs: the merge is stable, which argsort's indices
(carried along with the values) rely on.  NaN sorts last, as in NumPy.
"""

from __future__ import annotations

import concurrent.futures
import math
import os
from collections.abc import Iterator
from typing import Any

import numpy as np

from oocarray._compute._limits import require_memory, working_bytes
from oocarray._compute._nodes import BlockReads, Node
from oocarray._compute._temporaries import temporary
from oocarray._memory import active_manager, system

__all__ = ["flat_regions", "read_region", "sort_flat"]

Region = tuple[slice, ...]

# Runs are stored uncompressed: written once, read back a buffer at a time (an uncompressed
# chunk serves part of itself without decoding the rest), and so is a result stored as a
# temporary chunked array (sorted values of real data seldom compress much).
RUN_CODEC = "none"
RESULT_CODEC = "none"
MIN_CHUNK_ITEMS = 64
MAX_CHUNK_ITEMS = 1 << 20
# A merge reads this many items of a run at a time when it can, and merges all runs at once
# as long as it can read at least MIN_MERGE_ITEMS of each.
PREFERRED_MERGE_ITEMS = 1 << 16
MIN_MERGE_ITEMS = 1 << 10
# A merge's memory, in buffers per run: the buffered heads (up to two buffers), the round's
# pieces and their merge, and the round before being sorted and written meanwhile.
MERGE_BUFFERS = 7
MAX_RUN_WORKERS = 4
# Runs shorter than this are not worth a thread of their own.
MIN_RUN_BYTES = 1 << 20


def _workers(data_bytes: int, memory: int) -> int:
    """Runs sorted at once: one per core (at most four), while each run stays large."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - platforms without affinity
        cpus = os.cpu_count() or 1
    return max(1, min(cpus, MAX_RUN_WORKERS, memory // (3 * MIN_RUN_BYTES)))


def read_region(node: Node, region: Region) -> np.ndarray:
    """The values of ``region`` of ``node``, as an array of the region's shape."""
    shape = tuple(s.stop - s.start for s in region)
    return np.broadcast_to(node.evaluate(region, BlockReads()), shape)


def flat_regions(shape: tuple[int, ...], max_items: int) -> Iterator[Region]:
    """Regions of an array of ``shape`` whose C-order items follow each other, in order, each
    of at most ``max_items`` items (at least one)."""
    if not shape:
        yield ()
        return
    if 0 in shape:
        return
    max_items = max(1, max_items)
    # The first axis (from the end) along which a whole block of the axes after it does not
    # fit: regions step along it, with every axis after it whole.
    axis = len(shape) - 1
    while axis > 0 and math.prod(shape[axis:]) <= max_items:
        axis -= 1
    inner = math.prod(shape[axis + 1 :])
    step = max(1, max_items // inner)
    if axis == 0 and inner * shape[0] <= max_items:
        step = shape[0]
    for outer in np.ndindex(*shape[:axis]):
        for start in range(0, shape[axis], step):
            yield (
                *(slice(i, i + 1) for i in outer),
                slice(start, min(start + step, shape[axis])),
                *(slice(0, n) for n in shape[axis + 1 :]),
            )


def _run_kind(kind: Any) -> Any:
    return "stable" if kind in ("stable", "mergesort") else kind


class _RunReader:
    """A run's buffered head, refilled a buffer at a time from the runs array."""

    def __init__(self, values: Any, indices: Any, start: int, stop: int, chunk: int) -> None:
        self.values_array, self.indices_array = values, indices
        self.position, self.stop, self.chunk = start, stop, chunk
        self.values = np.empty(0, values.dtype)
        self.indices = np.empty(0, np.intp) if indices is not None else None
        self.fill()

    @property
    def exhausted(self) -> bool:
        return self.position >= self.stop

    def fill(self) -> None:
        if self.exhausted or len(self.values) >= self.chunk:
            return
        end = min(self.position + self.chunk, self.stop)
        self.values = np.concatenate([self.values, self.values_array[self.position : end]])
        if self.indices is not None:
            self.indices = np.concatenate([self.indices, self.indices_array[self.position : end]])
        self.position = end

    def take(self, count: int) -> tuple[np.ndarray, np.ndarray | None]:
        values, self.values = self.values[:count], self.values[count:]
        if self.indices is None:
            return values, None
        indices, self.indices = self.indices[:count], self.indices[count:]
        return values, indices


class _Output:
    """Where merged values go, from ``at``: an ndarray, or a chunked array written a whole
    number of chunks at a time (and indices alongside, for a merge level of argsort)."""

    def __init__(self, array: Any, chunk: int, at: int = 0, indices: Any = None) -> None:
        self.array, self.indices, self.chunk, self.at = array, indices, chunk, at
        self.pending: list[tuple[np.ndarray, np.ndarray | None]] = []
        self.pending_items = 0

    def write(self, values: np.ndarray, indices: np.ndarray | None, final: bool = False) -> None:
        if isinstance(self.array, np.ndarray):
            self.array[self.at : self.at + len(values)] = values
            self.at += len(values)
            return
        if len(values):
            self.pending.append((values, indices))
            self.pending_items += len(values)
        if self.pending_items >= self.chunk or (final and self.pending_items):
            joined = np.concatenate([v for v, _ in self.pending])
            index: np.ndarray | None = None
            if self.indices is not None:
                index = np.concatenate([i for _, i in self.pending if i is not None])
            whole = len(joined) if final else len(joined) - len(joined) % self.chunk
            self.array[self.at : self.at + whole] = joined[:whole]
            if index is not None:
                self.indices[self.at : self.at + whole] = index[:whole]
            self.at += whole
            self.pending = [(joined[whole:], None if index is None else index[whole:])]
            self.pending_items = len(joined) - whole


def _merge_round(readers: list[_RunReader]) -> tuple[list[np.ndarray], list[np.ndarray | None]]:
    """One round: the values every run gives up (in run order) and their indices."""
    open_runs = [i for i, r in enumerate(readers) if not r.exhausted and len(r.values)]
    counts = [len(r.values) for r in readers]
    if open_runs:
        lasts = np.array([readers[i].values[-1] for i in open_runs], readers[0].values.dtype)
        cut_run = open_runs[int(np.argsort(lasts, kind="stable")[0])]
        cut = readers[cut_run].values[-1:]
        counts = [
            int(np.searchsorted(r.values, cut, side="right" if i <= cut_run else "left")[0])
            for i, r in enumerate(readers)
        ]
    taken = [r.take(n) for r, n in zip(readers, counts, strict=True)]
    return [v for v, _ in taken], [i for _, i in taken]


def _merge(readers: list[_RunReader], output: _Output, arg: bool, stable: bool, last: bool) -> None:
    """Merges the runs into ``output``: values, or (``last`` of argsort) indices only.

    A round's pieces are merged by sorting their concatenation: NumPy's own sort (vectorised
    where the CPU allows) is faster than a merge for these sizes; argsort's ties keep their
    order (their runs' order) only when a stable sort was asked for, as in NumPy.  A thread
    sorts and writes each round while the next one is cut and its buffers read."""
    manager = active_manager() or system()

    def finish(joined: np.ndarray, indices: np.ndarray | None) -> None:
        with manager.activate():
            if indices is not None:
                order = np.argsort(joined, kind="stable" if stable else None)
                if last:
                    output.write(indices[order], None)
                else:
                    output.write(joined[order], indices[order])
            else:
                joined.sort()
                output.write(joined, None)

    with concurrent.futures.ThreadPoolExecutor(1, "oocarray-merge") as pool:
        writing: concurrent.futures.Future[None] | None = None
        while any(len(r.values) for r in readers):
            values, indices = _merge_round(readers)
            joined = np.concatenate(values)
            index: np.ndarray | None = None
            if arg:
                index = np.concatenate(indices)  # type: ignore[arg-type]
            del values, indices
            for reader in readers:
                reader.fill()
            if writing is not None:
                writing.result()  # (one round in flight: the memory of two at most)
            writing = pool.submit(finish, joined, index)
            del joined, index
        if writing is not None:
            writing.result()
    output.write(np.empty(0, output.array.dtype), None, final=True)


def sort_flat(node: Node, kind: Any, arg: bool) -> Any:
    """``node`` flattened and sorted (``arg``: the indices that sort it): an ndarray when it
    fits the budget, else a temporary chunked array."""
    size = node.size
    dtype = node.dtype
    item_bytes = dtype.itemsize + (2 * np.dtype(np.intp).itemsize if arg else 0)
    out_dtype = np.dtype(np.intp) if arg else dtype
    stable = kind in ("stable", "mergesort")
    memory = working_bytes()
    # Sorting in memory holds the values, their sorted copy and (argsort) two index arrays.
    if 3 * size * item_bytes <= memory:
        values = read_region(node, tuple(slice(0, n) for n in node.shape)).reshape(-1)
        if arg:
            return np.argsort(values, kind=kind)
        return np.sort(values, kind=kind)
    workers = _workers(size * item_bytes, memory)
    run_items = max(MIN_CHUNK_ITEMS, memory // (3 * workers * item_bytes))
    # Runs and results are stored in large chunks (written whole, once); a merge reads each
    # run a small buffer at a time, which uncompressed chunks serve without reading more.
    stored = min(MAX_CHUNK_ITEMS, memory // (8 * item_bytes), run_items)
    stored = max(MIN_CHUNK_ITEMS, 1 << (stored.bit_length() - 1))
    run_items = max(stored, run_items // stored * stored)
    runs = math.ceil(size / run_items)
    # A merge holds a buffer or two per run, then the round's pieces and their merge.  All
    # runs are merged at once while their buffers stay long enough to be worth a round (a
    # merge level costs a write and a read of everything).
    fan_in = runs
    if memory // (MERGE_BUFFERS * runs * item_bytes) < MIN_MERGE_ITEMS:
        fan_in = max(2, memory // (MERGE_BUFFERS * item_bytes * PREFERRED_MERGE_ITEMS))
    buffer = max(MIN_CHUNK_ITEMS, memory // (MERGE_BUFFERS * fan_in * item_bytes))
    require_memory(
        "sort",
        MERGE_BUFFERS * 2 * MIN_CHUNK_ITEMS * item_bytes,
        smallest_bytes=MERGE_BUFFERS * 2 * MIN_CHUNK_ITEMS * item_bytes,
        hint="or sort a part at a time",
    )
    run_values = temporary((size,), dtype, chunks=(stored,), codec=RUN_CODEC)
    run_indices = temporary((size,), np.intp, chunks=(stored,), codec=RUN_CODEC) if arg else None
    bounds = _write_runs(node, run_values, run_indices, run_items, kind, arg, workers)
    while len(bounds) > fan_in:  # merge levels: groups of runs into longer runs
        merged_values = temporary((size,), dtype, chunks=(stored,), codec=RUN_CODEC)
        merged_indices = (
            temporary((size,), np.intp, chunks=(stored,), codec=RUN_CODEC) if arg else None
        )
        merged = []
        for first in range(0, len(bounds), fan_in):
            group = bounds[first : first + fan_in]
            readers = [_RunReader(run_values, run_indices, a, b, buffer) for a, b in group]
            output = _Output(merged_values, stored, group[0][0], merged_indices)
            _merge(readers, output, arg, stable, last=False)
            merged.append((group[0][0], group[-1][1]))
        run_values, run_indices, bounds = merged_values, merged_indices, merged
    if size * out_dtype.itemsize * 4 <= memory:
        result: Any = np.empty(size, out_dtype)
    else:
        result = temporary((size,), out_dtype, chunks=(stored,), codec=RESULT_CODEC)
    readers = [_RunReader(run_values, run_indices, a, b, buffer) for a, b in bounds]
    _merge(readers, _Output(result, stored), arg, stable, last=True)
    return result


def _run_bounds(shape: tuple[int, ...], run_items: int) -> list[tuple[int, int, list[Region]]]:
    """The runs of a flattened array: (start, stop, the regions whose items they hold)."""
    size = math.prod(shape)
    runs: list[tuple[int, int, list[Region]]] = []
    at = 0
    regions: list[Region] = []
    # Regions never cross a run boundary: they are cut at multiples of run_items of the
    # innermost axes' items where the array allows, else collected until a run is full.
    piece = math.gcd(run_items, math.prod(shape[1:]) if len(shape) > 1 else run_items)
    for region in flat_regions(shape, max(piece, min(run_items, size))):
        count = math.prod(s.stop - s.start for s in region)
        regions.append(region)
        at += count
        start = runs[-1][1] if runs else 0
        if at - start >= run_items or at == size:
            runs.append((start, at, regions))
            regions = []
    return runs


def _write_runs(
    node: Node,
    run_values: Any,
    run_indices: Any,
    run_items: int,
    kind: Any,
    arg: bool,
    workers: int,
) -> list[tuple[int, int]]:
    """Sorts each run in memory (``workers`` at once) into the runs arrays; the runs'
    bounds."""
    stable = kind in ("stable", "mergesort")
    manager = active_manager() or system()

    def sort_run(run: tuple[int, int, list[Region]]) -> tuple[int, int]:
        start, stop, regions = run
        with manager.activate():
            if len(regions) == 1:
                values = np.array(read_region(node, regions[0]).reshape(-1))
            else:
                values = np.empty(stop - start, node.dtype)
                at = 0
                for region in regions:
                    part = read_region(node, region).reshape(-1)
                    values[at : at + len(part)] = part
                    at += len(part)
            if arg:
                order = np.argsort(values, kind="stable" if stable else kind)
                run_values[start:stop] = values[order]
                del values
                order += start
                run_indices[start:stop] = order
            else:
                values.sort(kind=_run_kind(kind))
                run_values[start:stop] = values
        return start, stop

    runs = _run_bounds(node.shape, run_items)
    if workers == 1 or len(runs) == 1:
        return [sort_run(run) for run in runs]
    with concurrent.futures.ThreadPoolExecutor(workers, "oocarray-sort") as pool:
        return list(pool.map(sort_run, runs))
