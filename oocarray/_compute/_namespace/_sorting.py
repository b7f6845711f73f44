"""The standard's sorting functions, through NumPy's (the compute layer's out-of-core sort).

A descending sort reverses an ascending one; a descending, stable argsort sorts the reversed
array stably and maps the positions back, so equal elements keep their order."""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.lib.array_utils import normalize_axis_index

from oocarray._compute._namespace._common import array_result, check_array
from oocarray._compute._namespace._dtypes import check_dtype

__all__ = ["argsort", "sort"]


def _check(x: Any, axis: int, name: str) -> int:
    check_dtype(check_array(x, name).dtype, "real numeric", name)
    if x.ndim == 0:
        raise ValueError(f"{name} needs an array of at least one dimension")
    return normalize_axis_index(axis, x.ndim)


def sort(x: Any, /, *, axis: int = -1, descending: bool = False, stable: bool = True) -> Any:
    """``x`` sorted along ``axis`` (NaNs last; first when ``descending``)."""
    own = _check(x, axis, "sort")
    ascending = np.sort(x, axis=own, kind="stable" if stable else None)
    return array_result(np.flip(ascending, axis=own) if descending else ascending)


def argsort(x: Any, /, *, axis: int = -1, descending: bool = False, stable: bool = True) -> Any:
    """The positions that sort ``x`` along ``axis`` (default integer dtype)."""
    own = _check(x, axis, "argsort")
    kind: Any = "stable" if stable else None
    if not descending:
        return array_result(np.argsort(x, axis=own, kind=kind))
    positions = np.flip(np.argsort(np.flip(x, axis=own), axis=own, kind=kind), axis=own)
    return array_result(x.shape[own] - 1 - positions)
