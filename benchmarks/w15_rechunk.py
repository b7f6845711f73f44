"""W15: rechunking larger than RAM in a budget, oocarray vs dask and Cubed on the same data.

Four shapes (PERFORMANCE.md W15), float32 zstd zarr, at ``--size`` bytes (default 4G; the
budget is 256 MiB, scaled down to size/16, at least 16 MiB, at small sizes):

- ``time->series``: (T, Y, X) chunked (1, Y, X) -> (T, Y/32, X/32);
- ``series->time``: the reverse;
- ``rows->columns``: (N, 1024) in row blocks -> (N, 16) column blocks;
- ``mild``: (T, Y, X) chunked (1, Y, X) -> (4, Y, X).

Besides the peers, the ``floor`` side times the codec work alone (every source chunk decoded
once, every target chunk encoded and written once, on every core, nothing else): no rechunk
can take less on this machine.

Each side runs in a fresh process, the sides interleaved over rounds; the median time and
the peak RSS (VmHWM of the process; for p2p the largest worker's too) are reported.  By
default every side runs under a hard memory limit of the budget + 64 MiB (a memory cgroup of
its own: anonymous memory and the page cache of the files it writes are counted, no swap),
the issue's terms: a peer the kernel kills there is reported as killed, and the target is
judged against the fastest peer that completes.  ``--no-limit`` runs the sides without one
(dask's task rechunk then holds the whole array in RAM); where no cgroup can be made (not
root) the sides run without one and the table says so.
Peers: dask ``rechunk(method="tasks")`` on threads, dask ``method="p2p"`` on a loopback
``distributed.LocalCluster`` of 2 worker processes, each given half the budget plus 256 MiB
(a worker process holds ~150 MiB before any data, and dask pauses a worker past 80% of its
limit: at the bare budget the workers pause for ever), and Cubed
(``Spec(allowed_mem=budget)``).  Not run: rechunker (it needs zarr<3, a separate
environment).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass

import numpy as np

import oocarray as oc
from benchmarks._timing import Ratio, Result, Row, Table, format_seconds
from testkit.cgroup import CgroupUnavailable, memory_cgroup

ROUNDS = 3
DEFAULT_SIZE = 4 << 30
QUICK_SIZE = 16 << 20
BUDGET = 256 << 20
# The target: at least twice as fast as the fastest peer that completes.
TARGET = 0.5
# The side that measures the floor: the codec work alone (not a peer, its output is not the
# data's).
FLOOR = "floor"
SIDE_TIMEOUT = 600  # seconds; a side past it is reported as not finished
# The hard limit each side runs under, above the budget (the terms).
LIMIT_ABOVE_BUDGET = 64 << 20

_CHILD = """
import json, resource, sys, time
src, out, work = sys.argv[1], sys.argv[2], sys.argv[5]
target, budget = tuple(json.loads(sys.argv[3])), int(sys.argv[4])
start = time.perf_counter()
{body}
seconds = time.perf_counter() - start
# VmHWM, not ru_maxrss: Linux keeps ru_maxrss across exec, so a child would report the
# benchmark process's own peak at the fork.
with open("/proc/self/status") as status:
    peak = next(int(s.split()[1]) * 1024 for s in status if s.startswith("VmHWM"))
print("RESULT " + json.dumps([seconds, peak]))
"""

_SIDES = {
    "oocarray": """
import oocarray as oc
with oc.Manager("w15", max_bytes=budget):
    oc.rechunk(oc.open(src), target, out, progress=False)
""",
    # Not a peer: the codec work alone, what no rechunk can skip -- every source chunk decoded
    # once and every target chunk encoded (and its file written) once, on every core, with
    # nothing moved between them.  The values encoded are a source chunk's, laid out as a
    # target chunk: random floats compress alike in either order.
    FLOOR: """
