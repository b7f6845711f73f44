"""xarray's routes that hand an array whole to bottleneck or numbagg: refused with a clear
error on oocarray-backed variables, never a silent load.

On data that is not a dask array, xarray 2026.9 passes the whole array to a C or numba kernel
in a few places, and the kernel converts it with ``__array__`` (a full load of data that may
exceed memory):

- ``ffill``/``bfill`` (``missing.ffill`` → ``duck_array_ops.push`` → ``_push``): only dask
  arrays get a chunked fill (built on the chunk manager's ``scan``);
- ``rolling(...).<reduction>()`` over one dimension, when bottleneck or numbagg is installed
  and enabled (``DataArrayRolling._bottleneck_reduce`` / ``_numbagg_reduce``): with neither,
  xarray reduces the sliding windows, which oocarray streams (``_windows.py``).

(``rolling_exp`` and ``rank`` go through ``apply_ufunc(..., dask="parallelized")``, which the
chunk manager runs block by block.)

None of these consults the array's NumPy function hook, namespace or chunk manager, so there
is no supported way to run them out of core.  :func:`refuse_whole_routes` recognises the
conversion asked from one of them (by the caller's frames: the only sign they leave) and
raises :class:`NotImplementedError` saying what to do instead.  Without bottleneck and
numbagg, xarray raises ``ModuleNotFoundError`` for ``ffill``/``bfill`` before it touches the
array, as it does for NumPy data.
"""

from __future__ import annotations

import sys
from types import FrameType

__all__ = ["FILL_REFUSED", "ROLLING_REFUSED", "refuse_whole_routes"]

FILL_REFUSED = (
    "ffill/bfill are not supported on chunked_array_type='oocarray' data: xarray passes the "
    "whole array to numbagg or bottleneck (only dask arrays get a chunked fill), which would "
    "load it into memory. Fill a subset in memory instead (ds.isel(...).compute().ffill(dim)), "
    "or use chunked_array_type='dask' for this step"
)
ROLLING_REFUSED = (
    "rolling(...) reductions with bottleneck or numbagg enabled pass the whole array to them, "
    "which would load it into memory: call xr.set_options(use_bottleneck=False, "
    "use_numbagg=False) (as a context manager or once) and oocarray streams the rolling "
    "windows in its budget"
)
# (module, function) of xarray's frames that convert a whole array, and what to say.
_ROUTES = {
    ("xarray.core.duck_array_ops", "_push"): FILL_REFUSED,
    ("xarray.computation.rolling", "_bottleneck_reduce"): ROLLING_REFUSED,
    ("xarray.computation.rolling", "_numbagg_reduce"): ROLLING_REFUSED,
}

# How many frames above ``__array__`` xarray's function may be: bottleneck calls it directly
# from C; numbagg through a few Python frames of its own.
_SEARCH_DEPTH = 12


def refuse_whole_routes() -> None:
    """Raise ``NotImplementedError`` when the caller's conversion to NumPy was asked by one of
    xarray's whole-array routes (see the module's text)."""
    frame: FrameType | None = sys._getframe(1)
    for _ in range(_SEARCH_DEPTH):
        if frame is None:
            return
        module = str(frame.f_globals.get("__name__"))
        message = _ROUTES.get((module, frame.f_code.co_name))
        if message is not None:
            raise NotImplementedError(message)
        frame = frame.f_back
