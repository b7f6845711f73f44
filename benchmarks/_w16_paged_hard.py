"""W16's percentile sides under a hard memory limit: one child process in a memory cgroup of
its own (``testkit.cgroup``), stopped after a given time, with what the kernel saw of it.

The child is ``python -c CODE`` as ``benchmarks.w16_sort_quantiles`` writes it: it prints
``BASE <json>`` once its imports are done (the timed work starts there), then ``END <json>``,
``GOT <json>`` and ``TIME <seconds>``.  Stopping is done from here, by ``SIGKILL`` at
``stop_after_s`` after ``BASE``: NumPy's partition is one C call that a Python alarm would not
interrupt.  Page faults come from the cgroup's ``memory.stat`` (its whole life, imports
included), storage traffic from ``/proc/PID/io`` sampled while the child runs (the last values
seen, so a stopped child's count too).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from benchmarks._harness import checkout_env
from benchmarks._timing import Result, Table, TextRow, format_bytes, format_mib, format_seconds
from benchmarks.w11_hard._runner import io_sampler
from datasets import w5_data
from testkit.cgroup import CgroupUnavailable, memory_cgroup

MiB = 1 << 20
IMPORT_TIMEOUT_S = 120.0  # imports and opening the store, before the timed work


@dataclass(frozen=True, slots=True)
class HardRun:
    """One child in a memory cgroup: its time (None when stopped or killed) and counters."""

    seconds: float | None
    stopped_after: float | None  # seconds of work when it was stopped, or None
    returncode: int
    oom_kills: int | None
    cgroup_peak: int | None
    vmhwm: int | None  # the child's own peak RSS, where it got to print it
    got: Any
    faults: int | None  # memory.stat pgfault
    major_faults: int | None  # memory.stat pgmajfault
    io: dict[str, int] = field(default_factory=dict)  # read_bytes, write_bytes
    stderr: str = ""

    @property
    def completed(self) -> bool:
        return self.seconds is not None


def drop_from_page_cache(path: str) -> None:
    """Drop the clean cached pages of the files under ``path`` (``POSIX_FADV_DONTNEED``, these
    files only), so that a child reads them from storage, charged to its own cgroup."""
    for directory, _, files in os.walk(path):
        for name in files:
            fd = os.open(os.path.join(directory, name), os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


def _memory_stat(path: str) -> dict[str, int]:
    out: dict[str, int] = {}
    try:
        with open(os.path.join(path, "memory.stat"), encoding="ascii") as f:
            for line in f:
                key, _, value = line.partition(" ")
                out[key] = int(value)
    except (OSError, ValueError):
        pass
    return out


def run_in_cgroup(
    code: str, limit_bytes: int, stop_after_s: float, env_extra: dict[str, str] | None = None
) -> HardRun:
    """Run ``python -c code`` in a new memory cgroup of ``limit_bytes``; kill it
    ``stop_after_s`` after it printed ``BASE``.  Raises ``CgroupUnavailable``."""
    env = checkout_env()
    env.update(env_extra or {})
    lines: list[str] = []
    started = threading.Event()
    stopped_after = None
    with tempfile.TemporaryFile("w+") as errors, memory_cgroup(limit_bytes) as group:
        proc = subprocess.Popen(
            group.command([sys.executable, "-c", code]),
            stdout=subprocess.PIPE,
            stderr=errors,
            env=env,
            text=True,
        )

        def read() -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                lines.append(line.rstrip("\n"))
                if line.startswith("BASE "):
                    started.set()

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        with io_sampler(proc.pid, interval=0.2) as io:
            started.wait(IMPORT_TIMEOUT_S)
            start = time.perf_counter()
            try:
                proc.wait(timeout=stop_after_s + 1.0)  # its own TIME excludes the exit
            except subprocess.TimeoutExpired:
                stopped_after = time.perf_counter() - start
                proc.kill()
                proc.wait()
        reader.join()
        stat = _memory_stat(group.path)
        peak, kills = group.peak_bytes(), group.oom_kills()
        errors.seek(0)
        stderr = errors.read()[-4000:]
    seconds, got, vmhwm = None, None, None
    for line in lines:
        if line.startswith("TIME "):
            seconds = float(line[5:])
        elif line.startswith("GOT "):
            got = json.loads(line[4:])
        elif line.startswith("END "):
            vmhwm = int(json.loads(line[4:]).get("VmHWM", 0))
    return HardRun(
        seconds,
        stopped_after,
        proc.returncode,
        kills,
        peak,
        vmhwm,
        got,
        stat.get("pgfault", stat.get("total_pgfault")),
        stat.get("pgmajfault", stat.get("total_pgmajfault")),
        dict(io),
        stderr,
    )


HARD_SLACK = 64 * MiB  # the cgroup's limit is the budget plus this (issue 24)
OOCARRAY_STOP_S = 900  # the oocarray side is not expected to need a stop; a guard


def _w5_store(directory: str, nbytes: int, quantiles: list[int]) -> tuple[str, int, np.ndarray]:
    """W5's store of ``nbytes`` in ``directory`` (written if missing; reused when a previous
    run left it there, with its percentiles in ``expected.json``), its rows, NumPy's result."""
    n_rows = w5_data.rows_for(nbytes)
    path = os.path.join(directory, "w5.zarr")
    expected_path = os.path.join(directory, "expected.json")
    if os.path.exists(expected_path):
        with open(expected_path, encoding="ascii") as f:
            saved = json.load(f)
        if saved["rows"] == n_rows:
            return path, n_rows, np.asarray(saved["percentile"])
    shutil.rmtree(path, ignore_errors=True)
    w5_data.write_zarr(path, n_rows)
    loaded = np.concatenate([w5_data.block(i, n_rows) for i in w5_data.blocks(n_rows)])
    expected_q = np.percentile(loaded, quantiles, axis=0, overwrite_input=True)
    del loaded
    with open(expected_path, "w", encoding="ascii") as f:
        json.dump({"rows": n_rows, "percentile": expected_q.tolist()}, f)
    return path, n_rows, expected_q


