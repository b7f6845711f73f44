"""W16: distinct values and their counts, ``np.unique(x, return_counts=True)``, of N int64 ids
(10,000 distinct) in a zstd zarr array (500M ids in the issue; ``--quick``: 20M).

The array (chunks of 1M ids) is written once, untimed, by oocarray's own writer.  Each side runs
in a fresh process (imports and opening untimed, the file read once before), rounds
interleaved, the median reported:

- **oocarray**: ``np.unique(x, return_counts=True)`` inside ``oc.Manager(max_bytes=BUDGET)``
  (one streaming pass of per-block tables; integer blocks of a narrow span are counted with
  ``np.bincount``);
- **dask**: ``da.unique(da.from_zarr(path), return_counts=True)``, threads scheduler;
- **values only** (context, no target): ``np.unique(x)`` and ``da.unique(y)``; dask's counts
  go through structured arrays, its values alone do not;
- **numpy**: ``np.unique(a, return_counts=True)`` of the array already in RAM (loaded untimed;
  the full size does not fit in RAM and is skipped there).

Target: oocarray >= 1.5x faster than dask (ratio <= 0.67).  Every side's values and counts are
checked against the generator's.  A dask run longer than ``STOP_PEER_AFTER`` times oocarray's
(the same workload's median so far) is stopped and not run again: dask's counted unique of
500M ids takes about 1,500 s a run here, so three rounds would hold a registered run for over
an hour, while one stopped run already bounds the ratio (reported as "<").

Run: ``PYTHONPATH=. python -m benchmarks.w16_unique --quick`` (or ``python -m benchmarks
--only W16 --quick`` once registered there).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import statistics
import subprocess
import tempfile

import numpy as np

import oocarray as oc
from benchmarks._harness import fresh_python
from benchmarks._timing import Ratio, Result, Row, Table, TextRow, format_seconds

FULL_IDS = 500_000_000
QUICK_IDS = 20_000_000
DISTINCT = 10_000
CHUNK = 1 << 20
BUDGET = "1G"
QUICK_BUDGET = "256M"
NUMPY_LIMIT_IDS = 100_000_000  # numpy loads the whole array: only at sizes that fit
DASK_TARGET = 1 / 1.5
ROUNDS = 3
# A dask run is stopped after this many times oocarray's, and never before MIN_PEER_LIMIT_S.
STOP_PEER_AFTER = 20.0
MIN_PEER_LIMIT_S = 60.0


def _ids(start: int, stop: int) -> np.ndarray:
    """Ids start..stop, the same on every call: 10,000 distinct, spread over a wide range."""
    rng = np.random.default_rng(start)
    return (rng.integers(0, DISTINCT, stop - start) * 7919 + 12345).astype(np.int64)


def write_ids(path: str, n: int) -> tuple[np.ndarray, np.ndarray]:
    """The zarr array of ``n`` ids; its distinct values and counts, as the generator made them."""
    out = oc.create(path, (n,), "int64", chunks=(CHUNK,), codec="zstd")
    counts = np.zeros(DISTINCT, np.int64)
    block = 16 * CHUNK
    for start in range(0, n, block):
        ids = _ids(start, min(n, start + block))
        out[start : start + len(ids)] = ids
        counts += np.bincount((ids - 12345) // 7919, minlength=DISTINCT)
    present = np.flatnonzero(counts)
    return present * 7919 + 12345, counts[present]


_PRELUDE = """
import json, time, hashlib
import numpy as np
def digest(values, counts):
    values, counts = np.asarray(values[...]), np.asarray(counts[...])
    return hashlib.sha1(values.tobytes() + counts.astype(np.int64).tobytes()).hexdigest()
"""

_SIDES = {
    "oocarray": """
import oocarray as oc
x = oc.open({path!r})
np.unique(oc.open({path!r})[: 1 << 20], return_counts=True)
with oc.Manager(max_bytes={budget!r}):
    start = time.perf_counter()
    values, counts = np.unique(x, return_counts=True)
    seconds = time.perf_counter() - start
""",
    "dask": """
import dask, dask.array as da
y = da.from_zarr({path!r})
start = time.perf_counter()
values, counts = dask.compute(*da.unique(y, return_counts=True), scheduler="threads")
seconds = time.perf_counter() - start
""",
    "oocarray (values only)": """
import oocarray as oc
x = oc.open({path!r})
np.unique(oc.open({path!r})[: 1 << 20])
with oc.Manager(max_bytes={budget!r}):
    start = time.perf_counter()
    values = np.unique(x)
    seconds = time.perf_counter() - start
counts = np.zeros(0)
""",
    "dask (values only)": """
import dask, dask.array as da
y = da.from_zarr({path!r})
start = time.perf_counter()
values = da.unique(y).compute(scheduler="threads")
seconds = time.perf_counter() - start
counts = np.zeros(0)
""",
    "numpy": """