import itertools, math, numpy as np, oocarray as oc
from concurrent.futures import ThreadPoolExecutor
from oocarray._storage._pool import workers
x = oc.open(src)
s = x._store
y = oc.create(out, x.shape, x.dtype, chunks=target)
d = y._store
sample = np.resize(s.read_chunk((0,) * x.ndim).ravel(), target)
def grid(chunks):
    return itertools.product(*(range(-(-n // c)) for n, c in zip(x.shape, chunks)))
def decode(chunk):
    s.read_chunk(chunk, scratch=True)
def encode(block):
    valid = tuple(slice(0, r.stop - r.start) for r in d.block_region(block))
    d.write_blocks([(block, sample[valid])])
start = time.perf_counter()  # the timed part: decode, then encode
with ThreadPoolExecutor(workers()) as pool:
    list(pool.map(decode, grid(s.chunks)))
    list(pool.map(encode, grid(target)))
""",
    "dask tasks": """
import dask, dask.array as da
with dask.config.set(scheduler="threads"):
    da.from_zarr(src).rechunk(target, method="tasks").to_zarr(out)
""",
    "dask p2p": """
import dask.array as da, distributed, resource
if __name__ == "__main__":
    with distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True,
        memory_limit=budget // 2 + (256 << 20),
        host="127.0.0.1", dashboard_address=None,
    ) as cluster, distributed.Client(cluster) as client:
        da.from_zarr(src).rechunk(target, method="p2p").to_zarr(out)
        workers = client.run(lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
    print("WORKERS " + json.dumps(max(workers.values()) * 1024))  # spawned: ru_maxrss is theirs
""",
    "cubed": """
import cubed, zarr
spec = cubed.Spec(work_dir=work, allowed_mem=budget)
x = cubed.from_zarr(src, spec=spec)
store = zarr.open_array(out, mode="w", shape=x.shape, dtype=x.dtype, chunks=target)
cubed.to_zarr(x.rechunk(target), store)
""",
}


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
    side: str, src: str, out: str, target: tuple[int, ...], budget: int, limit: int | None
) -> SideRun:
    """One timed run of ``side`` in a fresh process, in a memory cgroup of ``limit`` bytes
    where given."""
    work = tempfile.mkdtemp(prefix="w15-work-")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [os.path.dirname(os.path.dirname(os.path.abspath(__file__))), env.get("PYTHONPATH", "")]
    )
    code = _CHILD.format(body=_SIDES[side])
    argv = [sys.executable, "-c", code, src, out, json.dumps(list(target)), str(budget), work]
    started = time.perf_counter()
    kills = charged = None
    try:
        with contextlib.ExitStack() as stack:
            if limit is not None:
                group = stack.enter_context(memory_cgroup(limit))
                argv = group.command(argv)
            done = subprocess.run(
                argv, capture_output=True, text=True, env=env, timeout=SIDE_TIMEOUT
            )
            if limit is not None:
                kills, charged = group.oom_kills(), group.peak_bytes()
    except subprocess.TimeoutExpired:
        return SideRun(error=f"did not finish in {SIDE_TIMEOUT} s")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if kills or done.returncode in (-9, 137):
        return SideRun(
            error=f"killed by the hard limit of {limit_label(limit)} after "
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
    sides = sides or list(_SIDES)
    if "oocarray" not in sides:
        sides = ["oocarray", *sides]  # the row compares it
    rows, detail = [], []
    directory = tempfile.mkdtemp(prefix="w15-")
    try:
        for case, (shape, source, target) in shapes(size).items():
            if cases and case not in cases:
                continue
            src = os.path.join(directory, f"{case}.zarr")
            _write(src, shape, source)
            # The source's pages on disk before any side runs: the one run first would
            # otherwise share the disk with their write-back.
            os.sync()
            expected = oc.open(src)
            times: dict[str, list[float]] = {s: [] for s in sides}
            peaks: dict[str, int] = {}
            cgroup_peaks: dict[str, int] = {}
            errors: dict[str, str] = {}
            for round_number in range(rounds):
                shift = round_number % len(sides)
                for side in sides[shift:] + sides[:shift]:
                    if side in errors:
                        continue
                    out = os.path.join(directory, "out.zarr")
                    shutil.rmtree(out, ignore_errors=True)
                    timed = run_side(side, src, out, target, budget, limit)
                    if timed.error:
                        errors[side] = timed.error
                        continue
                    got = oc.open(out)
                    if side != FLOOR and (
                        got.chunks != target or not np.array_equal(got[...], expected[...])
                    ):
                        raise AssertionError(f"W15 {case}: {side}'s output is wrong")
                    times[side].append(timed.seconds)
                    peaks[side] = max(peaks.get(side, 0), timed.peak)
                    if timed.charged is not None:
                        cgroup_peaks[side] = max(cgroup_peaks.get(side, 0), timed.charged)
            ours = statistics.median(times["oocarray"])
            peers = {
                s: statistics.median(t)
                for s, t in times.items()
                if t and s not in ("oocarray", FLOOR)
            }
            best = min(peers, key=lambda s: peers[s]) if peers else "none"
            rows.append(
                Row(
                    "W15",
                    f"rechunk {case} {shape} {source}->{target} float32, budget "
                    f"{budget >> 20} MiB, every side under {limit_label(limit)}",
                    ours,
                    best,
                    peers.get(best),
                    Ratio.paired(times["oocarray"], times[best]) if peers else None,
                    TARGET,
                )
            )
            for side in sides:
                median = format_seconds(statistics.median(times[side])) if times[side] else "-"
                peak_mib = f"{peaks[side] / 2**20:.0f}" if side in peaks else "-"
                charged_mib = f"{cgroup_peaks[side] / 2**20:.0f}" if side in cgroup_peaks else "-"
                detail.append([case, side, median, peak_mib, charged_mib, errors.get(side, "")])
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    headers = ("case", "side", "median", "peak RSS MiB", "cgroup peak MiB", "error")
    title = f"W15 sides (each in a fresh process, under {limit_label(limit)})"
    return Result(rows, [Table(title, headers, detail)], [why_not] if why_not else [])


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
