"""W4: over-budget NumPy.  Peak resident memory of allocating 4x the budget.

Inside ``oc.Manager(max_bytes="256M")``, 32 arrays of 32 MiB (1 GiB, 4x the budget) are
allocated and filled with distinct data (``np.arange`` over consecutive ``int64`` ranges, so
no two arrays and no two elements are equal), then all are read back: each is summed and its
sum, first and last elements are compared with the values expected.  The peer is the same
code without a manager.  Target (PERFORMANCE.md): peak anonymous + shared RSS at most the
budget + 64 MiB, data intact.

Each run is a fresh Python process (``python -m benchmarks.w4_over_budget --child MODE``), so
its peaks are its own.  The parent samples ``/proc/<pid>/status`` of the child every 5 ms from
a thread that needs no GIL of the child; the child adds its own readings at the end of each
phase and its ``VmHWM``.  The kernel splits resident memory into ``RssAnon`` (anonymous),
``RssFile`` (pages of mapped files, including oocarray's temporary files on a disk file
system) and ``RssShmem`` (shared memory and tmpfs); each peak is reported on its own, and
"anonymous + shared" is checked both ways: with shared read as ``RssShmem`` and as
``RssFile``.

Sides: plain NumPy; the manager as asked (default ``spill="mmap"``: arrays over the budget are
placed in temporary files); the manager with ``oc.configure(max_physical_bytes=budget + 64M)``
as well (the watcher drops resident pages of on-disk arrays when the process is over it); and,
as an extra row that PERFORMANCE.md does not ask for, the manager with ``spill="evict"``.
"""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

import oocarray as oc
from benchmarks._disk import fs_description, scratch_spill_dir
from benchmarks._harness import checkout_env
from benchmarks._timing import Result, Table, TextRow, format_bytes, format_mib, format_seconds
from oocarray._memory._physical import watcher_stats

MiB = 1 << 20
BUDGET = 256 * MiB
HEADROOM = 64 * MiB
ARRAY_BYTES = 32 * MiB
TOTAL_BYTES = 4 * BUDGET
SAMPLE_INTERVAL_S = 0.005
ROOT = Path(__file__).resolve().parent.parent

# mode -> (label, extra row?)
MODES: dict[str, tuple[str, bool]] = {
    "numpy": ("plain NumPy, no manager", False),
    "manager": ('`Manager(max_bytes="256M")` (default `spill="mmap"`)', False),
    "physical": (
        '`Manager(max_bytes="256M")` + `configure(max_physical_bytes=256M + 64M)`',
        False,
    ),
    "evict": ('`Manager(max_bytes="256M", spill="evict")` (extra)', True),
}
FIELDS = ("RssAnon", "RssFile", "RssShmem")


# ---- the child: one run of the workload in a fresh process ----


def _status(path: str = "/proc/self/status") -> dict[str, int]:
    """RssAnon, RssFile, RssShmem and VmHWM in bytes (missing once a process has exited)."""
    values: dict[str, int] = {}
    with open(path, encoding="ascii") as status:
        for line in status:
            key, _, rest = line.partition(":")
            if key in FIELDS or key == "VmHWM":
                values[key] = int(rest.split()[0]) * 1024
    return values


@dataclass(frozen=True, slots=True)
class _Report:
    """What a child reports (as one JSON line on stdout)."""

    alloc_s: float
    read_s: float
    intact: int
    count: int
    checkpoints: dict[str, dict[str, int]]
    hwm: int
    placed: dict[str, int] | None
    watcher: dict[str, int]