import oocarray as oc
a = oc.open({path!r})[...]
start = time.perf_counter()
values, counts = np.unique(a, return_counts=True)
seconds = time.perf_counter() - start
""",
}


def run_side(side: str, path: str, budget: str, limit: float | None = None) -> tuple[float, str]:
    """One timed call of ``side`` in a fresh process: seconds, and a digest of its answer;
    ``subprocess.TimeoutExpired`` (the process stopped) past ``limit`` seconds."""
    code = _PRELUDE + _SIDES[side].format(path=path, budget=budget)
    code += 'print("RESULT " + json.dumps([seconds, digest(values, counts)]))\n'
    done = fresh_python(code, limit)
    if done.returncode != 0:
        raise RuntimeError(f"{side} failed:\n{done.stderr[-3000:]}")
    line = next(s for s in done.stdout.splitlines() if s.startswith("RESULT "))
    seconds, digest = json.loads(line[7:])
    return float(seconds), str(digest)


def _warm(path: str) -> None:
    for root, _, files in os.walk(path):
        for name in files:
            with open(os.path.join(root, name), "rb") as f:
                while f.read(1 << 22):
                    pass


def run(quick: bool, rounds: int = ROUNDS) -> Result:
    n = QUICK_IDS if quick else FULL_IDS
    budget = QUICK_BUDGET if quick else BUDGET
    directory = tempfile.mkdtemp(prefix="w16-")
    try:
        path = os.path.join(directory, "ids.zarr")
        values, counts = write_ids(path, n)
        expected = hashlib.sha1(values.tobytes() + counts.tobytes()).hexdigest()
        expected_values = hashlib.sha1(values.tobytes()).hexdigest()
        _warm(path)
        sides = ["oocarray", "dask", "oocarray (values only)", "dask (values only)"]
        sides += ["numpy"] if n <= NUMPY_LIMIT_IDS else []
        times: dict[str, list[float]] = {side: [] for side in sides}
        stopped: dict[str, float] = {}
        for round_number in range(rounds):
            shift = round_number % len(sides)
            for side in sides[shift:] + sides[:shift]:
                if side in stopped:
                    continue
                limit = peer_limit(side, times)
                try:
                    seconds, digest = run_side(side, path, budget, limit)
                except subprocess.TimeoutExpired:
                    stopped[side] = limit or 0.0
                    continue
                if digest != (expected_values if "values only" in side else expected):
                    raise AssertionError(f"W16: {side}'s values or counts are wrong")
                times[side].append(seconds)
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    return _result(n, times, stopped)


def peer_limit(side: str, times: dict[str, list[float]]) -> float | None:
    """The seconds after which a dask side is stopped: ``STOP_PEER_AFTER`` times oocarray's
    median on the same workload (at least ``MIN_PEER_LIMIT_S``); None for other sides and
    before oocarray has run."""
    if not side.startswith("dask"):
        return None
    ours = times["oocarray (values only)" if "values only" in side else "oocarray"]
    return max(MIN_PEER_LIMIT_S, STOP_PEER_AFTER * statistics.median(ours)) if ours else None


def _row(
    key: str,
    workload: str,
    ours: list[float],
    theirs: list[float],
    limit: float | None,
    target: float | None,
) -> Row | TextRow:
    """oocarray against dask; a bound where every dask run was stopped at ``limit``."""
    if theirs or limit is None:
        return Row(
            key,
            workload,
            statistics.median(ours),
            "dask",
            statistics.median(theirs),
            Ratio.paired(ours, theirs),
            target,
        )
    bound = statistics.median(ours) / limit
    met = "n/a" if target is None else ("yes" if bound <= target else "**no**")
    return TextRow(
        key,
        workload,
        format_seconds(statistics.median(ours)),
        f"dask: not finished in {format_seconds(limit)} (stopped)",
        f"< {bound:.2f}x",
        "—" if target is None else f"<= {target:.2f}x",
        met,
    )


def _result(n: int, times: dict[str, list[float]], stopped: dict[str, float]) -> Result:
    rows = [
        _row(
            "W16",
            f"np.unique(return_counts) of {n / 1e6:g}M int64 ids ({DISTINCT} distinct), zstd zarr",
            times["oocarray"],
            times["dask"],
            stopped.get("dask"),
            DASK_TARGET,
        ),
        _row(
            "W16v",
            f"np.unique (values only) of the same {n / 1e6:g}M ids",
            times["oocarray (values only)"],
            times["dask (values only)"],
            stopped.get("dask (values only)"),
            None,
        ),
    ]
    detail = [
        [
            side,
            format_seconds(statistics.median(t)) if t else "—",
            " ".join(format_seconds(s) for s in t)
            + (f" (stopped after {format_seconds(stopped[side])})" if side in stopped else ""),
        ]
        for side, t in times.items()
    ]
    return Result(
        rows, [Table("W16 sides (each in a fresh process)", ("side", "median", "runs"), detail)]
    )


def main() -> None:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--rounds", type=int, default=ROUNDS, help="rounds of every side")
    args = parser.parse_args()
    print(run(args.quick, args.rounds).render())


if __name__ == "__main__":
    main()
