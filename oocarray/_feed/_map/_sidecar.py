"""map_chunks' resume record: a sidecar in each output directory says which blocks are done.

Each output array directory (or, in an object store, the array's prefix) holds
``.oocarray-map-chunks/``: ``job.json`` names the job (the
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
from oocarray._storage._objects._backend import Backend, Fetched
from oocarray._storage._objects._backend_choice import backend_for
from oocarray._storage._objects._loop import run, run_all
from oocarray._storage._objects._urls import Remote
from oocarray._storage._replace import prepare_target
from oocarray._storage._zarr._remote import RemoteZarrStore
from oocarray._storage._zarr._remote_create import prepare_remote_target
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
    "place_of",
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


class _Files:
    """The sidecar of an output in a local directory: files, each written beside its name and
    renamed."""

    def __init__(self, array_path: str) -> None:
        self._root = os.path.join(array_path, SIDECAR)

    def read(self, name: str) -> bytes | None:
        try:
            with open(os.path.join(self._root, name), "rb") as f:
                return f.read()
        except OSError:
            return None

    def write(self, name: str, data: bytes) -> None:
        os.makedirs(os.path.join(self._root, "done"), exist_ok=True)
        tmp = os.path.join(self._root, f".tmp-{uuid.uuid4().hex}")
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, os.path.join(self._root, name))

    def mark(self, name: str) -> None:
        os.makedirs(os.path.join(self._root, "done"), exist_ok=True)
        os.close(os.open(os.path.join(self._root, name), os.O_CREAT | os.O_WRONLY, 0o644))

    def names(self, folder: str) -> list[str]:
        try:
            return os.listdir(os.path.join(self._root, folder))
        except FileNotFoundError:
            return []

    def remove(self, folder: str = "") -> None:
        shutil.rmtree(os.path.join(self._root, folder) if folder else self._root, True)

    def exists(self) -> bool:
        return os.path.isdir(self._root)


class _Objects:
    """The sidecar of an output in an object store: objects under the array's prefix (one PUT
    each: whole or absent), which zarr readers ignore as they ignore the directory."""

    def __init__(self, backend: Backend, prefix: str) -> None:
        self._backend = backend
        self._root = f"{prefix}{SIDECAR}/"

    def read(self, name: str) -> bytes | None:
        found = run(self._backend.get(self._root + name))
        return None if not isinstance(found, Fetched) else bytes(found.data)

    def write(self, name: str, data: bytes) -> None:
        run(self._backend.put(self._root + name, data))

    def mark(self, name: str) -> None:
        self.write(name, b"")

    def names(self, folder: str) -> list[str]:
        prefix = f"{self._root}{folder}/"
        return [key[len(prefix) :] for key, _ in run(self._backend.list(prefix))]

    def remove(self, folder: str = "") -> None:
        prefix = f"{self._root}{folder}/" if folder else self._root
        keys = [key for key, _ in run(self._backend.list(prefix))]
        run_all((self._backend.delete(key) for key in keys), 64)

    def exists(self) -> bool:
        return bool(run(self._backend.list(self._root)))


Place = _Files | _Objects


def place_of(target: str | Remote | ChunkedArray) -> Place:
    """Where the sidecar of an output is: beside a local array, or in its object store."""
    if isinstance(target, str):
        return _Files(target)
    if isinstance(target, Remote):
        return _Objects(backend_for(target, read_only=False), "")
    store = target._store
    if isinstance(store, RemoteZarrStore):
        return _Objects(store.backend, store._prefix)
    return _Files(target.path)


def read_record(place: Place) -> dict[str, Any] | None:
    """The record of an output, or None (none, or unreadable: start over)."""
    raw = place.read("job.json")
    try:
        record = json.loads(raw) if raw is not None else None
    except ValueError:
        return None
    return record if isinstance(record, dict) else None


def write_record(place: Place, record: dict[str, Any]) -> None:
    """Written whole: a reader sees the old record or the new one."""
    place.write("job.json", json.dumps(record).encode())


def check_replaceable(target: str | Remote) -> None:
    """Raise unless an output may be created at ``target`` (a path or an object-store URL):
    nothing is there (or an empty directory), or an output an earlier map_chunks run wrote.
    Anything else may be the user's data: a zarr array map_chunks did not write, another
    directory or other objects, a file."""
    if isinstance(target, Remote):
        backend = backend_for(target, read_only=False)
        array_there = prepare_remote_target(backend, "", "w", "map_chunks", replace=False)
        ours, shown = _Objects(backend, "").exists(), target.name
    else:
        array_there = prepare_target(target, "w", "map_chunks")
        ours, shown = _Files(target).exists(), repr(target)
    if array_there and not ours:
        raise StoreExistsError(
            f"{shown} holds a zarr array that map_chunks did not write: map_chunks replaces "
            "only its own outputs. Choose another out= location, or pass the array opened "
            "for writing (out=oc.open(path, mode='r+')) to write into it"
        )


def clear(place: Place) -> None:
    """Forget another job's record and marks, so they cannot count for this one."""
    place.remove()


def matches(
    stored: dict[str, Any] | None, record: dict[str, Any], name: Any, array: ChunkedArray
) -> bool:
    """Whether an output's sidecar names this job, this output and the array's shape."""
    if stored is None:
        return False
    wanted = output_record(record, name, array)
    return all(stored.get(k) == v for k, v in wanted.items() if k != "complete")


def done_blocks(place: Place, count: int) -> set[int]:
    """The blocks marked done in an output (all of them once it is complete)."""
    stored = read_record(place)
    if stored is not None and stored.get("complete"):
        return set(range(count))
    return {int(n) for n in place.names("done") if n.isdigit() and int(n) < count}


def mark_done(place: Place, index: int) -> None:
    """Record that block ``index`` of an output is written (after its chunks)."""
    place.mark(f"done/{index}")


def finish(place: Place) -> None:
    """Every block is done: say so in ``job.json`` and drop the marks."""
    stored = read_record(place)
    if stored is None:
        return
    if not stored.get("complete"):
        write_record(place, {**stored, "complete": True})
    place.remove("done")
