"""External merge sort of a chunked array or expression, flattened (C order).

Sorted runs that fit the budget (read, decoded, sorted and encoded on every core) are spilled
to an unnamed scratch file (no chunk files or checksum: each is written once and read back
once, a buffer at a time, with a cheap codec chosen per run); then a k-way merge streams them
into the output.  Large buffers are made once and reused (a run's read, a run's buffered head,
a round's values): the memory manager unmaps large freed regions, and a fresh one costs page
faults and pages zeroed by the kernel every time.  The merge works in rounds, each a few
vectorised NumPy calls (no loop per element): every run holds a buffered head; the round's
cut is the smallest last buffered value (ties: the earliest run), every run gives up its
buffered values below the cut (and those equal to it, from runs up to the cut's run), and the
pieces are merged by one sort of their concatenation (NumPy's vectorised sort beats a merge at
these sizes; rounds are sorted and written on every core, each at the place counted when it
was cut).  Every value that can still come later is at least the cut, so what a round gives
is final, and equal values leave in the order of their runs: the merge is stable, which
argsort's indices (carried along with the values) rely on.  NaN sorts last, as in NumPy.
"""

from __future__ import annotations

import collections
import concurrent.futures
import math
import os
import queue
import threading
from collections.abc import Iterator
from typing import Any

import numpy as np

from oocarray._compute._limits import require_memory, working_bytes
from oocarray._compute._nodes import BlockReads, Node, Source
from oocarray._compute._sorted_runs import RunReader, Runs
from oocarray._compute._temporaries import temporary
from oocarray._memory import active_manager, system

__all__ = ["flat_regions", "read_region", "sort_flat"]

Region = tuple[slice, ...]

# A result stored as a temporary chunked array takes a cheap codec (Blosc LZ4 with byte
# shuffle: several GB/s a core): sorted values share their high bytes, measurements often
# repeat, and writing fresh pages costs more than encoding them on a host short of memory
# bandwidth (512 MiB of rounded float32 sorted in 64 MiB: 1.2 s with it, 1.6-3.2 s raw).
RESULT_CODEC = "lz4"
MIN_CHUNK_ITEMS = 64
# A result's chunks are large: each is a file made, written and renamed, and making files
# costs (ext4 searching its inode tables) about as much as encoding a few MiB.
MAX_CHUNK_ITEMS = 2 << 20
# A merge reads this many items of a run at a time when it can, and merges all runs at once
# as long as it can read at least MIN_MERGE_ITEMS of each.
PREFERRED_MERGE_ITEMS = 1 << 16
MIN_MERGE_ITEMS = 1 << 10
# A merge's memory, in buffers per run: the buffered heads (up to two buffers), the round's
# pieces and their merge, and MERGE_WORKERS rounds being sorted and written meanwhile (each
# its values and argsort's order and gathered indices).
MERGE_WORKERS = 2
MERGE_BUFFERS = 4 + 3 * MERGE_WORKERS
MAX_RUN_WORKERS = 4
# Runs shorter than this are not worth a thread of their own.
MIN_RUN_BYTES = 1 << 20


