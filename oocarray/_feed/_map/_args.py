"""map_chunks' argument checks: inputs, outputs and the per-output ``dtype=`` and
``row_shape=``, refused with a message that says what to pass instead."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from oocarray._compute import ChunkedArray, Expr
from oocarray._feed._map._job import Structure
from oocarray._feed._map._sidecar import check_replaceable
from oocarray._memory import parse_shape
from oocarray._storage._objects._urls import Remote, locate
from oocarray._storage._replace import prepare_group_path
from oocarray._storage._zarr._groups import require_group
from oocarray.errors import ReadOnlyError

__all__ = [
    "Target",
    "common_length",
    "parse_dtypes",
    "parse_input",
    "parse_out",
    "parse_row_shapes",
    "parse_workers",
]


def parse_input(x: object, position: int) -> ChunkedArray | np.ndarray:
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


def common_length(sources: Sequence[ChunkedArray | np.ndarray]) -> int:
    lengths = [x.shape[0] for x in sources]
    if len(set(lengths)) > 1:
        raise ValueError(
            f"inputs must have the same length along axis 0 (their rows are aligned), got "
            f"lengths {lengths}"
        )
    return lengths[0]


def parse_workers(workers: object) -> None:
    if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int)):
        raise TypeError(f"workers must be a positive int or None, got {workers!r}")
    if workers is not None and workers < 1:
        raise ValueError(f"workers must be a positive int or None, got {workers!r}")


Target = str | Remote | ChunkedArray


def parse_out(
    out: Any, storage_options: Mapping[str, Any] | None = None, dataset: Any = None
) -> tuple[Structure, tuple[Any, ...], list[Target]]:
    """The structure of ``out``, its names (dict keys or positions) and its targets: local
    paths, object-store locations (URLs, with ``storage_options``) or open arrays.  With
    ``dataset`` (one name per path output, the structure of ``out``), a path is a zarr group
    and the target is the named array inside it."""
    if isinstance(out, Mapping):
        if not out:
            raise ValueError("out is an empty dict; give at least one output")
        names: tuple[Any, ...] = tuple(out)
        structure: Structure = "dict"
        given = list(out.values())
        labels = [repr(k) for k in out]
    elif isinstance(out, (tuple, list)):
        if not out:
            raise ValueError("out is empty; give at least one output")
        names, structure, given = tuple(range(len(out))), "tuple", list(out)
        labels = [str(i) for i in names]
    else:
        names, structure, given, labels = (0,), "one", [out], ["out"]
    datasets = _parse_datasets(dataset, structure, names)
    targets = [
        _parse_target(t, label, storage_options, name)
        for t, label, name in zip(given, labels, datasets, strict=True)
    ]
    return structure, names, targets


def _parse_datasets(dataset: Any, structure: Structure, names: tuple[Any, ...]) -> list[Any]:
    if dataset is None:
        return [None] * len(names)
    if structure == "one":
        return [dataset]
    if structure == "dict" and isinstance(dataset, Mapping) and set(dataset) <= set(names):
        return [dataset.get(k) for k in names]
    if structure == "tuple" and isinstance(dataset, (tuple, list)) and len(dataset) == len(names):
        return list(dataset)
    raise TypeError(
        f"dataset= must have the structure of out: a dict with out's keys or a tuple of "
        f"{len(names)} names (None for an output without a group), got {dataset!r}"
    )


def _parse_target(
    target: object, name: str, storage_options: Mapping[str, Any] | None, dataset: Any = None
) -> Target:
    if dataset is not None and not isinstance(target, (str, os.PathLike)):
        raise TypeError(
            f"output {name}: dataset= names an array inside the group at a path, but this "
            "output is an open array; drop its dataset= name"
        )
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
        location = locate(target, storage_options, f"output {name}", writing=True)
        if dataset is not None:
            location = _array_in_new_group(location, dataset, name)
        check_replaceable(location)  # before any work: a wrong location fails at once
        return location
    raise TypeError(
        f"output {name} must be a path, an object-store URL or a zarr ChunkedArray, got "
        f"{type(target).__name__}"
    )


def _array_in_new_group(location: str | Remote, dataset: object, name: str) -> str:
    """The directory of the array ``dataset`` in the local zarr group at ``location``, the
    group made if needed (a zarr array there is refused)."""
    if isinstance(location, Remote):
        raise NotImplementedError(
            f"output {name}: dataset= with an object-store URL is not supported by map_chunks "
            "yet; make the output with oc.create(url, ..., dataset=...) and pass it as out"
        )
    if not isinstance(dataset, str):
        raise TypeError(f"dataset must be a str such as 'temperature' or 'a/b', got {dataset!r}")
    prepare_group_path(location)
    return require_group(location, dataset)


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


def parse_dtypes(dtype: Any, structure: Structure, names: tuple[Any, ...]) -> list[Any]:
    """``dtype=`` as one value (None: from fn's result) per output."""
    return _per_output(dtype, structure, names, "dtype", _is_single_dtype)


def parse_row_shapes(
    row_shape: Any, structure: Structure, names: tuple[Any, ...]
) -> list[tuple[int, ...] | None]:
    """``row_shape=`` as one shape (None: from fn's result) per output."""
    return [
        None if r is None else tuple(parse_shape(r))
        for r in _per_output(row_shape, structure, names, "row_shape", _is_single_shape)
    ]
