"""``oc.map_chunks``: a function over aligned row blocks of its inputs, written to zarr outputs.

The inputs (chunked arrays and ndarrays of one length along axis 0) are cut into blocks of
rows that follow their chunks; ``fn`` gets the block of every input and returns the block of
every output, which is written as whole chunks.  A block's completion is recorded after its
chunks are written, so a rerun of an interrupted job skips what is done.

This module checks the call and drives the run; the parts live beside it, in this package:

- ``_args``: checking inputs, outputs, ``dtype=`` and ``row_shape=``;
- ``_job``: the job every block needs, and the rows per block;
- ``_sidecar``: the resume record in each output (``.oocarray-map-chunks/``);
- ``_outputs``: resuming or creating the outputs;
- ``_blocks``: one block, read, computed, written and marked;
- ``_threads``: the threads engine (worker threads of this process);
- ``_dask``: the dask engine (tasks of a ``distributed`` cluster, by path).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal, Protocol

import numpy as np

from oocarray._compute import ChunkedArray
from oocarray._compute._progress import progress_bar
from oocarray._feed._map import _sidecar as sidecar
from oocarray._feed._map._args import (
    Target,
    common_length,
    parse_dtypes,
    parse_input,
    parse_out,
    parse_row_shapes,
    parse_workers,
)
from oocarray._feed._map._job import Job, Spec, block_rows_for
from oocarray._feed._map._outputs import check_existing, open_outputs
from oocarray._feed._map._threads import ThreadsEngine
from oocarray._storage._objects._urls import Remote
from oocarray._storage._replace import refuse_replacing_an_input
from oocarray._storage._zarr._coords import check_coords, parse_coords, write_coords
from oocarray._storage._zarr._groups import refresh_consolidated

__all__ = ["map_chunks"]


class Engine(Protocol):
    """Where blocks run: ``_threads.ThreadsEngine`` or ``_dask.DaskEngine``."""

    def infer(self, job: Job) -> list[Spec]:
        """The outputs' dtypes and row shapes, from ``fn`` on the first block."""
        ...

    def run(self, job: Job, outputs: list[ChunkedArray], todo: list[int], bar: Any) -> None:
        """Run the blocks ``todo``, updating ``bar`` as each finishes."""
        ...


