"""``rolling(...)`` and ``weighted(...)`` on the oocarray chunk manager: the NumPy calls xarray
makes for them (``sliding_window_view``, ``einsum`` with ``...``, ``zeros_like``) run lazily,
equal xarray with dask, and stay within a budget smaller than the data."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import xarray as xr

import oocarray as oc
from oocarray._xarray._chunkmanager import OOCArrayChunkManager
from oocarray._xarray._lazy import OOCLazyArray


def _cube() -> tuple[xr.Dataset, xr.Dataset]:
    time = pd.date_range("2001-01-01", periods=730, freq="D")
    t2m = np.random.default_rng(2).normal(280, 10, (730, 6, 8)).astype("float32")
    t2m[5:40:3, 1, 2] = np.nan
    ds = xr.Dataset(
        {"t2m": (("time", "lat", "lon"), t2m)},
        coords={"time": time, "lat": np.linspace(-50, 50, 6), "lon": np.arange(8.0) * 45},
    )
    chunks = {"time": 73, "lat": 3}
    return ds.chunk(chunks, chunked_array_type="oocarray"), ds.chunk(chunks)


WEIGHTS = xr.DataArray(np.cos(np.deg2rad(np.linspace(-50, 50, 6))), dims="lat")


@pytest.mark.parametrize(
    "operation",
    [
        lambda ds: ds.t2m.rolling(time=5).mean(),
        lambda ds: ds.t2m.rolling(time=5, min_periods=2).sum(),
        lambda ds: ds.t2m.rolling(time=4, center=True).max(),
        lambda ds: ds.t2m.rolling(time=3, lat=2).mean(),
        lambda ds: ds.t2m.rolling(time=80).std(),  # a window longer than a chunk
        lambda ds: ds.t2m.rolling(time=3).construct("window").isel(window=0),
        lambda ds: ds.rolling(time=4, center=True, min_periods=1).mean().t2m,
        lambda ds: ds.t2m.coarsen(time=5, boundary="trim").mean(),
        lambda ds: ds.t2m.weighted(WEIGHTS).mean("lat"),
        lambda ds: ds.t2m.weighted(WEIGHTS).sum(("lat", "lon")),
        lambda ds: ds.weighted(WEIGHTS).mean(("lat", "lon")).t2m,
        lambda ds: xr.dot(ds.t2m, WEIGHTS, dim="lat"),
        lambda ds: ds.t2m.sum("lon"),  # nansum: zeros_like
    ],
)
def test_results_equal_dask(operation: object) -> None:
    assert callable(operation)
    ooc, dask = _cube()
    xr.testing.assert_allclose(
        operation(ooc).compute(), operation(dask).compute(), rtol=1e-5, atol=1e-4
    )


def test_the_windows_are_lazy() -> None:
    ooc, _ = _cube()
    windows = ooc.t2m.rolling(time=3).construct("window")
    assert isinstance(windows.data, OOCLazyArray)
    assert windows.shape == (730, 6, 8, 3)
    # rolling selects every window with slice(None, None, 1): that is the array, not a copy
    assert windows.isel(time=slice(None, None, 1)).data.lazy is windows.data.lazy


@pytest.mark.parametrize(
    "operation",
    [
        lambda ds: ds.t2m.rolling(time=7).mean().mean(("lat", "lon")),
        lambda ds: ds.t2m.weighted(WEIGHTS).mean("lat").mean("time"),
    ],
)
def test_they_stay_within_a_budget_smaller_than_the_data(operation: object) -> None:
    assert callable(operation)
    ooc, dask = _cube()  # t2m is 140 kB
    with oc.Manager(max_bytes="64k"):
        ours = operation(ooc).compute()
    xr.testing.assert_allclose(ours, operation(dask).compute(), rtol=1e-5, atol=1e-4)


def test_einsum_with_ellipsis_on_the_manager_arrays() -> None:
    manager = OOCArrayChunkManager()
    a = np.arange(24.0).reshape(2, 3, 4)
    b = np.arange(4.0)
    lazy = manager.from_array(a, chunks=(1, 3, 2))
    result = np.einsum("...ij,j->...i", lazy, b)
    np.testing.assert_allclose(np.asarray(result), np.einsum("...ij,j->...i", a, b))
