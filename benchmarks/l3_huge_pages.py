"""L3: transparent huge pages for workspace arenas, on and off.

A workspace cycle of W1's step (x float32, 16M elements) with the arena advised for huge
pages (the default for arenas and regions of 4 MiB and more) against the same with the advice
switched off (``oocarray._native.set_huge_pages(False)``).  Two figures: the first arena cycle,
which faults the arena in, and a steady cycle.  This is the measurement behind the default.
"""

from __future__ import annotations

import numpy as np

import oocarray as oc
from benchmarks._timing import Ratio, Result, Row, clock, interleave
from oocarray import _native

ELEMENTS = 16_000_000


def run(quick: bool = False) -> Result:
    x = np.random.default_rng(0).random(ELEMENTS, dtype=np.float32)
    rounds = 3 if quick else 9
    steady_cycles = 5 if quick else 20

    def body() -> float:
        y = x * 2 + 1
        z = y - x
        return float(z.sum())

    def first_and_steady(huge: bool) -> tuple[float, float]:
        previous = _native.set_huge_pages(huge)
        try:
            ws = oc.Workspace(f"l3-{'huge' if huge else 'small'}")
            with ws:
                body()  # learning cycle: allocations are external
            start = clock()
            with ws:
                body()  # first arena cycle: every page of the arena is touched first here
            first = clock() - start
            start = clock()
            for _ in range(steady_cycles):
                with ws:
                    body()
            steady = (clock() - start) / steady_cycles
            ws.close()
            return first, steady
        finally:
            _native.set_huge_pages(previous)

    results: dict[bool, list[tuple[float, float]]] = {True: [], False: []}

    def side(huge: bool) -> float:
        first, steady = first_and_steady(huge)
        results[huge].append((first, steady))
        return steady

    interleave({"huge": lambda: side(True), "small": lambda: side(False)}, rounds=rounds, warmup=0)
    first_on = [f for f, _ in results[True]]
    first_off = [f for f, _ in results[False]]
    steady_on = [s for _, s in results[True]]
    steady_off = [s for _, s in results[False]]
    return Result(
        rows=[
            Row(
                id="L3a",
                workload="first workspace cycle (arena faulted in), huge pages on",
                oocarray_s=float(np.median(first_on)),
                peer="4 KiB pages",
                peer_s=float(np.median(first_off)),
                ratio=Ratio.paired(first_on, first_off),
            ),
            Row(
                id="L3b",
                workload="steady workspace cycle, huge pages on",
                oocarray_s=float(np.median(steady_on)),
                peer="4 KiB pages",
                peer_s=float(np.median(steady_off)),
                ratio=Ratio.paired(steady_on, steady_off),
            ),
        ],
        tables=[],
        notes=[
            "L3: transparent huge pages are 'madvise' on this kernel; arenas and regions of "
            "4 MiB or more are 2 MiB aligned and advised, which L3 compares with no advice."
        ],
    )