def run_paged_hard(
    nbytes: int,
    directory: str | None,
    max_paged_s: float | None,
    *,
    code_for: Callable[[str, str, int], str],
    quantiles: list[int],
    target: float,
    budget_fraction: int,
) -> Result:
    """The percentile on W5's store against NumPy on ``x.as_ndarray()``, both in the same
    budget B (an eighth of the data) *and* a hard memory cgroup of B + 64 MiB, the store
    dropped from the page cache before each side (its reads are charged to the side's
    cgroup).  oocarray runs before and after the paged side; the paged side runs once and is
    stopped at ``target`` times oocarray's first time (which already proves the target), or
    at ``max_paged_s`` if that is sooner (then reported as stopped at it).  ``code_for(side,
    path, budget)`` is a side's child code (``"oocarray"`` or ``"paged"``).  Needs root (a
    cgroup); the data stays in ``directory`` when one is given."""
    keep = directory is not None
    directory = directory or tempfile.mkdtemp(prefix="oocarray-w16-")
    os.makedirs(directory, exist_ok=True)
    spill = os.path.join(directory, "spill")
    os.makedirs(spill, exist_ok=True)
    env = {"OOCARRAY_SPILL_DIR": spill}
    runs: list[tuple[str, HardRun]] = []
    try:
        path, n_rows, expected_q = _w5_store(directory, nbytes, quantiles)
        budget = n_rows * w5_data.ROW_BYTES // budget_fraction
        limit = budget + HARD_SLACK

        def side(name: str, stop_after_s: float) -> HardRun:
            drop_from_page_cache(path)
            code = code_for(name, path, budget)
            run = run_in_cgroup(code, limit, stop_after_s, env)
            runs.append((name, run))
            if name == "oocarray":
                if not run.completed:
                    raise RuntimeError(f"W16 paged-hard: oocarray failed: {run.stderr}")
                got = np.asarray(run.got, np.float64)
                np.testing.assert_array_equal(got, expected_q, "W16 percentile (hard limit)")
            elif run.completed and run.got != "timeout":
                np.testing.assert_array_equal(np.asarray(run.got, np.float64), expected_q)
            return run

        first = side("oocarray", OOCARRAY_STOP_S)
        assert first.seconds is not None
        stop = target * first.seconds
        if max_paged_s is not None and max_paged_s < stop:
            stop = max_paged_s
        side("paged", stop)
        side("oocarray", OOCARRAY_STOP_S)
    except CgroupUnavailable as error:
        return Result([], [], [f"W16 paged-hard not run: {error}"])
    finally:
        if not keep:
            shutil.rmtree(directory, ignore_errors=True)
        else:
            shutil.rmtree(spill, ignore_errors=True)
    return _paged_hard_result(runs, n_rows, budget, limit, quantiles, target, stop)


