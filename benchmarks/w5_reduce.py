"""W5: streaming reduction, mean and std over axis 0 of a (N, 64) float32 zstd zarr array.

The array (4 GiB in PERFORMANCE.md; ``--quick``: 64 MiB) is written once, untimed, by oocarray's
own writer from :mod:`datasets.w5_data` (noisy measurements rounded to 3 decimals, chunks of
16384 x 64 = 4 MiB, zstd level 3), together with a raw ``.npy`` of the same values.  Every file
is read once before timing, so every side reads from a warm page cache.  Sides, interleaved
round by round with the order rotated:

- **oocarray**: ``oc.compute(x.mean(axis=0, compute=False), x.std(axis=0, compute=False))``,
  one pass, inside ``oc.Manager(max_bytes=BUDGET)`` (entered untimed);
- **dask**: ``da.from_zarr`` (its chunks are the zarr chunks), mean and std computed together
  by ``dask.compute(..., scheduler="threads")``;
- **zarr-python**: a chunk loop, blocks of 4 chunks read with ``z[a:b]``, float64 sums and
  sums of squares accumulated in NumPy;
- **tensorstore** (when importable): the same loop over ``ts.open(zarr3)`` reads;
- **numpy.memmap**: the same loop over a memory map of the raw ``.npy`` (the uncompressed floor);
- **codec floor**: every chunk decoded, on every core, into preallocated buffers, no compute.
  Two ways, both timed, the faster is the floor: oocarray's native chunk reader
  (``read_rows_into`` in 64 MiB blocks into one buffer) and numcodecs' Zstd in a thread pool of
  one thread per core (``pread`` of the chunk file, its CRC-32C checked, ``decode(out=...)``).

Targets: oocarray >= 1.5x faster than dask (ratio <= 0.67), <= 1.15x the codec floor.
Peak RSS of the oocarray side, in a fresh process under the same budget: <= budget + 128 MiB.
Every side's mean and std are checked against a float64 reference.
"""

from __future__ import annotations

import concurrent.futures
import os
from collections.abc import Callable

import numpy as np

import oocarray as oc
from benchmarks import _compute_data as cd
from benchmarks._harness import Peer, Sides, scratch, zarr_pipeline
from benchmarks._timing import (
    Result,
    Row,
    TextRow,
    clock,
    format_bytes,
    format_mib,
)
from datasets import w5_data

MiB = 1 << 20
GiB = 1 << 30
FULL_BYTES = 4 * GiB
QUICK_BYTES = 64 * MiB
BUDGET = GiB
QUICK_BUDGET = 256 * MiB
DASK_TARGET = 1 / 1.5
FLOOR_TARGET = 1.15
RSS_SLACK = 128 * MiB
LOOP_ROWS = 4 * cd.CHUNK_ROWS  # peers' chunk loops: 16 MiB blocks
FLOOR_ROWS = 16 * cd.CHUNK_ROWS  # native floor: 64 MiB blocks


class Moments:
    """float64 sums and sums of squares per column, block by block (the peers' loops)."""

    def __init__(self) -> None:
        self.n = 0
        self.total = np.zeros(w5_data.COLUMNS)
        self.total2 = np.zeros(w5_data.COLUMNS)

    def add(self, block: np.ndarray) -> None:
        wide = block.astype(np.float64)
        self.n += len(block)
        self.total += wide.sum(axis=0)
        self.total2 += np.square(wide, out=wide).sum(axis=0)

    def result(self) -> tuple[np.ndarray, np.ndarray]:
        mean = self.total / self.n
        return mean, np.sqrt(np.maximum(self.total2 / self.n - mean * mean, 0.0))


Check = Callable[[], tuple[np.ndarray, np.ndarray] | None]


def oocarray_side(path: str, budget: int) -> Callable[[], tuple[float, object]]:
    x = oc.open(path)

    def side() -> tuple[float, object]:
        with oc.Manager(max_bytes=budget):
            start = clock()
            got = oc.compute(
                x.mean(axis=0, compute=False), x.std(axis=0, compute=False), progress=False
            )
            return clock() - start, got

    return side


def dask_side(path: str, zarrs: bool = False) -> Callable[[], tuple[float, object]]:
    import dask
    import dask.array as da

    pipeline = zarr_pipeline(zarrs)

    def side() -> tuple[float, object]:
        with pipeline():
            start = clock()
            y = da.from_zarr(path)
            got = dask.compute(y.mean(axis=0), y.std(axis=0), scheduler="threads")
            return clock() - start, got

    return side


def _loop(read: Callable[[int, int], np.ndarray], n_rows: int) -> tuple[np.ndarray, np.ndarray]:
    acc = Moments()
    for a in range(0, n_rows, LOOP_ROWS):
        acc.add(read(a, min(a + LOOP_ROWS, n_rows)))
    return acc.result()


