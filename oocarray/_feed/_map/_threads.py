"""map_chunks' threads engine: blocks on worker threads of this process, each thread in a
cyclic workspace of its own under the manager that was active when map_chunks was called."""

from __future__ import annotations

import concurrent.futures
import math
import os
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from oocarray._compute import ChunkedArray
from oocarray._compute._engine import budget_left
from oocarray._compute._interrupt import DeferredInterrupt
from oocarray._feed._map._blocks import results_of, run_block, thread_workspace, write_results
from oocarray._feed._map._job import Job, Spec
from oocarray._memory import Workspace, active_manager, system

__all__ = ["ThreadsEngine"]

MAX_WORKERS = 8


class ThreadsEngine:
    """Blocks on worker threads of this process, in the active manager."""

    def __init__(self, sources: Sequence[ChunkedArray | np.ndarray], workers: int | None):
        self.sources = list(sources)
        self.workers = workers
        self.manager = active_manager() or system()
        self.first: tuple[np.ndarray, ...] | None = None  # the inferring call's results

    def infer(self, job: Job) -> list[Spec]:
        region = job.region(0)
        data = [s[region] for s in self.sources]
        arrays = results_of(job, job.fn(*data), region)
        self.first = tuple(arrays)
        return [(a.dtype, a.shape[1:]) for a in arrays]

    def _worker_count(self, job: Job, todo: int) -> int:
        if self.workers is not None:
            return min(self.workers, max(1, todo))
        try:
            cpus = len(os.sched_getaffinity(0))
        except (AttributeError, OSError):  # pragma: no cover - platforms without affinity
            cpus = os.cpu_count() or 1
        count = max(1, min(cpus, MAX_WORKERS, todo))
        budget = budget_left(self.manager)
        if budget is not None:
            row_bytes = sum(math.prod(s.shape[1:]) * s.dtype.itemsize for s in self.sources)
            # A worker holds a block's inputs, temporaries and outputs: about four times its input.
            count = max(1, min(count, budget // max(1, 4 * row_bytes * job.block_rows)))
        return count

    def run(self, job: Job, outputs: list[ChunkedArray], todo: list[int], bar: Any) -> None:
        if self.first is not None and 0 in todo:
            # The block the dtypes were inferred from is written, not computed again.
            write_results(job, 0, self.first, outputs)
            todo = todo[1:]
            bar.update(1)
        self.first = None
        if not todo:
            return
        count = self._worker_count(job, len(todo))
        workspaces: list[Workspace] = []
        lock = threading.Lock()

        def task(index: int) -> None:
            ws = thread_workspace(self.manager)
            with lock:
                if ws not in workspaces:
                    workspaces.append(ws)
            region = job.region(index)
            with self.manager.activate(), ws:
                # ndarray inputs are handed over as their block: run_block slices chunked ones.
                blocks = [s if isinstance(s, ChunkedArray) else s[region] for s in self.sources]
                run_block(job, index, blocks, outputs)

        try:
            _run_threads(task, todo, count, bar)
        finally:
            for ws in workspaces:
                ws.destroy()


def _run_threads(task: Callable[[int], None], todo: list[int], count: int, bar: Any) -> None:
    """Run ``task`` on every index with ``count`` threads, a few queued each; on an error or
    Ctrl-C, blocks not started are dropped and those running finish (chunks stay whole)."""
    queue: Iterator[int] = iter(todo)
    # Ctrl-C is raised where the loop waits, never inside submit() (see _interrupt.py).
    with (
        DeferredInterrupt() as interrupt,
        concurrent.futures.ThreadPoolExecutor(count, "oocarray-map-chunks") as pool,
    ):
        in_flight = {pool.submit(task, i) for i in _take(queue, 2 * count)}
        try:
            while in_flight:
                interrupt.check()
                done, in_flight = concurrent.futures.wait(
                    in_flight, timeout=0.1, return_when=concurrent.futures.FIRST_COMPLETED
                )
                for future in done:
                    future.result()
                    bar.update(1)
                    in_flight |= {pool.submit(task, i) for i in _take(queue, 1)}
        except BaseException:
            for future in in_flight:
                future.cancel()
            raise


def _take(queue: Iterator[int], n: int) -> list[int]:
    return [i for _, i in zip(range(n), queue, strict=False)]