def _workers(data_bytes: int, memory: int) -> int:
    """Runs sorted at once: one more than the cores (at most four), while each run stays
    large; the extra one keeps every core busy while a worker writes its run or waits for
    the reads its decoding shares."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - platforms without affinity
        cpus = os.cpu_count() or 1
    return max(1, min(cpus + 1, MAX_RUN_WORKERS, memory // (3 * MIN_RUN_BYTES)))


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


class _Output:
    """Where merged values go, from ``at``: an ndarray, a scratch file of runs (a merge level,
    indices alongside for argsort), or a chunked array written a whole number of chunks at a
    time.

    A round knows where its values go (the merge counts them as it cuts the rounds), so rounds
    are written as soon as they are sorted, by whichever worker sorted them: an ndarray or a
    scratch file at their positions, a chunked array's whole chunks at once (encoded and
    written on that worker while the next rounds are sorted).  Only a chunk that spans two
    rounds waits, in :meth:`join`, for the round before it."""

    def __init__(self, array: Any, chunk: int, at: int = 0) -> None:
        self.array, self.chunk, self.at = array, chunk, at
        self.chunked = not isinstance(array, Runs | np.ndarray)
        # A chunk begun by an earlier round: its first item's position, and its items so far
        # in a buffer made once (rounds are joined one at a time; a fresh buffer per round
        # would be fresh pages, zeroed by the kernel, every time).
        self.pending_at = self.pending = 0
        self.assembly: np.ndarray | None = None

    def write(self, at: int, values: np.ndarray, indices: np.ndarray | None) -> tuple[int, int]:
        """Writes what of ``values`` (the items from ``at``) needs no other round: all of it,
        but for a chunked array's chunks that it shares with the rounds beside it; the range
        of the items left for :meth:`join`."""
        end = at + len(values)
        if isinstance(self.array, Runs):
            if len(values):
                self.array.write(at, values, indices)
            return end, end
        if isinstance(self.array, np.ndarray):
            self.array[at:end] = values
            return end, end
        first = min(-(-at // self.chunk) * self.chunk, end)  # (the first chunk boundary)
        last = max(end // self.chunk * self.chunk, first)
        if first < last:
            self.array[first:last] = values[first - at : last - at]
        return first, last

    def join(self, at: int, values: np.ndarray, whole: tuple[int, int]) -> None:
        """A chunked array's chunks shared with the rounds beside this one (the items of
        ``values`` before and after the range ``whole`` that :meth:`write` wrote); called in
        the order of the rounds."""
        if not self.chunked:
            return
        first, last = whole
        end = at + len(values)
        if first > at:  # (the end of a chunk begun before, or a piece inside it)
            if not self.pending:
                self.pending_at = at
            self._add(values[: first - at])
            if first % self.chunk == 0 or first == self.array.shape[0]:
                self._write_pending()
        if last < end:  # (the start of a chunk the next rounds end)
            self.pending_at = last
            self._add(values[last - at :])

    def _add(self, values: np.ndarray) -> None:
        if self.assembly is None:
            self.assembly = np.empty(self.chunk, self.array.dtype)
        self.assembly[self.pending : self.pending + len(values)] = values
        self.pending += len(values)

    def _write_pending(self) -> None:
        assert self.assembly is not None
        self.array[self.pending_at : self.pending_at + self.pending] = self.assembly[: self.pending]
        self.pending = 0

    def finish(self) -> None:
        """Writes the last chunk, when it is not whole, and frees the chunk's buffer."""
        if self.chunked and self.pending:
            self._write_pending()
        self.assembly = None


def _merge_round(readers: list[RunReader]) -> tuple[list[np.ndarray], list[np.ndarray | None]]:
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


