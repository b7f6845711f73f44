"""Variables opened with engine="oocarray" and chunked_array_type="oocarray" (or
``oc.open_dataset``) are the stored oocarray arrays themselves, CF decoding applied block by
block: opening copies and reads nothing, and values equal engine="zarr"'s."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import xarray as xr

import oocarray as oc
from oocarray._xarray._lazy import OOCLazyArray


@pytest.fixture
def cube(tmp_path: Path) -> str:
    data = np.random.default_rng(3).standard_normal((120, 6, 8)).astype(np.float32)
    ds = xr.Dataset(
        {
            "t2m": (("time", "lat", "lon"), data, {"units": "K"}),
            "packed": (("time", "lat", "lon"), data.copy()),
        },
        coords={"time": pd.date_range("2001-01-01", periods=120), "lat": np.arange(6.0)},
    )
    ds.packed.encoding.update(dtype="int16", scale_factor=0.01, add_offset=1.0, _FillValue=-999)
    ds["packed"][0, 0, :3] = np.nan
    path = str(tmp_path / "cube.zarr")
    ds.chunk(time=30).to_zarr(path, consolidated=False)
    return path


def test_variables_are_the_stored_arrays_with_lazy_decoding(cube: str) -> None:
    ds = oc.open_dataset(cube, consolidated=False)
    t2m, packed = ds.t2m.variable._data, ds.packed.variable._data
    assert isinstance(t2m, OOCLazyArray) and isinstance(t2m.lazy, oc.ChunkedArray)
    assert t2m.lazy.chunk_reads == 0  # nothing read by opening
    assert "cube.zarr" in repr(t2m.lazy)  # the store itself, not a temporary copy
    assert isinstance(packed.lazy, oc.Expr)  # scale, offset and fill applied per block
    assert t2m.chunks[0] == (30, 30, 30, 30)
    reference = xr.open_dataset(cube, engine="zarr", consolidated=False)
    xr.testing.assert_allclose(ds.compute(), reference)
    assert np.isnan(ds.packed.values[0, 0, :3]).all()


def test_asked_chunks_and_a_budget_smaller_than_the_data(cube: str) -> None:
    ds = oc.open_dataset(cube, chunks={"time": 60}, consolidated=False)
    assert ds.t2m.variable._data.chunks[0] == (60, 60)
    reference = xr.open_dataset(cube, engine="zarr", consolidated=False)
    with oc.Manager(max_bytes="16K"):  # less than one variable (23 KiB)
        climatology = ds.t2m.groupby("time.month").mean().compute()
        anomaly = (ds.packed - ds.packed.mean("time")).compute()
    xr.testing.assert_allclose(climatology, reference.t2m.groupby("time.month").mean())
    xr.testing.assert_allclose(anomaly, reference.packed - reference.packed.mean("time"))
