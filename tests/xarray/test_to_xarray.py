"""``x.to_xarray()``: chunked arrays and expressions as lazy DataArrays in the oocarray chunk
manager, with the stored dimension names and attributes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

import oocarray as oc
from oocarray._xarray._lazy import OOCLazyArray

VALUES = np.arange(48.0).reshape(6, 8)


def test_a_stored_array_keeps_its_dimension_names_attributes_and_chunks(tmp_path: Path) -> None:
    x = oc.from_numpy(VALUES, chunks=(2, 8))
    stored = x.to_zarr(
        tmp_path / "g.zarr", dataset="t", dimension_names=("time", "lon"), chunks=(2, 8),
        attributes={"units": "K"}, progress=False,
    )  # fmt: skip
    data = stored.to_xarray(name="t")
    assert isinstance(data.data, OOCLazyArray)
    assert data.dims == ("time", "lon")
    assert data.attrs == {"units": "K"}
    assert data.chunks == ((2, 2, 2), (8,))
    expected = xr.DataArray(VALUES, dims=("time", "lon"), name="t", attrs={"units": "K"})
    xr.testing.assert_identical(data.compute(), expected)
    xr.testing.assert_allclose(data.mean("time").compute(), expected.mean("time"))


def test_a_zarr_v2_array_written_by_xarray_gives_its_dimensions(tmp_path: Path) -> None:
    ds = xr.Dataset({"a": (("p", "q"), VALUES, {"long_name": "a"})})
    ds.to_zarr(tmp_path / "v2.zarr", zarr_format=2, consolidated=False)
    data = oc.open(tmp_path / "v2.zarr", dataset="a").to_xarray()
    assert data.dims == ("p", "q")
    assert data.attrs == {"long_name": "a"}
    np.testing.assert_array_equal(data.values, VALUES)


def test_arrays_without_names_and_expressions_get_default_dims() -> None:
    x = oc.from_numpy(VALUES, chunks=(3, 4))
    data = (x * 2 + 1).to_xarray()
    assert isinstance(data.data, OOCLazyArray)
    assert data.dims == ("dim_0", "dim_1")
    np.testing.assert_array_equal(data.sum("dim_1").values, (VALUES * 2 + 1).sum(1))
    assert x.to_xarray(dims=("a", "b")).dims == ("a", "b")
    with pytest.raises(ValueError, match="1 dims for an array of 2 axes"):
        x.to_xarray(dims="a")


def test_it_stays_within_a_budget_smaller_than_the_array(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    values = rng.normal(size=(4096, 32))  # 1 MiB
    x = oc.create(tmp_path / "x.zarr", values.shape, values.dtype, chunks=(256, 32),
                  dimension_names=("row", "col"))  # fmt: skip
    x[...] = values
    with oc.Manager(max_bytes="256k"):
        column_means = x.to_xarray().mean("row").compute()
    np.testing.assert_allclose(column_means.values, values.mean(0))


def test_importing_oocarray_does_not_import_xarray() -> None:
    code = "import sys, oocarray; print('xarray' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.stdout.strip() == "False", result.stderr
