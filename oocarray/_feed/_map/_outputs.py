"""map_chunks' outputs: resume the arrays an earlier run of the same job began, else create
them (or start given arrays over), and say which blocks are already done in all of them."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from oocarray._compute import ChunkedArray, create
from oocarray._compute import open as open_array
from oocarray._feed._map import _sidecar as sidecar
from oocarray._feed._map._args import Target
from oocarray._feed._map._job import Job, Spec
from oocarray._storage._objects._urls import Remote

__all__ = ["check_existing", "open_outputs"]


def check_existing(array: ChunkedArray, name: Any, rows: int, dtype: Any, row_shape: Any) -> None:
    """An output given as an open array must fit the inputs and what ``dtype=`` and
    ``row_shape=`` ask for."""
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


def _where(target: str | Remote) -> tuple[str, Mapping[str, Any] | None]:
    """A created output's location and storage options, as ``oc.open`` and ``oc.create``
    take them."""
    if isinstance(target, Remote):
        return target.zarr_store or target.url, target.options
    return target, None


def _resumable(
    target: str | Remote, name: Any, record: dict[str, Any], dtype: Any, row_shape: Any
) -> ChunkedArray | None:
    """The array at ``target`` when it holds this job's output, to resume; else None."""
    stored = sidecar.read_record(sidecar.place_of(target))
    if stored is None:
        return None
    location, options = _where(target)
    try:
        array = open_array(location, mode="r+", storage_options=options)
    except (OSError, ValueError):
        return None
    if array.format != "zarr" or not sidecar.matches(stored, record, name, array):
        return None
    if dtype is not None and np.dtype(dtype) != array.dtype:
        return None
    if row_shape is not None and tuple(row_shape) != array.shape[1:]:
        return None
    return array


def open_outputs(
    job: Job,
    record: dict[str, Any],
    targets: Sequence[Target],
    dtypes: Sequence[Any],
    row_shapes: Sequence[Any],
    codec: str,
    resume: bool,
    infer: Callable[[], list[Spec]],
) -> tuple[list[ChunkedArray], set[int]]:
    """Open (resuming) or create every output; the blocks already done in all of them.

    ``infer`` is called only when an output must be created and its dtype or row shape was
    not given (it runs ``fn`` on the first block)."""
    arrays: list[ChunkedArray | None] = []
    for target, name, dtype, row_shape in zip(targets, job.names, dtypes, row_shapes, strict=True):
        if isinstance(target, ChunkedArray):
            place = sidecar.place_of(target)
            if not (resume and sidecar.matches(sidecar.read_record(place), record, name, target)):
                sidecar.clear(place)
                sidecar.write_record(place, sidecar.output_record(record, name, target))
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
            assert not isinstance(target, ChunkedArray)
            dtype = dtypes[i] if dtypes[i] is not None else inferred[i][0]
            shape = row_shapes[i] if row_shapes[i] is not None else inferred[i][1]
            created = _create_output(target, job, dtype, shape, codec)
            sidecar.write_record(
                sidecar.place_of(target), sidecar.output_record(record, job.names[i], created)
            )
            arrays[i] = created
    done = set(range(job.block_count))
    result = [a for a in arrays if a is not None]
    for array in result:
        done &= sidecar.done_blocks(sidecar.place_of(array), job.block_count)
    return result, done


def _create_output(
    target: str | Remote, job: Job, dtype: npt.DTypeLike, row_shape: tuple[int, ...], codec: str
) -> ChunkedArray:
    """Create an output, replacing an earlier map_chunks output at ``target`` (never anything
    else: not a zarr array map_chunks did not write, which may be the user's data)."""
    sidecar.check_replaceable(target)
    sidecar.clear(sidecar.place_of(target))  # marks of another job must not count
    chunks = (max(1, min(job.block_rows, job.rows)), *(max(1, n) for n in row_shape))
    location, options = _where(target)
    return create(
        location,
        (job.rows, *row_shape),
        dtype,
        chunks=chunks,
        codec=codec,
        mode="w",
        storage_options=options,
    )
