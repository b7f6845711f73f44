"""W2-disk: small arrays on disk, as when a budget is full.

Two loops under ``Manager(location="mmap", max_bytes=1)`` (every array placed in the heap
file, PERFORMANCE.md's W2-disk), each against the same loop under a manager in RAM, rounds
interleaved:

- **W2**: ``np.empty(100)`` x 200,000 (each array freed before the next);
- **Nelder-Mead**: ``scipy.optimize.minimize(rosen, zeros(5), method="Nelder-Mead")`` for
  4,000 iterations (thousands of 5-element arrays made and freed).

Target: each at most 3x the same in RAM, with no system call per allocation (freed heap-file
slots stay mapped and are reused: native/heap.c).

Run: ``PYTHONPATH=. python -m benchmarks --only W2-disk`` (``--quick``: fewer rounds).
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable

import numpy as np

import oocarray as oc
from benchmarks._timing import Ratio, Result, Row, clock, interleave, per_op

TARGET = 3.0
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
    return Result(rows=rows, tables=[])
