"""Running W11-hard children in a memory cgroup (and the reference outside one), from the
parent: what each child did, what the cgroup and the disk saw."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from benchmarks.w11_hard._child import proc_io
from benchmarks.w11_hard._data import ROOT, Data, drop_page_cache
from testkit.cgroup import memory_cgroup


@dataclass(frozen=True, slots=True)
class Outcome:
    """One child under a limit: killed or not, its report, what the cgroup and disk saw."""

    workloads: tuple[str, ...]
    side: str
    returncode: int
    killed: bool
    timed_out: bool
    oom_kills: int | None
    peak_bytes: int | None
    io: dict[str, int]
    seconds: float
    report: dict[str, Any] | None
    stderr: str


@contextlib.contextmanager
def io_sampler(pid: int, interval: float = 0.5) -> Iterator[dict[str, int]]:
    """Samples ``/proc/PID/io`` while the block runs; the dict holds the last values seen
    (the storage reads and writes of a child that is killed or stopped, too)."""
    last: dict[str, int] = {}
    stop = threading.Event()

    def sample() -> None:
        while True:
            seen = proc_io(pid)
            if seen:
                last.update(seen)
            if stop.wait(interval):
                return

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    try:
        yield last
    finally:
        stop.set()
        thread.join()


def child_env(data: Data) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OOCARRAY_")}
    env["OOCARRAY_SPILL_DIR"] = data.spill_dir
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env["OMP_NUM_THREADS"] = "1"  # the children and the reference: the same BLAS threads
    env["OPENBLAS_NUM_THREADS"] = "1"
    return env


def run_reference(data: Data, timeout: float = 3600) -> dict[str, Any]:
    """Compute the reference in a separate process (no cgroup), with the children's
    environment; cached in ``reference.json``."""
    if not os.path.exists(data.reference_path):
        cmd = [sys.executable, "-m", "benchmarks.w11_hard", "--reference", data.directory]
        subprocess.run(cmd, cwd=ROOT, env=child_env(data), check=True, timeout=timeout)
    return data.reference()


def run_limited(
    data: Data,
    workloads: Sequence[str],
    side: str,
    *,
    limit_bytes: int,
    budget_bytes: int,
    spill: str = "mmap",
    percentile_columns: int = 4,
    timeout: float = 3600,
) -> Outcome:
    """Run ``workloads`` on ``side`` in one child in a new memory cgroup of ``limit_bytes``,
    the store and the .npy dropped from the page cache first.  Raises CgroupUnavailable."""
    drop_page_cache(data)
    args = [",".join(workloads), side, data.directory, str(budget_bytes), spill]
    python = [sys.executable, "-m", "benchmarks.w11_hard", "--child", *args]
    python.append(str(percentile_columns))
    timed_out = False
    with memory_cgroup(limit_bytes) as group:
        start = time.perf_counter()
        proc = subprocess.Popen(
            group.command(python),
            cwd=ROOT,
            env=child_env(data),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        with io_sampler(proc.pid) as io:
            try:
                stdout, stderr = proc.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                timed_out = True
                proc.kill()
                stdout, stderr = proc.communicate()
        seconds = time.perf_counter() - start
        peak, kills = group.peak_bytes(), group.oom_kills()
    killed = proc.returncode in (-9, 137) and not timed_out
    report = None
    if proc.returncode == 0 and stdout.strip():
        report = json.loads(stdout.strip().splitlines()[-1])
    return Outcome(
        tuple(workloads),
        side,
        proc.returncode,
        killed,
        timed_out,
        kills,
        peak,
        dict(io),
        seconds,
        report,
        stderr,
    )
