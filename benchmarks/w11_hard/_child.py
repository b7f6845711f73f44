"""A W11-hard child: the workloads on one side (``oc`` or ``numpy``) in this process, run by
``python -m benchmarks.w11_hard --child ...``; a JSON report on stdout."""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from benchmarks.w11_hard._compute import (
    filter_batch_rows,
    filter_digests,
    pca_fit,
    percentile_blocks,
)
from benchmarks.w11_hard._data import QUANTILES, Data


def _status_bytes(key: str) -> int:
    with open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    return 0


def run_step(step: str, a: np.ndarray, data: Data, budget: int, columns: int) -> Any:
    """One step of plain NumPy/SciPy code on ``a``; its JSON-able result."""
    if step == "mean":
        return np.mean(a, axis=0).tolist()
    if step == "mean64":
        return np.mean(a, axis=0, dtype=np.float64).tolist()
    if step == "percentile":
        return percentile_blocks(a, columns)
    if step == "percentile-whole":
        return np.percentile(a, QUANTILES, axis=0).tolist()
    if step == "pca":
        return pca_fit(a)
    if step == "filter":
        return filter_digests(a, filter_batch_rows(budget))
    if step == "load":
        return np.mean(np.load(data.npy), axis=0).tolist()
    raise ValueError(f"unknown step {step!r}")


def child(
    workloads: Sequence[str],
    side: str,
    directory: str,
    budget: int,
    spill: str,
    percentile_columns: int,
) -> dict[str, Any]:
    """Run ``workloads`` on one side in this process; a JSON-able report."""
    data = Data(directory)
    report: dict[str, Any] = {"seconds": {}, "results": {}}
    with contextlib.ExitStack() as stack:
        if side == "oc":
            import oocarray as oc

            manager = stack.enter_context(oc.Manager("w11-hard", max_bytes=budget, spill=spill))
            on_disk = stack.enter_context(spill_sampler(manager))
            x = oc.open(data.store)
            a = x.as_ndarray()
        elif side == "numpy":
            a = np.load(data.npy, mmap_mode="r")
        else:
            raise ValueError(f"side must be 'oc' or 'numpy', got {side!r}")
        for workload in workloads:
            for step in ("mean", "mean64") if workload == "mean" else (workload,):
                start = time.perf_counter()
                got = run_step(step, a, data, budget, percentile_columns)
                report["seconds"][step] = time.perf_counter() - start
                if step == "pca":
                    got, report["pca_which"] = got
                report["results"][step] = got
                print(f"{step}: {report['seconds'][step]:.1f} s", file=sys.stderr, flush=True)
        if side == "oc":
            report["paging"] = x.paging_stats()
            stats = manager.stats()
            report["manager"] = {
                "peak_bytes": stats.peak_bytes,
                "total_bytes": stats.total_bytes,
                "spills": stats.spills,
                "spill_moved_bytes": stats.spill_moved_bytes,
                "disk_peak_bytes": on_disk[0],
            }
        del a
    report["hwm"] = _status_bytes("VmHWM")
    report["io"] = proc_io("self")
    return report


@contextlib.contextmanager
def spill_sampler(manager: Any, interval: float = 0.02) -> Iterator[list[int]]:
    """Samples ``manager.stats()`` while the block runs: the peak bytes it had in files
    (``mmap_bytes + spilled_bytes``, compressed chunks counted at their disk size)."""
    peak = [0]
    stop = threading.Event()

    def on_disk() -> int:
        s = manager.stats()
        return int(s.mmap_bytes + s.spilled_bytes - s.compressed_bytes + s.compressed_disk_bytes)

    def sample() -> None:
        while not stop.wait(interval):
            peak[0] = max(peak[0], on_disk())

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    try:
        yield peak
    finally:
        stop.set()
        thread.join()


def proc_io(pid: int | str) -> dict[str, int]:
    """``/proc/PID/io``: bytes the process made the kernel read from and write to storage."""
    out: dict[str, int] = {}
    try:
        with open(f"/proc/{pid}/io", encoding="ascii") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key in ("read_bytes", "write_bytes"):
                    out[key] = int(value)
    except OSError:
        pass
    return out
