"""W14: xarray on a daily (time, lat, lon) float32 cube in zstd zarr (4 GiB in the issue;
``--quick`` or ``--size 64M``: a smoke run).

The cube (``datasets/w14_data.py``: CF time, lat, lon; chunks of 30 days by 360 x 720 / 64 x
128 tiles of about 2 MiB) is written once, untimed, and reused.  Two workloads, one after the
other in the same process:

- **(a) climatology**: ``ds.t2m.groupby("time.month").mean()``, computed;
- **(b) anomaly**: ``(ds.t2m.groupby("time.month") - clim).to_zarr(out)`` with (a)'s result.

The grouped subtraction chunks ``clim`` (NumPy) with xarray's default chunk manager, so the
oocarray and Cubed sides set ``xr.set_options(chunk_manager=...)`` to their own, as a user
switching from dask would.

Sides, each in a fresh process (imports and opening untimed), rounds interleaved:

- **oocarray**: ``xr.open_dataset(path, engine="oocarray", chunks={},
  chunked_array_type="oocarray")`` inside ``oc.Manager(max_bytes="512M")``;
- **dask**: ``xr.open_zarr(path)``, threaded scheduler;
- **cubed**: ``xr.open_zarr(path, chunks={}, chunked_array_type="cubed")`` with one spec
  for every array set through ``cubed.config`` (work_dir in a temporary directory,
  ``allowed_mem`` 2 GB, the single-machine threads executor): a spec given to ``open_zarr``
  alone would not reach the climatology xarray chunks for the grouped subtraction, and Cubed
  refuses arrays of different specs.

A peer slower than ``SLOW_PEER`` times the fastest peer cannot be the one the target compares
to: its run is stopped there (Cubed's at 4 GiB would take most of an hour), reported as not
finished, and a peer that ran past that in the first round is not run again.

Each side's climatology and a sample of its anomaly store are checked equal (allclose) to the
first side that succeeded.  Peak RSS is the process's ``ru_maxrss``.  A side that fails
(an operation its chunk manager does not support) is reported as failed with its error; it
does not stop the others.

Targets: oocarray >= 1.5x faster than the faster peer (ratio <= 0.67) on each workload, and
its peak RSS <= budget + 128 MiB.

Run: ``PYTHONPATH=. python -m benchmarks.w14_xarray --size 64M`` (or ``python -m benchmarks
--only W14 --quick``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import tempfile
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

import oocarray as oc
from benchmarks._harness import fresh_python
from benchmarks._timing import Ratio, Result, Row, Table, TextRow, format_mib, format_seconds

FULL_SIZE = "4G"
QUICK_SIZE = "64M"
BUDGET = "512M"
RSS_SLACK = 128 << 20
PEER_TARGET = 1 / 1.5
ROUNDS = 3
QUICK_ROUNDS = 2
SIDES = ("oocarray", "dask", "cubed")
# A peer's run (both workloads) longer than this many times the fastest peer's is stopped.
SLOW_PEER = 2.0

_OPEN = {
    "oocarray": """
import oocarray as oc
manager = oc.Manager("w14", max_bytes={budget!r})
manager.__enter__()
xr.set_options(chunk_manager="oocarray")
ds = xr.open_dataset({path!r}, engine="oocarray", chunks={{}}, chunked_array_type="oocarray")
""",
    "dask": """
import dask
dask.config.set(scheduler="threads")
ds = xr.open_zarr({path!r})
""",
    "cubed": """
import cubed
# One spec for every array (the climatology xarray chunks for the grouped subtraction too):
# Cubed refuses to combine arrays of different specs.
cubed.config.set({{"spec": {{"work_dir": {work!r}, "allowed_mem": "2GB",
                            "executor_name": "threads"}}}})
