"""W1: workspace cyclic step.

``x`` is float32 with 16M elements (64 MiB).  One iteration is ``y = x*2+1; z = y-x;
s = z.sum()`` (and a variant that starts with ``np.tanh(x)``); one measurement is 50
iterations.  Three sides, interleaved round by round:

- plain NumPy (each temporary is a fresh 64 MiB allocation, so fresh pages to fault in);
- the same step with each iteration one cycle ``with ws:`` of an ``oc.Workspace`` made once
  per variant and reused by every measurement; its first (learning) cycle runs before any
  timing, and the cycle body is a function, so ``y`` and ``z`` are gone when the cycle ends;
- the hand-written floor: the same arithmetic into ``out=`` buffers allocated once, in place;
- for reference, NumPy's own passes: each operation of the step into a buffer of its own,
  allocated once (``np.tanh(x, out=a); np.multiply(a, 2, out=b); ...``).  This is what the
  step does when NumPy does not elide its temporaries (it does not here: ``y = x*2+1`` peaks
  at two 64 MiB arrays), minus the allocation, so it bounds what a workspace can reach: a
  workspace takes allocation and page faults away, not the passes NumPy's code makes.

Targets (PERFORMANCE.md): workspace >= 1.35x faster than plain NumPy (a ratio
workspace/plain <= 1/1.35); <= 1.15x the ``out=`` floor.  Resident memory: the growth of
anonymous RSS over 1,000 workspace cycles (after the learning cycle and a few warm cycles)
must be at most 1 MiB.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable

import numpy as np

import oocarray as oc
from benchmarks._timing import (
    Ratio,
    Result,
    Row,
    Table,
    TextRow,
    clock,
    format_seconds,
    gc_paused,
    interleave,
    per_op,
)
from oocarray._memory._physical import resident_memory

MiB = 1 << 20
ELEMENTS = 16 << 20
ITERATIONS = 50
FASTER_THAN_PLAIN = 1.35
FLOOR_TARGET = 1.15
RSS_CYCLES = 1000
RSS_WARM_CYCLES = 5
RSS_TARGET = MiB

Step = Callable[[np.ndarray], np.floating]


def _step(x: np.ndarray) -> np.floating:
    y = x * 2 + 1
    z = y - x
    return z.sum()


def _step_tanh(x: np.ndarray) -> np.floating:
    y = np.tanh(x) * 2 + 1
    z = y - x
    return z.sum()


def _floor(x: np.ndarray, y: np.ndarray, z: np.ndarray) -> np.floating:
    np.multiply(x, 2, out=y)
    np.add(y, 1, out=y)
    np.subtract(y, x, out=z)
    return z.sum()


def _floor_tanh(x: np.ndarray, y: np.ndarray, z: np.ndarray) -> np.floating:
    np.tanh(x, out=y)
    np.multiply(y, 2, out=y)
    np.add(y, 1, out=y)
    np.subtract(y, x, out=z)
    return z.sum()


def _passes(x: np.ndarray, a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.floating:
    np.multiply(x, 2, out=a)
    np.add(a, 1, out=b)
    np.subtract(b, x, out=c)
    return c.sum()


def _passes_tanh(
    x: np.ndarray, a: np.ndarray, b: np.ndarray, c: np.ndarray, d: np.ndarray
) -> np.floating:
    np.tanh(x, out=a)
    np.multiply(a, 2, out=b)
    np.add(b, 1, out=c)
    np.subtract(c, x, out=d)
    return d.sum()


# variant -> (label, step, floor step, NumPy's own passes with their buffers made once)
VARIANTS: dict[str, tuple[str, Step, Callable[..., np.floating], Callable[..., np.floating]]] = {
    "basic": ("`y = x*2+1; z = y-x; s = z.sum()`", _step, _floor, _passes),
    "tanh": ("`y = np.tanh(x)*2+1; z = y-x; s = z.sum()`", _step_tanh, _floor_tanh, _passes_tanh),
}


def _buffers(passes: Callable[..., np.floating], like: np.ndarray) -> list[np.ndarray]:
    """One output buffer per operation of ``passes`` (every argument after ``x``), touched."""
    return [np.ones_like(like) for _ in range(passes.__code__.co_argcount - 1)]


def _timed(call: Callable[[], object]) -> Callable[[], float]:
    """A side: seconds for ITERATIONS calls of ``call``."""

    def side() -> float:
        start = clock()
        for _ in range(ITERATIONS):
            call()
        return clock() - start

    return side


def _sides(
    x: np.ndarray,
    ws: oc.Workspace,
    step: Step,
    floor: Callable[..., np.floating],
    passes: Callable[..., np.floating],
) -> dict[str, Callable[[], float]]:
    y = np.empty_like(x)
    z = np.empty_like(x)
    buffers = _buffers(passes, x)

    def cycle() -> None:
        with ws:
            step(x)

    return {
        "workspace": _timed(cycle),
        "plain": _timed(lambda: step(x)),
        "floor": _timed(lambda: floor(x, y, z)),
        "passes": _timed(lambda: passes(x, *buffers)),
    }


def _check(
    x: np.ndarray,
    ws: oc.Workspace,
    step: Step,
    floor: Callable[..., np.floating],
    passes: Callable[..., np.floating],
) -> None:
    """All sides compute the same sum, and the workspace cycle allocates in its arena."""
    small = x[: 1 << 16]
    expected = float(step(small))
    y = np.empty_like(small)
    z = np.empty_like(small)
    got_floor = float(floor(small, y, z))
    got_passes = float(passes(small, *_buffers(passes, small)))
    with ws:
        got_ws = float(step(x))
    if not np.isclose(got_floor, expected, rtol=1e-5):
        raise RuntimeError(f"W1: out= floor gives {got_floor}, plain NumPy {expected}")
    if not np.isclose(got_passes, expected, rtol=1e-5):
        raise RuntimeError(f"W1: NumPy's own passes give {got_passes}, plain NumPy {expected}")
    full = float(step(x))
    if not np.isclose(got_ws, full, rtol=1e-5):
        raise RuntimeError(f"W1: workspace step gives {got_ws}, plain NumPy {full}")


def _rss_growth(x: np.ndarray, cycles: int) -> tuple[int, int, oc.WorkspaceStats]:
    """Anonymous RSS growth over ``cycles`` workspace cycles after learning and warm-up."""
    ws = oc.Workspace("w1-rss")
    try:
        with gc_paused():
            for _ in range(1 + RSS_WARM_CYCLES):
                with ws:
                    _step(x)
            before = resident_memory().anon_bytes
            peak = before
            for i in range(cycles):
                with ws:
                    _step(x)
                if i % 50 == 49:
                    peak = max(peak, resident_memory().anon_bytes)
            after = resident_memory().anon_bytes
        return after - before, max(peak, after) - before, ws.stats()
    finally:
        ws.close()


def _format_stats(s: oc.WorkspaceStats) -> str:
    return (
        f"arena {s.size_bytes / MiB:.1f} MiB (learned {s.learned_bytes / MiB:.1f} MiB), "
        f"{s.cycles} cycles, {s.arena_allocations} arena / {s.external_allocations} external "
        f"({s.spilled_allocations} because the arena was full) allocations, "
        f"{s.escapes} escapes, {s.reallocations} arena mapping(s)"
    )


def run(quick: bool = False) -> Result:
    rounds = 3 if quick else 9
    rss_elements = (1 << 20) if quick else ELEMENTS
    rss_cycles = 200 if quick else RSS_CYCLES
    x = np.random.default_rng(1).standard_normal(ELEMENTS).astype(np.float32)
    rows: list[Row | TextRow] = []
    detail: list[list[str]] = []
    notes: list[str] = []
    for variant, (label, step, floor, passes) in VARIANTS.items():
        ws = oc.Workspace(f"w1-{variant}")
        try:
            _check(x, ws, step, floor, passes)  # includes the learning cycle
            times = interleave(_sides(x, ws, step, floor, passes), rounds=rounds)
            stats = ws.stats()
        finally:
            ws.close()
        ws_s = per_op(times["workspace"], ITERATIONS)
        workload = f"{label}, x f32 16M, per iteration (x{ITERATIONS})"
        rows.append(
            Row(
                id="W1",
                workload=f"{workload}: workspace vs plain (>= {FASTER_THAN_PLAIN}x faster)",
                oocarray_s=ws_s,
                peer="plain NumPy",
                peer_s=per_op(times["plain"], ITERATIONS),
                ratio=Ratio.paired(times["workspace"], times["plain"]),
                target=1 / FASTER_THAN_PLAIN,
            )
        )
        rows.append(
            Row(
                id="W1",
                workload=f"{workload}: workspace vs `out=` floor",
                oocarray_s=ws_s,
                peer="`out=` buffers",
                peer_s=per_op(times["floor"], ITERATIONS),
                ratio=Ratio.paired(times["workspace"], times["floor"]),
                target=FLOOR_TARGET,
            )
        )
        rows.append(
            Row(
                id="W1",
                workload=(
                    f"{workload}: workspace vs NumPy's own passes, each into a buffer made once "
                    "(what a workspace can reach; no target)"
                ),
                oocarray_s=ws_s,
                peer="one buffer per operation",
                peer_s=per_op(times["passes"], ITERATIONS),
                ratio=Ratio.paired(times["workspace"], times["passes"]),
                target=None,
            )
        )
        for side, values in times.items():
            per_iter = [t / ITERATIONS for t in values]
            detail.append(
                [
                    variant,
                    side,
                    format_seconds(statistics.median(per_iter)),
                    format_seconds(min(per_iter)),
                    format_seconds(max(per_iter)),
                ]
            )
        speedup = Ratio.paired(times["plain"], times["workspace"])
        reachable = Ratio.paired(times["plain"], times["passes"])
        notes.append(
            f"W1 {variant}: plain/workspace speed-up {speedup}; plain/NumPy's own passes into "
            f"buffers made once {reachable} (all that removing allocation can give: where it is "
            f"below {FASTER_THAN_PLAIN}x, the target against plain NumPy is out of reach for "
            f"any allocator on this machine); ws.stats() after the timed rounds: "
            f"{_format_stats(stats)}."
        )

    growth, peak_growth, rss_stats = _rss_growth(x[:rss_elements], rss_cycles)
    size = "16M" if rss_elements == ELEMENTS else f"{rss_elements / MiB:g}M"
    rows.append(
        TextRow(
            id="W1",
            workload=(
                f"anon RSS growth over {rss_cycles:,} workspace cycles (basic step, x f32 {size})"
            ),
            oocarray=f"{growth / MiB:+.2f} MiB (peak {peak_growth / MiB:+.2f} MiB)",
            peer="—",
            ratio="—",
            target="<= 1 MiB",
            met="yes" if growth <= RSS_TARGET else "**no**",
        )
    )
    notes.append(
        f"W1 RSS: measured with oocarray._memory._physical.resident_memory().anon_bytes after the "
        f"learning cycle and {RSS_WARM_CYCLES} warm cycles, then after {rss_cycles:,} more "
        f"(x f32 {size}); peak sampled every 50 cycles; workspace: {_format_stats(rss_stats)}."
    )
    notes.append(
        f"W1: {rounds} interleaved rounds of {ITERATIONS} iterations per side; ratios are "
        "workspace/peer per round (median [IQR]); the plain target 1.35x faster is a ratio "
        "<= 0.74x. One workspace per variant, reused by every round; its learning cycle ran "
        "before timing."
    )
    table = Table(
        title="W1 per-iteration time by side (median, min, max over rounds)",
        headers=("variant", "side", "median", "min", "max"),
        rows=detail,
    )
    return Result(rows=rows, tables=[table], notes=notes)
