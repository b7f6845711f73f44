"""W7: random-row reads from a (N, 1024) float32 array on disk.

The array (8 GiB in PERFORMANCE.md; ``--quick`` uses 512 MiB) is written deterministically,
block by block (:mod:`datasets.w7_data`: noise, with each row's index in column 0 so every read
is checked), into a raw ``.npy``, an uncompressed zarr (``oc.create(..., codec="none")``), a
zstd zarr (``oc.create(..., codec="zstd")``), and HDF5 contiguous and chunked (uncompressed;
h5py has no zstd without a plugin).  The zarr arrays and the chunked HDF5 dataset have row
chunks of ``CHUNK_ROWS`` rows (2 MiB).

Two reads: one row ``x[i]`` at a random row, and a 256-row contiguous batch ``x[s:s+256]`` at
a random start (fixed seeds).  Every read is timed on its own; the table gives the p50 and p90
latency of each side.  A read must leave the data in memory: the sides that return views of a
file map (``numpy.memmap`` and oocarray on ``.npy``) copy the view with ``np.array``, since a
view reads nothing.

Sides are measured in three phases, one per group of files, so that each group fits in the page
cache and on disk while it is read (8 GiB per file, 16 GiB per phase): (1) ``.npy`` and
uncompressed zarr: ``numpy.memmap`` (the floor), oocarray on the ``.npy`` (memory-mapped),
oocarray and zarr-python on the uncompressed zarr; (2) the zstd zarr: oocarray, zarr-python
with its default codec pipeline and with the zarrs (Rust) pipeline, tensorstore (when
importable; its default context, which caches no chunks); (3) h5py contiguous and chunked.
oocarray's chunk-reading sides are measured twice: as a plain call, and inside an
``oc.Manager`` (their buffers then come from oocarray's allocator instead of ``malloc``).  In
each phase the sides run interleaved in rounds (order rotated each round); in a round each side
reads a different block of the same list of rows, so no side reads rows another side just read.

Targets (PERFORMANCE.md): oocarray's p50 within 2x of ``numpy.memmap`` on uncompressed data
(the ``.npy`` and the uncompressed zarr are both compared); >= 10x faster than zarr-python on
the uncompressed zarr, i.e. a p50 ratio oocarray/zarr-python <= 0.10; and on the zstd zarr,
where decoding one chunk bounds every side, ahead of every peer (a p50 ratio <= 1.0 against
zarr-python with either pipeline and tensorstore).
"""

from __future__ import annotations

import contextlib
import mmap
import os
import resource
import shutil
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from importlib.metadata import version
from typing import Any

import numpy as np

import oocarray as oc
from benchmarks._harness import evict_page_cache, marked_cold, scratch, zarrs_pipeline
from benchmarks._timing import (
    Result,
    clock,
    format_bytes,
    gc_paused,
)
from benchmarks._w7_results import (
    BATCH,
    CHUNK_ROWS,
    SEED,
    WARM,
    Counts,
    Measured,
    Phase,
    result,
    store_description,
)
from datasets import w7_data
from oocarray import _native

MiB = 1 << 20
GiB = 1 << 30
FULL_BYTES = 8 * GiB
QUICK_BYTES = 512 * MiB
MIN_FREE_FOR_FULL = 40 * GiB  # PERFORMANCE.md's 8 GiB needs this much free disk
MIN_BYTES = 256 * MiB


Reader = Callable[[int], np.ndarray]


@dataclass
class Side:
    """One reader of one store: a single-row and a batch read, and whether to run it inside an
    ``oc.Manager``."""

    label: str
    row: Reader
    batch: Reader
    managed: bool = False
    closers: list[Callable[[], Any]] = field(default_factory=list)

    def reader(self, kind: str) -> Reader:
        return self.row if kind == "single" else self.batch

    def close(self) -> None:
        for close in self.closers:
            close()


# ---- sizes, disk and memory ----


def _mem_available() -> int:
    with open("/proc/meminfo", encoding="ascii") as meminfo:
        for line in meminfo:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return 0