xr.set_options(chunk_manager="cubed")
ds = xr.open_zarr({path!r}, chunks={{}}, chunked_array_type="cubed")
""",
}

_WORK = """
import json, resource, time
import numpy as np
import xarray as xr
{open}
start = time.perf_counter()
clim = ds.t2m.groupby("time.month").mean().compute()
climatology_s = time.perf_counter() - start
np.save({clim_out!r}, np.asarray(clim.values))
start = time.perf_counter()
anomaly = ds.t2m.groupby("time.month") - clim
anomaly.to_dataset(name="t2m").to_zarr({anomaly_out!r}, mode="w", consolidated=False)
anomaly_s = time.perf_counter() - start
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print("RESULT " + json.dumps([climatology_s, anomaly_s, rss]))
"""


@dataclass(slots=True)
class SideRuns:
    """What one side measured over the rounds, or the error that stopped it."""

    climatology: list[float] = field(default_factory=list)
    anomaly: list[float] = field(default_factory=list)
    peak_rss: int = 0
    error: str | None = None


def _bytes(size: str) -> int:
    nbytes = oc.parse_size(size)
    assert nbytes is not None
    return nbytes


def run_side(
    side: str, path: str, directory: str, budget: str, limit: float | None = None
) -> tuple[float, float, int]:
    """One round of ``side`` in a fresh process: the two workloads' seconds and peak RSS;
    a RuntimeError when it fails or runs past ``limit`` seconds (then it is stopped)."""
    work = tempfile.mkdtemp(prefix=f"cubed-{side}-", dir=directory)
    code = _WORK.format(
        open=_OPEN[side].format(path=path, budget=budget, work=work),
        clim_out=os.path.join(directory, f"clim-{side}.npy"),
        anomaly_out=os.path.join(directory, f"anomaly-{side}.zarr"),
    )
    try:
        done = fresh_python(code, limit)
    except subprocess.TimeoutExpired:
        raise RuntimeError(
            f"not finished in {format_seconds(limit or 0)} ({SLOW_PEER:g}x the fastest peer's "
            "run): stopped"
        ) from None
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if done.returncode != 0:
        last = done.stderr.strip().splitlines()[-1:] or ["(no message)"]
        raise RuntimeError(last[0])
    line = next(s for s in done.stdout.splitlines() if s.startswith("RESULT "))
    climatology_s, anomaly_s, rss = json.loads(line[7:])
    return float(climatology_s), float(anomaly_s), int(rss)


def check_equal(side: str, reference: str, directory: str) -> None:
    """``side``'s climatology and anomaly store equal ``reference``'s (float32 tolerance)."""
    import zarr

    ours = np.load(os.path.join(directory, f"clim-{side}.npy"))
    theirs = np.load(os.path.join(directory, f"clim-{reference}.npy"))
    np.testing.assert_allclose(ours, theirs, rtol=1e-5, err_msg=f"W14: {side}'s climatology")
    a = zarr.open_array(os.path.join(directory, f"anomaly-{side}.zarr"), path="t2m", mode="r")
    b = zarr.open_array(os.path.join(directory, f"anomaly-{reference}.zarr"), path="t2m", mode="r")
    if a.shape != b.shape:
        raise AssertionError(f"W14: {side}'s anomaly has shape {a.shape}, not {b.shape}")
    for days in (slice(0, 40), slice(a.shape[0] - 40, a.shape[0])):
        mine: NDArray[np.float32] = np.asarray(a[days])
        reference_days: NDArray[np.float32] = np.asarray(b[days])
        np.testing.assert_allclose(
            mine, reference_days, atol=1e-3, err_msg=f"W14: {side}'s anomaly"
        )


def run(quick: bool, size: str | None = None, rounds: int | None = None) -> Result:
    from datasets.w14_data import write_cube

    nbytes = _bytes(size or (QUICK_SIZE if quick else FULL_SIZE))
    rounds = rounds or (QUICK_ROUNDS if quick else ROUNDS)
    directory = tempfile.mkdtemp(prefix="w14-")
    runs = {side: SideRuns() for side in SIDES}
    try:
        path = os.path.join(directory, "cube.zarr")
        shape = write_cube(path, nbytes)
        for round_number in range(rounds):
            shift = round_number % len(SIDES)
            for side in SIDES[shift:] + SIDES[:shift]:
                limit = _peer_limit(side, runs)
                if runs[side].error is not None or (limit and _first(runs[side]) > limit):
                    continue
                try:
                    climatology_s, anomaly_s, rss = run_side(side, path, directory, BUDGET, limit)
                except RuntimeError as error:
                    runs[side].error = str(error)
                    continue
                runs[side].climatology.append(climatology_s)
                runs[side].anomaly.append(anomaly_s)
                runs[side].peak_rss = max(runs[side].peak_rss, rss)
        done = [side for side in SIDES if runs[side].error is None]
        for side in done[1:]:
            check_equal(side, done[0], directory)
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    return _result(runs, shape.nbytes, shape.days)


def _first(side: SideRuns) -> float:
    """A side's first run, both workloads (0 before it ran)."""
    return side.climatology[0] + side.anomaly[0] if side.climatology else 0.0


