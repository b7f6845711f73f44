"""Standard code through ``oocarray.array_api``: does the namespace cost anything over the
array methods, and how does it compare with dask's namespace on the same chunks?

The workload is code written against the Array API standard, for any library::

    def standardise(a):
        xp = a.__array_namespace__()   # array_api_compat.array_namespace(a) for dask
        return xp.max(xp.abs((a - xp.mean(a, axis=0)) / xp.std(a, axis=0)), axis=1)

on an (N, 64) float64 array in zstd zarr chunks of 16384 x 64 (written once, untimed).  Each
side runs in a fresh process (so no side warms another's caches but the page cache, which
every side gets warm), rounds interleaved:

- **oocarray.array_api**: the function above on the chunked array, in
  ``oc.Manager(max_bytes=BUDGET)``; two passes (the mean and std, then the maximum);
- **oocarray methods**: the same with ``x.mean(axis=0)``, ``x.std(axis=0)``, ``np.abs`` and
  ``.max(axis=1)`` (the namespace's overhead is the difference);
- **dask**: ``da.from_zarr`` through array_api_compat's dask namespace, threads scheduler;
- **numpy**: the whole array loaded first (untimed), the function in RAM (a floor).

``python -m benchmarks.array_api_namespace [--mib 64] [--rounds 3]``
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

import numpy as np

MiB = 1 << 20
BUDGET = "256M"
CHUNK_ROWS = 16384
SIDES = ("oocarray.array_api", "oocarray methods", "dask", "numpy")


def standardise(a: Any, xp: Any) -> Any:
    return xp.max(xp.abs((a - xp.mean(a, axis=0)) / xp.std(a, axis=0)), axis=1)


def _write(path: str, rows: int) -> None:
    import oocarray as oc

    x = oc.create(path, (rows, 64), np.float64, chunks=(CHUNK_ROWS, 64), codec="zstd")
    rng = np.random.default_rng(0)
    for start in range(0, rows, CHUNK_ROWS):
        stop = min(rows, start + CHUNK_ROWS)
        x[start:stop] = rng.normal(3.0, 2.0, (stop - start, 64))


def _side(name: str, path: str, rounds: int) -> list[float]:
    """Seconds per round of one side, in this (fresh) process; one warm-up round first."""
    import oocarray as oc

    times = []
    loaded = np.asarray(oc.open(path)[:]) if name == "numpy" else None
    for round_ in range(rounds + 1):
        start = time.perf_counter()
        if name == "oocarray.array_api":
            x = oc.open(path)
            with oc.Manager("bench", max_bytes=BUDGET):
                result = np.asarray(standardise(x, x.__array_namespace__()))
        elif name == "oocarray methods":
            x = oc.open(path)
            with oc.Manager("bench", max_bytes=BUDGET):
                m, s = oc.compute(x.mean(axis=0, compute=False), x.std(axis=0, compute=False))
                result = np.asarray(np.abs((x - m) / s).max(axis=1))
        elif name == "dask":
            import array_api_compat
            import dask
            import dask.array as da

            d = da.from_zarr(path)
            xp = array_api_compat.array_namespace(d)
            with dask.config.set(scheduler="threads"):
                result = np.asarray(standardise(d, xp).compute())
        else:
            result = standardise(loaded, np)
        if round_:
            times.append(time.perf_counter() - start)
    assert result.shape == (oc.open(path).shape[0],)
    return times


def run(mib: int, rounds: int) -> str:
    rows = mib * MiB // (64 * 8)
    with tempfile.TemporaryDirectory() as directory:
        path = os.path.join(directory, "data.zarr")
        _write(path, rows)
        timings = {}
        for name in SIDES:
            command = [sys.executable, "-m", "benchmarks.array_api_namespace", "--side", name,
                       "--path", path, "--rounds", str(rounds)]  # fmt: skip
            done = subprocess.run(command, capture_output=True, text=True, check=True)
            timings[name] = json.loads(done.stdout.strip().splitlines()[-1])
    reference = statistics.median(timings["oocarray.array_api"])
    lines = [
        f"Standard code on ({rows}, 64) float64 ({mib} MiB, zstd chunks of {CHUNK_ROWS} rows), "
        f"median of {rounds} rounds, budget {BUDGET} for oocarray:",
        "",
        "| Side | Median | Ratio to oocarray.array_api |",
        "|---|---|---|",
    ]
    for name, values in timings.items():
        median = statistics.median(values)
        lines.append(f"| {name} | {median:.3f} s | {median / reference:.2f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--side", choices=SIDES)
    parser.add_argument("--path")
    args = parser.parse_args()
    if args.side:
        print(json.dumps(_side(args.side, args.path, args.rounds)))
    else:
        print(run(args.mib, args.rounds))


if __name__ == "__main__":
    main()
