"""What a writer may replace: only a zarr array, and of it only its own files.

Creating an array at a path where something is already fails unless the mode is ``"w"``, and
``"w"`` replaces a zarr array only.  Nothing else is ever deleted, in any mode: not a directory
of other files (a typo in a path must not destroy a user's data), not a zarr group (its arrays
are siblings of the one being made), not a regular file.  An empty directory is no loss: an
array may be created in it.

Replacing an array removes the files zarr made for it (its metadata, its chunk or shard files,
oocarray's own files in it) and keeps any other file the user put in its directory.  The
metadata goes first, renamed to a marker, so that an interrupted replacement never leaves the
old metadata over a part of the old chunks (which would read as zeros, silently): it leaves a
directory that ``oc.open`` refuses and that ``mode="w"`` finishes replacing.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from collections.abc import Iterable
from typing import Any

from oocarray.errors import StoreExistsError

__all__ = [
    "ARRAY",
    "GROUP",
    "finish_replacement",
    "foreign_files",
    "node_kind",
    "prepare_group_path",
    "prepare_target",
    "refuse_replacing_an_input",
    "remove_zarr_array",
]

ARRAY = "array"
GROUP = "group"
# An array whose replacement began: its metadata, moved aside (see the module's docstring).
REPLACING = ".oocarray-replacing.json"
_OWN_DIRS = (".oocarray-map-chunks",)  # map_chunks' resume record
_METADATA = ("zarr.json", ".zarray", ".zattrs")
# Chunk (and shard) keys of the two key encodings, any number of axes: "c/0/1", "c.0.1", "c"
# for v3's default encoding; "0.1", "0/1", "0" for v2's (also a v3 option).
_V3_KEY = re.compile(r"^c(?:[/.]\d+)*$")
_V2_KEY = re.compile(r"^\d+(?:[/.]\d+)*$")


def node_kind(path: str) -> str | None:
    """``"array"`` or ``"group"`` for a zarr node (v3 or v2) at ``path``, ``"array"`` for an
    array whose replacement was interrupted, else None (not zarr, or unreadable metadata)."""
    v3 = os.path.join(path, "zarr.json")
    if os.path.isfile(v3):
        meta = _read_json(v3)
        kind = meta.get("node_type") if isinstance(meta, dict) else None
        return kind if kind in (ARRAY, GROUP) else None
    if os.path.isfile(os.path.join(path, ".zarray")):
        return ARRAY
    if os.path.isfile(os.path.join(path, ".zgroup")):
        return GROUP
    if os.path.isfile(os.path.join(path, REPLACING)):
        return ARRAY
    return None


def prepare_target(path: str, mode: str, what: str = "oc.create") -> bool:
    """Check that an array may be created at ``path`` with ``mode`` (``"w"``, ``"w-"`` or
    ``"x"``); True when a zarr array is there to be replaced (``"w"`` only).

    Raises
    ------
    StoreExistsError
        Something is at ``path`` that ``mode`` may not replace; nothing was changed.
    """
    if not os.path.lexists(path):
        return False
    if not os.path.isdir(path):
        what_is = "a link to nothing" if os.path.islink(path) else "a file"
        raise StoreExistsError(
            f"{path!r} exists and is {what_is}, not a zarr array: {what} never deletes it; "
            "choose another path"
        )
    kind = node_kind(path)
    if kind == GROUP:
        raise StoreExistsError(
            f"{path!r} is a zarr group: {what} never replaces a group (its arrays would go with "
            "it); to make an array inside it, give dataset='name'"
        )
    if kind is None:
        try:
            entries = sorted(os.listdir(path))
        except OSError as error:
            raise StoreExistsError(f"{path!r} exists and cannot be listed: {error}") from None
        if not entries:
            return False  # an empty directory: nothing to lose
        shown = ", ".join(entries[:5]) + (", ..." if len(entries) > 5 else "")
        raise StoreExistsError(
            f"{path!r} is a directory that is not a zarr array ({len(entries)} "
            f"{'entry' if len(entries) == 1 else 'entries'}: {shown}): {what} never deletes "
            "it; choose another path"
        )
    if mode != "w":
        raise StoreExistsError(
            f"{path!r} already holds a zarr array; pass mode='w' to replace it (the default, "
            "mode='w-', never replaces anything)"
        )
    return True


def refuse_replacing_an_input(path: str, inputs: Iterable[str], what: str) -> None:
    """Raise ``ValueError`` when ``path`` is one of the arrays a write reads: replacing it
    would remove the data before it is read."""
    if "://" in path:  # an object-store URL (redacted, as stores name themselves)
        same = any(source == path for source in inputs)
    else:
        target = os.path.realpath(path)
        same = any(os.path.realpath(source) == target for source in inputs)
    if same:
        raise ValueError(
            f"{what} would replace {path!r}, which it also reads: write to another path, then "
            "move the result over the old array"
        )


def prepare_group_path(path: str) -> None:
    """Check that arrays may be created inside a zarr group at ``path``: one is there, or
    nothing (or an empty directory) is, where one will be made.

    Raises
    ------
    StoreExistsError
        A file, or a directory that is not zarr, is at ``path``; nothing was changed.
    """
    if not os.path.lexists(path) or (os.path.isdir(path) and node_kind(path) is not None):
        return  # a zarr array there is refused by the group's own checks, with its reason
    if os.path.isdir(path) and not os.listdir(path):
        return
    what = "a directory that is not a zarr group" if os.path.isdir(path) else "a file"
    raise StoreExistsError(
        f"{path!r} is {what}: oc.create(..., dataset=) makes arrays inside a zarr group and "
        "never writes into or deletes anything else; choose another path"
    )


def remove_zarr_array(path: str) -> list[str]:
    """Remove the zarr array at ``path``: its metadata, its chunk files and oocarray's own
    files; every other file stays.  Returns what stayed (paths relative to ``path``)."""
    marker = os.path.join(path, REPLACING)
    for name in ("zarr.json", ".zarray"):
        source = os.path.join(path, name)
        if os.path.isfile(source):
            os.replace(source, marker)  # the array is gone for readers from here on
            break
    ours, own_dirs, kept = _array_files(path, _read_json(marker))
    for file in ours:
        os.unlink(os.path.join(path, file))
    for directory in own_dirs:  # deepest first; only once empty: a user's file keeps it
        with contextlib.suppress(OSError):
            os.rmdir(os.path.join(path, directory))
    return kept


def foreign_files(path: str) -> list[str]:
    """The files in the zarr array directory ``path`` that are not the array's own (paths
    relative to ``path``): what a user put there."""
    meta = None
    for name in ("zarr.json", ".zarray", REPLACING):
        if os.path.isfile(os.path.join(path, name)):
            meta = _read_json(os.path.join(path, name))
            break
    return _array_files(path, meta)[2]


def _array_files(path: str, meta: Any) -> tuple[list[str], list[str], list[str]]:
    """The array's own files, its own directories (deepest first) and the other files in its
    directory ``path``, all relative to ``path``; ``meta`` is its metadata."""
    key = _V3_KEY
    if isinstance(meta, dict) and (
        meta.get("zarr_format") == 2 or (meta.get("chunk_key_encoding") or {}).get("name") == "v2"
    ):
        key = _V2_KEY
    ours: list[str] = []
    own_dirs: list[str] = []
    kept: list[str] = []
    for directory, dirs, files in os.walk(path, topdown=False):
        relative_dir = os.path.relpath(directory, path)
        top = relative_dir == "."
        chunk_dir = not top and bool(key.match(relative_dir.replace(os.sep, "/")))
        own_dir = not top and relative_dir.split(os.sep)[0] in _OWN_DIRS
        # A link to a directory is not walked into: a link where chunks go is the array's
        # (removed, never what it points to), or its old chunks would be read as the new one's.
        links = [d for d in dirs if os.path.islink(os.path.join(directory, d))]
        for name in [*files, *links]:
            relative = name if top else os.path.join(relative_dir, name)
            if top and name == REPLACING:
                continue  # removed once the new array is written
            if (
                key.match(relative.replace(os.sep, "/"))
                or (name.startswith(".tmp-") and (top or chunk_dir))
                or (top and name in _METADATA)
                or own_dir
            ):
                ours.append(relative)
            else:
                kept.append(relative)
        if chunk_dir or own_dir:
            own_dirs.append(relative_dir)
    return ours, own_dirs, sorted(kept)


def finish_replacement(path: str) -> None:
    """The new array is written: drop the old metadata's marker."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(os.path.join(path, REPLACING))


def _read_json(path: str) -> Any:
    try:
        with open(path, "rb") as f:
            return json.load(f)
    except (OSError, ValueError):
        return None
