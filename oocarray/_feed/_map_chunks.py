"""``oc.map_chunks``: a function over aligned row blocks of its inputs, written to zarr outputs.

The inputs (chunked arrays and ndarrays of one length along axis 0) are cut into blocks of
rows that follow their chunks; ``fn`` gets the block of every input and returns the block of
every output, which is written as whole chunks.  A block's completion is recorded after its
chunks are written (see *Resuming* below), so a rerun of an interrupted job skips what is done.

The threads engine runs blocks on worker threads of this process, each in a cyclic workspace of
its own; the dask engine (``_dask``) runs the same blocks as tasks on a ``distributed`` cluster,
each task opening its inputs and outputs by path in the worker process.

Resuming
--------
Each output array directory holds a small sidecar, ``.oocarray-map-chunks/``: ``job.json``
names the job (the inputs' paths, shapes and dtypes, the rows per block, ``fn``'s name, the
output's shape and dtype) and ``done/<n>`` is an empty file made once block ``n``'s chunks of
that output are written (each chunk file is written beside its name and renamed, so it is whole
or absent).  A block counts as done when every output has its mark; when all are, ``job.json``
says ``"complete"`` and the marks go.  Zarr readers ignore the sidecar.
"""

from __future__ import annotations

import concurrent.futures
import json
import math
import os
import shutil
import threading
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from oocarray._compute import Expr
from oocarray._compute._engine import budget_left
from oocarray._memory import Manager, Workspace, active_manager, parse_shape, system
from oocarray._storage import ChunkedArray, create
from oocarray._storage import open as open_array
from oocarray._storage._base import auto_chunks
from oocarray.errors import ReadOnlyError

__all__ = ["map_chunks"]

SIDECAR = ".oocarray-map-chunks"
RECORD_VERSION = 1
MAX_WORKERS = 8
# Inputs whose chunks along axis 0 differ are read in blocks of their least common multiple of
# rows, unless that is more than this many times their largest chunk (memory would balloon).
MAX_BLOCK_GROWTH = 4

Structure = Literal["one", "tuple", "dict"]


# ---- the job: what every block needs, small enough to travel to a dask worker ----


@dataclass(frozen=True, slots=True)
class Source:
    """A chunked input as a worker process reopens it: by path (and dataset)."""

    path: str
    dataset: str | None


