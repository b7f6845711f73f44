"""``__array_namespace_info__()``: what the namespace supports, as the standard asks it."""

from __future__ import annotations

from typing import Any

import numpy as np

from oocarray._compute._namespace._dtypes import DTYPE_CATEGORIES, isdtype

__all__ = ["Info", "__array_namespace_info__"]


class Info:
    """The namespace's capabilities, devices and dtypes."""

    def capabilities(self) -> dict[str, Any]:
        """Boolean-mask indexing: no (``x[mask]`` is refused); data-dependent shapes
        (``unique_*``, ``nonzero``): yes; at most 64 dimensions, as NumPy."""
        return {
            "boolean indexing": False,
            "data-dependent shapes": True,
            "max dimensions": 64,
        }

    def default_device(self) -> str:
        return "cpu"

    def devices(self) -> list[str]:
        return ["cpu"]

    def default_dtypes(self, *, device: Any = None) -> dict[str, np.dtype[Any]]:
        _check(device)
        return {
            "real floating": np.dtype("float64"),
            "complex floating": np.dtype("complex128"),
            "integral": np.dtype("int64"),
            "indexing": np.dtype("int64"),
        }

    def dtypes(self, *, device: Any = None, kind: Any = None) -> dict[str, np.dtype[Any]]:
        _check(device)
        everything = {str(d): d for d in DTYPE_CATEGORIES["all"]}
        if kind is None:
            return everything
        return {name: d for name, d in everything.items() if isdtype(d, kind)}


def _check(device: Any) -> None:
    if device not in (None, "cpu"):
        raise ValueError(f"oocarray arrays live on 'cpu' only, got device={device!r}")


def __array_namespace_info__() -> Info:
    """The namespace's inspection object (``capabilities()``, ``devices()``, ``dtypes()``,
    ``default_dtypes()``, ``default_device()``).

    Examples
    --------
    >>> import oocarray.array_api as xp
    >>> info = xp.__array_namespace_info__()
    >>> info.devices(), info.default_dtypes()["integral"]
    (['cpu'], dtype('int64'))
    """
    return Info()
