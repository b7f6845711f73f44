"""The oocarray array behind xarray's lazily indexed backend variables, without copying.

``open_dataset(..., engine="oocarray", chunks={}, chunked_array_type="oocarray")`` hands the
chunk manager a stack of xarray's wrappers: indexing, copy-on-write and caching adapters, a lazily
indexed view (a key), and CF decoding (masking, scaling, bools, byte order) as element-wise
functions, over the backend's :class:`~._backend_stores.OOCArrayBackendArray`.  When the view
is the whole array, the stack is the stored ``ChunkedArray`` with the decoding applied block by
block (``map_blocks``): nothing is read or copied until something is computed.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from xarray.coding.common import _ElementwiseFunctionArray
from xarray.coding.variables import BoolTypeArray, NativeEndiannessArray
from xarray.core import indexing

from oocarray._compute import ChunkedArray, Expr
from oocarray._xarray._backend_stores import OOCArrayBackendArray

__all__ = ["stored_source"]

_ADAPTERS = (
    indexing.ImplicitToExplicitIndexingAdapter,
    indexing.CopyOnWriteArray,
    indexing.MemoryCachedArray,
)


def _is_whole(key: Any, shape: tuple[int, ...]) -> bool:
    parts = getattr(key, "tuple", ())
    return len(parts) == len(shape) and all(
        isinstance(p, slice) and p.indices(n) == (0, n, 1)
        for p, n in zip(parts, shape, strict=True)
    )


def stored_source(data: Any) -> ChunkedArray | Expr | None:
    """The lazy oocarray array equal to ``data``, or None when ``data`` is not (only) xarray's
    wrappers over whole oocarray backend arrays."""
    if isinstance(data, OOCArrayBackendArray):
        return data.chunked
    if isinstance(data, _ADAPTERS):
        return stored_source(data.array)
    if isinstance(data, indexing.LazilyIndexedArray):
        return stored_source(data.array) if _is_whole(data.key, data.array.shape) else None
    if isinstance(data, _ElementwiseFunctionArray | BoolTypeArray | NativeEndiannessArray):
        inner = stored_source(data.array)
        dtype = np.dtype(data.dtype)
        if inner is None or dtype.kind not in "biufc":  # (dates stay with xarray's reader)
            return None
        if isinstance(data, _ElementwiseFunctionArray):
            return inner.map_blocks(data.func, dtype=dtype)
        return inner.astype(dtype)
    return None