def _pick_size(directory: str, quick: bool) -> tuple[int, list[str]]:
    """Array bytes for this run, and notes on why."""
    free = shutil.disk_usage(directory).free
    available = _mem_available()
    notes = [
        f"W7 machine: {os.cpu_count()} CPUs, {available / GiB:.1f} GiB memory available, "
        f"{free / GiB:.0f} GiB free disk at {directory}."
    ]
    if quick:
        return QUICK_BYTES, [*notes, f"W7 --quick: a {format_bytes(QUICK_BYTES)} array."]
    size = FULL_BYTES
    if free < MIN_FREE_FOR_FULL:
        size = min(size, _pow2_floor(free // 5))
        notes.append(
            f"W7 scaled down: {free / GiB:.0f} GiB free disk is under "
            f"{MIN_FREE_FOR_FULL // GiB} GiB, so the array is {format_bytes(size)} instead of "
            f"{format_bytes(FULL_BYTES)}."
        )
    # A phase reads two files; both should fit in the page cache with room to spare.
    if 2 * size + 2 * GiB > available:
        size = min(size, _pow2_floor((available - 2 * GiB) // 2))
        notes.append(
            f"W7 scaled down to {format_bytes(size)} so that a phase's two files fit in the "
            f"{available / GiB:.1f} GiB of available memory (page cache)."
        )
    if size < MIN_BYTES:
        raise RuntimeError(
            f"W7: not enough disk ({free / GiB:.1f} GiB free) or memory "
            f"({available / GiB:.1f} GiB) for even a {format_bytes(MIN_BYTES)} array"
        )
    return size, notes


def _pow2_floor(n: int) -> int:
    return 1 << (max(int(n), 1).bit_length() - 1)


def _files(path: str) -> Iterator[str]:
    if os.path.isdir(path):
        for directory, _, names in os.walk(path):
            for name in names:
                yield os.path.join(directory, name)
    else:
        yield path


def _disk_bytes(path: str) -> int:
    return sum(os.path.getsize(p) for p in _files(path))


def _resident_fraction(paths: Sequence[str]) -> float:
    """Fraction of the files' pages in the page cache (asked without touching them)."""
    page = mmap.PAGESIZE
    resident = total = 0
    for path in paths:
        for name in _files(path):
            size = os.path.getsize(name)
            if size == 0:
                continue
            fd = os.open(name, os.O_RDONLY)
            try:
                resident += _native.cached_pages(fd, 0, size)
            except OSError:  # cannot be told (as before: a figure, not a failure)
                return float("nan")
            finally:
                os.close(fd)
            total += -(-size // page)
    return resident / total if total else float("nan")


def _read_through(paths: Sequence[str]) -> None:
    """Read the files once, sequentially, to bring evicted pages back into the page cache.

    The buffer is an anonymous map, not ``malloc`` memory: freeing a multi-MiB ``malloc`` block
    raises glibc's dynamic mmap and trim thresholds, which changes how the sides that allocate
    chunk buffers outside a manager behave for the rest of the process (see the notes).
    """
    with mmap.mmap(-1, 16 * MiB) as buffer:
        for path in paths:
            for name in _files(path):
                with open(name, "rb", buffering=0) as f:
                    while f.readinto(buffer):
                        pass


# ---- timing ----


def _check(result: np.ndarray, start: int, rows: int) -> None:
    """A single row (``rows == 0``) or a batch holds the rows it should (column 0 is the row
    index)."""
    expected = (w7_data.COLUMNS,) if rows == 0 else (rows, w7_data.COLUMNS)
    first = result[0] if rows == 0 else result[0, 0]
    last = result[0] if rows == 0 else result[-1, 0]
    end = start if rows == 0 else start + rows - 1
    if result.shape != expected or first != start or last != end:
        raise RuntimeError(
            f"W7: a read at {start} returned shape {result.shape} holding rows "
            f"{first}..{last}, expected {expected} holding {start}..{end}"
        )


def _minor_faults() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def _loop(read: Reader, starts: np.ndarray, rows: int, managed: bool) -> tuple[np.ndarray, int]:
    """Latency of each read, and the minor page faults the loop took."""
    latencies = np.empty(len(starts))
    scope: contextlib.AbstractContextManager[Any] = (
        oc.Manager("w7-reads") if managed else contextlib.nullcontext()
    )
    with scope:
        result = None
        faults = _minor_faults()
        for j, start in enumerate(starts.tolist()):
            t0 = clock()
            result = read(start)
            latencies[j] = clock() - t0
            _check(result, start, rows)
        faults = _minor_faults() - faults
        del result  # before the manager closes
    return latencies, faults


def _interleaved(
    sides: dict[str, Side],
    kind: str,
    starts: np.ndarray,
    rounds: int,
    cold: Sequence[str] = (),
) -> tuple[dict[str, list[np.ndarray]], dict[str, float]]:
    """Per side, per round latencies, and minor faults per read; side ``k`` reads block
    ``(round + k) % rounds`` of ``starts``; the ``cold`` files are evicted from the page cache
    before each side's block."""
    rows = 0 if kind == "single" else BATCH
    blocks = np.array_split(starts, rounds)
    names = list(sides)
    times: dict[str, list[np.ndarray]] = {name: [] for name in names}
    faults = dict.fromkeys(names, 0)
    with gc_paused():
        warm = np.random.default_rng(SEED + 1).integers(0, int(starts.max()) + 1, 20)
        for name in names:
            side = sides[name]
            _loop(side.reader(kind), warm, rows, side.managed)
        for r in range(rounds):
            shift = r % len(names)
            for name in names[shift:] + names[:shift]:
                side = sides[name]
                block = blocks[(r + names.index(name)) % rounds]
                evict_page_cache(cold)
                latencies, n = _loop(side.reader(kind), block, rows, side.managed)
                times[name].append(latencies)
                faults[name] += n
    return times, {name: faults[name] / len(starts) for name in names}


def _measure_phase(
    phase: str, sides: dict[str, Side], n_rows: int, counts: Counts, cold: Sequence[str] = ()
) -> dict[str, Measured]:
    rng = np.random.default_rng(SEED)
    singles = rng.integers(0, n_rows, counts.singles)
    batches = rng.integers(0, n_rows - BATCH + 1, counts.batches)
    single, single_faults = _interleaved(sides, "single", singles, counts.rounds, cold)
    batch, batch_faults = _interleaved(sides, "batch", batches, counts.rounds, cold)
    return {
        name: Measured(
            sides[name].label,
            phase,
            single[name],
            batch[name],
            {"single": single_faults[name], "batch": batch_faults[name]},
        )
        for name in sides
    }


# ---- the sides ----


def _oc_sides(key: str, label: str, path: str) -> dict[str, Side]:
    x = oc.open(path)
    y = oc.open(path)
    return {
        key: Side(label, x.__getitem__, lambda s: x[s : s + BATCH], closers=[x.close]),
        f"{key}+mgr": Side(
            f"{label}, in `oc.Manager`",
            y.__getitem__,
            lambda s: y[s : s + BATCH],
            managed=True,
            closers=[y.close],
        ),
    }


def _phase_uncompressed(npy: str, zarr_none: str) -> dict[str, Side]:
    mm = np.load(npy, mmap_mode="r")
    x = oc.open(npy)
    sides = {
        "memmap": Side(
            "numpy.memmap (.npy) + copy",
            lambda i: np.array(mm[i]),
            lambda s: np.array(mm[s : s + BATCH]),
        ),
        "oc-npy": Side(
            "oocarray .npy (memory-mapped) + copy",
            lambda i: np.array(x[i]),
            lambda s: np.array(x[s : s + BATCH]),
            closers=[x.close],
        ),
    }
    sides.update(_oc_sides("oc-none", "oocarray zarr, uncompressed", zarr_none))
    sides.update(_zarr_python_side("zarr-none", "uncompressed", zarr_none))
    return sides


def _zarr_python_side(key: str, what: str, path: str) -> dict[str, Side]:
    import zarr

    z = zarr.open_array(store=path, mode="r")
    return {
        key: Side(
            f"zarr-python {zarr.__version__}, {what}", z.__getitem__, lambda s: z[s : s + BATCH]
        )
    }


def _phase_zstd(zarr_zstd: str) -> tuple[dict[str, Side], list[str]]:
    notes = []
    sides = _oc_sides("oc-zstd", "oocarray zarr, zstd", zarr_zstd)
    sides.update(_zarr_python_side("zarr-python", "zstd", zarr_zstd))
    try:
        with zarrs_pipeline():  # the array keeps the pipeline it was opened with
            sides.update(
                _zarr_python_side("zarr+zarrs", f"zstd, zarrs {version('zarrs')}", zarr_zstd)
            )
    except ImportError:
        notes.append("W7: zarrs is not installed: the zarrs pipeline's side is missing.")
    try:
        import tensorstore as ts
    except ImportError:
        notes.append("W7: tensorstore is not installed: its side is missing.")
    else:
        t = ts.open(
            {"driver": "zarr3", "kvstore": {"driver": "file", "path": zarr_zstd}}, read=True
        ).result()
        sides["tensorstore"] = Side(
            "tensorstore, zstd (no chunk cache)",
            lambda i: t[i].read().result(),
            lambda s: t[s : s + BATCH].read().result(),
        )
    return sides, notes


def _phase_hdf5(contiguous: str, chunked: str) -> dict[str, Side]:
    import h5py

    fc = h5py.File(contiguous, "r")
    fk = h5py.File(chunked, "r")
    dc = fc["data"]
    dk = fk["data"]
    return {
        "h5-contiguous": Side(
            f"h5py {h5py.__version__} contiguous",
            dc.__getitem__,
            lambda s: dc[s : s + BATCH],
            closers=[fc.close],
        ),
        "h5-chunked": Side(
            f"h5py chunked ({CHUNK_ROWS} rows, uncompressed)",
            dk.__getitem__,
            lambda s: dk[s : s + BATCH],
            closers=[fk.close],
        ),
    }


# ---- the run ----


def _write(phase: Phase, n_rows: int) -> None:
    start = time.perf_counter()
    for kind, path in phase.files.items():
        if kind == "npy":
            w7_data.write_npy(path, n_rows)
        elif kind in ("none", "zstd"):
            w7_data.write_zarr(path, n_rows, CHUNK_ROWS, kind)
        elif kind == "h5-contiguous":
            w7_data.write_hdf5(path, n_rows)
        elif kind == "h5-chunked":
            w7_data.write_hdf5(path, n_rows, CHUNK_ROWS)
    phase.write_s = time.perf_counter() - start


def run(quick: bool = False, cold: bool = False) -> Result:
    with scratch("oocarray-w7-") as directory:
        result = _run_in(directory, quick, cold)
    return marked_cold(result) if cold else result


def _run_in(directory: str, quick: bool, cold: bool = False) -> Result:
    size, notes = _pick_size(directory, quick)
    n_rows = size // w7_data.ROW_BYTES
    if quick:
        cheap = Counts(singles=1_000, batches=1_000, rounds=5)
        costly = Counts(singles=500, batches=500, rounds=5)
    else:
        cheap = Counts(singles=10_000, batches=10_000, rounds=20)
        # Every read of the zstd store decodes one or two 2 MiB chunks (about 2-5 ms here) on
        # five sides: 10k of each would take over 5 minutes on its own.
        costly = Counts(singles=4_000, batches=4_000, rounds=20)
    phases = [
        Phase(
            "uncompressed",
            {
                "npy": os.path.join(directory, "w7.npy"),
                "none": os.path.join(directory, "none.zarr"),
            },
        ),
        Phase("zstd", {"zstd": os.path.join(directory, "zstd.zarr")}),
        Phase(
            "hdf5",
            {
                "h5-contiguous": os.path.join(directory, "contiguous.h5"),
                "h5-chunked": os.path.join(directory, "chunked.h5"),
            },
        ),
    ]
    measured: dict[str, Measured] = {}
    stores: list[list[str]] = []
    run_counts: dict[str, Counts] = {}
    for phase in phases:
        _write(phase, n_rows)
        for kind, path in phase.files.items():
            stores.append(
                [
                    kind,
                    store_description(kind),
                    format_bytes(size),
                    f"{_disk_bytes(path) / MiB:,.0f} MiB ({_disk_bytes(path) / size:.2f}x)",
                    f"{phase.write_s:.1f} s (phase)",
                ]
            )
        files = list(phase.files.values())
        if phase.name == "uncompressed":
            sides = _phase_uncompressed(phase.files["npy"], phase.files["none"])
            counts = cheap
        elif phase.name == "zstd":
            sides, extra = _phase_zstd(phase.files["zstd"])
            notes += extra
            counts = costly
        else:
            sides = _phase_hdf5(phase.files["h5-contiguous"], phase.files["h5-chunked"])
            counts = cheap
        phase.resident_written = _resident_fraction(files)
        if cold:
            evict_page_cache(files)
        elif phase.resident_written < WARM:
            _read_through(files)
        phase.resident_before = _resident_fraction(files)
        try:
            measured.update(
                _measure_phase(phase.name, sides, n_rows, counts, files if cold else ())
            )
        finally:
            for side in sides.values():
                side.close()
            del sides
        phase.resident_after = _resident_fraction(files)
        run_counts[phase.name] = counts
        for path in files:
            if os.path.isdir(path):
                shutil.rmtree(path, ignore_errors=True)
            else:
                os.unlink(path)
    return result(measured, stores, phases, run_counts, size, n_rows, notes)
