"""Zarr groups: telling a group from an array, finding an array in one, making the way to one."""

from __future__ import annotations

import json
import os
import warnings
from typing import Any, Literal

import zarr

from oocarray.errors import StoreNotFoundError

__all__ = ["array_in_group", "array_member", "is_group", "refresh_consolidated", "require_group"]


def is_group(path: str) -> bool:
    """Whether ``path`` holds a zarr group (v3 or v2) rather than an array."""
    v3 = os.path.join(path, "zarr.json")
    if os.path.isfile(v3):
        try:
            with open(v3, "rb") as f:
                meta = json.load(f)
        except (OSError, ValueError):
            return False  # unreadable metadata: zarr-python reports it when the node is opened
        return isinstance(meta, dict) and meta.get("node_type") == "group"
    return os.path.isfile(os.path.join(path, ".zgroup")) and not os.path.isfile(
        os.path.join(path, ".zarray")
    )


def array_in_group(path: str, dataset: str | None) -> str:
    """The directory of the array ``dataset`` (``"a/b"``) in the group at ``path``; without a
    name, of the group's only array.  Names are checked against the group's members, so the
    result never leaves the group."""
    if dataset is not None and not isinstance(dataset, str):
        raise TypeError(f"dataset must be a str, got {dataset!r}")
    if not is_group(path):
        raise ValueError(
            f"dataset= names an array inside a zarr group, but {path!r} is a zarr array: "
            "open it without dataset="
        )
    members = dict(zarr.open_group(store=path, mode="r").members(max_depth=None))
    name = array_member(members, dataset, path)
    return os.path.join(path, *name.split("/"))


def array_member(members: dict[str, Any], dataset: str | None, where: str) -> str:
    """The name of the array ``dataset`` among a group's ``members`` (all depths), or of its
    only array when ``dataset`` is None; ``where`` names the group in errors."""
    arrays = sorted(name for name, node in members.items() if isinstance(node, zarr.Array))
    if dataset is None:
        if len(arrays) != 1:
            raise ValueError(
                f"{where!r} is a zarr group with {len(arrays)} arrays {arrays}; choose one with "
                "dataset=..."
            )
        return arrays[0]
    name = dataset.strip("/")
    if name in members and name not in arrays:
        raise ValueError(f"{dataset!r} in {where!r} is a zarr group, not an array")
    if name not in arrays:
        raise StoreNotFoundError(f"no array {dataset!r} in zarr group {where!r}; it has {arrays}")
    return name


def require_group(path: str, dataset: str) -> str:
    """Make the zarr v3 group at ``path`` (and the groups on the way to ``dataset``) unless they
    exist; the directory where the array ``dataset`` goes."""
    parts = dataset.strip("/").split("/")
    if any(part in ("", ".", "..") or part.startswith("__") for part in parts):
        raise ValueError(
            f"dataset must be a name like 'temperature' or 'a/b' (no empty, '.', '..' or "
            f"'__'-prefixed parts), got {dataset!r}"
        )
    if not is_group(path) and any(
        os.path.isfile(os.path.join(path, name)) for name in ("zarr.json", ".zarray")
    ):
        raise ValueError(f"{path!r} is a zarr array; dataset= needs a zarr group there")
    if os.path.isfile(os.path.join(path, ".zgroup")):
        raise ValueError(
            f"{path!r} is a zarr v2 group; oc.create writes zarr v3 arrays, which a v2 group "
            "cannot hold: write into a new path or a v3 group"
        )
    group = zarr.open_group(store=path, mode="a", zarr_format=3)
    for part in parts[:-1]:
        group = group.require_group(part)
    return os.path.join(path, *parts)


def refresh_consolidated(path: str) -> None:
    """Rewrite the consolidated metadata of the group at ``path`` when it has any, so readers
    that trust it (``xarray.open_zarr``) see an array just added or grown; a group without
    consolidated metadata is left without."""
    meta_path = os.path.join(path, "zarr.json")
    zarr_format: Literal[2, 3]
    if os.path.isfile(meta_path):
        with open(meta_path, "rb") as f:
            meta = json.load(f)
        has = isinstance(meta, dict) and meta.get("consolidated_metadata") is not None
        zarr_format = 3
    else:
        has = os.path.isfile(os.path.join(path, ".zmetadata"))
        zarr_format = 2
    if has:
        with warnings.catch_warnings():
            # The group already chose consolidated metadata; zarr's note that v3 has it only
            # as an extension says nothing new here.
            warnings.filterwarnings("ignore", "Consolidated metadata", UserWarning)
            zarr.consolidate_metadata(path, zarr_format=zarr_format)
