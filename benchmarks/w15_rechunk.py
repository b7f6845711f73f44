"""W15: rechunking larger than RAM in a budget, oocarray vs dask and Cubed on the same data.

Four shapes (PERFORMANCE.md W15), float32 zstd zarr, at ``--size`` bytes (default 4G; the
budget is 256 MiB, scaled down to size/16, at least 16 MiB, at small sizes):

- ``time->series``: (T, Y, X) chunked (1, Y, X) -> (T, Y/32, X/32);
- ``series->time``: the reverse;
- ``rows->columns``: (N, 1024) in row blocks -> (N, 16) column blocks;
- ``mild``: (T, Y, X) chunked (1, Y, X) -> (4, Y, X).

Besides the peers, the ``floor`` side times the codec work alone (every source chunk decoded
once, every target chunk encoded and written once, on every core, nothing else): no rechunk
that decodes and encodes can take less on this machine.  Merging whole zstd chunks
(``mild``) oocarray does neither: it copies the source chunks' frames.

Each side runs in a fresh process, the sides interleaved over rounds; the median time and
the peak RSS (VmHWM of the process; for p2p the largest worker's too) are reported.  A peer
more than twice as slow as the fastest peer in the first round runs once.  The target is
judged twice:

- without a memory limit, against the fastest peer (dask's task rechunk then holds the whole
  array in RAM); each side still runs in a memory cgroup of the machine's memory less 2 GiB,
  where one can be made, so that a peer outgrowing the machine is killed alone;
- with every side run once more under a hard memory limit of the budget + 64 MiB (a memory
  cgroup of its own: anonymous memory and the page cache of the files it writes count, no
  swap), the issue's terms: a peer the kernel kills there is reported as killed, and the
  target compares with the fastest peer that completes.  ``--no-limit`` skips this; where no
  cgroup can be made (not root) it is skipped and the notes say why.
Peers: dask ``rechunk(method="tasks")`` on threads, dask ``method="p2p"`` on a loopback
``distributed.LocalCluster`` of 2 worker processes, each given half the budget plus 256 MiB
(a worker process holds ~150 MiB before any data, and dask pauses a worker past 80% of its
limit: at the bare budget the workers pause for ever), Cubed (``Spec(allowed_mem=budget)``),
rechunker on dask threads given ``max_mem=budget`` (its intermediate store in the side's work
folder, every store with the source's codecs), and xarray-beam's ``Rechunk`` given
``max_mem=budget`` on Apache Beam's local runner with a worker process per core.  rechunker
pins zarr<3 and xarray-beam brings Apache Beam: each runs in an environment of its own
(``benchmarks/_peer_venv.py``, built on first use) on the source's own chunk files seen as
it reads them (``benchmarks/_source_views.py``); the code of every side is in
``benchmarks/_w15_sides.py``.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

import oocarray as oc
from benchmarks._harness import checkout_env
from benchmarks._peer_venv import interpreter
from benchmarks._timing import Ratio, Result, Row, Table, TextRow, format_seconds
from benchmarks._w15_sides import CHILD, FLOOR, OWN_ENV, SIDES, output_array
from testkit.cgroup import CgroupUnavailable, memory_cgroup, unavailable

ROUNDS = 3
DEFAULT_SIZE = 4 << 30
QUICK_SIZE = 16 << 20
BUDGET = 256 << 20
# The target: at least twice as fast as the fastest peer that completes.
TARGET = 0.5
SIDE_TIMEOUT = 600  # seconds; a side past it is reported as not finished
# The hard limit each side runs under, above the budget (the terms).
LIMIT_ABOVE_BUDGET = 64 << 20
# A peer this many times slower than the fastest one in the first round runs only once.
SLOW_PEER = 2.0
# Without a memory limit a side still runs in a memory cgroup this far below the machine's
# memory, where one can be made: a peer that outgrows the machine is then killed alone, not
# the benchmark with it (xarray-beam's local runner holds about 7x the data).
MACHINE_RESERVE = 2 << 30


def shapes(size: int) -> dict[str, tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]]:
    """Each case's shape, source chunks and target chunks for ``size`` bytes of float32."""
    side = 2048 if size >= 4 << 30 else 256
    t = max(32, size // (4 * side * side))
    n = max(1024, size // (4 * 1024))
    return {
        "time->series": ((t, side, side), (1, side, side), (t, side // 32, side // 32)),
        "series->time": ((t, side, side), (t, side // 32, side // 32), (1, side, side)),
        "rows->columns": ((n, 1024), (max(1, n // 64), 1024), (n, 16)),
        "mild": ((t, side, side), (1, side, side), (4, side, side)),
    }


def _write(path: str, shape: tuple[int, ...], chunks: tuple[int, ...]) -> None:
    """Random floats in blocks of whole chunks (a block that cut chunks would re-encode each
    of them once per block: with (256, 64, 64) chunks, a time step at a time, 256 times)."""
    x = oc.create(path, shape, "float32", chunks=chunks)
    rng = np.random.default_rng(15)
    # Whole chunks along axis 0, then as many chunk rows along axis 1 as about 64 MiB holds.
    lead = min(shape[0], chunks[0])
    row = 4 * lead * int(np.prod(shape[2:]))
    rows = max(chunks[1], (64 << 20) // row // chunks[1] * chunks[1])
    for start in range(0, shape[0], lead):
        stop = min(shape[0], start + lead)
        for first in range(0, shape[1], rows):
            last = min(shape[1], first + rows)
            size = (stop - start, last - first, *shape[2:])
            x[start:stop, first:last] = rng.random(size, dtype=np.float32)


@dataclass(frozen=True, slots=True)
class SideRun:
    """One timed run of a side: seconds, peak RSS and its cgroup's peak (the page cache of its
    files counted too), or why it did not complete."""

    seconds: float = 0.0
    peak: int = 0
    charged: int | None = None
    error: str = ""


def run_side(
    side: str,
    src: str,
    out: str,
    target: tuple[int, ...],
    budget: int,
    limit: int | None,
    python: str = sys.executable,
) -> SideRun:
    """One timed run of ``side`` in a fresh process of ``python``, in a memory cgroup of
    ``limit`` bytes where given (else of the machine's memory less ``MACHINE_RESERVE``)."""
    work = tempfile.mkdtemp(prefix="w15-work-")
    env = checkout_env()
    code = CHILD.format(body=SIDES[side])
    argv = [python, "-c", code, src, out, json.dumps(list(target)), str(budget), work]
    started = time.perf_counter()
    kills = charged = None
    cap = limit if limit is not None else machine_cap()
    try:
        with contextlib.ExitStack() as stack:
            if cap is not None:
                group = stack.enter_context(memory_cgroup(cap))
                argv = group.command(argv)
            done = subprocess.run(
                argv, capture_output=True, text=True, env=env, timeout=SIDE_TIMEOUT
            )
            if cap is not None:
                kills = group.oom_kills()
            if limit is not None:
                charged = group.peak_bytes()
    except subprocess.TimeoutExpired:
        return SideRun(error=f"did not finish in {SIDE_TIMEOUT} s")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if kills or done.returncode in (-9, 137):
        where = (
            f"the hard limit of {limit_label(limit)}"
            if limit is not None
            else f"the machine's memory (a cgroup of {(cap or 0) / 2**30:.1f} GiB)"
        )
        return SideRun(
            error=f"killed by {where} after "
            f"{format_seconds(time.perf_counter() - started)} (OOM kills: {kills})"
        )
    if done.returncode != 0:
        return SideRun(error=done.stderr.strip().splitlines()[-1][:120])
    line = next(s for s in done.stdout.splitlines() if s.startswith("RESULT "))
    seconds, peak = json.loads(line[7:])
    for extra in done.stdout.splitlines():  # p2p: its largest worker process
        if extra.startswith("WORKERS "):
            peak = max(peak, int(json.loads(extra[8:])))
    return SideRun(float(seconds), int(peak), charged)


@functools.cache
def machine_cap() -> int | None:
    """The memory cgroup a side without a limit runs in: the machine's memory less
    ``MACHINE_RESERVE``; None where no cgroup can be made here."""
    cap = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") - MACHINE_RESERVE
    return cap if unavailable(cap) is None else None


def limit_label(limit: int | None) -> str:
    return "no memory limit" if limit is None else f"{limit >> 20} MiB"


def hard_limit(budget: int, wanted: bool) -> tuple[int | None, str]:
    """The limit the sides run under (None: none) and, where one was wanted but none can be
    made here, why."""
    if not wanted:
        return None, ""
    limit = budget + LIMIT_ABOVE_BUDGET
    try:
        with memory_cgroup(limit):
            return limit, ""
    except CgroupUnavailable as error:
        return None, f"no hard limit: {error}"


def _timed_rounds(
    sides: list[str],
    rounds: int,
    run_one: Callable[[str], SideRun],
) -> tuple[dict[str, list[float]], dict[str, SideRun]]:
    """Every side in each round (the order shifted by one each round), without a limit: the
    times of each and, per side, its run with the highest peak or its error.  A peer more
    than ``SLOW_PEER`` times slower than the fastest peer in the first round is not run again
    (its one time stands: it cannot be the peer the target compares to)."""
    times: dict[str, list[float]] = {s: [] for s in sides}
    worst: dict[str, SideRun] = {}
    for round_number in range(rounds):
        shift = round_number % len(sides)
        for side in sides[shift:] + sides[:shift]:
            if worst.get(side, SideRun()).error or (round_number and _slow(side, times)):
                continue
            timed = run_one(side)
            if not timed.error:
                times[side].append(timed.seconds)
            if timed.error or timed.peak >= worst.get(side, SideRun()).peak:
                worst[side] = timed
    return times, worst


def _slow(side: str, times: dict[str, list[float]]) -> bool:
    firsts = [t[0] for s, t in times.items() if t and s not in ("oocarray", FLOOR)]
    return (
        side not in ("oocarray", FLOOR)
        and bool(times[side])
        and (times[side][0] > SLOW_PEER * min(firsts))
    )


def _limited_row(case: str, budget: int, limit: int, runs: dict[str, SideRun]) -> TextRow:
    """The issue's terms: every side once under the hard limit, oocarray against the fastest
    peer that completes there."""
    ours = runs["oocarray"]
    peers = {s: r for s, r in runs.items() if s not in ("oocarray", FLOOR)}
    done = {s: r for s, r in peers.items() if not r.error}
    fates = "; ".join(
        f"{s}: {format_seconds(r.seconds)}" if not r.error else f"{s}: {r.error}"
        for s, r in peers.items()
    )
    label = (
        f"rechunk {case}, every side once under a hard memory limit of {limit >> 20} MiB "
        f"(budget {budget >> 20} MiB + 64 MiB)"
    )
    target = f"<= {TARGET:.2f}x the fastest peer that completes"
    if ours.error:
        return TextRow("W15", label, ours.error, fates, "—", target, "**no**")
    mine = f"{format_seconds(ours.seconds)}, peak RSS {ours.peak / 2**20:.0f} MiB"
    if not done:
        return TextRow("W15", label, mine, fates, "—", target, "yes: no peer completes")
    best = min(done, key=lambda s: done[s].seconds)
    ratio = ours.seconds / done[best].seconds
    met = "yes" if ratio <= TARGET else "**no**"
    return TextRow("W15", label, mine, fates, f"{ratio:.2f}x ({best})", target, met)


def run(
    quick: bool,
    size: int | None = None,
    budget: int | None = None,
    cases: list[str] | None = None,
    rounds: int = ROUNDS,
    sides: list[str] | None = None,
    limited: bool = True,
) -> Result:
    size = size or (QUICK_SIZE if quick else DEFAULT_SIZE)
    budget = budget or (BUDGET if size >= 4 << 30 else max(16 << 20, size // 16))
    limit, why_not = hard_limit(budget, limited)
    sides = list(sides or SIDES)
    if "oocarray" not in sides:
        sides = ["oocarray", *sides]  # the row compares it
    notes = [why_not] if why_not else []
    pythons = {}
    for side in [s for s in sides if s in OWN_ENV]:
        python, why = interpreter(OWN_ENV[side].env)
        if python is None:
            sides.remove(side)
            notes.append(why)
        else:
            pythons[side] = python
    rows: list[Row | TextRow] = []
    detail = []
    directory = tempfile.mkdtemp(prefix="w15-")
    try:
        for case, (shape, source, target) in shapes(size).items():
            if cases and case not in cases:
                continue
            # One case's files on disk at a time: the last case's source, views and output go.
            for name in os.listdir(directory):
                shutil.rmtree(os.path.join(directory, name), ignore_errors=True)
            src = os.path.join(directory, f"{case}.zarr")
            _write(src, shape, source)
            sources = dict.fromkeys(sides, src)
            for side in pythons:
                sources[side] = os.path.join(directory, f"{case}.{side}.zarr")
                OWN_ENV[side].view(src, sources[side])
            # The source's pages on disk before any side runs: the one run first would
            # otherwise share the disk with their write-back.
            os.sync()
            expected = oc.open(src)

            def run_one(
                side: str,
                limit: int | None = None,
                case: str = case,
                sources: dict[str, str] = sources,
                target: tuple[int, ...] = target,
                expected: Any = expected,
            ) -> SideRun:
                """One run of ``side``, its output checked against the source."""
                out = os.path.join(directory, "out.zarr")
                shutil.rmtree(out, ignore_errors=True)
                # Every side starts with the disk idle: the last side's output, still in the
                # page cache, would otherwise be written back during this one's run.
                os.sync()
                python = pythons.get(side, sys.executable)
                timed = run_side(side, sources[side], out, target, budget, limit, python)
                if not timed.error and side != FLOOR:
                    got = oc.open(output_array(side, out))
                    if got.chunks != target or not np.array_equal(got[...], expected[...]):
                        raise AssertionError(f"W15 {case}: {side}'s output is wrong")
                return timed

            times, worst = _timed_rounds(sides, rounds, run_one)
            ours = statistics.median(times["oocarray"])
            peers = {
                s: statistics.median(t)
                for s, t in times.items()
                if t and s not in ("oocarray", FLOOR)
            }
            best = min(peers, key=lambda s: peers[s]) if peers else "none"
            paired = min(len(times["oocarray"]), len(times.get(best, [])))
            rows.append(
                Row(
                    "W15",
                    f"rechunk {case} {shape} {source}->{target} float32, budget "
                    f"{budget >> 20} MiB, no memory limit",
                    ours,
                    best,
                    peers.get(best),
                    Ratio.paired(times["oocarray"][:paired], times[best][:paired])
                    if peers
                    else None,
                    TARGET,
                )
            )
            for side in sides:
                timed = worst[side]
                median = format_seconds(statistics.median(times[side])) if times[side] else "-"
                peak = f"{timed.peak / 2**20:.0f}" if not timed.error else "-"
                detail.append(
                    [case, side, "none", median, str(len(times[side])), peak, "-", timed.error]
                )
            if limit is None:
                continue
            limited_runs = {s: run_one(s, limit) for s in sides if s != FLOOR}
            rows.append(_limited_row(case, budget, limit, limited_runs))
            for side, timed in limited_runs.items():
                charged = "-" if timed.charged is None else f"{timed.charged / 2**20:.0f}"
                detail.append(
                    [
                        case,
                        side,
                        limit_label(limit),
                        "-" if timed.error else format_seconds(timed.seconds),
                        "1",
                        "-" if timed.error else f"{timed.peak / 2**20:.0f}",
                        charged,
                        timed.error,
                    ]
                )
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    headers = (
        "case",
        "side",
        "memory limit",
        "median",
        "runs",
        "peak RSS MiB",
        "cgroup peak MiB",
        "error",
    )
    title = "W15 sides (each in a fresh process)"
    return Result(rows, [Table(title, headers, detail)], notes)


def main() -> None:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--size", type=oc.parse_size, default=None, help="data size, e.g. 64M")
    parser.add_argument("--budget", type=oc.parse_size, default=None, help="e.g. 256M")
    parser.add_argument("--case", action="append", help="run only these cases")
    parser.add_argument("--side", action="append", help="run only these sides")
    parser.add_argument("--rounds", type=int, default=ROUNDS)
    parser.add_argument(
        "--no-limit",
        action="store_true",
        help="run the sides without the hard memory limit of the budget + 64 MiB",
    )
    args = parser.parse_args()
    result = run(
        args.quick, args.size, args.budget, args.case, args.rounds, args.side, not args.no_limit
    )
    print(result.render())


if __name__ == "__main__":
    main()
