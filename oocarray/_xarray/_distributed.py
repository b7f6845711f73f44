"""The chunk manager's ``compute`` and ``store`` on a ``dask.distributed`` cluster.

With a client given (``ds.compute(client=c)``, ``to_zarr(...,
chunkmanager_store_kwargs={"client": c})``) or active (``distributed.default_client()``), each
block of the result is a task: the worker evaluates the block's region of the oocarray tree
under its own budget (``oocarray.dask.MemoryBudgetPlugin``, through the same ``budgeted``
wrapper ``map_chunks(engine="dask")`` uses), reading stored inputs by path.  ``compute`` gathers
the blocks into the result; ``store`` has each worker write its block into the target when the
target travels (a zarr array does), else writes the blocks as they come back.  A few tasks per
worker thread are in flight at a time, so finished blocks never pile up on the client.
"""

from __future__ import annotations

import pickle
import sys
import uuid
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from oocarray._compute import Expr
from oocarray._compute._nodes import Node

__all__ = ["active_client", "compute_blocks", "store_blocks"]

Region = tuple[slice, ...]


def active_client(given: Any) -> Any:
    """``given``, else the default ``distributed`` client where one is active, else None.
    (``distributed`` is consulted only when something already imported it.)"""
    if given is not None:
        return given
    if "distributed" not in sys.modules:
        return None
    import distributed

    try:
        return distributed.default_client()  # type: ignore[no-untyped-call]
    except ValueError:
        return None


def evaluate_region(node: Node, region: Region) -> np.ndarray:
    """A task: the values of ``region`` of ``node``, in the worker."""
    return np.asarray(Expr(node)[region])


def write_region(node: Node, region: Region, target: Any, placed: Region) -> None:
    """A task: ``region`` of ``node`` written to ``placed`` of ``target``, in the worker."""
    target[placed] = np.asarray(Expr(node)[region])


def _run(
    client: Any,
    task: Callable[..., Any],
    jobs: Sequence[tuple[Any, ...]],
    done: Callable[[int, Any], None],
) -> None:
    """``task(*job)`` for every job on the cluster under each worker's budget, a window at a
    time; ``done(i, result)`` on this thread as each finishes.  After an error nothing more is
    submitted and the first error is raised once the tasks out have finished."""
    import distributed

    from oocarray._feed._dask import budgeted

    window = 2 * max(1, sum(client.nthreads().values()))
    queue: Iterator[int] = iter(range(len(jobs)))
    wrapped = budgeted(task)
    token = uuid.uuid4().hex[:12]
    index_of: dict[Any, int] = {}

    def submit(count: int) -> list[Any]:
        futures = []
        for i in [i for _, i in zip(range(count), queue, strict=False)]:
            future = client.submit(wrapped, *jobs[i], key=f"oocarray-block-{token}-{i}")
            index_of[future] = i
            futures.append(future)
        return futures

    pending = distributed.as_completed(submit(window), loop=client.loop)  # type: ignore[no-untyped-call]
    failure: Exception | None = None
    for future in pending:
        i = index_of.pop(future)
        try:
            result = future.result()
        except Exception as error:
            failure = failure or error
            continue
        done(i, result)
        if failure is None:
            pending.update(submit(1))  # type: ignore[no-untyped-call]
    if failure is not None:
        raise failure


def compute_blocks(client: Any, node: Node, regions: Sequence[Region]) -> np.ndarray:
    """The values of ``node``, each region computed by a worker."""
    out = np.empty(node.shape, node.dtype)
    [shared] = client.scatter([node], hash=False, broadcast=True)

    def place(i: int, block: np.ndarray) -> None:
        out[regions[i]] = block

    _run(client, evaluate_region, [(shared, r) for r in regions], place)
    return out


def _travels(target: Any) -> bool:
    try:
        pickle.dumps(target)
    except Exception:
        return False
    return True


def store_blocks(
    client: Any, node: Node, regions: Sequence[Region], target: Any, placed: Sequence[Region]
) -> None:
    """``node`` written into ``target``: region ``regions[i]`` at ``placed[i]``, each computed
    (and, where ``target`` pickles, written) by a worker."""
    [shared] = client.scatter([node], hash=False, broadcast=True)
    if _travels(target):
        jobs = [(shared, r, target, p) for r, p in zip(regions, placed, strict=True)]
        _run(client, write_region, jobs, lambda i, result: None)
        return

    def write(i: int, block: np.ndarray) -> None:
        target[placed[i]] = block

    _run(client, evaluate_region, [(shared, r) for r in regions], write)
