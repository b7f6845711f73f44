"""W4-hard: the work of W4, a streaming reduction and a training epoch under a *hard* memory
limit (a cgroup), where plain NumPy is killed.

Each side is a fresh Python process (``python -m benchmarks.w4_hard --child ...``) put in a
new memory cgroup before it starts (``sh -c 'echo $$ > cgroup.procs; exec python ...'``):
cgroup v2 (``memory.max``, ``memory.swap.max`` 0) where the memory controller is enabled for
this process's cgroup, else cgroup v1 (``memory.limit_in_bytes``).  The kernel counts every
page the child uses (anonymous memory, shared memory and the page cache of files it reads or
writes, oocarray's spill files included) and kills it (SIGKILL, an OOM kill) when it cannot
reclaim enough below the limit.

Workloads (``budget`` 256 MiB, ``limit`` 320 MiB; sizes several times the limit):

- ``arrays``: ``size`` bytes of ``int64`` arrays of 32 MiB, each filled with distinct values
  (``np.arange`` over consecutive ranges), then each read back and checked (sum, first, last):
  plain NumPy against ``oc.Manager(max_bytes=budget)``.
- ``reduce``: ``mean`` and ``std`` over axis 0 of a (N, 64) float32 zstd zarr array of
  ``size`` bytes: plain NumPy on ``zarr.open_array(path)[...]`` (the whole array read, as
  ``np.load`` would) against ``oc.compute(x.mean(axis=0, compute=False), x.std(...))`` in
  ``oc.Manager(max_bytes=budget)``; results checked against a streaming float64 reference.
- ``epoch``: one epoch of shuffled 4096-row batches of the same array: plain NumPy (the whole
  array read, then a random permutation of its rows in batches, the map-style recipe on an
  in-memory array) against ``oc.batches(x, 4096, shuffle="chunks", seed=0)`` in
  ``oc.Manager(max_bytes=budget)``; every row is summed, and the column sums and the row
  count are checked against the reference.

The tests in ``tests/reliability/test_hard_limits.py`` run the same children, smaller.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks._timing import Result, Table, TextRow, format_bytes, format_mib, format_seconds
from testkit import children
from testkit.cgroup import CgroupUnavailable, memory_cgroup

MiB = 1 << 20
GiB = 1 << 30
BUDGET = 256 * MiB
LIMIT = 320 * MiB
ARRAY_BYTES = 32 * MiB
COLUMNS = 64
CHUNK_ROWS = 16384  # 4 MiB chunks of (N, 64) float32
BATCH = 4096
WORKLOADS = ("arrays", "reduce", "epoch")
SIDES = ("numpy", "oc")


# ---- data ----


def reference(path: str) -> dict[str, list[float] | int]:
    """Column sums, means and standard deviations (float64, streaming) and the row count."""
    meta = json.loads((Path(path) / "reference.json").read_text())
    return dict(meta)


def make_data(path: str, size_bytes: int) -> str:
    """A (N, 64) float32 zstd zarr array of ``size_bytes`` at ``path``/x.zarr, written chunk by
    chunk, and its reference statistics in ``path``/reference.json.  Values vary by row and
    column but compress well, so the disk holds a fraction of ``size_bytes``."""
    import oocarray as oc

    rows = size_bytes // (COLUMNS * 4)
    store = os.path.join(path, "x.zarr")
    x = oc.create(store, (rows, COLUMNS), np.float32, chunks=(CHUNK_ROWS, COLUMNS), codec="zstd")
    total = np.zeros(COLUMNS)
    squares = np.zeros(COLUMNS)
    for start in range(0, rows, CHUNK_ROWS):
        block = _block(start, min(rows, start + CHUNK_ROWS))
        x[start : start + len(block)] = block
        wide = block.astype(np.float64)
        total += wide.sum(axis=0)
        squares += (wide * wide).sum(axis=0)
    mean = total / rows
    std = np.sqrt(np.maximum(squares / rows - mean * mean, 0.0))
    ref = {"rows": rows, "sum": total.tolist(), "mean": mean.tolist(), "std": std.tolist()}
    (Path(path) / "reference.json").write_text(json.dumps(ref))
    return store


def _block(start: int, stop: int) -> np.ndarray:
    i = np.arange(start, stop, dtype=np.int64)[:, None]
    j = np.arange(COLUMNS, dtype=np.int64)[None, :]
    return (((i * 7 + j * 13) % 1021) * 0.25 + j).astype(np.float32)


# ---- the child ----


def _vm_hwm() -> int:
    with open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


def _child_arrays(side: str, size_bytes: int) -> dict[str, object]:
    import oocarray as oc

    elements = ARRAY_BYTES // 8
    count = size_bytes // ARRAY_BYTES
    scope: contextlib.AbstractContextManager[object] = contextlib.nullcontext()
    if side == "oc":
        scope = oc.Manager("w4-hard", max_bytes=BUDGET)
    with scope:
        arrays = [np.arange(i * elements, (i + 1) * elements, dtype=np.int64) for i in range(count)]
        intact = 0
        for i, a in enumerate(arrays):
            first = i * elements
            expected = elements * first + elements * (elements - 1) // 2
            ok = int(a.sum()) == expected and int(a[0]) == first
            intact += ok and int(a[-1]) == first + elements - 1
        del arrays
    return {"intact": intact == count, "detail": f"{intact}/{count} arrays intact"}


def _child_reduce(side: str, path: str) -> dict[str, object]:
    ref = reference(path)
    store = os.path.join(path, "x.zarr")
    if side == "numpy":
        import zarr

        data = np.asarray(zarr.open_array(store, mode="r")[...])
        mean, std = data.mean(axis=0), data.std(axis=0)
    else:
        import oocarray as oc

        with oc.Manager("w4-hard", max_bytes=BUDGET):
            x: Any = oc.open(store)  # the compute layer adds the reductions
            mean, std = oc.compute(
                x.mean(axis=0, compute=False), x.std(axis=0, compute=False), progress=False
            )
            mean, std = np.array(mean, np.float64), np.array(std, np.float64)
    ok = bool(
        np.allclose(mean, ref["mean"], rtol=1e-5, atol=1e-4)
        and np.allclose(std, ref["std"], rtol=1e-4, atol=1e-3)
    )
    return {"intact": ok, "detail": f"mean[:2] {np.round(mean[:2], 4).tolist()}"}


def _child_epoch(side: str, path: str) -> dict[str, object]:
    ref = reference(path)
    store = os.path.join(path, "x.zarr")
    total = np.zeros(COLUMNS)
    rows = 0
    if side == "numpy":
        import zarr

        data = np.asarray(zarr.open_array(store, mode="r")[...])
        order = np.random.default_rng(0).permutation(len(data))
        for start in range(0, len(order), BATCH):
            xb = data[np.sort(order[start : start + BATCH])]
            total += xb.sum(axis=0, dtype=np.float64)
            rows += len(xb)
    else:
        import oocarray as oc

        with oc.Manager("w4-hard", max_bytes=BUDGET):
            x = oc.open(store)
            for xb in oc.batches(x, batch_size=BATCH, shuffle="chunks", seed=0):
                total += xb.sum(axis=0, dtype=np.float64)
                rows += len(xb)
    ok = rows == ref["rows"] and bool(np.allclose(total, ref["sum"], rtol=1e-9))
    return {"intact": ok, "detail": f"{rows} rows"}


def child(workload: str, side: str, size_or_path: str) -> dict[str, object]:
    """Run one workload on one side in this process; a JSON-able report."""
    start = time.perf_counter()
    if workload == "arrays":
        report = _child_arrays(side, int(size_or_path))
    elif workload == "reduce":
        report = _child_reduce(side, size_or_path)
    else:
        report = _child_epoch(side, size_or_path)
    report["seconds"] = time.perf_counter() - start
    report["hwm"] = _vm_hwm()
    return report


# ---- the parent ----


@dataclass(frozen=True, slots=True)
class Outcome:
    """One child under a limit: killed or not, its report, what the cgroup saw."""

    workload: str
    side: str
    returncode: int
    killed: bool
    oom_kills: int | None
    peak_bytes: int | None
    seconds: float
    report: dict[str, object] | None
    stderr: str


def run_limited(
    workload: str,
    side: str,
    size_or_path: str,
    *,
    limit_bytes: int = LIMIT,
    spill_dir: str | None = None,
    timeout: float = 600,
) -> Outcome:
    """Run one child in a new memory cgroup of ``limit_bytes``.  Raises CgroupUnavailable."""
    env = {"OMP_NUM_THREADS": "1"}
    if spill_dir is not None:
        env["OOCARRAY_SPILL_DIR"] = spill_dir
    argv = ["-m", "benchmarks.w4_hard", "--child", workload, side, size_or_path]
    with memory_cgroup(limit_bytes) as group:
        start = time.perf_counter()
        result = children.run(argv, env=env, timeout=timeout, wrap=group.command)
        seconds = time.perf_counter() - start
        peak, kills = group.peak_bytes(), group.oom_kills()
    killed = result.returncode in (-9, 137)
    report = None
    if result.returncode == 0 and result.stdout.strip():
        report = json.loads(result.stdout.strip().splitlines()[-1])
    return Outcome(
        workload, side, result.returncode, killed, kills, peak, seconds, report, result.stderr
    )


LABELS = {
    "arrays": "{size} of int64 arrays (32 MiB each), then read all",
    "reduce": "mean + std over axis 0 of a {size} (N, 64) f32 zstd zarr",
    "epoch": 'one epoch of 4096-row batches of a {size} zarr, shuffle="chunks"',
}
PEERS = {
    "arrays": "plain NumPy",
    "reduce": "NumPy on zarr.open_array(path)[...]",
    "epoch": "NumPy on zarr.open_array(path)[...] + permutation",
}


def _describe(o: Outcome) -> str:
    if o.killed:
        return f"killed (SIGKILL, OOM kills {o.oom_kills}) after {format_seconds(o.seconds)}"
    if o.report is None:
        return f"failed rc {o.returncode}: {o.stderr.strip().splitlines()[-1:]}"
    intact = "intact" if o.report["intact"] else "**wrong data**"
    return f"completed in {format_seconds(o.seconds)}, {intact}"


def run(quick: bool = False) -> Result:
    size = 1 * GiB if quick else 4 * GiB
    scratch = tempfile.mkdtemp(prefix="oocarray-w4-hard-")
    try:
        make_data(scratch, size)
        spill = os.path.join(scratch, "spill")
        os.mkdir(spill)
        outcomes: list[tuple[Outcome, Outcome]] = []
        for workload in WORKLOADS:
            arg = str(size) if workload == "arrays" else scratch
            pair = [run_limited(workload, side, arg, spill_dir=spill) for side in SIDES]
            outcomes.append((pair[1], pair[0]))
    except CgroupUnavailable as error:
        return Result(rows=[], tables=[], notes=[f"W4-hard not run: {error}"])
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    rows, table = [], []
    for ours, plain in outcomes:
        met = not ours.killed and ours.report is not None and bool(ours.report["intact"])
        met = met and plain.killed
        rows.append(
            TextRow(
                id="W4-hard",
                workload=LABELS[ours.workload].format(size=format_bytes(size))
                + f", cgroup limit {format_mib(LIMIT)}, Manager(max_bytes=256M)",
                oocarray=_describe(ours),
                peer=f"{_describe(plain)} ({PEERS[ours.workload]})",
                ratio="—",
                target="oocarray completes, data intact; plain NumPy killed",
                met="yes" if met else "**no**",
            )
        )
        for o in (ours, plain):
            table.append(
                [
                    o.workload,
                    "oocarray" if o.side == "oc" else PEERS[o.workload],
                    str(o.returncode),
                    "—" if o.oom_kills is None else str(o.oom_kills),
                    "—" if o.peak_bytes is None else format_mib(o.peak_bytes),
                    "—" if o.report is None else format_mib(int(str(o.report["hwm"]))),
                    format_seconds(o.seconds),
                    "—" if o.report is None else str(o.report["detail"]),
                ]
            )
    return Result(
        rows=rows,
        tables=[
            Table(
                title=(
                    f"W4-hard: {format_bytes(size)} per workload in a memory cgroup of "
                    f"{format_mib(LIMIT)} (page cache counted), budget {format_mib(BUDGET)}"
                ),
                headers=(
                    "workload",
                    "side",
                    "exit",
                    "OOM kills",
                    "cgroup peak",
                    "VmHWM",
                    "wall",
                    "check",
                ),
                rows=table,
            )
        ],
    )


def main(argv: list[str]) -> int:
    if len(argv) == 4 and argv[0] == "--child":
        print(json.dumps(child(argv[1], argv[2], argv[3]), default=str))
        return 0
    result = run(quick="--quick" in argv)
    for row in result.rows:
        print(asdict(row) if hasattr(row, "__dataclass_fields__") else row)
    for t in result.tables:
        print(t.render())
    for note in result.notes:
        print(note)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