@dataclass(frozen=True)
class Job:
    """One map_chunks run: the function, how to reach inputs and outputs, and the blocks."""

    fn: Callable[..., Any]
    sources: tuple[Source | None, ...]  # None: an ndarray, handed over block by block
    outputs: tuple[str, ...]  # output array directories
    structure: Structure
    names: tuple[Any, ...]  # dict keys, or positions
    rows: int
    block_rows: int
    token: str = field(default_factory=lambda: uuid.uuid4().hex)

    @property
    def block_count(self) -> int:
        return math.ceil(self.rows / self.block_rows)

    def region(self, index: int) -> slice:
        start = index * self.block_rows
        return slice(start, min(start + self.block_rows, self.rows))


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
) -> Any:
    """Apply ``fn`` to aligned row blocks of ``inputs`` and write what it returns to zarr.

    ``fn(*blocks)`` gets one ``np.ndarray`` per input, the same rows of each (a block follows
    the inputs' chunks along axis 0), and returns as many rows: one array for one output, a
    tuple for a tuple of outputs, a dict for a dict of outputs.  Blocks run in parallel, each
    worker holding one block at a time in a cyclic workspace (so temporaries reuse the same
    memory and the active manager's budget applies), and each block's output chunks are
    written whole.  A progress bar shows on work longer than about two seconds.

    Parameters
    ----------
    fn
        ``fn(*blocks) -> array | tuple | dict``; every array has the block's number of rows.
    *inputs
        ``ChunkedArray`` or ``np.ndarray`` (memory maps too), of one length along axis 0.
    out
        Where results go: a path (a zarr array is created there, one chunk per block) or an
        open zarr ``ChunkedArray`` of the right shape, or a tuple or dict of them when ``fn``
        returns several arrays.
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
        ``False`` hides the progress bar.

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
    sources = [_parse_input(x, i) for i, x in enumerate(inputs)]
    if not sources:
        raise TypeError("map_chunks needs at least one input array after fn")
    rows = _common_length(sources)
    if engine not in ("threads", "dask"):
        raise ValueError(f"engine must be 'threads' or 'dask', got {engine!r}")
    if engine == "threads" and (client is not None or worker_max_bytes is not None):
        raise ValueError("client= and worker_max_bytes= are for engine='dask'")
    if client is not None and worker_max_bytes is not None:
        raise ValueError(
            "worker_max_bytes= budgets the LocalCluster map_chunks starts; with your own client, "
            "register oocarray.dask.MemoryBudgetPlugin(max_bytes=...) on it instead"
        )
    if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int)):
        raise TypeError(f"workers must be a positive int or None, got {workers!r}")
    if workers is not None and workers < 1:
        raise ValueError(f"workers must be a positive int or None, got {workers!r}")
    structure, names, targets = _parse_out(out)
    dtypes = _per_output(dtype, structure, names, "dtype", _is_single_dtype)
    row_shapes = [
        None if r is None else tuple(parse_shape(r))
        for r in _per_output(row_shape, structure, names, "row_shape", _is_single_shape)
    ]
    for target, name, d, r in zip(targets, names, dtypes, row_shapes, strict=True):
        if isinstance(target, ChunkedArray):
            _check_existing(target, name, rows, d, r)
    existing = [t for t in targets if isinstance(t, ChunkedArray)]
    rows_per_block = _block_rows(sources, existing, rows, block_rows)
    job = Job(
        fn=fn,
        sources=tuple(
            Source(x.path, _dataset_of(x)) if isinstance(x, ChunkedArray) else None for x in sources
        ),
        outputs=(),
        structure=structure,
        names=names,
        rows=rows,
        block_rows=rows_per_block,
    )
    record = _job_record(job, sources)
    if engine == "dask":
        from oocarray._feed import _dask

        with _dask.cluster_client(client, workers, worker_max_bytes) as dask_client:
            return _run(
                job, record, sources, targets, dtypes, row_shapes, codec, resume, progress,
                _DaskEngine(dask_client, sources),
            )  # fmt: skip
    return _run(
        job, record, sources, targets, dtypes, row_shapes, codec, resume, progress,
        _ThreadsEngine(sources, workers),
    )  # fmt: skip


# ---- checking the arguments ----


def _parse_input(x: object, position: int) -> ChunkedArray | np.ndarray:
    if isinstance(x, Expr):
        raise TypeError(
            f"input {position} is a lazy expression; write it first (z.to_zarr(path)) or "
            "compute it inside fn from its operands"
        )
    if isinstance(x, ChunkedArray):
        x._check_open()
    elif not isinstance(x, np.ndarray):
        raise TypeError(
            f"input {position} must be a ChunkedArray or an np.ndarray, got "
            f"{type(x).__name__}; convert it with np.asarray(...) or oc.from_dask(...)"
        )
    if x.ndim == 0:
        raise ValueError(f"input {position} is 0-d; map_chunks cuts inputs along axis 0")
    return x


def _common_length(sources: Sequence[ChunkedArray | np.ndarray]) -> int:
    lengths = [x.shape[0] for x in sources]
    if len(set(lengths)) > 1:
        raise ValueError(
            f"inputs must have the same length along axis 0 (their rows are aligned), got "
            f"lengths {lengths}"
        )
    return lengths[0]


def _parse_out(out: Any) -> tuple[Structure, tuple[Any, ...], list[str | ChunkedArray]]:
    if isinstance(out, Mapping):
        if not out:
            raise ValueError("out is an empty dict; give at least one output")
        return "dict", tuple(out), [_parse_target(t, repr(k)) for k, t in out.items()]
    if isinstance(out, (tuple, list)):
        if not out:
            raise ValueError("out is empty; give at least one output")
        return (
            "tuple",
            tuple(range(len(out))),
            [_parse_target(t, str(i)) for i, t in enumerate(out)],
        )
    return "one", (0,), [_parse_target(out, "out")]


def _parse_target(target: object, name: str) -> str | ChunkedArray:
    if isinstance(target, ChunkedArray):
        target._check_open()
        if target.format != "zarr":
            raise ValueError(
                f"output {name} is a {target.format} array at {target.path!r}; map_chunks "
                "writes zarr arrays (give a path, or an array made by oc.create)"
            )
        if target.readonly:
            raise ReadOnlyError(
                f"output {name} at {target.path!r} was opened read-only; open it with "
                "mode='r+' or give its path"
            )
        return target
    if isinstance(target, (str, os.PathLike)):
        return os.fspath(target)
    raise TypeError(
        f"output {name} must be a path or a zarr ChunkedArray, got {type(target).__name__}"
    )


def _is_single_dtype(value: object) -> bool:
    return not isinstance(value, (tuple, list, Mapping))


def _is_single_shape(value: object) -> bool:
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        return True  # one axis: 3 is (3,)
    return isinstance(value, (tuple, list)) and all(
        isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in value
    )


def _per_output(
    value: Any,
    structure: Structure,
    names: tuple[Any, ...],
    what: str,
    is_single: Callable[[object], bool],
) -> list[Any]:
    """One value per output: ``value`` given for all, or in the structure of ``out``."""
    if value is None or structure == "one" or is_single(value):
        if structure == "one" and value is not None and not is_single(value):
            raise TypeError(f"{what} must be one value for a single output, got {value!r}")
        return [value] * len(names)
    if structure == "dict":
        if not isinstance(value, Mapping) or set(value) - set(names):
            raise TypeError(f"{what} must be one value or a dict with keys among {names!r}")
        return [value.get(name) for name in names]
    if not isinstance(value, (tuple, list)) or len(value) != len(names):
        raise TypeError(f"{what} must be one value or {len(names)} values, one per output")
    return list(value)


def _dataset_of(x: ChunkedArray) -> str | None:
    """The HDF5 dataset a reopened store needs (zarr and .npy paths name the array)."""
    name = getattr(x._store, "dataset_name", None)
    return name if isinstance(name, str) else None


def _grid_rows(x: ChunkedArray) -> int:
    return x.shards[0] if x.shards else x.chunks[0]


def _block_rows(
    sources: Sequence[ChunkedArray | np.ndarray],
    outputs: Sequence[ChunkedArray],
    rows: int,
    given: int | None,
) -> int:
    """Rows per block: whole chunks of every output; the inputs' chunks where they agree."""
    required = sorted({_grid_rows(o) for o in outputs})
    if given is not None:
        if isinstance(given, bool) or not isinstance(given, (int, np.integer)) or given < 1:
            raise ValueError(f"block_rows must be a positive int, got {given!r}")
        bad = [r for r in required if given % r]
        if bad:
            raise ValueError(
                f"block_rows={given} must be a multiple of the outputs' chunk rows {bad}, so a "
                "block writes whole chunks"
            )
        return int(given)
    # Memory-mapped inputs (.npy, contiguous HDF5) have no chunks worth following.
    preferred = sorted(
        {_grid_rows(x) for x in sources if isinstance(x, ChunkedArray) and x.location != "mmap"}
    )
    grids = required + preferred
    if not grids:
        widest = max(sources, key=lambda x: math.prod(x.shape[1:]) * x.dtype.itemsize)
        return max(1, auto_chunks((max(rows, 1), *widest.shape[1:]), widest.dtype.itemsize)[0])
    common = math.lcm(*grids)
    if common > MAX_BLOCK_GROWTH * max(grids) and common > min(rows, max(grids)):
        raise ValueError(
            f"the inputs and outputs are chunked differently along axis 0 ({grids} rows), and "
            f"a block covering whole chunks of each would take {common} rows; pass "
            f"block_rows= (a multiple of the outputs' chunk rows {required or 'any'}), or "
            "rewrite an input with matching chunks (x.to_zarr(path, chunks=...))"
        )
    return common


