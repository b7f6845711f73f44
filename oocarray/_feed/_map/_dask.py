"""map_chunks' dask engine: blocks as tasks of a ``distributed`` cluster.

Only the small :class:`~oocarray._feed._map._job.Job` travels with a task: each task reopens
its chunked inputs and its outputs by path in the worker process and writes its chunks there,
and ndarray inputs are scattered to workers block by block (see ``_dask.run_blocks``).
Imported only for ``engine="dask"``, since importing ``_dask`` imports ``distributed``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from oocarray._compute import ChunkedArray
from oocarray._feed import _dask
from oocarray._feed._map._blocks import infer_specs, run_block, thread_workspace
from oocarray._feed._map._job import Job, Spec
from oocarray._memory import active_manager, system

__all__ = ["DaskEngine", "remote_block", "remote_infer"]


class DaskEngine:
    """Blocks as tasks on a distributed cluster, through ``client``."""

    def __init__(self, client: Any, sources: Sequence[ChunkedArray | np.ndarray]) -> None:
        self.client = client
        self.arrays = [s for s in sources if not isinstance(s, ChunkedArray)]

    def _blocks(self, job: Job, index: int) -> list[np.ndarray]:
        region = job.region(index)
        return [a[region] for a in self.arrays]

    def infer(self, job: Job) -> list[Spec]:
        specs = _dask.run_one(self.client, remote_infer, job, self._blocks(job, 0))
        return [(np.dtype(d), tuple(s)) for d, s in specs]

    def run(self, job: Job, outputs: list[ChunkedArray], todo: list[int], bar: Any) -> None:
        _dask.run_blocks(self.client, remote_block, job, todo, lambda i: self._blocks(job, i), bar)


def _reopen(job: Job, blocks: Sequence[np.ndarray]) -> list[ChunkedArray | np.ndarray]:
    """A worker's inputs: chunked ones reopened (unpickled with the job), ndarray ones as
    handed over."""
    given = iter(blocks)
    return [s if s is not None else next(given) for s in job.sources]


def remote_block(job: Job, index: int, *blocks: np.ndarray) -> None:
    """A dask task: one block, in this worker thread's workspace under the active manager
    (the worker's budget when ``oocarray.dask.budgeted`` wraps it)."""
    manager = active_manager() or system()
    ws = thread_workspace(manager)
    inputs = _reopen(job, blocks)
    outputs = list(job.outputs)
    with manager.activate(), ws:
        run_block(job, index, inputs, outputs)
    for array in (*inputs, *outputs):
        if isinstance(array, ChunkedArray):
            array.close()


def remote_infer(job: Job, *blocks: np.ndarray) -> list[tuple[str, tuple[int, ...]]]:
    """A dask task: the outputs' dtypes (as strings) and row shapes from the first block."""
    inputs = _reopen(job, blocks)
    try:
        return [(d.str, s) for d, s in infer_specs(job, inputs)]
    finally:
        for array in inputs:
            if isinstance(array, ChunkedArray):
                array.close()
