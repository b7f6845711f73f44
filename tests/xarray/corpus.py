"""Small deterministic datasets written with xarray itself, for the xarray tests: CF time
units, packed int16 with scale_factor/add_offset, _FillValue, strings, 0-d variables,
coordinates, attributes of several types, an unlimited dimension (netCDF4) and groups."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import xarray as xr


def climate(n_time: int = 40, n_lat: int = 6, n_lon: int = 8) -> xr.Dataset:
    """A daily (time, lat, lon) cube with CF attributes and a varied set of variables."""
    rng = np.random.default_rng(25)
    time = pd.date_range("2000-01-01", periods=n_time, freq="D")
    lat = np.linspace(-60.0, 60.0, n_lat)
    lon = np.linspace(0.0, 350.0, n_lon)
    t2m = (280 + 10 * rng.standard_normal((n_time, n_lat, n_lon))).astype("float32")
    precip = rng.gamma(1.0, 2.0, (n_time, n_lat, n_lon))
    precip[0, 0, :3] = np.nan
    counts = rng.integers(0, 100, (n_time, n_lat), dtype="int32")
    ds = xr.Dataset(
        {
            "t2m": (("time", "lat", "lon"), t2m, {"units": "K", "long_name": "2 m temperature"}),
            "precip": (("time", "lat", "lon"), precip, {"units": "mm/day"}),
            "counts": (("time", "lat"), counts, {"flag": np.int16(3), "valid": [0, 100]}),
            "station": (("lat",), np.array([f"st{i}" for i in range(n_lat)], dtype=object)),
            "scalar": ((), np.float64(2.5), {"note": "0-d"}),
            "mask": (("lat", "lon"), rng.random((n_lat, n_lon)) > 0.5),
        },
        coords={
            "time": time,
            "lat": ("lat", lat, {"units": "degrees_north", "standard_name": "latitude"}),
            "lon": ("lon", lon, {"units": "degrees_east"}),
            "height": ((), 2.0, {"units": "m"}),
        },
        attrs={
            "title": "corpus cube",
            "version": 3,
            "scale": 1.5,
            "levels": np.array([1, 2, 3], dtype="int32"),
            "institution": "nowhere",
        },
    )
    ds["time"].encoding.update({"units": "days since 1990-01-01", "calendar": "standard"})
    ds["precip"].encoding.update(
        {"dtype": "int16", "scale_factor": 0.01, "add_offset": 10.0, "_FillValue": -9999}
    )
    ds["t2m"].encoding.update({"_FillValue": np.float32(-1.0e20), "chunks": (10, 3, 8)})
    ds["counts"].encoding["chunks"] = (16, 6)
    ds["precip"].encoding["chunks"] = (10, 6, 4)
    return ds


def _child() -> xr.Dataset:
    return xr.Dataset(
        {"depth_mean": (("depth",), np.arange(5, dtype="float64"), {"units": "m"})},
        coords={"depth": ("depth", np.arange(5) * 10.0)},
        attrs={"group_note": "child"},
    )


def write_zarr(path: Path, zarr_format: int = 3, consolidated: bool = True) -> xr.Dataset:
    """Write :func:`climate` with a child group ``ocean`` to a zarr store; returns the cube."""
    ds = climate()
    if zarr_format == 2:
        ds = ds.drop_vars("station")  # variable-length strings need v3's string dtype or v2's
    ds.to_zarr(path, zarr_format=zarr_format, consolidated=consolidated, mode="w")
    _child().to_zarr(
        path, group="ocean", zarr_format=zarr_format, consolidated=consolidated, mode="w"
    )
    return ds


def write_netcdf(path: Path) -> xr.Dataset:
    """Write :func:`climate` (time unlimited) with a child group ``ocean`` to netCDF4."""
    ds = climate()
    for var in ds.variables.values():
        var.encoding.pop("chunks", None)
    ds["t2m"].encoding["chunksizes"] = (10, 3, 8)
    ds.to_netcdf(path, engine="h5netcdf", unlimited_dims=["time"])
    _child().to_netcdf(path, engine="h5netcdf", group="ocean", mode="a")
    return ds
