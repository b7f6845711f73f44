"""xarray operations on the oocarray chunk manager against xarray with dask (issue 25).

A 730 x 90 x 180 float32 cube (47 MB; ``--quick``: 146 x 45 x 90) in zstd zarr, chunks of 73
days, written once, untimed.  Operations, each then computed with ``.values``:

- ``xr.apply_ufunc`` norm over lon (a core dimension), then ``mean``;
- an element-wise ``xr.apply_ufunc``, then ``mean``;
- ``weighted(cos(lat)).mean(("lat", "lon"))``;
- ``rolling(time=7).mean()``, ``.std()``, ``.max()`` and
  ``rolling(time=7, center=True, min_periods=3).sum()``.

Sides, each operation of each round in a fresh process (imports and opening untimed), rounds
interleaved: **oocarray** opens with ``engine="oocarray", chunked_array_type="oocarray"``
inside ``oc.Manager(max_bytes="32M")``; **dask** with ``xr.open_zarr``, threaded scheduler.
Peak RSS is the child's ``VmHWM``; the oocarray side also reports its manager's peak.  The
first round's results of the two sides are checked equal (allclose).

Target: oocarray at least as fast as dask (ratio <= 1.0), peak RSS <= dask's, manager peak
<= budget.

Run: ``PYTHONPATH=. python -m benchmarks.xarray_operations [--quick]``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
from dataclasses import dataclass, field

import numpy as np

from benchmarks._compute_data import run_child
from benchmarks._timing import Ratio, Result, Row, Table, format_mib, format_seconds

BUDGET = "32M"
SHAPE = (730, 90, 180)
QUICK_SHAPE = (146, 45, 90)
CHUNK_DAYS = 73
ROUNDS = 3
QUICK_ROUNDS = 2
SIDES = ("oocarray", "dask")

OPERATIONS = {
    "norm over lon, mean": (
        'xr.apply_ufunc(np.linalg.norm, ds.t2m, input_core_dims=[["lon"]], '
        'kwargs={"axis": -1}, dask="parallelized", output_dtypes=[np.float32]).mean("lat")'
    ),
    "element-wise apply_ufunc, mean": (
        'xr.apply_ufunc(np.sqrt, ds.t2m, dask="parallelized", output_dtypes=[np.float32])'
        '.mean("time")'
    ),
    "weighted mean": 'ds.t2m.weighted(np.cos(np.deg2rad(ds.lat))).mean(("lat", "lon"))',
    "rolling(time=7).mean()": "ds.t2m.rolling(time=7).mean()",
    "rolling(time=7).std()": "ds.t2m.rolling(time=7).std()",
    "rolling(time=7).max()": "ds.t2m.rolling(time=7).max()",
    "rolling(time=7, center, min_periods=3).sum()": (
        "ds.t2m.rolling(time=7, center=True, min_periods=3).sum()"
    ),
}

_OPEN = {
    "oocarray": """
import oocarray as oc
manager = oc.Manager("xarray-operations", max_bytes={budget!r})
manager.__enter__()
ds = xr.open_dataset({path!r}, engine="oocarray", chunks={{}}, chunked_array_type="oocarray")
""",
    "dask": """
import dask
dask.config.set(scheduler="threads")
ds = xr.open_zarr({path!r})
""",
}

_WORK = """
import json, time, warnings
import numpy as np
import xarray as xr
from benchmarks._compute_data import status_json
warnings.simplefilter("ignore")
{open}
print("BASE " + status_json(), flush=True)
start = time.perf_counter()
values = ({operation}).values
seconds = time.perf_counter() - start
print("END " + status_json(), flush=True)
manager_peak = manager.stats().peak_bytes if "manager" in globals() else None
print("SECONDS " + json.dumps([seconds, manager_peak]), flush=True)
if {out!r}:
    np.save({out!r}, values)