def _peer_limit(side: str, runs: dict[str, SideRuns]) -> float | None:
    """The seconds past which peer ``side`` cannot be the fastest peer: ``SLOW_PEER`` times the
    fastest other peer's first run; None for oocarray and before another peer ran."""
    others = [_first(r) for s, r in runs.items() if s not in ("oocarray", side) and _first(r)]
    return SLOW_PEER * min(others) if side != "oocarray" and others else None


def _result(runs: dict[str, SideRuns], nbytes: int, days: int) -> Result:
    cube = f"{format_mib(nbytes)} cube ({days} days)"
    rows: list[Row | TextRow] = []
    ours = runs["oocarray"]
    peers = [s for s in ("dask", "cubed") if runs[s].error is None]
    for key, workload, attribute in (
        ("W14a", f'groupby("time.month").mean() of a {cube}', "climatology"),
        ("W14b", f"(groupby - clim).to_zarr of the same {cube}", "anomaly"),
    ):
        if ours.error is not None or not peers:
            rows.append(TextRow(key, workload, ours.error or "ok", "—", "—", "<= 0.67x", "n/a"))
            continue
        mine = getattr(ours, attribute)
        best = min(peers, key=lambda s: statistics.median(getattr(runs[s], attribute)))
        theirs = getattr(runs[best], attribute)
        rows.append(
            Row(
                key,
                workload,
                statistics.median(mine),
                best,
                statistics.median(theirs),
                Ratio.paired(mine, theirs),
                PEER_TARGET,
            )
        )
    limit = _bytes(BUDGET) + RSS_SLACK
    if ours.error is None:
        rss_peer = ", ".join(
            f"{s} {format_mib(runs[s].peak_rss)}" for s in peers if runs[s].peak_rss
        )
        met = "yes" if ours.peak_rss <= limit else "**no**"
        rows.append(
            TextRow(
                "W14m",
                f"peak RSS of (a) + (b) under Manager(max_bytes={BUDGET!r})",
                format_mib(ours.peak_rss),
                rss_peer or "—",
                "—",
                f"<= {format_mib(limit)}",
                met,
            )
        )
    detail = []
    for side, measured in runs.items():
        if measured.error is not None:
            detail.append([side, "failed", measured.error[:200], "", ""])
            continue
        detail.append(
            [
                side,
                format_seconds(statistics.median(measured.climatology)),
                format_seconds(statistics.median(measured.anomaly)),
                format_mib(measured.peak_rss),
                " ".join(format_seconds(s) for s in measured.climatology + measured.anomaly),
            ]
        )
    headers = ("side", "(a) median", "(b) median", "peak RSS", "runs (a..., b...)")
    return Result(rows, [Table("W14 sides (each in a fresh process)", headers, detail)])


def main() -> None:

    parser = argparse.ArgumentParser(description=(__doc__ or "W14").splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--size", help=f"cube size, e.g. 64M (default {FULL_SIZE})")
    parser.add_argument("--rounds", type=int, help="rounds of every side (Cubed takes minutes)")
    arguments = parser.parse_args()
    print(run(arguments.quick, arguments.size, arguments.rounds).render())


if __name__ == "__main__":
    main()