def _paged_hard_result(
    runs: list[tuple[str, HardRun]],
    n_rows: int,
    budget: int,
    limit: int,
    quantiles: list[int],
    target: float,
    stop: float,
) -> Result:
    ooc_times = [r.seconds for name, r in runs if name == "oocarray" and r.seconds is not None]
    ooc = sum(ooc_times) / len(ooc_times)
    (paged,) = [r for name, r in runs if name == "paged"]
    if paged.seconds is not None:
        peer_text, faster = format_seconds(paged.seconds), f"{paged.seconds / ooc:.1f}x faster"
        met = paged.seconds / ooc >= target
    elif paged.stopped_after is not None:
        # Stopped at target x the oocarray run before it: that proves the target (the
        # issue's rule); against the mean of both oocarray runs it may read a little under.
        peer_text = f"> {format_seconds(paged.stopped_after)}, stopped"
        before = paged.stopped_after / ooc_times[0]
        faster = f"> {before:.1f}x the run before it, > {paged.stopped_after / ooc:.1f}x the mean"
        met = before >= target * 0.99  # the stop is target x, give or take a poll
    else:
        peer_text = f"killed (rc {paged.returncode}, OOM kills {paged.oom_kills})"
        faster, met = "n/a (NumPy did not complete)", True
    what = (
        f"np.percentile(x, {quantiles}, axis=0) of W5's store ({n_rows}, 64) float32 zstd, "
        f"`Manager(max_bytes={format_bytes(budget)})` in a hard cgroup of {format_mib(limit)}"
    )
    rows = [
        TextRow(
            "W16",
            what,
            f"{format_seconds(ooc)} (" + ", ".join(format_seconds(t) for t in ooc_times) + ")",
            f"{peer_text} (NumPy on x.as_ndarray(), same budget and limit)",
            faster,
            f">= {target:g}x faster",
            "yes" if met else "**no**",
        )
    ]

    def count(value: int | None) -> str:
        return "—" if value is None else f"{value:,}"

    detail = [
        [
            name,
            format_seconds(r.seconds)
            if r.seconds is not None
            else f"> {format_seconds(r.stopped_after or 0)} (stopped)"
            if r.stopped_after is not None
            else f"rc {r.returncode}",
            "—" if r.cgroup_peak is None else format_mib(r.cgroup_peak),
            "—" if r.vmhwm is None else format_mib(r.vmhwm),
            count(r.oom_kills),
            count(r.faults),
            count(r.major_faults),
            format_mib(r.io.get("read_bytes", 0)),
            format_mib(r.io.get("write_bytes", 0)),
        ]
        for name, r in runs
    ]
    table = Table(
        "W16 paged-hard runs, in order (each a fresh process in its own cgroup; faults from the "
        "cgroup's memory.stat, bytes from /proc/PID/io)",
        (
            "side",
            "time",
            "cgroup peak",
            "VmHWM",
            "OOM kills",
            "page faults",
            "major faults",
            "read",
            "written",
        ),
        detail,
    )
    notes = [
        f"Budget {format_bytes(budget)} (an eighth of the data), cgroup limit "
        f"{format_mib(limit)} (page cache counted, no swap); the store's pages dropped from "
        f"the page cache before each side; the paged side stopped at {format_seconds(stop)} "
        f"({stop / ooc_times[0]:.1f}x oocarray's first time) if not done (and 1 s of grace).",
    ]
    return Result(rows, [table], notes)
