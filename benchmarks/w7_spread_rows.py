"""W7r: ``x[rows]`` with an index array spread over every chunk of a zstd zarr array.

W5's (N, 64) float32 zstd array (1 GiB, chunks of 16384 rows = 4 MiB; ``--quick``: 64 MiB) and
2,000 sorted random row indices, so nearly every chunk is decoded for a few rows.  Sides, in
interleaved rounds from a warm page cache (``cold``: each side's files evicted first):

- **oocarray**: ``x[rows]``;
- **tensorstore**: ``ts.open(zarr3)[rows].read().result()`` (no chunk cache);
- **zarr-python**: ``z.get_orthogonal_selection(rows)``, with its default codec pipeline and
  with the zarrs (Rust) pipeline.

Target (issue 27: "ahead of every peer"): oocarray's time <= 1.0x each peer's.  Every
side's rows are checked against the raw ``.npy``.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

import oocarray as oc
from benchmarks import _compute_data as cd
from benchmarks._harness import Peer, Sides, scratch, zarr_pipeline
from benchmarks._timing import Result, Row, clock, format_bytes

MiB = 1 << 20
GiB = 1 << 30
FULL_BYTES = GiB
QUICK_BYTES = 64 * MiB
PICKED = 2000
TARGET = 1.0

Run = Callable[[], tuple[float, object]]


def oocarray_side(path: str, rows: np.ndarray) -> Run:
    x = oc.open(path)

    def side() -> tuple[float, object]:
        start = clock()
        got = x[rows]
        return clock() - start, got

    return side


def tensorstore_side(path: str, rows: np.ndarray) -> Run:
    import tensorstore as ts

    t = ts.open({"driver": "zarr3", "kvstore": {"driver": "file", "path": path}}).result()

    def side() -> tuple[float, object]:
        start = clock()
        got = t[rows].read().result()
        return clock() - start, got

    return side


def zarr_side(path: str, rows: np.ndarray, zarrs: bool) -> Run:
    import zarr

    pipeline = zarr_pipeline(zarrs)

    def side() -> tuple[float, object]:
        with pipeline():
            start = clock()
            got = zarr.open_array(path, mode="r").get_orthogonal_selection(rows)
            return clock() - start, got

    return side


def run(quick: bool = False, cold: bool = False) -> Result:
    with scratch("oocarray-w7r-") as directory:
        data, _ = cd.make_data(directory, QUICK_BYTES if quick else FULL_BYTES)
        assert data.npy_path is not None
        rows = np.sort(np.random.default_rng(7).choice(data.n_rows, PICKED, replace=False))
        expected = np.load(data.npy_path, mmap_mode="r")[rows]
        path = data.zarr_path
        sides = Sides.discover(
            "W7r",
            {
                "oocarray": Peer("oocarray `x[rows]`", lambda: oocarray_side(path, rows)),
                "tensorstore": Peer(
                    f"tensorstore {cd.version('tensorstore')}",
                    lambda: tensorstore_side(path, rows),
                ),
                "zarr": Peer(
                    f"zarr-python {cd.version('zarr')}", lambda: zarr_side(path, rows, False)
                ),
                "zarr+zarrs": Peer(
                    f"zarr-python, zarrs {cd.version('zarrs')} pipeline",
                    lambda: zarr_side(path, rows, True),
                ),
            },
        )

        def verify(name: str, got: object) -> None:
            if not np.array_equal(np.asarray(got), expected):
                raise RuntimeError(f"W7r {name}: the rows differ from the raw .npy's")

        cd.warm(path)
        sides.check(verify)
        timings = sides.time(rounds=3 if quick else 7, files=(path,), cold=cold)
        what = (
            f"`x[rows]`, {PICKED:,} sorted random rows over every chunk of a "
            f"({data.n_rows:,}, 64) f32 zstd zarr, {format_bytes(data.nbytes)}, {timings.cache}"
        )
        rows_out: list[Row] = [
            timings.row(what, "oocarray", peer, TARGET)
            for peer in ("tensorstore", "zarr", "zarr+zarrs")
        ]
        table = timings.by_side(f"W7r time by side, {what}", data.nbytes)
        return Result(rows_out, [table], sides.notes())
