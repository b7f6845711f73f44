"""F1: what a fork costs with 1 GiB of arrays on disk against 1 GiB in RAM.

Three processes' worth of state are compared side by side in one process, in alternating rounds:

- ``ram``: a 1 GiB managed ``uint8`` array, every page written, in RAM;
- ``disk``: the same array spilled with ``oc.spill`` and forked before (its mapping is already
  copy-on-write: later forks find nothing to convert);
- ``disk, first fork``: the array is brought back and spilled again before each round
  (untimed), so every timed fork converts its file mapping to copy-on-write first.

Each timed repeat is ``os.fork()`` in the parent up to ``waitpid`` returning, with a child that
exits at once (fork latency), and the same with a child that reads the whole array first
(``a.sum()``: the child's data is really there).  The spill directory is a scratch directory on
a disk.  PERFORMANCE.md sets no target: the figures are for the README.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import numpy as np

import oocarray as oc
from benchmarks._disk import scratch_spill_dir
from benchmarks._timing import Ratio, Result, Row, clock, format_bytes, interleave, per_op

GiB = 1 << 30
QUICK_BYTES = 256 << 20


def _fork(child: Callable[[], None]) -> float:
    start = clock()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 1
        try:
            child()
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    elapsed = clock() - start
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError("the benchmark's child failed")
    return elapsed


def run(quick: bool) -> Result:
    size = QUICK_BYTES if quick else GiB
    rounds = 5 if quick else 15
    with scratch_spill_dir("oocarray-f1-"), oc.Manager("fork-cost"):
        in_ram = np.ones(size, np.uint8)
        on_disk = np.ones(size, np.uint8)
        respilled = np.ones(size, np.uint8)
        oc.spill(on_disk)
        _fork(lambda: None)  # on_disk is copy-on-write from here on
        oc.spill(respilled)

        def first_fork(child: Callable[[], None]) -> float:
            oc.unspill(respilled)
            oc.spill(respilled)
            return _fork(child)

        def reads(a: np.ndarray) -> Callable[[], None]:
            def child() -> None:
                if int(a.sum(dtype=np.uint64)) != size:
                    raise AssertionError("wrong data in the child")

            return child

        quiet = interleave(
            {
                "ram": lambda: _fork(lambda: None),
                "disk": lambda: _fork(lambda: None),
                "first": lambda: first_fork(lambda: None),
            },
            rounds,
        )
        reading = interleave(
            {
                "ram": lambda: _fork(reads(in_ram)),
                "disk": lambda: _fork(reads(on_disk)),
                "first": lambda: first_fork(reads(respilled)),
            },
            max(3, rounds // 3),
        )
    label = format_bytes(size)
    rows = []
    for kind, times in (("fork + exit", quiet), ("fork + child reads all", reading)):
        for side, title in (("disk", "on disk"), ("first", "on disk, first fork after a spill")):
            rows.append(
                Row(
                    "F1",
                    f"{kind}, {label} {title}",
                    per_op(times[side], 1),
                    f"{label} in RAM",
                    per_op(times["ram"], 1),
                    Ratio.paired(times[side], times["ram"]),
                )
            )
    return Result(rows, [])
