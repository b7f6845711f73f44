"""Temporary chunked arrays for results too large for RAM (a sort's runs and output, a large
product), typed as the public :class:`~oocarray.ChunkedArray`.

The algorithms that make them sit below ``_compute._array``, which defines that type (and
imports them to answer NumPy's calls); it names the type here when it is defined, so nothing
here imports it.
"""

from __future__ import annotations

from typing import Any

from oocarray._storage import StoredArray, temp

__all__ = ["temporary", "use_array_type"]

_ARRAY_TYPE: list[type[StoredArray]] = [StoredArray]


def use_array_type(array_type: type[StoredArray]) -> None:
    """Make :func:`temporary` return ``array_type`` (``_compute._array`` passes ChunkedArray)."""
    _ARRAY_TYPE[0] = array_type


def temporary(shape: Any, dtype: Any, chunks: Any = None, codec: str = "zstd") -> StoredArray:
    """A temporary chunked array owned by the active manager (see ``oocarray.temp``)."""
    return temp(shape, dtype, chunks, codec, array_type=_ARRAY_TYPE[0])
