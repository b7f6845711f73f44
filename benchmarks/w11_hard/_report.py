"""The W11-hard benchmark: data, reference, one child per workload and side, and the table
of BENCHMARKS.md."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence

from benchmarks._timing import Result, Table, TextRow, format_mib, format_seconds
from benchmarks.w11_hard._checks import check_outcome
from benchmarks.w11_hard._compute import have_scipy
from benchmarks.w11_hard._data import (
    CHUNK_ROWS,
    COLUMNS,
    ROW_BYTES,
    WORKLOADS,
    Data,
    GiB,
    MiB,
    dir_bytes,
    make_data,
)
from benchmarks.w11_hard._runner import Outcome, run_limited, run_reference
from testkit.cgroup import CgroupUnavailable, memory_cgroup


def _load() -> str:
    one, five, _ = os.getloadavg()
    return f"{one:.2f}/{five:.2f}"


def _status(o: Outcome) -> str:
    if o.timed_out:
        return f"**stopped** after the {format_seconds(o.seconds)} time limit"
    if o.killed:
        return f"**killed** (SIGKILL, OOM kills {o.oom_kills})"
    if o.report is None:
        lines = o.stderr.strip().splitlines()
        return f"**failed** rc {o.returncode}: {lines[-1] if lines else ''}"
    return "completed"


def run_benchmark(
    size_bytes: int,
    limit_bytes: int,
    budget_bytes: int,
    directory: str | None,
    keep: bool,
    spill: str,
    workloads: Sequence[str],
    percentile_columns: int,
    timeout: float,
    whole_timeout: float,
) -> Result:
    from oocarray._storage._paged._arrays import paging_available

    ok, why = paging_available()
    if not ok:
        return Result(rows=[], tables=[], notes=[f"W11-hard not run: {why}"])
    try:
        with memory_cgroup(limit_bytes):
            pass
    except CgroupUnavailable as error:
        return Result(rows=[], tables=[], notes=[f"W11-hard not run: {error}"])
    made = directory is None
    if directory is None:
        directory = tempfile.mkdtemp(prefix="oocarray-w11-hard-")
    os.makedirs(directory, exist_ok=True)
    notes: list[str] = []
    try:
        data = Data(directory)
        if os.path.exists(data.npy) and data.rows() == size_bytes // ROW_BYTES:
            notes.append(f"data reused from {directory}")
        else:
            for stale in (data.reference_path,):
                with contextlib.suppress(FileNotFoundError):
                    os.remove(stale)
            _, seconds = make_data(directory, size_bytes)
            notes.append(f"data written in {format_seconds(seconds)} (load {_load()})")
        start = time.perf_counter()
        ref = run_reference(data)
        parts = {k: round(v, 1) for k, v in ref["seconds"].items()}
        notes.append(
            f"reference ({ref['pca_which']}) in {format_seconds(time.perf_counter() - start)}"
            f" outside the cgroup, seconds: {json.dumps(parts)}"
        )
        stored = dir_bytes(data.store)
        notes.append(
            f"store: {ref['rows']:,} x {COLUMNS} float32 = {format_mib(ref['rows'] * ROW_BYTES)}"
            f", zstd in {CHUNK_ROWS}-row chunks, {format_mib(stored)} on disk "
            f"({stored / (ref['rows'] * ROW_BYTES):.2f} of raw)"
        )
        outcomes: list[tuple[Outcome, str]] = []
        if "filter" in workloads and not have_scipy():
            workloads = [w for w in workloads if w != "filter"]
            notes.append("filter not run: SciPy is not installed")
        for workload in workloads:
            sides = ["numpy"] if workload == "load" else ["oc", "numpy"]
            for side in sides:
                load = _load()
                print(f"running {workload} on {side} (load {load}) ...", file=sys.stderr)
                o = run_limited(
                    data,
                    [workload],
                    side,
                    limit_bytes=limit_bytes,
                    budget_bytes=budget_bytes,
                    spill=spill,
                    percentile_columns=percentile_columns,
                    timeout=whole_timeout if workload == "percentile-whole" else timeout,
                )
                print(f"  {_status(o)} in {format_seconds(o.seconds)}", file=sys.stderr)
                outcomes.append((o, load))
        table = []
        rows: list[TextRow] = []
        for o, load in outcomes:
            checks = check_outcome(o, ref) if o.report is not None else {}
            steps = list(checks) or list(o.workloads)
            spilled, decoded = "—", "—"
            if o.report is not None and o.side == "oc":
                spilled = format_mib(o.report["manager"]["disk_peak_bytes"])
                decoded = format_mib(sum(p["decoded_bytes"] for p in o.report["paging"]))
            written = format_mib(o.io["write_bytes"]) if "write_bytes" in o.io else "—"
            for step in steps:
                secs = "—" if o.report is None else format_seconds(o.report["seconds"][step])
                ok, detail = checks.get(step, (False, _status(o)))
                table.append(
                    [
                        step,
                        "oocarray" if o.side == "oc" else "NumPy on np.load(npy, mmap_mode='r')",
                        _status(o),
                        secs,
                        format_seconds(o.seconds),
                        "—" if o.peak_bytes is None else format_mib(o.peak_bytes),
                        "—" if o.oom_kills is None else str(o.oom_kills),
                        spilled,
                        written,
                        decoded,
                        load,
                        ("same" if ok else "**differs**") + f": {detail}"
                        if o.report is not None
                        else "—",
                    ]
                )
            if o.side == "oc":
                met = o.report is not None and all(ok for ok, _ in checks.values())
                rows.append(
                    TextRow(
                        id="W11H",
                        workload=f"{'+'.join(o.workloads)} on as_ndarray() of the "
                        f"{format_mib(ref['rows'] * ROW_BYTES)} zstd store, cgroup "
                        f"{format_mib(limit_bytes)}, Manager(max_bytes="
                        f"{format_mib(budget_bytes)}, spill={spill!r})",
                        oocarray=f"{_status(o)} in {format_seconds(o.seconds)}",
                        peer="see the table",
                        ratio="—",
                        target="completes, same results as on the raw data, no OOM kill",
                        met="yes" if met else "**no**",
                    )
                )
        return Result(
            rows=rows,
            tables=[
                Table(
                    title=(
                        f"W11-hard: {format_mib(ref['rows'] * ROW_BYTES)} (N, 64) float32, "
                        f"cgroup limit {format_mib(limit_bytes)} (page cache counted), "
                        f"budget {format_mib(budget_bytes)}, spill={spill!r}, percentile "
                        f"column blocks of {percentile_columns}"
                    ),
                    headers=(
                        "step",
                        "side",
                        "outcome",
                        "step time",
                        "child wall",
                        "cgroup peak",
                        "OOM kills",
                        "spill files (peak)",
                        "written to disk",
                        "chunks decoded",
                        "load 1/5 min",
                        "result",
                    ),
                    rows=table,
                )
            ],
            notes=notes,
        )
    finally:
        if made and not keep:
            shutil.rmtree(directory, ignore_errors=True)
        elif not keep:
            for name in ("x.zarr", "x.npy", "reference.json", "spill"):
                path = os.path.join(directory, name)
                if os.path.isdir(path):
                    shutil.rmtree(path, ignore_errors=True)
                else:
                    with contextlib.suppress(FileNotFoundError):
                        os.remove(path)


def run(quick: bool = False) -> Result:
    """``python -m benchmarks --large --only W11H``: 8 GiB in 1 GiB (``--quick``: 256 MiB in
    128 MiB), every workload."""
    if quick:
        return run_benchmark(
            256 * MiB, 128 * MiB, 32 * MiB, None, False, "mmap", WORKLOADS, 4, 600, 600
        )
    return run_benchmark(8 * GiB, GiB, 768 * MiB, None, False, "mmap", WORKLOADS, 4, 3600, 420)
