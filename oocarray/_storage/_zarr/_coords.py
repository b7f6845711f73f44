"""Coordinate arrays beside a writer's output in a zarr group: the small 1-d arrays named like
their dimension that xarray shows as a Dataset's coordinates."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import numpy as np
import zarr

from oocarray.errors import StoreExistsError

__all__ = ["check_coords", "parse_coords", "write_coords"]


def parse_coords(coords: object) -> dict[str, tuple[np.ndarray, dict[str, Any]]]:
    """``{name: values}`` or ``{name: (values, attributes)}`` as 1-d arrays and attribute
    dicts; anything else raises ``TypeError`` or ``ValueError`` naming the coordinate."""
    if coords is None:
        return {}
    if not isinstance(coords, Mapping):
        raise TypeError(f"coords must be a dict such as {{'time': values}}, got {coords!r}")
    parsed: dict[str, tuple[np.ndarray, dict[str, Any]]] = {}
    for name, given in coords.items():
        if not isinstance(name, str) or not name or "/" in name or name.startswith("__"):
            raise ValueError(f"coords: {name!r} is not a name for a coordinate array")
        values, attrs = given if isinstance(given, tuple) else (given, {})
        array = np.asarray(values)
        if array.ndim != 1 or array.dtype.kind not in "biufcMmU":
            raise ValueError(
                f"coords[{name!r}] must be 1-d numbers, times or strings, got shape "
                f"{array.shape} of {array.dtype}"
            )
        if not isinstance(attrs, Mapping):
            raise TypeError(f"coords[{name!r}] attributes must be a dict, got {attrs!r}")
        parsed[name] = (array, dict(attrs))
    return parsed


def _same(group: str, name: str, values: np.ndarray) -> bool | None:
    """Whether the array ``name`` in ``group`` holds ``values``; None when there is none."""
    if not os.path.exists(os.path.join(group, name)):
        return None
    old = zarr.open_array(store=group, path=name, mode="r")
    return bool(
        old.shape == values.shape and old.dtype == values.dtype and np.array_equal(old[...], values)
    )


def check_coords(
    group: str, coords: dict[str, tuple[np.ndarray, dict[str, Any]]], mode: str
) -> None:
    """Refuse, before anything is written, coordinates whose values differ from those of the
    same name in ``group`` unless ``mode="w"``."""
    for name, (values, _) in coords.items():
        if mode != "w" and _same(group, name, values) is False:
            raise StoreExistsError(
                f"coordinate {name!r} in {group!r} has other values; pass mode='w' to "
                "replace it, or give the same values"
            )


def write_coords(
    group: str, coords: dict[str, tuple[np.ndarray, dict[str, Any]]], mode: str
) -> None:
    """Write each coordinate as an array in ``group``; one already there with the same values
    is kept (outputs share their coordinates), one with other values is replaced only with
    ``mode="w"``."""
    if not coords:
        return
    root = zarr.open_group(store=group, mode="a", zarr_format=3)
    for name, (values, attrs) in coords.items():
        same = _same(group, name, values)
        if same:
            if attrs:
                zarr.open_array(store=group, path=name, mode="r+").attrs.update(attrs)
            continue
        if same is False and mode != "w":
            check_coords(group, {name: (values, attrs)}, mode)  # raises
        array = root.create_array(
            name,
            shape=values.shape,
            dtype=values.dtype,
            dimension_names=(name,),
            attributes=attrs,
            overwrite=True,
        )
        array[...] = values