def _merge(readers: list[RunReader], output: _Output, arg: bool, stable: bool, last: bool) -> None:
    """Merges the runs into ``output``: values, or (``last`` of argsort) indices only.

    A round's pieces are merged by sorting their concatenation: NumPy's own sort (vectorised
    where the CPU allows) is faster than a merge for these sizes; argsort's ties keep their
    order (their runs' order) only when a stable sort was asked for, as in NumPy.  Rounds are
    sorted by MERGE_WORKERS threads while the next ones are cut and their buffers read, and
    written by the thread that sorted them, at the place counted when they were cut (only a
    chunk two rounds share waits for the round before: see :class:`_Output`)."""
    manager = active_manager() or system()
    # Values that compare equal yet differ (0.0 and -0.0, NaNs) keep their runs' order only
    # in a stable sort: NumPy's, which merges the round's sorted pieces as they are.  Equal
    # values of other kinds are the same bits: the faster sort gives the same result.
    values_kind: Any = "stable" if stable and readers[0].values.dtype.kind in "fc" else None
    # The rounds' joined values, reused: each round is concatenated into a free buffer large
    # enough (else a new one), which its worker gives back once the round is written.  At most
    # MERGE_WORKERS + 1 are in use at once: the rounds in flight and the one being joined.
    free_buffers: list[np.ndarray] = []
    buffers_lock = threading.Lock()
    largest_round = sum(len(reader.value_buffer) for reader in readers)

    def joined_buffer(count: int) -> np.ndarray:
        with buffers_lock:
            free_buffers.sort(key=len)  # (the smallest that fits is taken)
            for i, buffer in enumerate(free_buffers):
                if len(buffer) >= count:
                    return free_buffers.pop(i)[:count]
            if free_buffers:  # (too small: replaced, so the buffers kept stay few)
                free_buffers.pop(0)
        # With room for a larger round (rounds vary in size, and each new buffer is fresh
        # pages), though never more than every head holds at once: no round is larger.
        room = max(count, min(count + count // 4, largest_round))
        return np.empty(room, readers[0].values.dtype)[:count]

    def give_back(buffer: np.ndarray) -> None:
        base = buffer.base if isinstance(buffer.base, np.ndarray) else buffer
        with buffers_lock:
            free_buffers.append(base)

    def finish(
        at: int, joined: np.ndarray, indices: np.ndarray | None, before: threading.Event | None
    ) -> None:
        with manager.activate():
            merged: np.ndarray
            merged_indices: np.ndarray | None = None
            reused = indices is None  # (values only: sorted in their pooled buffer)
            if indices is not None:
                order = np.argsort(joined, kind="stable" if stable else None)
                if last:
                    merged = indices[order]
                else:
                    merged, merged_indices = joined[order], indices[order]
                del order, joined
            else:
                joined.sort(kind=values_kind)
                merged = joined
            del indices
            whole = output.write(at, merged, merged_indices)
            if before is not None:
                before.wait()
            output.join(at, merged, whole)
            if reused:
                # Written (every output copies what it is given): nothing holds it now.
                give_back(merged)

    with concurrent.futures.ThreadPoolExecutor(MERGE_WORKERS, "oocarray-merge") as pool:
        rounds: collections.deque[concurrent.futures.Future[None]] = collections.deque()
        # Chunks shared by two rounds are joined in order: each round's event is set once it
        # has joined its own.
        before: threading.Event | None = None
        at = output.at
        while any(len(r.values) for r in readers):
            values, indices = _merge_round(readers)
            count = sum(len(v) for v in values)
            index: np.ndarray | None = None
            if arg:
                joined = np.concatenate(values)
                index = np.concatenate(indices)  # type: ignore[arg-type]
            else:
                joined = np.concatenate(values, out=joined_buffer(count))
            del values, indices
            # (refilled while the rounds before are sorted: the pieces were copied out)
            for reader in readers:
                reader.fill()
            while len(rounds) >= MERGE_WORKERS:  # (the memory of MERGE_WORKERS rounds at most)
                rounds.popleft().result()
            done = threading.Event()
            future = pool.submit(_chained, finish, at, joined, index, before, done)
            rounds.append(future)
            before = done
            at += count
            del joined, index
        for future in rounds:
            future.result()
        free_buffers.clear()
    output.finish()


def _chained(
    finish: Any,
    at: int,
    joined: np.ndarray,
    index: np.ndarray | None,
    before: threading.Event | None,
    done: threading.Event,
) -> None:
    """``finish`` of a round, then ``done`` set, even when it fails (the rounds after it
    must not wait forever: the failure is raised by the merge from this round's future)."""
    try:
        finish(at, joined, index, before)
    finally:
        done.set()


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
    # A result is stored in large chunks (written whole, once).
    stored = min(MAX_CHUNK_ITEMS, memory // (8 * item_bytes), run_items)
    stored = max(MIN_CHUNK_ITEMS, 1 << (stored.bit_length() - 1))
    run_items = max(stored, run_items // stored * stored)
    run_count = math.ceil(size / run_items)
    # A merge holds a buffer or two per run, then the round's pieces and their merge.  All
    # runs are merged at once while their buffers stay long enough to be worth a round (a
    # merge level costs a write and a read of everything).
    fan_in = run_count
    if memory // (MERGE_BUFFERS * run_count * item_bytes) < MIN_MERGE_ITEMS:
        fan_in = max(2, memory // (MERGE_BUFFERS * item_bytes * PREFERRED_MERGE_ITEMS))
    buffer = max(MIN_CHUNK_ITEMS, memory // (MERGE_BUFFERS * fan_in * item_bytes))
    require_memory(
        "sort",
        MERGE_BUFFERS * 2 * MIN_CHUNK_ITEMS * item_bytes,
        smallest_bytes=MERGE_BUFFERS * 2 * MIN_CHUNK_ITEMS * item_bytes,
        hint="or sort a part at a time",
    )
    # First-level runs are compressed in blocks of the merge's buffer (a reader's refill).
    runs = Runs(size, dtype, arg, block=buffer if dtype.kind in "biuf" else 0)
    try:
        bounds = _write_runs(node, runs, run_items, kind, arg, workers)
        while len(bounds) > fan_in:  # merge levels: groups of runs into longer runs
            merged_runs = Runs(size, dtype, arg)
            merged = []
            for first in range(0, len(bounds), fan_in):
                group = bounds[first : first + fan_in]
                readers = [RunReader(runs, a, b, buffer) for a, b in group]
                _merge(readers, _Output(merged_runs, stored, group[0][0]), arg, stable, last=False)
                merged.append((group[0][0], group[-1][1]))
            runs.close()
            runs, bounds = merged_runs, merged
        if size * out_dtype.itemsize * 4 <= memory:
            result: Any = np.empty(size, out_dtype)
        else:
            result = temporary((size,), out_dtype, chunks=(stored,), codec=RESULT_CODEC)
        readers = [RunReader(runs, a, b, buffer) for a, b in bounds]
        _merge(readers, _Output(result, stored), arg, stable, last=True)
    finally:
        runs.close()
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
    node: Node, runs: Runs, run_items: int, kind: Any, arg: bool, workers: int
) -> list[tuple[int, int]]:
    """Sorts each run in memory (``workers`` at once: each reads, decodes and sorts its own)
    into ``runs``; the runs' bounds."""
    stable = kind in ("stable", "mergesort")
    manager = active_manager() or system()
    # A 1-d stored array's runs are decoded straight into a buffer the workers keep (a run
    # read as a new array would be fresh pages each time, zeroed by the kernel).
    source = node.array if isinstance(node, Source) and node.ndim == 1 else None
    buffers: queue.SimpleQueue[np.ndarray] = queue.SimpleQueue()

    def read_run(start: int, stop: int, regions: list[Region]) -> np.ndarray:
        if source is not None and not arg:
            try:
                buffer: np.ndarray | None = buffers.get_nowait()
            except queue.Empty:
                buffer = None
            if buffer is None or len(buffer) < stop - start:
                buffer = np.empty(max(run_items, stop - start), node.dtype)
            values = buffer[: stop - start]
            source._read_rows_into(start, values)
            return values
        if len(regions) == 1 and isinstance(node, Source):
            # A stored array's read is a fresh array: sorted where it was read.
            return node.array[regions[0]].reshape(-1)
        if len(regions) == 1:
            return np.array(read_region(node, regions[0]).reshape(-1))
        values = np.empty(stop - start, node.dtype)
        at = 0
        for region in regions:
            part = read_region(node, region).reshape(-1)
            values[at : at + len(part)] = part
            at += len(part)
        return values

    def sort_run(run: tuple[int, int, list[Region]]) -> tuple[int, int]:
        start, stop, regions = run
        with manager.activate():
            values = read_run(start, stop, regions)
            if arg:
                order = np.argsort(values, kind="stable" if stable else kind)
                sorted_values = values[order]
                del values
                order += start
                runs.write(start, sorted_values, order)
            else:
                values.sort(kind=_run_kind(kind))
                runs.write(start, values, None)  # (encoded and written: the buffer is free)
                if source is not None:
                    buffers.put(values.base if values.base is not None else values)
        return start, stop

    bounds = _run_bounds(node.shape, run_items)
    try:
        if workers == 1 or len(bounds) == 1:
            return [sort_run(run) for run in bounds]
        with concurrent.futures.ThreadPoolExecutor(workers, "oocarray-sort") as pool:
            # (Ctrl-C or a failed run: map's results cancel the runs not started)
            return list(pool.map(sort_run, bounds))
    finally:
        while not buffers.empty():  # (freed now, before the merge plans its memory)
            buffers.get_nowait()
