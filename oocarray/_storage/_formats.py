"""Storage backends of chunked arrays.  Only the module of a backend imports that backend."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from oocarray._storage._base import Store
from oocarray._storage._objects._urls import Remote
from oocarray.errors import StoreNotFoundError

__all__ = ["Store", "detect_format", "open_store"]

_HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"
_NPY_SIGNATURE = b"\x93NUMPY"


def detect_format(path: str) -> str:
    """``"zarr"``, ``"hdf5"`` or ``"npy"``, from the content at ``path``."""
    p = Path(path)
    if not p.exists():
        raise StoreNotFoundError(
            f"no array store at {path!r}: the path does not exist (check it, or create one "
            "with oc.create)"
        )
    if p.is_dir():
        if any((p / name).is_file() for name in ("zarr.json", ".zarray", ".zgroup")):
            return "zarr"  # an array, or a group holding one (see ``dataset=``)
        raise ValueError(
            f"{path!r} is a directory but not a zarr array or group (no zarr.json, .zarray or "
            ".zgroup)"
        )
    with open(p, "rb") as f:
        head = f.read(8)
    if head.startswith(_HDF5_SIGNATURE):
        return "hdf5"
    if head.startswith(_NPY_SIGNATURE):
        return "npy"
    raise ValueError(
        f"{path!r} is not an array store oocarray reads: expected a zarr directory, an HDF5 "
        "file or a .npy file"
    )


def open_store(
    path: str | os.PathLike[str] | Remote,
    mode: str,
    dataset: str | None,
    allow_object: bool,
    cache: Any = None,
) -> Store:
    """Open the store at ``path`` with the backend its content calls for; in an object store,
    a zarr array (read through ``cache``, a ChunkCache, where given)."""
    if isinstance(path, Remote):
        from oocarray._storage._zarr._remote import RemoteZarrStore

        return RemoteZarrStore.open_remote(path, mode, allow_object, dataset, cache)
    if cache is not None:
        raise ValueError("cache= keeps chunks fetched from object stores; this is a local path")
    path = os.fspath(path)
    kind = detect_format(path)
    if dataset is not None and kind == "npy":
        raise ValueError(
            f"dataset= names an array in an HDF5 file or a zarr group, but {path!r} is a .npy file"
        )
    if kind == "zarr":
        from oocarray._storage._zarr._store import ZarrStore

        return ZarrStore.open(path, mode, allow_object, dataset)
    if kind == "hdf5":
        from oocarray._storage._hdf5 import HDF5Store

        return HDF5Store(path, mode, dataset, allow_object)
    from oocarray._storage._npy import NpyStore

    return NpyStore(path, mode, allow_object)
