"""W11: a chunk-backed ndarray (``x.as_ndarray()``) of W5's zstd store, then plain NumPy on it.

Data: W5's noisy (N, 64) float32 array (``benchmarks._compute_data``), written by oocarray as
zstd zarr in (16384, 64) chunks (4 MiB) and as a raw .npy; the page cache is warm (every file
read once) so that decoding, not the disk, is measured.

Sides of the full scan (``mean`` over axis 0), interleaved rounds:

- ``paged``: ``x.as_ndarray().mean(axis=0)`` in ``Manager(max_bytes=budget)``, each round on
  a fresh ``as_ndarray()``, so every chunk is faulted in (and, past the budget, dropped);
- ``stream``: W5's streaming reduction, ``x.mean(axis=0)`` in the same manager;
- ``dask``: ``da.from_zarr(path).mean(axis=0)`` on the threaded scheduler;
- ``memmap``: ``np.load(npy, mmap_mode="r").mean(axis=0)``: the same NumPy call on the raw
  bytes (the uncompressed floor of "plain NumPy over a file").

Random rows: 2000 sorted random row indices, ``x.as_ndarray()[rows]`` (fresh, cold) vs
``x[rows]`` (oocarray's chunked read).  Resident memory: the paged scan in a fresh process
under the budget, peak RSS (anon + file + shmem) sampled by the parent.

Targets (PERFORMANCE.md): full scan >= 0.8x the streaming reduction's speed and >= 1.5x
dask's; random rows <= 1.5x ``x[rows]``; resident memory <= budget + 64 MiB.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any

import numpy as np

import oocarray as oc
from benchmarks import _compute_data as cd
from benchmarks._harness import Peer, Sides, evict_page_cache, scratch, zarr_pipeline
from benchmarks._timing import (
    Ratio,
    Result,
    Row,
    TextRow,
    clock,
    format_bytes,
    format_mib,
    interleave,
)
from oocarray._storage._paged._arrays import paging_available

MiB = 1 << 20
GiB = 1 << 30
FULL_BYTES = GiB
QUICK_BYTES = 64 * MiB
BUDGET = 256 * MiB
QUICK_BUDGET = 32 * MiB
RSS_SLACK = 64 * MiB
STREAM_TARGET = 1 / 0.8  # paged time <= 1.25x the streaming reduction's
DASK_TARGET = 1 / 1.5
ROWS_TARGET = 1.5
N_ROWS_PICKED = 2000


def run(quick: bool = False, cold: bool = False) -> Result:
    with scratch("oocarray-w11-") as directory:
        return _run_in(directory, quick, cold)


def _peers(data: cd.Data, budget: int) -> dict[str, Peer]:
    x = oc.open(data.zarr_path)

    def paged() -> tuple[float, np.ndarray]:
        with oc.Manager("w11-paged", max_bytes=budget):
            start = clock()
            a = x.as_ndarray()
            got = a.mean(axis=0)
            seconds = clock() - start
            del a
        return seconds, got

    def stream() -> tuple[float, np.ndarray]:
        with oc.Manager("w11-stream", max_bytes=budget):
            start = clock()
            got = np.asarray(x.mean(axis=0))
            return clock() - start, got

    def memmap() -> tuple[float, np.ndarray]:
        assert data.npy_path is not None
        start = clock()
        got = np.load(data.npy_path, mmap_mode="r").mean(axis=0)
        return clock() - start, got

    def dask_side() -> Callable[[], tuple[float, np.ndarray]]:
        import dask.array as da

        def side() -> tuple[float, np.ndarray]:
            start = clock()
            got = da.from_zarr(data.zarr_path).mean(axis=0).compute(scheduler="threads")
            return clock() - start, np.asarray(got)

        return side

    def dask_zarrs_side() -> Callable[[], tuple[float, np.ndarray]]:
        plain = dask_side()
        pipeline = zarr_pipeline(zarrs=True)

        def side() -> tuple[float, np.ndarray]:
            with pipeline():
                return plain()

        return side

    return {
        "paged": Peer("`x.as_ndarray().mean(axis=0)`", lambda: paged),
        "stream": Peer("oocarray streaming reduction", lambda: stream),
        "memmap": Peer("numpy.memmap", lambda: memmap),
        "dask": Peer(f"dask {cd.version('dask')} threads", dask_side),
        "dask+zarrs": Peer(f"dask threads over zarrs {cd.version('zarrs')}", dask_zarrs_side),
    }


def peak_rss(path: str, budget: int) -> cd.Peak:
    code = f"""
import numpy as np, oocarray as oc
from benchmarks import _compute_data as cd
x = oc.open({path!r})
print("BASE " + cd.status_json(), flush=True)
with oc.Manager(max_bytes={budget}):
    a = x.as_ndarray()
    m = a.mean(axis=0)
    del a
