"""One block of a map_chunks job: read it, call ``fn``, check and write what it returns, mark
it done.  Both engines run blocks through here, the dask one in worker processes."""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from oocarray._compute import ChunkedArray
from oocarray._feed._map._job import Job, Spec
from oocarray._feed._map._sidecar import mark_done, place_of
from oocarray._memory import Manager, Workspace

__all__ = ["infer_specs", "results_of", "run_block", "thread_workspace", "write_results"]


def results_of(job: Job, result: Any, region: slice) -> list[np.ndarray]:
    """``fn``'s result for a block as one array per output, each checked for its rows."""
    rows = region.stop - region.start
    where = f"fn's result for rows {region.start}:{region.stop}"
    if job.structure == "one":
        arrays = [result]
    elif job.structure == "tuple":
        if not isinstance(result, (tuple, list)) or len(result) != len(job.names):
            raise TypeError(
                f"{where} must be a tuple of {len(job.names)} arrays (one per output), got "
                f"{type(result).__name__}"
            )
        arrays = list(result)
    else:
        if not isinstance(result, Mapping) or set(result) != set(job.names):
            keys = sorted(result) if isinstance(result, Mapping) else type(result).__name__
            raise TypeError(
                f"{where} must be a dict with the keys of out {list(job.names)}, got {keys}"
            )
        arrays = [result[name] for name in job.names]
    checked = []
    for name, array in zip(job.names, arrays, strict=True):
        a = np.asarray(array)
        if a.ndim == 0 or a.shape[0] != rows:
            raise ValueError(
                f"{where}, output {name}, has shape {a.shape}; it must have {rows} rows, one per "
                "input row"
            )
        checked.append(a)
    return checked


def _blocks_of(blocks: Sequence[ChunkedArray | np.ndarray], region: slice) -> list[np.ndarray]:
    # Chunked inputs are read here; ndarray ones were handed over as the block already.
    return [b[region] if isinstance(b, ChunkedArray) else b for b in blocks]


def run_block(
    job: Job,
    index: int,
    blocks: Sequence[ChunkedArray | np.ndarray],
    outputs: Sequence[ChunkedArray],
) -> None:
    """Read a block (ChunkedArray inputs; ndarray ones come as the block), call ``fn``, write
    its results, then mark the block done in each output.  Runs in the caller's workspace."""
    region = job.region(index)
    data = _blocks_of(blocks, region)
    arrays = results_of(job, job.fn(*data), region)
    del data  # the inputs' memory goes back to the workspace before the writes
    write_results(job, index, arrays, outputs)


def write_results(
    job: Job, index: int, arrays: Sequence[np.ndarray], outputs: Sequence[ChunkedArray]
) -> None:
    """Write block ``index``'s results, then (only then) mark it done in every output."""
    region = job.region(index)
    for array, out in zip(arrays, outputs, strict=True):
        if array.shape[1:] != out.shape[1:]:
            raise ValueError(
                f"fn's result for rows {region.start}:{region.stop} has rows of shape "
                f"{array.shape[1:]}, but the output at {out.path!r} has rows of shape "
                f"{out.shape[1:]}"
            )
        out[region] = array
    for out in outputs:
        mark_done(place_of(out), index)


def infer_specs(job: Job, blocks: Sequence[ChunkedArray | np.ndarray]) -> list[Spec]:
    """The outputs' dtypes and row shapes, from ``fn`` on the first block."""
    region = job.region(0)
    return [
        (a.dtype, a.shape[1:]) for a in results_of(job, job.fn(*_blocks_of(blocks, region)), region)
    ]


_local = threading.local()


def thread_workspace(manager: Manager) -> Workspace:
    """This thread's cyclic workspace under ``manager``, kept from one block to the next."""
    cached = getattr(_local, "workspace", None)
    if cached is not None and cached[0] is manager and not cached[1].closed:
        return cached[1]  # type: ignore[no-any-return]
    if cached is not None and not cached[1].closed:
        cached[1].destroy()
    with manager.activate():
        # "pin": an array fn keeps past its block stays valid instead of failing the block.
        ws = Workspace("map_chunks", learning="over_time", on_escape="pin")
    _local.workspace = (manager, ws)
    return ws
