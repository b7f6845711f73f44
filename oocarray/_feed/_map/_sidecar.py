"""map_chunks' resume record: a sidecar in each output directory says which blocks are done.

Each output array directory holds ``.oocarray-map-chunks/``: ``job.json`` names the job (the
inputs' paths, shapes and dtypes, the rows per block, ``fn``'s name, the output's shape and
dtype) and ``done/<n>`` is an empty file made once block ``n``'s chunks of that output are
written (each chunk file is written beside its name and renamed, so it is whole or absent).
A block counts as done when every output has its mark; when all are, ``job.json`` says
``"complete"`` and the marks go.  Zarr readers ignore the sidecar.
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from collections.abc import Sequence
from typing import Any

import numpy as np

from oocarray._compute import ChunkedArray
from oocarray._feed._map._job import Job, dataset_of
from oocarray._storage._replace import prepare_target
from oocarray.errors import StoreExistsError

__all__ = [
    "SIDECAR",
    "check_replaceable",
    "clear",
    "done_blocks",
    "finish",
    "job_record",
    "mark_done",
    "matches",
    "output_record",
    "present",
    "read_record",
    "write_record",
]

SIDECAR = ".oocarray-map-chunks"
RECORD_VERSION = 1


def job_record(job: Job, sources: Sequence[ChunkedArray | np.ndarray]) -> dict[str, Any]:
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
                "dataset": dataset_of(x) if isinstance(x, ChunkedArray) else None,
                "shape": list(x.shape),
                "dtype": x.dtype.str,
            }
            for x in sources
        ],
        "outputs": [str(n) for n in job.names],
    }


def output_record(record: dict[str, Any], name: Any, array: ChunkedArray) -> dict[str, Any]:
    """The job's record as one output's sidecar holds it."""
    return {
        **record,
        "output": str(name),
        "shape": list(array.shape),
        "dtype": array.dtype.str,
        "complete": False,
    }


def _sidecar(path: str) -> str:
    return os.path.join(path, SIDECAR)


def read_record(path: str) -> dict[str, Any] | None:
    """The record of the output at ``path``, or None (none, or unreadable: start over)."""
    try:
        with open(os.path.join(_sidecar(path), "job.json")) as f:
            record = json.load(f)
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def write_record(path: str, record: dict[str, Any]) -> None:
    """Written beside and renamed: a reader sees the old record or the new one."""
    directory = _sidecar(path)
    os.makedirs(os.path.join(directory, "done"), exist_ok=True)
    tmp = os.path.join(directory, f".job-{uuid.uuid4().hex}.json")
    with open(tmp, "w") as f:
        json.dump(record, f)
    os.replace(tmp, os.path.join(directory, "job.json"))


def present(path: str) -> bool:
    """Whether the array at ``path`` was written by map_chunks (it has a sidecar)."""
    return os.path.isdir(_sidecar(path))


def check_replaceable(path: str) -> None:
    """Raise unless an output may be created at ``path``: nothing is there (or an empty
    directory), or an output an earlier map_chunks run wrote.  Anything else may be the
    user's data: a zarr array map_chunks did not write, another directory, a file."""
    if prepare_target(path, "w", "map_chunks") and not present(path):
        raise StoreExistsError(
            f"{path!r} holds a zarr array that map_chunks did not write: map_chunks replaces "
            "only its own outputs. Choose another out= path, or pass the array opened for "
            "writing (out=oc.open(path, mode='r+')) to write into it"
        )


def clear(path: str) -> None:
    """Forget another job's record and marks, so they cannot count for this one."""
    shutil.rmtree(_sidecar(path), ignore_errors=True)


def matches(
    stored: dict[str, Any] | None, record: dict[str, Any], name: Any, array: ChunkedArray
) -> bool:
    """Whether an output's sidecar names this job, this output and the array's shape."""
    if stored is None:
        return False
    wanted = output_record(record, name, array)
    return all(stored.get(k) == v for k, v in wanted.items() if k != "complete")


def done_blocks(path: str, count: int) -> set[int]:
    """The blocks marked done in the output at ``path`` (all of them once it is complete)."""
    stored = read_record(path)
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


def finish(path: str) -> None:
    """Every block is done: say so in ``job.json`` and drop the marks."""
    stored = read_record(path)
    if stored is None:
        return
    if not stored.get("complete"):
        write_record(path, {**stored, "complete": True})
    shutil.rmtree(os.path.join(_sidecar(path), "done"), ignore_errors=True)
