"""W2-disk: small arrays on disk, as when a budget is full.

Two loops under ``Manager(location="mmap", max_bytes=1)`` (every array placed in the heap
file, PERFORMANCE.md's W2-disk), each against the same loop under a manager in RAM, rounds
interleaved:

- **W2**: ``np.empty(100)`` x 200,000 (each array freed before the next);
- **Nelder-Mead**: ``scipy.optimize.minimize(rosen, zeros(5), method="Nelder-Mead")`` for
  4,000 iterations (thousands of 5-element arrays made and freed).

Target: each at most 3x the same in RAM, with no system call per allocation (freed heap-file
slots stay mapped and are reused: native/heap.c).

And the manager's own resident memory: 20,000 arrays of random sizes from 128 B to 16 MiB
(eight alive at a time), under ``Manager()`` in RAM and in plain NumPy, each in a fresh
process; the peak RSS above the process's start (``ru_maxrss``) of each.  Target: the manager
adds at most 8 MiB.

Run: ``PYTHONPATH=. python -m benchmarks --only W2-disk`` (``--quick``: fewer rounds).
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from collections.abc import Callable

import numpy as np

import oocarray as oc
from benchmarks._timing import Ratio, Result, Row, TextRow, clock, interleave, per_op

TARGET = 3.0
RSS_TARGET_MIB = 8.0
_RSS_CHILD = """
import resource, sys
import numpy as np
import oocarray as oc
rng = np.random.default_rng(0)
sizes = (2 ** rng.uniform(7, 24, 20000)).astype(int)
def work():
    alive = []
    for n in sizes:
        alive.append(np.ones(n // 8))
        if len(alive) > 8:
            alive.pop(int(rng.integers(len(alive))))
start = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
if sys.argv[1] == "manager":
    with oc.Manager("w2-rss"):
        work()
else:
    work()
print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - start) / 1024)
"""
COUNT = 200_000
ELEMENTS = 100
ITERATIONS = 4_000


def _w2() -> None:
    empty = np.empty
    for _ in range(COUNT):
        empty(ELEMENTS)


def _nelder_mead() -> None:
    import scipy.optimize

    options = {"maxiter": ITERATIONS, "maxfev": 10 * ITERATIONS, "xatol": 0.0, "fatol": 0.0}
    result = scipy.optimize.minimize(
        scipy.optimize.rosen, np.zeros(5), method="Nelder-Mead", options=options
    )
    if result.nit != ITERATIONS:
        raise RuntimeError(f"W2-disk: Nelder-Mead ran {result.nit} iterations, not {ITERATIONS}")


def _timed(loop: Callable[[], None], **manager: object) -> Callable[[], float]:
    def side() -> float:
        with oc.Manager("w2-disk", **manager):  # type: ignore[arg-type]
            start = clock()
            loop()
            return clock() - start

    return side


def _check() -> None:
    with oc.Manager("w2-disk-check", location="mmap", max_bytes=1):
        if oc.location(np.empty(ELEMENTS)) != "mmap":
            raise RuntimeError("W2-disk: the small array was not placed on disk")


def run(quick: bool = False) -> Result:
    rounds = 5 if quick else 21
    rows = []
    with tempfile.TemporaryDirectory(prefix="oocarray-w2-disk-") as spill_dir:
        oc.configure(spill_dir=spill_dir)
        try:
            _check()
            for name, loop, ops, what in (
                ("W2-disk", _w2, COUNT, f"`np.empty({ELEMENTS})` x {COUNT:,}, per op"),
                ("W2-disk NM", _nelder_mead, 1, f"Nelder-Mead, {ITERATIONS:,} iterations"),
            ):
                sides = {
                    "disk": _timed(loop, location="mmap", max_bytes=1),
                    "ram": _timed(loop),
                }
                times = interleave(sides, rounds=rounds, warmup=1)
                rows.append(
                    Row(
                        id=name,
                        workload=f"{what}, `Manager(location='mmap', max_bytes=1)`",
                        oocarray_s=per_op(times["disk"], ops),
                        peer="the same in a RAM manager",
                        peer_s=per_op(times["ram"], ops),
                        ratio=Ratio.paired(times["disk"], times["ram"]),
                        target=TARGET,
                    )
                )
        finally:
            oc.configure(spill_dir=None)
    rows.append(_rss_row(3 if quick else 5))
    return Result(rows=rows, tables=[])


def _peak_mib(side: str) -> float:
    out = subprocess.run(
        [sys.executable, "-c", _RSS_CHILD, side], capture_output=True, text=True, check=True
    )
    return float(out.stdout.split()[-1])


def _rss_row(rounds: int) -> TextRow:
    """Peak RSS above the start, median of fresh processes, sides interleaved."""
    peaks: dict[str, list[float]] = {"manager": [], "plain": []}
    for _ in range(rounds):
        for side in peaks:
            peaks[side].append(_peak_mib(side))
    manager = sorted(peaks["manager"])[rounds // 2]
    plain = sorted(peaks["plain"])[rounds // 2]
    added = manager - plain
    return TextRow(
        id="W2-disk RSS",
        workload="20,000 arrays of 128 B-16 MiB, 8 alive: peak RSS above start",
        oocarray=f"{manager:.1f} MiB (`Manager()` in RAM)",
        peer=f"{plain:.1f} MiB (plain NumPy)",
        ratio=f"{added:+.1f} MiB",
        target=f"<= +{RSS_TARGET_MIB:.0f} MiB",
        met="yes" if added <= RSS_TARGET_MIB else "**no**",
    )
