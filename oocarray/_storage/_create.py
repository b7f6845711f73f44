"""Opening and creating chunked arrays: ``oc.open`` and ``oc.create``."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from typing import Any

import numpy as np
import numpy.typing as npt

from oocarray._memory import parse_shape, parse_size
from oocarray._storage._base import auto_chunks
from oocarray._storage._chunked import StoredArray
from oocarray._storage._formats import open_store
from oocarray._storage._objects._urls import Remote, locate
from oocarray._storage._replace import (
    finish_replacement,
    prepare_group_path,
    prepare_target,
    remove_zarr_array,
)

__all__ = ["create", "open", "parse_chunks"]

_MODES_OPEN = ("r", "r+")
DEFAULT_CACHE_BYTES = "10G"
_MODES_CREATE = ("w", "w-", "x")


def open(
    path: Any,
    mode: str = "r",
    dataset: str | None = None,
    *,
    allow_object: bool = False,
    storage_options: Mapping[str, Any] | None = None,
    cache: str | os.PathLike[str] | None = None,
    cache_max_bytes: int | str = DEFAULT_CACHE_BYTES,
    array_type: type[StoredArray] = StoredArray,
) -> StoredArray:
    """Open an array on disk or in an object store; its format (zarr v3/v2, HDF5, ``.npy``)
    comes from its content.

    Parameters
    ----------
    path
        A zarr array directory, an HDF5 file or a ``.npy`` file; a ``file://`` URL is taken
        as the local path it names.  A zarr array (or group) in an object store:
        ``s3://bucket/x.zarr``, ``gs://...``, ``az://container/...`` (or ``abfs://``),
        ``https://host/x.zarr`` (read-only), or a zarr ``Store`` object.
    mode
        ``"r"`` (read-only) or ``"r+"`` (read and write).
    dataset
        The array's path inside an HDF5 file or a zarr group (v3 or v2), e.g. ``"a/b"``; not
        needed when the file or group holds only one.
    allow_object
        Read arrays of Python objects (which can run code when loaded): only for data you trust.
    storage_options
        For URLs: the object store's settings, as obstore takes them (``endpoint``,
        ``region``, ``access_key_id``, ``skip_signature``, ``client_options``,
        ``retry_config``, ...) or as s3fs, gcsfs and zarr-python users write them (``anon``,
        ``key``, ``secret``, ``endpoint_url``, ``requester_pays``, ...).  Credentials also
        come from the standard ``AWS_*``, ``GOOGLE_*`` and ``AZURE_*`` variables (and AWS
        config files where boto3 is installed).
    cache
        For URLs: a local directory keeping the chunks fetched, for later passes and
        processes (DataLoader workers may share it).  A chunk is used again only while its
        object's version (ETag) is unchanged.
    cache_max_bytes
        The cache's size limit (``"20G"``); the least recently used chunks go first.

    Returns
    -------
    ChunkedArray
        The array, read lazily chunk by chunk: indexing reads only the chunks it touches.

    Raises
    ------
    StoreNotFoundError
        Nothing is at ``path`` (or no such dataset in the HDF5 file or zarr group).
    ValueError
        ``path`` holds no array oocarray reads, or holds objects and ``allow_object`` is off.
    StoreAccessError
        The object store refused access (the message names the URL, never credentials).
    ObjectStoreError
        The object store kept failing after its retries.

    Examples
    --------
    >>> import os, tempfile, numpy as np, oocarray as oc
    >>> path = os.path.join(tempfile.mkdtemp(), "x.npy")
    >>> np.save(path, np.arange(6.0).reshape(2, 3))
    >>> x = oc.open(path)
    >>> (x.shape, x.format, x[1])
    ((2, 3), 'npy', array([3., 4., 5.]))
    """
    # array_type: the class of the result (oc.open passes the compute layer's ChunkedArray).
    if mode not in _MODES_OPEN:
        raise ValueError(f"mode must be one of {_MODES_OPEN} for oc.open, got {mode!r}")
    location = locate(path, storage_options, "path", writing=mode == "r+")
    chunk_cache = None
    if cache is not None:
        if not isinstance(location, Remote):
            raise ValueError("cache= keeps chunks fetched from object stores; path is local")
        chunk_cache = chunk_cache_at(cache, cache_max_bytes)
    return array_type(open_store(location, mode, dataset, allow_object, chunk_cache))


def chunk_cache_at(directory: str | os.PathLike[str], max_bytes: int | str) -> Any:
    """The chunk cache in ``directory`` (made if missing), of at most ``max_bytes``."""
    from oocarray._storage._objects._cache import ChunkCache

    limit = parse_size(max_bytes, "cache_max_bytes")
    assert limit is not None  # parse_size gives None only where None is allowed
    return ChunkCache(directory, limit)


def parse_chunks(
    chunks: object, shape: tuple[int, ...], dtype: np.dtype[Any], name: str = "chunks"
) -> tuple[int, ...]:
    if chunks is None:
        return auto_chunks(shape, dtype.itemsize)
    if isinstance(chunks, (int, np.integer)) and not isinstance(chunks, bool):
        chunks = (int(chunks),) * len(shape)
    if not isinstance(chunks, (tuple, list)) or len(chunks) != len(shape):
        raise ValueError(
            f"{name} must be None, an int, or one positive int per axis ({len(shape)}), "
            f"got {chunks!r}"
        )
    result = []
    for c in chunks:
        if isinstance(c, bool) or not isinstance(c, (int, np.integer)) or c < 1:
            raise ValueError(f"{name} must be positive ints, got {chunks!r}")
        result.append(int(c))
    return tuple(result)


INNER_CHUNK_BYTES = 128 << 10


def _inner_chunks(shards: tuple[int, ...], itemsize: int) -> tuple[int, ...]:
    """Default chunks inside shards: the shard halved along its leading axes (so they divide
    it) until a chunk holds at most INNER_CHUNK_BYTES."""
    chunks = list(shards)
    for axis in range(len(chunks)):
        while math.prod(chunks) * itemsize > INNER_CHUNK_BYTES and chunks[axis] % 2 == 0:
            chunks[axis] //= 2
    return tuple(chunks)


def _parse_dtype(dtype: object) -> np.dtype[Any]:
    try:
        parsed: np.dtype[Any] = np.dtype(dtype)  # type: ignore[call-overload]
    except TypeError as error:
        raise TypeError(f"dtype {dtype!r} is not a NumPy data type (e.g. 'float32')") from error
    if parsed.hasobject:  # allow_object= is for opening existing arrays, never for writing
        raise ValueError(
            f"chunked arrays cannot store Python objects (dtype {parsed}): use a fixed-width "
            "string dtype such as 'U16' or 'S16', or a numeric one"
        )
    if parsed.fields is not None or parsed.subdtype is not None:
        raise TypeError(f"structured and sub-array dtypes are not supported, got {parsed}")
    return parsed


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
    array_type: type[StoredArray] = StoredArray,
    coords: object = None,
) -> StoredArray:
    """Create a zarr v3 array on disk or in an object store, filled with zeros, open for
    reading and writing.

    Parameters
    ----------
    path
        The array's directory, or with ``dataset`` the zarr group that holds it (made if
        missing); a ``file://`` URL is taken as the local path it names.  In an object store:
        a URL (``s3://bucket/x.zarr``, ``gs://``, ``az://``) or a zarr ``Store`` object; each
        chunk is then one object, written whole.
    shape, dtype
        As for :func:`numpy.empty`.
    chunks
        Chunk shape; default: about 4 MiB per chunk, trailing axes whole where they fit (with
        ``shards``: at most 128 KiB, halving the shard along its leading axes).
    codec
        ``"zstd"`` (default), ``"lz4"`` or ``"blosc"`` (both Blosc, with byte shuffle),
        ``"gzip"``, or ``"none"``.
    mode
        ``"w-"`` (default, or ``"x"``): create, and raise :class:`~oocarray.StoreExistsError`
        (a ``FileExistsError``) if something is at ``path`` (an empty directory is fine).
        ``"w"``: create, replacing a zarr array that is at ``path``: its metadata and chunks
        are removed, other files in its directory stay.  No mode deletes anything else: a
        directory that is not a zarr array, a zarr group, or a file raises
        ``StoreExistsError`` and is left as it was.
    shards
        Shard shape (a multiple of ``chunks`` on every axis), or None for no sharding.  A shard
        is one file holding many small chunks: random reads decode only the small chunks they
        touch, while the files stay few.  Writes are made of whole shards (writing part of one
        rewrites it), so write in shard-sized blocks.
    dimension_names
        One name per axis (xarray's dimensions), e.g. ``("time", "station")``.  Default: none
        for an array of its own, and ``dim_0``, ``dim_1``, ... for an array inside a zarr group
        (what xarray needs to open the group; name them when the group's arrays do not share
        their axes).
    attributes
        JSON-serialisable metadata stored with the array (``units``, ``long_name``, ...);
        xarray shows them as the variable's ``attrs``.
    dataset
        Create the array at this path (``"temperature"``, ``"a/b"``) inside the zarr v3 group at
        ``path``, making the group and the groups on the way if needed; ``mode`` then applies
        to that array alone (the group's other arrays are never touched).  Read it back with
        ``oc.open(path, dataset=...)``.
    coords
        With ``dataset``: coordinate arrays to write into the group beside it,
        ``{"time": values}`` or ``{"time": (values, {"units": "days since 2000-01-01"})}``,
        each a 1-d array named like its dimension (``dimension_names=(name,)``), which xarray
        shows as the Dataset's coordinates.  One already in the group with the same values
        is kept (outputs share coordinates); other values raise
        :class:`~oocarray.StoreExistsError` unless ``mode="w"``.  Local paths only.
    storage_options
        For URLs: the object store's settings (see :func:`~oocarray.open`).

    Returns
    -------
    ChunkedArray
        The new array, zero-filled (no chunk written yet), open for reading and writing.

    Raises
    ------
    StoreExistsError
        Something is at the array's path that ``mode`` may not replace (see ``mode``).
    StoreAccessError
        The object store refused access.

    Examples
    --------
    xarray opens zarr groups whose arrays name their dimensions:

    >>> import os, tempfile, numpy as np, xarray as xr, oocarray as oc
    >>> path = os.path.join(tempfile.mkdtemp(), "weather.zarr")
    >>> t = oc.create(path, (365, 40), "float32", dataset="temperature",
    ...               dimension_names=("day", "station"), attributes={"units": "K"})
    >>> t[...] = 280.0
    >>> ds = xr.open_zarr(path, consolidated=False)
    >>> ds["temperature"].dims, ds["temperature"].attrs["units"]
    (('day', 'station'), 'K')
    >>> oc.open(path, dataset="temperature")[0, :3]
    array([280., 280., 280.], dtype=float32)
    """
    # array_type: the class of the result (oc.create passes the compute layer's ChunkedArray).
    from oocarray._storage._zarr._coords import check_coords, parse_coords, write_coords
    from oocarray._storage._zarr._create import CODECS, create_zarr
    from oocarray._storage._zarr._groups import is_group, refresh_consolidated, require_group
    from oocarray._storage._zarr._store import ZarrStore

    location = locate(path, storage_options, "path", writing=True)
    dims = parse_shape(shape)
    parsed = _parse_dtype(dtype)
    if math.prod(dims) * max(parsed.itemsize, 1) > np.iinfo(np.intp).max:
        raise ValueError(
            f"shape {dims} of {parsed} is more than {np.iinfo(np.intp).max} bytes, which no "
            "NumPy array or index can address; give a smaller shape"
        )
    shard_shape = None if shards is None else parse_chunks(shards, dims, parsed, "shards")
    if shard_shape is not None and chunks is None:
        chunk_shape = _inner_chunks(shard_shape, parsed.itemsize)
    else:
        chunk_shape = parse_chunks(chunks, dims, parsed)
    if shard_shape is not None and any(
        s % c for s, c in zip(shard_shape, chunk_shape, strict=True)
    ):
        raise ValueError(
            f"shards must be a multiple of chunks on every axis, got shards {shard_shape} for "
            f"chunks {chunk_shape}"
        )
    if not isinstance(codec, str) or codec not in CODECS:
        raise ValueError(f"codec must be one of {CODECS}, got {codec!r}")
    if mode not in _MODES_CREATE:
        raise ValueError(f"mode must be one of {_MODES_CREATE} for oc.create, got {mode!r}")
    names = _parse_dimension_names(dimension_names, len(dims))
    attrs = _parse_attributes(attributes)
    if dataset is not None and not isinstance(dataset, str):
        raise TypeError(f"dataset must be a str such as 'temperature' or 'a/b', got {dataset!r}")
    coordinates = parse_coords(coords)
    if coordinates and (dataset is None or isinstance(location, Remote)):
        raise ValueError(
            "coords= writes coordinate arrays into a local zarr group: give dataset= and a "
            "local path"
        )
    if isinstance(location, Remote):
        from oocarray._storage._zarr._remote_create import create_remote

        store = create_remote(
            location,
            mode,
            dataset,
            {
                "shape": dims,
                "dtype": parsed,
                "chunks": chunk_shape,
                "codec": codec,
                "shards": shard_shape,
                "dimension_names": names,
                "attributes": attrs,
            },
        )
        return array_type(store)
    root = location
    if dataset is None:
        target = root
    else:
        prepare_group_path(root)
        target = require_group(root, dataset)
        check_coords(root, coordinates, mode)
    replacing = prepare_target(target, mode)
    if replacing:
        remove_zarr_array(target)
    if names is None and is_group(os.path.dirname(os.path.abspath(target))):
        names = tuple(f"dim_{axis}" for axis in range(len(dims)))  # xarray's default names
    create_zarr(
        target,
        dims,
        parsed,
        chunk_shape,
        codec,
        shards=shard_shape,
        dimension_names=names,
        attributes=attrs,
    )
    if replacing:
        finish_replacement(target)
    if dataset is not None:
        write_coords(root, coordinates, mode)
        refresh_consolidated(root)
    return array_type(ZarrStore.open(target, "r+", False))


def _parse_dimension_names(names: object, ndim: int) -> tuple[str | None, ...] | None:
    if names is None:
        return None
    if (
        isinstance(names, (str, bytes))
        or not isinstance(names, (tuple, list))
        or len(names) != ndim
        or not all(n is None or isinstance(n, str) for n in names)
    ):
        raise ValueError(
            f"dimension_names must be one str (or None) per axis ({ndim}), e.g. "
            f"{tuple(f'dim_{i}' for i in range(ndim))}; got {names!r}"
        )
    return tuple(names)


def _parse_attributes(attributes: object) -> dict[str, Any] | None:
    if attributes is None:
        return None
    if not isinstance(attributes, Mapping) or not all(isinstance(k, str) for k in attributes):
        raise TypeError(f"attributes must be a mapping with str keys, got {attributes!r}")
    try:
        json.dumps(dict(attributes), allow_nan=False)
    except (TypeError, ValueError) as error:
        raise TypeError(
            f"attributes must be JSON values (str, numbers, bools, None, lists, dicts), got "
            f"{attributes!r}: {error}"
        ) from None
    return dict(attributes)