print("END " + cd.status_json(), flush=True)
"""
    return cd.run_child(code)


def _run_in(directory: str, quick: bool, cold: bool = False) -> Result:
    nbytes = QUICK_BYTES if quick else FULL_BYTES
    budget = QUICK_BUDGET if quick else BUDGET
    rounds = 1 if quick else 3
    ok, why = paging_available()
    if not ok:
        return Result(rows=[], tables=[], notes=[f"W11: skipped, {why}"])
    data, _ = cd.make_data(directory, nbytes)
    assert data.npy_path is not None
    stored = cd.dir_bytes(data.zarr_path)
    files = (data.zarr_path, data.npy_path)
    for p in files:
        cd.warm(p)
    sides = Sides.discover("W11", _peers(data, budget))
    notes = sides.notes()
    timings = sides.time(rounds, files=files, cold=cold)
    results: dict[str, Any] = sides.results
    # NumPy's float32 mean over axis 0 accumulates row by row in float32 (off by up to ~1e-2
    # relative over millions of rows): the paged scan must equal the same NumPy call on the raw
    # bytes exactly; the float64 reductions (streaming, dask) must agree with each other.
    if not np.array_equal(results["paged"], results["memmap"]):
        notes.append("W11: DATA MISMATCH: as_ndarray().mean(0) != the same mean on the raw .npy")
    for name in ("dask", "dask+zarrs"):
        if name in results and not np.allclose(results["stream"], results[name], rtol=1e-5):
            notes.append(f"W11: the streaming mean differs from {name}'s")

    x = oc.open(data.zarr_path)
    rows = np.sort(np.random.default_rng(0).integers(0, data.n_rows, N_ROWS_PICKED))
    picked: dict[str, np.ndarray] = {}

    def rows_paged() -> float:
        with oc.Manager("w11-rows", max_bytes=budget):
            start = clock()
            a = x.as_ndarray()
            picked["paged"] = np.array(a[rows])
            seconds = clock() - start
            del a
        return seconds

    def rows_chunked() -> float:
        start = clock()
        picked["x"] = x[rows]
        return clock() - start

    row_times = interleave(
        {"paged": rows_paged, "x": rows_chunked},
        rounds=max(rounds, 3),
        warmup=0,
        before_each=(lambda: evict_page_cache(files)) if cold else None,
    )
    if not np.array_equal(picked["paged"], picked["x"]):
        notes.append("W11: DATA MISMATCH between as_ndarray()[rows] and x[rows]")
    peak = peak_rss(data.zarr_path, budget)
    over_base = peak.sampled_anon_file - peak.baseline_rss

    gib = data.nbytes / GiB
    what = (
        f"`x.as_ndarray().mean(axis=0)`, ({data.n_rows:,}, 64) f32 zstd zarr, {gib:.3g} GiB "
        f"({stored / data.nbytes:.2f} stored), `Manager(max_bytes={format_bytes(budget)})`"
    )
    what = f"{what}, {timings.cache}"
    out_rows: list[Row | TextRow] = [
        timings.row(
            what, "paged", "stream", STREAM_TARGET, label="vs W5's streaming `x.mean(axis=0)`"
        ),
        timings.row(what, "paged", "dask", DASK_TARGET, label="vs dask (>= 1.5x faster)"),
        timings.row(
            what, "paged", "dask+zarrs", DASK_TARGET, label="vs dask over the zarrs pipeline"
        ),
        timings.row(
            what,
            "paged",
            "memmap",
            None,
            label="vs `np.load(npy, mmap_mode='r').mean(axis=0)` (raw, uncompressed)",
        ),
    ]
    out_rows += [
        Row(
            "W11",
            f"{N_ROWS_PICKED} sorted random rows, a fresh `x.as_ndarray()[rows]`, {timings.cache}",
            statistics.median(row_times["paged"]),
            "`x[rows]`",
            statistics.median(row_times["x"]),
            Ratio.paired(row_times["paged"], row_times["x"]),
            ROWS_TARGET,
        ),
        TextRow(
            "W11",
            f"resident memory of the paged scan, budget {format_bytes(budget)} (fresh process)",
            f"{format_mib(over_base)} over the baseline",
            "—",
            "—",
            f"<= budget + {format_bytes(RSS_SLACK)}",
            "yes" if over_base <= budget + RSS_SLACK else "**no**",
        ),
    ]
    detail = timings.by_side(
        f"Chunk-backed ndarray (W11): {gib:.3g} GiB, medians; GB/s of uncompressed data",
        data.nbytes,
    )
    return Result(rows=out_rows, tables=[detail], notes=notes)


if __name__ == "__main__":
    import sys

    from benchmarks._timing import ROW_HEADERS, markdown_table

    result = run("--quick" in sys.argv)
    print(markdown_table(ROW_HEADERS, [r.cells() for r in result.rows]))
    for table in result.tables:
        print(table.render())
    for note in result.notes:
        print(note)