def map_chunks(
    fn: Callable[..., Any],
    *inputs: ChunkedArray | np.ndarray,
    out: Any,
    dtype: Any = None,
    row_shape: Any = None,
    block_rows: int | None = None,
    codec: str = "zstd",
    engine: Literal["threads", "dask"] = "threads",
    client: Any = None,
    workers: int | None = None,
    worker_max_bytes: int | str | None = None,
    resume: bool = True,
    progress: bool = True,
    storage_options: Mapping[str, Any] | None = None,
    dataset: Any = None,
    coords: Any = None,
) -> Any:
    """Apply ``fn`` to aligned row blocks of ``inputs`` and write what it returns to zarr.

    ``fn(*blocks)`` gets one ``np.ndarray`` per input, the same rows of each (a block follows
    the inputs' chunks along axis 0), and returns as many rows: one array for one output, a
    tuple for a tuple of outputs, a dict for a dict of outputs.  Blocks run in parallel, each
    worker holding one block at a time in a cyclic workspace (so temporaries reuse the same
    memory and the active manager's budget applies), and each block's output chunks are
    written whole.  Work longer than about two seconds shows a progress bar on a terminal or
    in Jupyter, and ends with one summary line on stderr elsewhere (a log).

    Parameters
    ----------
    fn
        ``fn(*blocks) -> array | tuple | dict``; every array has the block's number of rows.
    *inputs
        ``ChunkedArray`` or ``np.ndarray`` (memory maps too), of one length along axis 0.
    out
        Where results go: a path (a zarr array is created there, one chunk per block) or an
        open zarr ``ChunkedArray`` of the right shape, or a tuple or dict of them when ``fn``
        returns several arrays.  At a path, an output of an earlier ``map_chunks`` run is
        resumed or replaced (see ``resume``); anything else there (a zarr array map_chunks
        did not write, another directory, a file) raises
        :class:`~oocarray.StoreExistsError` before any work, and is left as it was.
    dtype, row_shape
        The outputs' dtype and shape of one row (``shape[1:]``), the same structure as ``out``
        (or one value for all).  What is not given is taken from ``fn``'s result on the first
        block (which is then written, not computed twice); an existing output being resumed
        keeps its own.
    block_rows
        Rows per block.  Default: the inputs' chunk rows (shards for sharded arrays), or their
        least common multiple when they differ by little; about 4 MiB of rows for ndarrays.
        Must be a multiple of each existing output's chunk rows.
    codec
        Compression of created outputs (as in :func:`oocarray.create`).
    engine
        ``"threads"`` (this process) or ``"dask"`` (a ``distributed`` cluster: ``client``, or
        a ``LocalCluster`` started and closed here).  With dask, each task reads its inputs
        and writes its outputs by path in the worker process; ndarray inputs travel block by
        block straight to workers (``scatter``), not through the scheduler.
    client
        A ``distributed.Client`` for ``engine="dask"``.
    workers
        Worker threads (threads engine; default: the cores, fewer when the active manager's
        budget is small), or worker processes of the ``LocalCluster`` started when ``client``
        is None.
    worker_max_bytes
        With ``engine="dask"`` and no ``client``: each worker's budget, through
        :class:`oocarray.dask.MemoryBudgetPlugin` (with a client, register the plugin
        yourself).
    resume
        Skip blocks that an earlier run of the same job finished (the inputs' paths, shapes
        and dtypes, the rows per block, ``fn``'s name and the outputs' shapes and dtypes
        match).  A different job starts the outputs over.  ``False`` always starts over: pass
        it after changing ``fn``'s code or the inputs' data.
    progress
        ``False`` turns the progress bar (or summary line) off.
    storage_options
        For outputs given as object-store URLs (``s3://...``): the backend's options, as
        for :func:`oocarray.create`.
    dataset
        Names of the outputs inside zarr groups, the structure of ``out`` (one name for one
        output, a tuple or a dict with ``out``'s keys; ``None`` for an output without a
        group): a path is then a zarr group (made if needed; its other arrays stay) and the
        output is the array of that name in it, resumed or replaced as above, so several
        outputs share one group that ``xarray.open_zarr(path)`` opens.  Created outputs get
        xarray's default axis names (``dim_0``, ...); to name the axes, make the output with
        ``oc.create(path, ..., dataset=name, dimension_names=...)`` and pass that array in
        ``out``.  Local paths only.
    coords
        Coordinate arrays written into the groups of the ``dataset=`` outputs, as for
        :func:`oocarray.create` (``{"time": values}`` or ``{"time": (values, attrs)}``);
        checked before any block runs.

    Returns
    -------
    ChunkedArray, or a tuple or dict of them (the structure of ``out``), open read-write.

    Notes
    -----
    A block is done when its chunks are written in every output; that is recorded after the
    chunks, as an empty marker file in ``<output>/.oocarray-map-chunks/done/``.  Chunk files
    are written beside their names and renamed, so an interrupted run (an exception in ``fn``,
    Ctrl-C, a killed worker or process) leaves every chunk whole, old or new, and no mark
    without its chunks; a rerun recomputes exactly the blocks without a mark.  When all blocks
    are done, ``.oocarray-map-chunks/job.json`` says so and the marks are removed.

    Examples
    --------
    >>> import os, tempfile, numpy as np, oocarray as oc
    >>> root = tempfile.mkdtemp()
    >>> x = oc.from_numpy(np.arange(12.0).reshape(6, 2), chunks=(2, 2))
    >>> labels = np.arange(6)
    >>> y = oc.map_chunks(lambda a, b: a.sum(axis=1) * b, x, labels,
    ...                   out=os.path.join(root, "y.zarr"))
    >>> y[...]
    array([  0.,   5.,  18.,  39.,  68., 105.])
    >>> lo, hi = oc.map_chunks(lambda a: (a.min(axis=1), a.max(axis=1)), x,
    ...                        out=(os.path.join(root, "lo.zarr"), os.path.join(root, "hi.zarr")))
    >>> hi[:3]
    array([1., 3., 5.])
    """
    if not callable(fn):
        raise TypeError(f"fn must be callable, got {fn!r}")
    sources = [parse_input(x, i) for i, x in enumerate(inputs)]
    if not sources:
        raise TypeError("map_chunks needs at least one input array after fn")
    rows = common_length(sources)
    if engine not in ("threads", "dask"):
        raise ValueError(f"engine must be 'threads' or 'dask', got {engine!r}")
    if engine == "threads" and (client is not None or worker_max_bytes is not None):
        raise ValueError("client= and worker_max_bytes= are for engine='dask'")
    if client is not None and worker_max_bytes is not None:
        raise ValueError(
            "worker_max_bytes= budgets the LocalCluster map_chunks starts; with your own client, "
            "register oocarray.dask.MemoryBudgetPlugin(max_bytes=...) on it instead"
        )
    parse_workers(workers)
    structure, names, targets = parse_out(out, storage_options, dataset)
    coordinates = parse_coords(coords)
    groups = _coordinate_groups(coordinates, targets, dataset, structure, names)
    for group in groups:
        check_coords(group, coordinates, "w-")  # before any work
    for group in groups:
        write_coords(group, coordinates, "w-")
    for target in targets:
        if not isinstance(target, ChunkedArray):
            read = [x.path for x in sources if isinstance(x, ChunkedArray)]
            where = target.name if isinstance(target, Remote) else target
            refuse_replacing_an_input(where, read, "map_chunks")
    dtypes = parse_dtypes(dtype, structure, names)
    row_shapes = parse_row_shapes(row_shape, structure, names)
    for target, name, d, r in zip(targets, names, dtypes, row_shapes, strict=True):
        if isinstance(target, ChunkedArray):
            check_existing(target, name, rows, d, r)
    existing = [t for t in targets if isinstance(t, ChunkedArray)]
    job = Job(
        fn=fn,
        sources=tuple(x if isinstance(x, ChunkedArray) else None for x in sources),
        outputs=(),  # filled in once the outputs are open
        structure=structure,
        names=names,
        rows=rows,
        block_rows=block_rows_for(sources, existing, rows, block_rows),
    )
    record = sidecar.job_record(job, sources)
    if engine == "dask":
        # Lazily: importing the dask engine imports distributed, an optional dependency.
        from oocarray._feed import _dask
        from oocarray._feed._map import _dask as _map_dask

        with _dask.cluster_client(client, workers, worker_max_bytes) as dask_client:
            result = _run(
                job, record, targets, dtypes, row_shapes, codec, resume, progress,
                _map_dask.DaskEngine(dask_client, sources),
            )  # fmt: skip
    else:
        result = _run(
            job, record, targets, dtypes, row_shapes, codec, resume, progress,
            ThreadsEngine(sources, workers),
        )  # fmt: skip
    for group in groups:
        refresh_consolidated(group)  # readers that trust it see the new outputs
    return result


