"""W2: small-allocation overhead.

``np.empty(100)`` (800 bytes) 200,000 times inside an active manager, against the same loop
outside any manager (NumPy's own allocator).  Only the loop is timed; entering and closing the
manager are not.  Target (PERFORMANCE.md): at most 1.20x.

Each round is timed twice over: by the wall clock (the main figure, as in every benchmark) and
by the thread's CPU time.  The loop neither sleeps nor does I/O, so the two agree on an idle
machine; on a shared one the CPU time leaves out the time other processes held the core.
"""

from __future__ import annotations

import time

import numpy as np

import oocarray as oc
from benchmarks._timing import Ratio, Result, Row, clock, interleave, per_op
from oocarray import _native

TARGET = 1.20
COUNT = 200_000
ELEMENTS = 100


def _loop(count: int, cpu: list[float] | None = None) -> float:
    """Wall seconds for the loop; its CPU seconds (this thread's) are appended to ``cpu``."""
    empty = np.empty
    start_cpu = time.thread_time()
    start = clock()
    for _ in range(count):
        empty(ELEMENTS)
    wall = clock() - start
    if cpu is not None:
        cpu.append(time.thread_time() - start_cpu)
    return wall


def _check(count: int) -> None:
    """Make sure each side allocates where it says it does."""
    if _native.block_info(np.empty(ELEMENTS)) is not None:
        raise RuntimeError("W2: a manager is active outside the benchmark; the peer would be wrong")
    with oc.Manager("w2-check"):
        if _native.block_info(np.empty(ELEMENTS)) is None:
            raise RuntimeError("W2: np.empty inside the manager did not go through oocarray")
    _loop(min(count, 1000))


def run(quick: bool = False) -> Result:
    count = COUNT
    rounds = 7 if quick else 41
    _check(count)
    cpu: dict[str, list[float]] = {"oocarray": [], "numpy": []}

    def managed() -> float:
        with oc.Manager("w2"):
            return _loop(count, cpu["oocarray"])

    def plain() -> float:
        return _loop(count, cpu["numpy"])

    warmup = 1
    times = interleave({"oocarray": managed, "numpy": plain}, rounds=rounds, warmup=warmup)
    cpu = {side: values[warmup:] for side, values in cpu.items()}
    row = Row(
        id="W2",
        workload=f"`np.empty({ELEMENTS})` x {count:,} in `Manager('w2')`, per op",
        oocarray_s=per_op(times["oocarray"], count),
        peer="plain NumPy",
        peer_s=per_op(times["numpy"], count),
        ratio=Ratio.paired(times["oocarray"], times["numpy"]),
        target=TARGET,
    )
    cpu_row = Row(
        id="W2 (CPU)",
        workload="the same rounds, timed with this thread's CPU time (`time.thread_time`)",
        oocarray_s=per_op(cpu["oocarray"], count),
        peer="plain NumPy",
        peer_s=per_op(cpu["numpy"], count),
        ratio=Ratio.paired(cpu["oocarray"], cpu["numpy"]),
        target=TARGET,
    )
    return Result(rows=[row, cpu_row], tables=[])
