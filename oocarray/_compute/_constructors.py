"""The public constructors of chunked arrays: the storage layer's, returning the compute
layer's :class:`~oocarray.ChunkedArray` (passed down as ``array_type``).

Each takes the storage function's arguments and carries its documentation.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import numpy.typing as npt

from oocarray import _storage
from oocarray._compute._array import ChunkedArray

__all__ = ["create", "from_dask", "from_numpy", "open", "temp"]

F = TypeVar("F", bound=Callable[..., Any])


def _documented_as(storage_function: Callable[..., Any]) -> Callable[[F], F]:
    """Give a constructor the docstring of the storage function it calls (the users'
    documentation, ``help(oc.open)``, lives with the parameters it describes)."""

    def document(function: F) -> F:
        function.__doc__ = storage_function.__doc__
        return function

    return document


def _chunked(array: _storage.StoredArray) -> ChunkedArray:
    assert isinstance(array, ChunkedArray)
    return array


@_documented_as(_storage.open)
def open(
    path: Any,
    mode: str = "r",
    dataset: str | None = None,
    *,
    allow_object: bool = False,
    storage_options: Mapping[str, Any] | None = None,
    cache: str | os.PathLike[str] | None = None,
    cache_max_bytes: int | str = _storage.DEFAULT_CACHE_BYTES,
) -> ChunkedArray:
    return _chunked(
        _storage.open(
            path,
            mode,
            dataset,
            allow_object=allow_object,
            storage_options=storage_options,
            cache=cache,
            cache_max_bytes=cache_max_bytes,
            array_type=ChunkedArray,
        )
    )


@_documented_as(_storage.create)
def create(
    path: Any,
    shape: object,
    dtype: npt.DTypeLike,
    chunks: object = None,
    codec: str = "zstd",
    mode: str = "w-",
    shards: object = None,
    *,
    dimension_names: object = None,
    attributes: object = None,
    dataset: str | None = None,
    storage_options: Mapping[str, Any] | None = None,
    coords: object = None,
) -> ChunkedArray:
    return _chunked(
        _storage.create(
            path,
            shape,
            dtype,
            chunks,
            codec,
            mode,
            shards,
            dimension_names=dimension_names,
            attributes=attributes,
            dataset=dataset,
            storage_options=storage_options,
            array_type=ChunkedArray,
            coords=coords,
        )
    )


@_documented_as(_storage.temp)
def temp(
    shape: object, dtype: npt.DTypeLike, chunks: object = None, codec: str = "zstd"
) -> ChunkedArray:
    return _chunked(_storage.temp(shape, dtype, chunks, codec, array_type=ChunkedArray))


@_documented_as(_storage.from_numpy)
def from_numpy(a: npt.ArrayLike, chunks: object = None, codec: str = "zstd") -> ChunkedArray:
    return _chunked(_storage.from_numpy(a, chunks, codec, array_type=ChunkedArray))


@_documented_as(_storage.from_dask)
def from_dask(d: Any, chunks: object = None, codec: str = "zstd") -> ChunkedArray:
    return _chunked(_storage.from_dask(d, chunks, codec, array_type=ChunkedArray))
