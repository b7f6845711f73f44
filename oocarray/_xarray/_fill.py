"""``ffill``/``bfill`` on oocarray-backed variables: refused with a clear error, not loaded.

xarray 2026.9's ``ffill``/``bfill`` (``xarray/core/missing.py``) run ``apply_ufunc(push, arr,
dask="allowed")``; ``duck_array_ops.push`` has a chunked route (``dask_array_ops.push``, built
on the chunk manager's ``scan``) only for dask arrays (``is_duck_dask_array``), and hands any
other array to ``_push``, which calls ``numbagg.ffill`` or ``bottleneck.push`` on it whole.
Both convert it with ``__array__``: a full, silent load of data that may exceed memory.  No
dispatch (``__array_function__``, the array namespace, the chunk manager) is consulted on that
route, so there is no supported way to run it out of core; without numbagg and bottleneck,
xarray raises ``ModuleNotFoundError`` before touching the array at all.

:func:`refuse_whole_fill` recognises the conversion asked from ``_push`` (by its frame: the
only sign it leaves) and raises :class:`NotImplementedError` naming ``ffill``/``bfill`` and
what to do instead.
"""

from __future__ import annotations

import sys
from types import FrameType

__all__ = ["FILL_REFUSED", "refuse_whole_fill"]

FILL_REFUSED = (
    "ffill/bfill are not supported on chunked_array_type='oocarray' data: xarray passes the "
    "whole array to numbagg or bottleneck (only dask arrays get a chunked fill), which would "
    "load it into memory. Fill a subset in memory instead (ds.isel(...).compute().ffill(dim)), "
    "or use chunked_array_type='dask' for this step"
)

# How many frames above ``__array__`` xarray's ``_push`` may be: bottleneck calls it directly
# from C; numbagg through a few Python frames of its own.
_SEARCH_DEPTH = 12


def refuse_whole_fill() -> None:
    """Raise ``NotImplementedError`` (:data:`FILL_REFUSED`) when the caller's conversion to
    NumPy was asked by xarray's ``duck_array_ops._push`` (``ffill``/``bfill``)."""
    frame: FrameType | None = sys._getframe(1)
    for _ in range(_SEARCH_DEPTH):
        if frame is None:
            return
        if (
            frame.f_code.co_name == "_push"
            and frame.f_globals.get("__name__") == "xarray.core.duck_array_ops"
        ):
            raise NotImplementedError(FILL_REFUSED)
        frame = frame.f_back