# ---- outputs: resume or create ----


def _job_record(job: Job, sources: Sequence[ChunkedArray | np.ndarray]) -> dict[str, Any]:
    """What names a job in its outputs' sidecars: a rerun resumes only the same job."""
    fn = getattr(job.fn, "func", job.fn)  # a functools.partial is named by its function
    name = f"{getattr(fn, '__module__', '')}.{getattr(fn, '__qualname__', type(fn).__name__)}"
    return {
        "version": RECORD_VERSION,
        "fn": name,
        "rows": job.rows,
        "block_rows": job.block_rows,
        "inputs": [
            {
                "path": os.path.realpath(x.path) if isinstance(x, ChunkedArray) else None,
                "dataset": _dataset_of(x) if isinstance(x, ChunkedArray) else None,
                "shape": list(x.shape),
                "dtype": x.dtype.str,
            }
            for x in sources
        ],
        "outputs": [str(n) for n in job.names],
    }


def _sidecar(path: str) -> str:
    return os.path.join(path, SIDECAR)


def _read_record(path: str) -> dict[str, Any] | None:
    try:
        with open(os.path.join(_sidecar(path), "job.json")) as f:
            record = json.load(f)
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def _write_record(path: str, record: dict[str, Any]) -> None:
    """Written beside and renamed: a reader sees the old record or the new one."""
    directory = _sidecar(path)
    os.makedirs(os.path.join(directory, "done"), exist_ok=True)
    tmp = os.path.join(directory, f".job-{uuid.uuid4().hex}.json")
    with open(tmp, "w") as f:
        json.dump(record, f)
    os.replace(tmp, os.path.join(directory, "job.json"))