def zarr_side(path: str, n_rows: int, zarrs: bool = False) -> Callable[[], tuple[float, object]]:
    import zarr

    pipeline = zarr_pipeline(zarrs)

    def side() -> tuple[float, object]:
        with pipeline():
            start = clock()
            z = zarr.open_array(path, mode="r")
            got = _loop(lambda a, b: z[a:b], n_rows)
            return clock() - start, got

    return side


def tensorstore_side(path: str, n_rows: int) -> Callable[[], tuple[float, object]]:
    import tensorstore as ts

    spec = {"driver": "zarr3", "kvstore": {"driver": "file", "path": path}}

    def side() -> tuple[float, object]:
        start = clock()
        t = ts.open(spec, read=True).result()
        got = _loop(lambda a, b: t[a:b].read().result(), n_rows)
        return clock() - start, got

    return side


def memmap_side(path: str, n_rows: int) -> Callable[[], tuple[float, object]]:
    def side() -> tuple[float, object]:
        start = clock()
        mm = np.load(path, mmap_mode="r")
        got = _loop(lambda a, b: mm[a:b], n_rows)
        return clock() - start, got

    return side


def native_floor_side(path: str, n_rows: int) -> Callable[[], tuple[float, object]]:
    x = oc.open(path)
    store = x._store  # the native chunk reader: chunk jobs decoded on every core
    out = np.empty((FLOOR_ROWS, w5_data.COLUMNS), dtype=np.float32)
    out.fill(0)

    def side() -> tuple[float, object]:
        start = clock()
        for a in range(0, n_rows, FLOOR_ROWS):
            view = out[: min(FLOOR_ROWS, n_rows - a)]
            if not store.read_rows_into(a, view):
                raise RuntimeError("W5: the native reader cannot read rows in place here")
        return clock() - start, None

    return side


def numcodecs_floor_side(path: str, n_rows: int) -> Callable[[], tuple[float, object]]:
    import google_crc32c
    import numcodecs

    codec = numcodecs.Zstd()
    # oocarray's chains end with zarr's crc32c codec: checked and taken off, as every reader does
    crc32c = oc.open(path)._store._layout.crc32c
    chunks = n_rows // cd.CHUNK_ROWS
    per_block = FLOOR_ROWS // cd.CHUNK_ROWS
    out = np.zeros((per_block, cd.CHUNK_ROWS, w5_data.COLUMNS), dtype=np.float32)
    workers = len(os.sched_getaffinity(0))
    pool = concurrent.futures.ThreadPoolExecutor(workers, "w5-numcodecs")

    def decode(c: int, dest: np.ndarray) -> None:
        fd = os.open(os.path.join(path, "c", str(c), "0"), os.O_RDONLY)
        try:
            data = os.read(fd, os.fstat(fd).st_size)
        finally:
            os.close(fd)
        if crc32c:
            if google_crc32c.value(data[:-4]) != int.from_bytes(data[-4:], "little"):
                raise ValueError(f"chunk {c}: its CRC-32C does not match")
            data = data[:-4]
        codec.decode(data, out=dest)

    def side() -> tuple[float, object]:
        start = clock()
        for first in range(0, chunks, per_block):
            jobs = [
                pool.submit(decode, c, out[c - first])
                for c in range(first, min(first + per_block, chunks))
            ]
            for job in jobs:
                job.result()
        return clock() - start, None

    side.pool = pool  # type: ignore[attr-defined]
    return side


def peak_rss(path: str, budget: int) -> cd.Peak:
    code = f"""
import numpy as np, oocarray as oc
from benchmarks import _compute_data as cd
x = oc.open({path!r})
print("BASE " + cd.status_json(), flush=True)
with oc.Manager(max_bytes={budget}):
    m, s = oc.compute(x.mean(axis=0, compute=False), x.std(axis=0, compute=False), progress=False)
print("END " + cd.status_json(), flush=True)
"""
    return cd.run_child(code)


def run(quick: bool = False, cold: bool = False) -> Result:
    with scratch("oocarray-w5-") as directory:
        return _run_in(directory, quick, cold)


