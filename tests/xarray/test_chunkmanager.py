"""The ``chunked_array_type="oocarray"`` chunk manager, compared with dask on a small cube."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import xarray as xr
from xarray.namedarray.parallelcompat import get_chunked_array_type, guess_chunkmanager

import oocarray as oc
from oocarray._xarray._chunkmanager import OOCArrayChunkManager
from oocarray._xarray._lazy import OOCLazyArray


def _cube() -> xr.Dataset:
    time = pd.date_range("2001-01-01", periods=730, freq="D")
    rng = np.random.default_rng(0)
    t2m = rng.normal(280, 10, (730, 6, 8)).astype("float32")
    return xr.Dataset(
        {"t2m": (("time", "lat", "lon"), t2m, {"units": "K", "long_name": "air temperature"})},
        coords={"time": time, "lat": np.linspace(-50, 50, 6), "lon": np.arange(8.0) * 45},
    )


@pytest.fixture
def stores(tmp_path: Path) -> tuple[xr.Dataset, xr.Dataset]:
    path = tmp_path / "cube.zarr"
    _cube().to_zarr(path, encoding={"t2m": {"chunks": (73, 6, 8)}}, consolidated=False)
    ooc = xr.open_zarr(path, chunks={}, chunked_array_type="oocarray", consolidated=False)
    dask = xr.open_zarr(path, chunks={}, consolidated=False)
    return ooc, dask


def test_the_manager_is_found_by_name_and_by_array() -> None:
    manager = guess_chunkmanager("oocarray")
    assert isinstance(manager, OOCArrayChunkManager)
    lazy = manager.from_array(np.arange(10.0), chunks=((5, 5),))
    assert isinstance(get_chunked_array_type(lazy, np.ones(3)), OOCArrayChunkManager)
    assert manager.chunks(lazy) == ((5, 5),)


def test_opening_gives_lazy_oocarray_variables(stores: tuple[xr.Dataset, xr.Dataset]) -> None:
    ooc, dask = stores
    assert isinstance(ooc.t2m.data, OOCLazyArray)
    assert ooc.t2m.chunks == dask.t2m.chunks
    xr.testing.assert_identical(ooc.compute(), dask.compute())


@pytest.mark.parametrize(
    "operation",
    [
        lambda ds: ds.t2m * 2 + 1,
        lambda ds: ds.t2m.mean("time"),
        lambda ds: ds.t2m.std("lon"),
        lambda ds: ds.t2m.max(),
        lambda ds: ds.t2m.min("lat"),
        lambda ds: ds.t2m.sum(("lat", "lon"), skipna=False),
        lambda ds: ds.t2m - ds.t2m.mean("time"),
        lambda ds: np.sqrt(ds.t2m),
        lambda ds: ds.t2m.isel(time=slice(3, 400, 7), lat=2),
        lambda ds: ds.t2m.isel(time=[5, 2, 9, 333]),
        lambda ds: ds.t2m.groupby("time.month").mean(),
        lambda ds: ds.t2m.resample(time="1MS").mean(),
        lambda ds: ds.t2m.where(ds.t2m > 280),
        lambda ds: ds.t2m.quantile(0.3, "time"),
        lambda ds: xr.apply_ufunc(
            lambda t, c: t - c, ds.t2m, 273.15, dask="parallelized", output_dtypes=["f4"]
        ),
        lambda ds: xr.apply_ufunc(
            lambda t: max(t, 280.0),
            ds.t2m,
            dask="parallelized",
            vectorize=True,
            output_dtypes=["f4"],
        ),
    ],
)
def test_results_equal_dask(stores: tuple[xr.Dataset, xr.Dataset], operation: object) -> None:
    ooc, dask = stores
    assert callable(operation)
    xr.testing.assert_allclose(
        operation(ooc).compute(), operation(dask).compute(), rtol=1e-5, atol=1e-3
    )


def test_to_zarr_writes_block_by_block_in_budget(
    stores: tuple[xr.Dataset, xr.Dataset], tmp_path: Path
) -> None:
    ooc, dask = stores  # t2m is 140 kB; the budget is a fraction of it
    anomaly = (ooc - ooc.mean("time")).drop_encoding()
    with oc.Manager(max_bytes="64k"):
        anomaly.to_zarr(tmp_path / "anomaly.zarr", consolidated=False)
    written = xr.open_zarr(tmp_path / "anomaly.zarr", consolidated=False).compute()
    expected = (dask - dask.mean("time")).compute()
    xr.testing.assert_allclose(written, expected, rtol=1e-5, atol=1e-3)


def test_unsupported_operations_raise_a_clear_error(
    stores: tuple[xr.Dataset, xr.Dataset],
) -> None:
    ooc, _ = stores
    with pytest.raises(NotImplementedError, match="apply_gufunc with axes"):
        OOCArrayChunkManager().apply_gufunc(np.sort, "(i)->(i)", ooc.t2m.data, axes=[(0,), (0,)])


def test_groupby_mean_stays_within_a_budget_smaller_than_the_data(
    stores: tuple[xr.Dataset, xr.Dataset],
) -> None:
    ooc, dask = stores  # t2m is 140 kB
    with oc.Manager(max_bytes="64k"):
        climatology = ooc.t2m.groupby("time.month").mean().compute()
    expected = dask.t2m.groupby("time.month").mean().compute()
    xr.testing.assert_allclose(climatology, expected, rtol=1e-5)


def test_rechunk_gives_the_new_chunks_and_the_same_values(
    stores: tuple[xr.Dataset, xr.Dataset],
) -> None:
    ooc, dask = stores
    with oc.Manager(max_bytes="64k"):
        rechunked = ooc.chunk(time=100, lat=3, chunked_array_type="oocarray")
    assert isinstance(rechunked.t2m.data, OOCLazyArray)
    assert rechunked.t2m.chunks == dask.chunk(time=100, lat=3).t2m.chunks
    xr.testing.assert_identical(rechunked.compute(), dask.compute())


def test_mixing_with_numpy_keeps_the_oocarray_manager(
    stores: tuple[xr.Dataset, xr.Dataset],
) -> None:
    ooc, dask = stores
    plain = np.linspace(0, 1, ooc.sizes["lon"], dtype="float32")
    mixed = ooc.t2m * xr.DataArray(plain, dims="lon")
    assert isinstance(mixed.data, OOCLazyArray)
    assert isinstance(get_chunked_array_type(mixed.data, plain), OOCArrayChunkManager)
    xr.testing.assert_allclose(
        mixed.compute(), (dask.t2m * xr.DataArray(plain, dims="lon")).compute()
    )


def test_normalize_chunks_matches_dask() -> None:
    from dask.array.core import normalize_chunks

    manager = OOCArrayChunkManager()
    for chunks in [5, (4, -1), ((3, 3, 4), 2), {0: 7}]:
        assert manager.normalize_chunks(chunks, shape=(10, 6)) == normalize_chunks(
            chunks, shape=(10, 6)
        )