def _output_record(record: dict[str, Any], name: Any, array: ChunkedArray) -> dict[str, Any]:
    return {
        **record,
        "output": str(name),
        "shape": list(array.shape),
        "dtype": array.dtype.str,
        "complete": False,
    }


def _matches(
    stored: dict[str, Any] | None, record: dict[str, Any], name: Any, array: ChunkedArray
) -> bool:
    """Whether an output's sidecar names this job, this output and the array's shape."""
    if stored is None:
        return False
    wanted = _output_record(record, name, array)
    return all(stored.get(k) == v for k, v in wanted.items() if k != "complete")


def _done_blocks(path: str, count: int) -> set[int]:
    stored = _read_record(path)
    if stored is not None and stored.get("complete"):
        return set(range(count))
    try:
        names = os.listdir(os.path.join(_sidecar(path), "done"))
    except FileNotFoundError:
        return set()
    return {int(n) for n in names if n.isdigit() and int(n) < count}


def mark_done(path: str, index: int) -> None:
    """Record that block ``index`` of the output at ``path`` is written (after its chunks)."""
    marker = os.path.join(_sidecar(path), "done", str(index))
    os.close(os.open(marker, os.O_CREAT | os.O_WRONLY, 0o644))


def _finish(path: str) -> None:
    stored = _read_record(path)
    if stored is None:
        return
    if not stored.get("complete"):
        _write_record(path, {**stored, "complete": True})
    shutil.rmtree(os.path.join(_sidecar(path), "done"), ignore_errors=True)


def _check_existing(array: ChunkedArray, name: Any, rows: int, dtype: Any, row_shape: Any) -> None:
    if array.shape[:1] != (rows,):
        raise ValueError(
            f"output {name} at {array.path!r} has shape {array.shape}; it needs {rows} rows, "
            "one per input row"
        )
    if dtype is not None and np.dtype(dtype) != array.dtype:
        raise ValueError(f"output {name} has dtype {array.dtype}, but dtype={dtype!r} was given")
    if row_shape is not None and tuple(row_shape) != array.shape[1:]:
        raise ValueError(
            f"output {name} has rows of shape {array.shape[1:]}, but row_shape="
            f"{tuple(row_shape)!r} was given"
        )


def _resumable(
    target: str, name: Any, record: dict[str, Any], dtype: Any, row_shape: Any
) -> ChunkedArray | None:
    """The array at ``target`` when it holds this job's output, to resume; else None."""
    stored = _read_record(target)
    if stored is None:
        return None
    try:
        array = open_array(target, mode="r+")
    except (OSError, ValueError):
        return None
    if array.format != "zarr" or not _matches(stored, record, name, array):
        return None
    if dtype is not None and np.dtype(dtype) != array.dtype:
        return None
    if row_shape is not None and tuple(row_shape) != array.shape[1:]:
        return None
    return array


