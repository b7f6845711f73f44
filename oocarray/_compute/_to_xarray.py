"""``x.to_xarray()``: an oocarray array as an ``xarray.DataArray`` computed by oocarray.

The compute layer never imports the xarray layer: the array goes to xarray as it is and
xarray's own ``.chunk(chunked_array_type="oocarray")`` hands it to oocarray's chunk manager
(found through xarray's ``xarray.chunkmanagers`` entry point), which wraps it without copying.
xarray is imported when this is called, so importing oocarray never imports it.
"""

from __future__ import annotations

from typing import Any

from oocarray._storage import StoredArray
from oocarray._storage._labels import stored_labels

__all__ = ["to_xarray"]


def _block_shape(array: Any) -> tuple[int, ...]:
    """The blocks the chunk manager sees for ``array`` (so that ``.chunk`` keeps them)."""
    if isinstance(array, StoredArray):
        return tuple(array.chunks)
    for source in array.sources():
        if tuple(source.shape) == tuple(array.shape):
            return tuple(source.chunks)
    return tuple(array.shape)


def to_xarray(array: Any, name: str | None = None, dims: Any = None) -> Any:
    """``array`` (a ``ChunkedArray`` or ``Expr``) as a lazy ``xarray.DataArray``."""
    import xarray as xr

    attrs: dict[str, Any] = {}
    stored_dims = None
    if isinstance(array, StoredArray):
        # _store: the storage layer's format object, which knows the stored metadata.
        stored_dims, attrs = stored_labels(array._store)
    if dims is None:
        dims = stored_dims or tuple(f"dim_{i}" for i in range(len(array.shape)))
    dims = (dims,) if isinstance(dims, str) else tuple(dims)
    if len(dims) != len(array.shape):
        raise ValueError(f"to_xarray: {len(dims)} dims for an array of {len(array.shape)} axes")
    chunks = dict(zip(dims, _block_shape(array), strict=True))
    data = xr.DataArray(array, dims=dims, name=name, attrs=attrs)
    return data.chunk(chunks, chunked_array_type="oocarray")
