"""``oc.open_dataset``: a zarr store or netCDF4/HDF5 file as an xarray Dataset computed by
oocarray (``engine="oocarray"`` and ``chunked_array_type="oocarray"`` in one call).  xarray is
imported when it is called, so importing oocarray never imports it."""

from __future__ import annotations

from typing import Any

__all__ = ["open_dataset"]


def open_dataset(path: Any, *, chunks: Any = None, **kwargs: Any) -> Any:
    """Open ``path`` (a zarr store, a netCDF4/HDF5 file, or a URL) as a lazy ``xarray.Dataset``
    whose variables are oocarray arrays: xarray's operations on it run on oocarray's streaming
    engine inside the active manager's budget.

    Parameters
    ----------
    path : str or os.PathLike
        What ``xr.open_dataset(path, engine="oocarray")`` opens.
    chunks : dict, optional
        The chunks of the variables; the stored chunks by default (``{}``).
    **kwargs
        Passed to :func:`xarray.open_dataset` (``group=``, ``storage_options=``,
        ``decode_times=``, ``mask_and_scale=``, ...).

    Returns
    -------
    xarray.Dataset
        The dataset, its data variables backed by :class:`~oocarray.ChunkedArray` objects
        (nothing read yet).

    Examples
    --------
    >>> import tempfile, os, numpy as np, xarray as xr
    >>> import oocarray as oc
    >>> path = os.path.join(tempfile.mkdtemp(), "cube.zarr")
    >>> xr.Dataset({"t": (("time", "x"), np.arange(12.0).reshape(4, 3))}).to_zarr(
    ...     path, consolidated=False)  # doctest: +ELLIPSIS
    <xarray.backends.zarr.ZarrStore object at ...>
    >>> ds = oc.open_dataset(path, consolidated=False)
    >>> float(ds.t.mean("time").sum().compute())
    16.5
    """
    import xarray as xr

    kwargs.setdefault("engine", "oocarray")
    kwargs.setdefault("chunked_array_type", "oocarray")
    return xr.open_dataset(path, chunks={} if chunks is None else chunks, **kwargs)