def _outputs(
    job: Job,
    record: dict[str, Any],
    targets: Sequence[str | ChunkedArray],
    dtypes: Sequence[Any],
    row_shapes: Sequence[Any],
    codec: str,
    resume: bool,
    infer: Callable[[], list[tuple[np.dtype[Any], tuple[int, ...]]]],
) -> tuple[list[ChunkedArray], set[int]]:
    """Open (resuming) or create every output; the blocks already done in all of them."""
    arrays: list[ChunkedArray | None] = []
    for target, name, dtype, row_shape in zip(targets, job.names, dtypes, row_shapes, strict=True):
        if isinstance(target, ChunkedArray):
            if not (resume and _matches(_read_record(target.path), record, name, target)):
                shutil.rmtree(_sidecar(target.path), ignore_errors=True)
                _write_record(target.path, _output_record(record, name, target))
            arrays.append(target)
        else:
            arrays.append(_resumable(target, name, record, dtype, row_shape) if resume else None)
    if any(a is None for a in arrays):
        missing = [
            i
            for i, a in enumerate(arrays)
            if a is None and (dtypes[i] is None or row_shapes[i] is None)
        ]
        inferred = infer() if missing else []
        for i, target in enumerate(targets):
            if arrays[i] is not None:
                continue
            assert isinstance(target, str)
            dtype = dtypes[i] if dtypes[i] is not None else inferred[i][0]
            shape = row_shapes[i] if row_shapes[i] is not None else inferred[i][1]
            arrays[i] = _create_output(target, job, dtype, shape, codec)
            _write_record(target, _output_record(record, job.names[i], arrays[i]))  # type: ignore[arg-type]
    done = set(range(job.block_count))
    result = [a for a in arrays if a is not None]
    for array in result:
        done &= _done_blocks(array.path, job.block_count)
    return result, done


def _create_output(
    path: str, job: Job, dtype: npt.DTypeLike, row_shape: tuple[int, ...], codec: str
) -> ChunkedArray:
    shutil.rmtree(_sidecar(path), ignore_errors=True)  # marks of another job must not count
    chunks = (max(1, min(job.block_rows, job.rows)), *(max(1, n) for n in row_shape))
    return create(path, (job.rows, *row_shape), dtype, chunks=chunks, codec=codec, mode="w")


# ---- one block ----


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


def run_block(
    job: Job,
    index: int,
    blocks: Sequence[ChunkedArray | np.ndarray],
    outputs: Sequence[ChunkedArray],
) -> None:
    """Read a block (ChunkedArray inputs; ndarray ones come as the block), call ``fn``, write
    its results, then mark the block done in each output.  Runs in the caller's workspace."""
    region = job.region(index)
    data = [b[region] if isinstance(b, ChunkedArray) else b for b in blocks]
    arrays = results_of(job, job.fn(*data), region)
    del data
    for array, out in zip(arrays, outputs, strict=True):
        _write(out, region, array)
    del arrays
    for out in outputs:
        mark_done(out.path, index)


def _write(out: ChunkedArray, region: slice, array: np.ndarray) -> None:
    if array.shape[1:] != out.shape[1:]:
        raise ValueError(
            f"fn's result for rows {region.start}:{region.stop} has rows of shape "
            f"{array.shape[1:]}, but the output at {out.path!r} has rows of shape "
            f"{out.shape[1:]}"
        )
    out[region] = array


def infer_specs(
    job: Job, blocks: Sequence[ChunkedArray | np.ndarray]
) -> list[tuple[np.dtype[Any], tuple[int, ...]]]:
    """The outputs' dtypes and row shapes, from ``fn`` on the first block."""
    region = job.region(0)
    data = [b[region] if isinstance(b, ChunkedArray) else b for b in blocks]
    return [(a.dtype, a.shape[1:]) for a in results_of(job, job.fn(*data), region)]


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


# ---- the engines ----


class _Engine:
    def infer(self, job: Job) -> list[tuple[np.dtype[Any], tuple[int, ...]]]:
        raise NotImplementedError

    def run(self, job: Job, outputs: list[ChunkedArray], todo: list[int], bar: Any) -> None:
        raise NotImplementedError


