"""Creating and replacing zarr arrays in object stores: ``oc.create``, ``to_zarr`` and
``from_batches`` at a URL.  Replacing (``mode="w"``) deletes only the zarr array's own objects
(its metadata and chunk keys), chunks first and metadata last, never the other objects under
its prefix."""

from __future__ import annotations

import json
from typing import Any

import zarr

from oocarray._storage._objects import _loop
from oocarray._storage._objects._backend import Backend, translate
from oocarray._storage._objects._backend_choice import backend_for
from oocarray._storage._objects._requests import MAX_REQUESTS
from oocarray._storage._objects._urls import Remote
from oocarray._storage._zarr._remote import RemoteZarrStore, open_array_at
from oocarray.errors import StoreExistsError, StoreNotFoundError

__all__ = ["check_remote_target", "create_remote", "prepare_remote_target"]

_METADATA = ("zarr.json", ".zarray", ".zattrs", ".zgroup")


def check_remote_target(remote: Remote, mode: str, what: str) -> None:
    """Raise as ``_replace.prepare_target`` does where an array may not be created at
    ``remote`` with ``mode``; nothing is changed."""
    prepare_remote_target(backend_for(remote, read_only=True), "", mode, what, replace=False)


def prepare_remote_target(
    backend: Backend, prefix: str, mode: str, what: str, *, replace: bool = True
) -> bool:
    """As ``_replace.prepare_target`` for a location in an object store: True when a zarr
    array there is to be replaced (``mode="w"``); with ``replace`` its objects are then
    deleted here, and only they (metadata and chunk keys), never the other objects under the
    prefix."""
    listed = _loop.run(backend.list(prefix))
    if not listed:
        return False
    names = {key[len(prefix) :] for key, _ in listed}
    where = backend.where(prefix.rstrip("/")) if prefix else backend.name
    meta = None
    for name in ("zarr.json", ".zarray", ".zgroup"):
        if name in names:
            found = _loop.run(backend.get(prefix + name))
            meta = (name, None if found is None else bytes(found.data))  # type: ignore[union-attr]
            break
    is_array = meta is not None and (
        meta[0] == ".zarray" or (meta[0] == "zarr.json" and _node_type(meta[1]) == "array")
    )
    if not is_array:
        raise StoreExistsError(
            f"{where} holds {len(listed)} objects that are not a zarr array: {what} never "
            "deletes them; choose another location"
        )
    if mode != "w":
        raise StoreExistsError(
            f"{where} already holds a zarr array; pass mode='w' to replace it (the default, "
            "mode='w-', never replaces anything)"
        )
    if not replace:
        return True
    owned = [key for key, _ in listed if _is_array_object(key[len(prefix) :])]

    # chunks first, metadata last: an interrupted replacement still reads as an array
    for last in (False, True):
        keys = [k for k in owned if k.endswith(_METADATA) == last]
        _loop.run_all((backend.delete(k) for k in keys), MAX_REQUESTS)
    return True


def _node_type(raw: bytes | None) -> str | None:
    try:
        meta = json.loads(raw or b"")
    except ValueError:
        return None
    return meta.get("node_type") if isinstance(meta, dict) else None


def _is_array_object(name: str) -> bool:
    """A zarr array's own object: its metadata, or a chunk key (v3 ``c/...``, v2 digits)."""
    if name in _METADATA:
        return True
    head = name.split("/", 1)[0]
    return head == "c" or head.replace(".", "").isdigit()


def create_remote(
    remote: Remote, mode: str, dataset: str | None, metadata: dict[str, Any]
) -> RemoteZarrStore:
    """``oc.create`` in an object store: the array's metadata written by zarr-python (after
    replacing an array there where ``mode`` allows), then the array opened ``"r+"``."""
    from oocarray._storage._zarr._create import create_zarr

    backend = backend_for(remote, read_only=False)
    prefix = ""
    try:
        if dataset is not None:
            parts = dataset.strip("/").split("/")
            if any(part in ("", ".", "..") or part.startswith("__") for part in parts):
                raise ValueError(
                    f"dataset must be a name like 'temperature' or 'a/b', got {dataset!r}"
                )
            group = zarr.open_group(store=backend.zarr_store, mode="a", zarr_format=3)
            for part in parts[:-1]:
                group = group.require_group(part)
            prefix = "/".join(parts) + "/"
            if metadata.get("dimension_names") is None:
                ndim = len(metadata["shape"])
                metadata["dimension_names"] = tuple(f"dim_{axis}" for axis in range(ndim))
        prepare_remote_target(backend, prefix, mode, "oc.create")
        create_zarr(backend.zarr_store, **metadata, name=prefix.rstrip("/") or None)
        array, prefix = open_array_at(backend, dataset, "r+")
    except (StoreExistsError, StoreNotFoundError, ValueError, TypeError):
        raise
    except Exception as error:
        raise translate(error, remote.name) from error
    return RemoteZarrStore(array, remote, backend, prefix, False, False)