def _peers(data: cd.Data, budget: int) -> dict[str, Peer]:
    assert data.npy_path is not None
    npy_path = data.npy_path
    return {
        "oocarray": Peer("oocarray", lambda: oocarray_side(data.zarr_path, budget)),
        "dask": Peer(f"dask {cd.version('dask')} threads", lambda: dask_side(data.zarr_path)),
        "zarr": Peer(
            f"zarr-python {cd.version('zarr')} chunk loop",
            lambda: zarr_side(data.zarr_path, data.n_rows),
        ),
        "zarr+zarrs": Peer(
            f"zarr-python chunk loop, zarrs {cd.version('zarrs')} pipeline",
            lambda: zarr_side(data.zarr_path, data.n_rows, zarrs=True),
        ),
        "dask+zarrs": Peer(
            f"dask threads over zarrs {cd.version('zarrs')}",
            lambda: dask_side(data.zarr_path, zarrs=True),
        ),
        "tensorstore": Peer(
            f"tensorstore {cd.version('tensorstore')} chunk loop",
            lambda: tensorstore_side(data.zarr_path, data.n_rows),
        ),
        "memmap": Peer(
            "numpy.memmap (.npy) chunk loop", lambda: memmap_side(npy_path, data.n_rows)
        ),
        "floor-native": Peer(
            "codec floor: oocarray native reader, no compute",
            lambda: native_floor_side(data.zarr_path, data.n_rows),
        ),
        "floor-numcodecs": Peer(
            "codec floor: numcodecs Zstd thread pool, no compute",
            lambda: numcodecs_floor_side(data.zarr_path, data.n_rows),
        ),
    }


def _run_in(directory: str, quick: bool, cold: bool = False) -> Result:
    nbytes = QUICK_BYTES if quick else FULL_BYTES
    budget = QUICK_BUDGET if quick else BUDGET
    if not cd.enough_disk(directory, 2 * nbytes + GiB):
        raise SystemExit(f"W5 needs {format_bytes(2 * nbytes + GiB)} free in {directory}")
    data, made_s = cd.make_data(directory, nbytes)
    assert data.npy_path is not None
    stored = cd.dir_bytes(data.zarr_path)
    reference = w5_data.expected_moments(data.n_rows)
    files = (data.zarr_path, data.npy_path)
    for p in files:
        cd.warm(p)
    sides = Sides.discover("W5", _peers(data, budget))
    notes = sides.notes()

    def verify(name: str, got: object) -> None:
        if got is not None:
            cd.moments_close((got[0], got[1]), reference, f"W5 {name}")  # type: ignore[index]

    sides.check(verify)  # one untimed round (it also warms imports and pools)
    timings = sides.time(rounds=3, files=files, cold=cold)
    floor_name = min(
        ("floor-native", "floor-numcodecs"),
        key=lambda n: timings.median(n) if n in timings.times else float("inf"),
    )
    peak = peak_rss(data.zarr_path, budget)

    gib = data.nbytes / GiB
    what = (
        f"mean+std axis 0, ({data.n_rows:,}, 64) f32 zarr zstd, {gib:.3g} GiB "
        f"({stored / data.nbytes:.2f} stored), `Manager(max_bytes={format_bytes(budget)})`, "
        f"{timings.cache}"
    )
    rows: list[Row | TextRow] = [
        timings.row(what, "oocarray", "dask", DASK_TARGET, label="vs dask (>= 1.5x faster)"),
        timings.row(what, "oocarray", floor_name, FLOOR_TARGET, label="vs the codec floor"),
        timings.row(what, "oocarray", "zarr", None, label="vs zarr-python chunk loop"),
        timings.row(
            what, "oocarray", "dask+zarrs", DASK_TARGET, label="vs dask over the zarrs pipeline"
        ),
        timings.row(
            what, "oocarray", "zarr+zarrs", None, label="vs zarr-python chunk loop with zarrs"
        ),
        timings.row(what, "oocarray", "tensorstore", None, label="vs tensorstore chunk loop"),
        timings.row(
            what,
            "oocarray",
            "memmap",
            None,
            label="vs numpy.memmap of the raw .npy (uncompressed floor)",
        ),
    ]
    limit = budget + RSS_SLACK
    rows.append(
        TextRow(
            "W5",
            f"peak RSS of the oocarray side in a fresh process, {what}",
            f"VmHWM {format_mib(peak.vmhwm)} (before the pass {format_mib(peak.baseline_rss)}); "
            f"sampled anon+file+shmem {format_mib(peak.sampled_anon_file)}",
            "—",
            "—",
            f"<= {format_mib(limit)}",
            "yes" if max(peak.vmhwm, peak.sampled_anon_file) <= limit else "**no**",
        )
    )
    detail = timings.by_side(
        f"W5 time by side after one checked round; {gib:.3g} GiB; GB/s of uncompressed data",
        data.nbytes,
    )
    notes.append(
        f"W5: data written untimed in {made_s:.0f} s; zarr {format_mib(stored)} on disk; "
        + (
            "the files are evicted from the page cache before every side's run (cold)"
            if cold
            else "all files read once before timing (warm page cache)"
        )
        + f". Codec floor = {floor_name} (faster of the two). "
        f"Peak RSS child took {peak.seconds:.1f} s."
    )
    for run_side in sides.runs.values():
        pool = getattr(run_side, "pool", None)
        if pool is not None:
            pool.shutdown()
    return Result(rows, [detail], notes)
