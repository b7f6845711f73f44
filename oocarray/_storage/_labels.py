"""What a stored array says about its axes and itself: dimension names and attributes, for
``to_xarray`` (zarr v3 ``dimension_names``, zarr v2 ``_ARRAY_DIMENSIONS``, HDF5 attributes)."""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["stored_labels"]

_XARRAY_DIMENSIONS = "_ARRAY_DIMENSIONS"  # zarr v2's convention (and xarray's)


def _plain(value: Any) -> Any:
    """An attribute as Python values (HDF5 gives NumPy scalars and bytes)."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, np.generic):
        return value.item()
    return value


def stored_labels(store: Any) -> tuple[tuple[str, ...] | None, dict[str, Any]]:
    """The dimension names (None where the store names none, or not every axis) and the
    attributes of the array behind ``store``."""
    zarr_array = getattr(store, "array", None)
    if zarr_array is not None and hasattr(zarr_array, "metadata"):
        attrs = dict(zarr_array.attrs)
        names = getattr(zarr_array.metadata, "dimension_names", None)
        names = names or attrs.pop(_XARRAY_DIMENSIONS, None)
        attrs.pop(_XARRAY_DIMENSIONS, None)
    else:
        dataset = getattr(store, "ds", None)
        raw = {} if dataset is None else dict(dataset.attrs)
        attrs = {
            k: _plain(v)
            for k, v in raw.items()
            if k not in ("DIMENSION_LIST", "REFERENCE_LIST", "CLASS", "NAME", "_Netcdf4Dimid")
        }
        names = None
    if names is None or any(n is None for n in names):
        return None, attrs
    return tuple(str(n) for n in names), attrs