def _run(
    job: Job,
    record: dict[str, Any],
    sources: Sequence[ChunkedArray | np.ndarray],
    targets: Sequence[str | ChunkedArray],
    dtypes: Sequence[Any],
    row_shapes: Sequence[Any],
    codec: str,
    resume: bool,
    progress: bool,
    engine: _Engine,
) -> Any:
    outputs, done = _outputs(
        job, record, targets, dtypes, row_shapes, codec, resume, lambda: engine.infer(job)
    )
    job = Job(
        job.fn,
        job.sources,
        tuple(o.path for o in outputs),
        job.structure,
        job.names,
        job.rows,
        job.block_rows,
    )
    todo = [i for i in range(job.block_count) if i not in done]
    bar = _progress_bar(job.block_count, len(done), progress)
    try:
        engine.run(job, outputs, todo, bar)
    finally:
        bar.close()
    for out in outputs:
        _finish(out.path)
    if job.structure == "one":
        return outputs[0]
    if job.structure == "tuple":
        return tuple(outputs)
    return dict(zip(job.names, outputs, strict=True))


class _ThreadsEngine(_Engine):
    """Blocks on worker threads of this process, in the active manager."""

    def __init__(self, sources: Sequence[ChunkedArray | np.ndarray], workers: int | None):
        self.sources = list(sources)
        self.workers = workers
        self.manager = active_manager() or system()
        self.first: tuple[np.ndarray, ...] | None = None  # the inferring call's results

    def infer(self, job: Job) -> list[tuple[np.dtype[Any], tuple[int, ...]]]:
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
            region = job.region(0)
            for array, out in zip(self.first, outputs, strict=True):
                _write(out, region, array)
            for out in outputs:
                mark_done(out.path, 0)
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
    with concurrent.futures.ThreadPoolExecutor(count, "oocarray-map-chunks") as pool:
        in_flight = {pool.submit(task, i) for i in _take(queue, 2 * count)}
        try:
            while in_flight:
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


class _DaskEngine(_Engine):
    """Blocks as tasks on a distributed cluster (see ``_dask``)."""

    def __init__(self, client: Any, sources: Sequence[ChunkedArray | np.ndarray]) -> None:
        self.client = client
        self.arrays = [s for s in sources if not isinstance(s, ChunkedArray)]

    def _blocks(self, job: Job, index: int) -> list[np.ndarray]:
        region = job.region(index)
        return [a[region] for a in self.arrays]

    def infer(self, job: Job) -> list[tuple[np.dtype[Any], tuple[int, ...]]]:
        from oocarray._feed import _dask

        specs = _dask.run_one(self.client, remote_infer, job, self._blocks(job, 0))
        return [(np.dtype(d), tuple(s)) for d, s in specs]

    def run(self, job: Job, outputs: list[ChunkedArray], todo: list[int], bar: Any) -> None:
        from oocarray._feed import _dask

        _dask.run_blocks(self.client, remote_block, job, todo, lambda i: self._blocks(job, i), bar)


def _reopen(job: Job, blocks: Sequence[np.ndarray]) -> list[ChunkedArray | np.ndarray]:
    """A worker's inputs: chunked ones reopened by path, ndarray ones as handed over."""
    given = iter(blocks)
    return [
        open_array(s.path, mode="r", dataset=s.dataset) if s is not None else next(given)
        for s in job.sources
    ]


def remote_block(job: Job, index: int, *blocks: np.ndarray) -> None:
    """A dask task: one block, in this worker thread's workspace under the active manager
    (the worker's budget when ``oocarray.dask.budgeted`` wraps it)."""
    manager = active_manager() or system()
    ws = thread_workspace(manager)
    inputs = _reopen(job, blocks)
    outputs = [open_array(path, mode="r+") for path in job.outputs]
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


class _NoProgress:
    def update(self, n: int) -> None:
        pass

    def close(self) -> None:
        pass


def _progress_bar(total: int, done: int, enabled: bool) -> Any:
    """A tqdm bar that shows itself only once the work has run about two seconds."""
    if not enabled or total - done < 2:
        return _NoProgress()
    from tqdm.auto import tqdm

    return tqdm(total=total, initial=done, delay=2.0, unit="block", leave=False)