def _coordinate_groups(
    coordinates: dict[str, Any],
    targets: Sequence[Target],
    dataset: Any,
    structure: str,
    names: tuple[Any, ...],
) -> list[str]:
    """The local groups of the outputs named by ``dataset=`` (an output's directory less its
    name's parts), where ``coords=`` goes."""
    if dataset is None:
        if coordinates:
            raise ValueError(
                "coords= writes coordinate arrays into the outputs' groups: give dataset="
            )
        return []
    if structure == "one":
        given = [dataset]
    elif isinstance(dataset, Mapping):
        given = [dataset.get(k) for k in names]
    else:
        given = list(dataset)
    groups: list[str] = []
    for target, name in zip(targets, given, strict=True):
        if name is None or not isinstance(target, str):
            continue
        group = target
        for _ in str(name).strip("/").split("/"):
            group = os.path.dirname(group)
        if group not in groups:
            groups.append(group)
    return groups


def _run(
    job: Job,
    record: dict[str, Any],
    targets: Sequence[Target],
    dtypes: Sequence[Any],
    row_shapes: Sequence[Any],
    codec: str,
    resume: bool,
    progress: bool,
    engine: Engine,
) -> Any:
    """Open the outputs, run the blocks not done yet, mark the outputs complete."""
    outputs, done = open_outputs(
        job, record, targets, dtypes, row_shapes, codec, resume, lambda: engine.infer(job)
    )
    job = dataclasses.replace(job, outputs=tuple(outputs))
    todo = [i for i in range(job.block_count) if i not in done]
    bar = _progress_bar(job.block_count, len(done), progress)
    try:
        engine.run(job, outputs, todo, bar)
    finally:
        bar.close()
    for out in outputs:
        sidecar.finish(sidecar.place_of(out))
    if job.structure == "one":
        return outputs[0]
    if job.structure == "tuple":
        return tuple(outputs)
    return dict(zip(job.names, outputs, strict=True))


def _progress_bar(total: int, done: int, enabled: bool) -> Any:
    """A bar once the work has run about two seconds, or a summary line where stderr is a
    log (see :mod:`oocarray._compute._progress`)."""
    return progress_bar(
        total=total, initial=done, desc="map_chunks", disable=not enabled or total - done < 2
    )