def _child(mode: str) -> _Report:
    elements = ARRAY_BYTES // 8
    count = TOTAL_BYTES // ARRAY_BYTES
    if mode == "physical":
        oc.configure(max_physical_bytes=BUDGET + HEADROOM)
    scope: contextlib.AbstractContextManager[oc.Manager | None] = contextlib.nullcontext()
    if mode != "numpy":
        scope = oc.Manager("w4", max_bytes=BUDGET, spill="evict" if mode == "evict" else "mmap")
    checkpoints = {"baseline": _status()}
    arange = np.arange
    with scope as manager:
        start = time.perf_counter()
        arrays = [arange(i * elements, (i + 1) * elements, dtype=np.int64) for i in range(count)]
        alloc_s = time.perf_counter() - start
        checkpoints["allocated"] = _status()
        start = time.perf_counter()
        intact = 0
        for i, a in enumerate(arrays):
            first = i * elements
            expected = elements * first + elements * (elements - 1) // 2
            if (
                int(a.sum()) == expected
                and int(a[0]) == first
                and int(a[-1]) == first + elements - 1
            ):
                intact += 1
        read_s = time.perf_counter() - start
        checkpoints["read"] = _status()
        placed = None
        if manager is not None:
            s = manager.stats()
            placed = {"ram": s.ram_bytes, "mmap": s.mmap_bytes, "spilled": s.spilled_bytes}
        del arrays
    w = watcher_stats()
    return _Report(
        alloc_s=alloc_s,
        read_s=read_s,
        intact=intact,
        count=count,
        checkpoints=checkpoints,
        hwm=_status()["VmHWM"],
        placed=placed,
        watcher={"checks": w.checks, "spill_rounds": w.spill_rounds, "drops": w.page_drops},
    )


# ---- the parent: runs children and samples them ----


@dataclass
class _Peaks:
    anon: int = 0
    file: int = 0
    shmem: int = 0
    anon_shmem: int = 0
    anon_file: int = 0
    samples: int = 0

    def add(self, status: dict[str, int]) -> None:
        if not all(key in status for key in FIELDS):
            return
        anon, file, shmem = (status[key] for key in FIELDS)
        self.anon = max(self.anon, anon)
        self.file = max(self.file, file)
        self.shmem = max(self.shmem, shmem)
        self.anon_shmem = max(self.anon_shmem, anon + shmem)
        self.anon_file = max(self.anon_file, anon + file)
        self.samples += 1


@dataclass(frozen=True, slots=True)
class _Run:
    peaks: _Peaks
    report: _Report


def _sample(pid: int, peaks: _Peaks, stop: threading.Event) -> None:
    path = f"/proc/{pid}/status"
    while not stop.is_set():
        try:
            peaks.add(_status(path))
        except (OSError, ValueError):
            return
        stop.wait(SAMPLE_INTERVAL_S)