"""


def write_cube(path: str, shape: tuple[int, ...]) -> None:
    """The benchmark's cube: normal float32 values with NaN rows, zstd zarr, 73-day chunks."""
    import pandas as pd
    import xarray as xr
    import zarr

    t2m = np.random.default_rng(0).normal(280, 10, shape).astype(np.float32)
    t2m[::17, 3, :] = np.nan
    ds = xr.Dataset(
        {"t2m": (("time", "lat", "lon"), t2m)},
        coords={
            "time": pd.date_range("2001-01-01", periods=shape[0], freq="D"),
            "lat": np.linspace(-89.0, 89.0, shape[1]),
            "lon": np.arange(shape[2]) * (360.0 / shape[2]),
        },
    )
    encoding = {"t2m": {"compressors": [zarr.codecs.ZstdCodec()]}}
    ds.chunk(time=CHUNK_DAYS).to_zarr(
        path, mode="w", zarr_format=3, encoding=encoding, consolidated=False
    )


@dataclass
class Runs:
    """One side's rounds of one operation."""

    seconds: list[float] = field(default_factory=list)
    peak_rss: list[int] = field(default_factory=list)
    manager_peak: list[int] = field(default_factory=list)


def run_once(side: str, operation: str, path: str, out: str) -> tuple[float, int, int | None]:
    """One round of ``operation`` on ``side`` in a fresh process: seconds, peak RSS and the
    manager's peak bytes (oocarray)."""
    code = _WORK.format(
        open=_OPEN[side].format(path=path, budget=BUDGET), operation=operation, out=out
    )
    lines: list[str] = []
    peak = run_child(code, lines_out=lines)
    found = next(line for line in lines if line.startswith("SECONDS "))
    seconds, manager_peak = json.loads(found[len("SECONDS ") :])
    return float(seconds), peak.vmhwm, manager_peak


def run(quick: bool) -> Result:
    rounds = QUICK_ROUNDS if quick else ROUNDS
    directory = tempfile.mkdtemp(prefix="xarray-operations-")
    try:
        path = os.path.join(directory, "cube.zarr")
        write_cube(path, QUICK_SHAPE if quick else SHAPE)
        runs = {(op, side): Runs() for op in OPERATIONS for side in SIDES}
        for r in range(rounds):
            for op, code in OPERATIONS.items():
                order = SIDES if (r + list(OPERATIONS).index(op)) % 2 == 0 else SIDES[::-1]
                for side in order:
                    out = os.path.join(directory, f"{side}.npy") if r == 0 else ""
                    seconds, rss, manager_peak = run_once(side, code, path, out)
                    runs[op, side].seconds.append(seconds)
                    runs[op, side].peak_rss.append(rss)
                    if manager_peak is not None:
                        runs[op, side].manager_peak.append(manager_peak)
                if r == 0:
                    ours, theirs = (np.load(os.path.join(directory, f"{s}.npy")) for s in SIDES)
                    if not np.allclose(ours, theirs, rtol=1e-4, atol=1e-3, equal_nan=True):
                        raise RuntimeError(f"{op}: oocarray's result differs from dask's")
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    return _result(runs, rounds, quick)


def _result(runs: dict[tuple[str, str], Runs], rounds: int, quick: bool) -> Result:
    rows, detail = [], []
    for op in OPERATIONS:
        ours, theirs = runs[op, "oocarray"], runs[op, "dask"]
        rows.append(
            Row(
                "xr-ops",
                op,
                statistics.median(ours.seconds),
                "dask",
                statistics.median(theirs.seconds),
                Ratio.paired(ours.seconds, theirs.seconds),
                1.0,
            )
        )
        detail.append(
            [
                op,
                format_seconds(statistics.median(ours.seconds)),
                format_mib(int(statistics.median(ours.peak_rss))),
                format_mib(max(ours.manager_peak)),
                format_seconds(statistics.median(theirs.seconds)),
                format_mib(int(statistics.median(theirs.peak_rss))),
            ]
        )
    headers = (
        "operation",
        "oocarray time",
        "oocarray peak RSS",
        f"manager peak (budget {BUDGET})",
        "dask time",
        "dask peak RSS",
    )
    shape = " x ".join(str(n) for n in (QUICK_SHAPE if quick else SHAPE))
    notes = [
        f"{shape} float32 zstd zarr, chunks of {CHUNK_DAYS} days; medians of {rounds} "
        "interleaved rounds, each operation and side in a fresh process"
    ]
    return Result(rows, [Table("xarray operations (medians)", headers, detail)], notes)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "xarray operations").splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    print(run(parser.parse_args().quick).render())


if __name__ == "__main__":
    main()