def _run_child(mode: str, spill_dir: str) -> _Run:
    env = checkout_env({k: v for k, v in os.environ.items() if not k.startswith("OOCARRAY_")})
    env["OOCARRAY_SPILL_DIR"] = spill_dir
    command = [sys.executable, "-m", "benchmarks.w4_over_budget", "--child", mode]
    peaks = _Peaks()
    stop = threading.Event()
    with subprocess.Popen(
        command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as child:
        sampler = threading.Thread(target=_sample, args=(child.pid, peaks, stop), daemon=True)
        sampler.start()
        out, err = child.communicate()
        stop.set()
        sampler.join()
    if child.returncode != 0:
        raise RuntimeError(f"W4 child {mode!r} failed ({child.returncode}):\n{err[-4000:]}")
    report = _Report(**json.loads(out.strip().splitlines()[-1]))
    for status in report.checkpoints.values():
        peaks.add(status)
    return _Run(peaks, report)


def run(quick: bool = False) -> Result:
    with scratch_spill_dir("oocarray-w4-") as directory:
        return _run_in(directory, quick)


def _run_in(directory: str, quick: bool) -> Result:
    repeats = 1 if quick else 3
    modes = list(MODES)
    runs: dict[str, list[_Run]] = {mode: [] for mode in modes}
    for r in range(repeats):
        shift = r % len(modes)
        for mode in modes[shift:] + modes[:shift]:
            runs[mode].append(_run_child(mode, directory))
    limit = BUDGET + HEADROOM
    fs = fs_description(directory)

    def worst(mode: str, field: str) -> int:
        return max(int(getattr(run.peaks, field)) for run in runs[mode])

    def met(value: int) -> str:
        return "yes" if value <= limit else "**no**"

    table_rows = []
    main_rows = []
    plain_anon = worst("numpy", "anon_shmem")
    for mode in modes:
        label, extra = MODES[mode]
        reports = [run.report for run in runs[mode]]
        intact = sum(rep.intact for rep in reports)
        expected = sum(rep.count for rep in reports)
        baseline = statistics.median(rep.checkpoints["baseline"]["RssAnon"] for rep in reports)
        baseline_file = statistics.median(rep.checkpoints["baseline"]["RssFile"] for rep in reports)
        hwm = max(rep.hwm for rep in reports)
        alloc_s = statistics.median(rep.alloc_s for rep in reports)
        read_s = statistics.median(rep.read_s for rep in reports)
        samples = min(run.peaks.samples for run in runs[mode])
        anon_shmem = worst(mode, "anon_shmem")
        anon_file = worst(mode, "anon_file")
        watcher = reports[-1].watcher
        placed = reports[-1].placed
        table_rows.append(
            [
                label,
                format_mib(worst(mode, "anon")),
                format_mib(worst(mode, "file")),
                format_mib(worst(mode, "shmem")),
                format_mib(anon_shmem),
                format_mib(anon_file),
                format_mib(hwm),
                f"{format_mib(int(baseline))} / {format_mib(int(baseline_file))}",
                f"{format_seconds(alloc_s)} / {format_seconds(read_s)}",
                f"{intact}/{expected}",
                met(anon_shmem) if mode != "numpy" else f"({met(anon_shmem)})",
                met(anon_file) if mode != "numpy" else f"({met(anon_file)})",
                str(samples),
                "—"
                if placed is None
                else (
                    f"{format_bytes(placed['ram'])} / {format_bytes(placed['mmap'])} / "
                    f"{format_bytes(placed['spilled'])}"
                ),
                f"{watcher['spill_rounds']} / {watcher['drops']}" if mode == "physical" else "—",
            ]
        )
        if mode == "numpy" or extra:
            continue
        ok = intact == expected
        main_rows.append(
            TextRow(
                id="W4" if mode == "manager" else "W4+phys",
                workload=(
                    f"{format_bytes(TOTAL_BYTES)} in {format_bytes(ARRAY_BYTES)} arrays, then read "
                    f"all, in {label}; peak RSS"
                ),
                oocarray=(
                    f"anon+shmem {format_mib(anon_shmem)}; anon+file {format_mib(anon_file)}"
                ),
                peer=f"anon+shmem {format_mib(plain_anon)} (plain NumPy)",
                ratio=f"{anon_shmem / plain_anon:.2f}x (anon+shmem)",
                target=f"anon+shared <= {format_mib(limit)}, data intact",
                met=(
                    f"{'yes' if anon_shmem <= limit and ok else '**no**'} (shared = RssShmem); "
                    f"{'yes' if anon_file <= limit and ok else '**no**'} (shared = RssFile)"
                ),
            )
        )
    table = Table(
        title=(
            f"Over budget (W4): {format_bytes(TOTAL_BYTES)} in {format_bytes(ARRAY_BYTES)} `int64` "
            f"arrays, budget {format_bytes(BUDGET)}, limit {format_mib(limit)}; peaks are the "
            f"highest of {repeats} fresh processes per side (sampled every "
            f"{SAMPLE_INTERVAL_S * 1000:g} ms plus phase ends); spill directory on {fs}"
        ),
        headers=(
            "side",
            "peak RssAnon",
            "peak RssFile",
            "peak RssShmem",
            "peak anon+shmem",
            "peak anon+file",
            "VmHWM",
            "baseline anon / file",
            "allocate+fill / read",
            "arrays intact",
            "anon+shmem <= limit",
            "anon+file <= limit",
            "samples (min)",
            "placed: RAM / file / spilled",
            "watcher spills / page drops",
        ),
        rows=table_rows,
    )
    return Result(rows=main_rows, tables=[table])


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--child" and sys.argv[2] in MODES:
        print(json.dumps(asdict(_child(sys.argv[2]))))
    else:
        raise SystemExit("usage: python -m benchmarks.w4_over_budget --child {numpy,manager,...}")
