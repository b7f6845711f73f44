"""Outer selections of oocarray-backed xarray variables are lazy gathers, equal to NumPy's.

xarray's groupby selects each group with an integer array (``isel``) and the grouped
arithmetic expands a climatology with one: these selections must stay lazy (nothing copied
ahead) and read only what a block needs, so a groupby streams in a budget smaller than the
data.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import xarray as xr
from hypothesis import given, settings
from hypothesis import strategies as st

import oocarray as oc
from oocarray._compute._outer import outer_take
from oocarray._xarray._lazy import OOCLazyArray

SHAPE = (9, 7, 5)
VALUES = np.arange(np.prod(SHAPE), dtype=np.float64).reshape(SHAPE)


def _lazy() -> OOCLazyArray:
    return OOCLazyArray(oc.from_numpy(VALUES, chunks=(4, 3, 2)))


def _key(draw: st.DrawFn, n: int) -> object:
    kind = draw(st.sampled_from(["slice", "int", "array", "all"]))
    if kind == "all":
        return slice(None)
    if kind == "int":
        return draw(st.integers(-n, n - 1))
    if kind == "array":  # negative, unsorted and repeated positions
        positions = draw(st.lists(st.integers(-n, n - 1), min_size=0, max_size=12))
        return np.array(positions, dtype=np.int64)
    start = draw(st.none() | st.integers(-n - 2, n + 2))
    stop = draw(st.none() | st.integers(-n - 2, n + 2))
    step = draw(st.none() | st.integers(-3, 3).filter(lambda s: s != 0))
    return slice(start, stop, step)


@st.composite
def outer_keys(draw: st.DrawFn) -> tuple[object, ...]:
    return tuple(_key(draw, n) for n in SHAPE)


def _numpy_outer(values: np.ndarray, key: tuple[object, ...]) -> np.ndarray:
    """NumPy's result of outer indexing: one axis at a time."""
    out = values
    axis = 0
    for k in key:
        out = out[(slice(None),) * axis + (k,)]
        if not isinstance(k, int):
            axis += 1
    return out


@settings(deadline=None, max_examples=60)  # the machine's speed must not fail a test
@given(outer_keys())
def test_selection_equals_numpy_on_every_axis(key: tuple[object, ...]) -> None:
    selected = _lazy()[key]
    expected = _numpy_outer(VALUES, key)
    assert selected.shape == expected.shape
    np.testing.assert_array_equal(np.asarray(selected), expected)


def test_selection_is_lazy_and_reduces_like_numpy() -> None:
    rows = np.array([7, -1, 2, 2, 0, 5])
    selected = _lazy()[rows, 1:6:2, [-1, 0]]
    assert isinstance(selected.lazy, oc.Expr)
    assert not isinstance(selected.lazy, oc.ChunkedArray)  # no temporary copy
    expected = VALUES[rows][:, 1:6:2][:, :, [-1, 0]]
    np.testing.assert_array_equal(np.asarray(selected), expected)
    np.testing.assert_allclose(np.asarray(np.nanmean(selected, axis=0)), expected.mean(axis=0))
    np.testing.assert_allclose(np.asarray(selected * 2 - 1), expected * 2 - 1)


def test_none_in_a_key_adds_axes_lazily() -> None:
    x = _lazy()
    for key in [(None, Ellipsis), (Ellipsis, None), (1, None), (None, 2, None, slice(1, 4))]:
        selected = x[key]
        assert isinstance(selected.lazy, oc.Expr)
        np.testing.assert_array_equal(np.asarray(selected), VALUES[key])


def test_reductions_stay_lazy_and_give_python_scalars() -> None:
    x = _lazy()
    total = np.sum(x)
    assert isinstance(total, OOCLazyArray) and total.shape == ()
    assert float(total) == VALUES.sum() and int(total) == int(VALUES.sum())
    assert bool(np.all(x >= 0)) and not bool(np.any(x < 0))
    np.testing.assert_allclose(np.asarray(x - np.mean(x, axis=0)), VALUES - VALUES.mean(axis=0))
    with pytest.raises(TypeError, match="unsized"):
        len(total)


def test_outer_take_refuses_positions_out_of_range() -> None:
    x = oc.from_numpy(np.arange(4.0), chunks=2)
    with pytest.raises(IndexError, match="out of range"):
        outer_take(x, [(np.array([4]), False)])
    with pytest.raises(ValueError, match="one pick per axis"):
        outer_take(x, [])


def _cube(days: int) -> xr.Dataset:
    time = pd.date_range("2001-01-01", periods=days, freq="D")
    rng = np.random.default_rng(25)
    t2m = rng.normal(280, 10, (days, 16, 24)).astype("float32")
    return xr.Dataset(
        {"t2m": (("time", "lat", "lon"), t2m, {"units": "K"})},
        coords={"time": time, "lat": np.linspace(-60, 60, 16), "lon": np.arange(24.0) * 15},
    )


@pytest.fixture
def cube_path(tmp_path: Path) -> Path:
    """A 2.2 MB cube (three years): several times the 512 kB budgets below."""
    path = tmp_path / "cube.zarr"
    _cube(1461).to_zarr(path, encoding={"t2m": {"chunks": (30, 8, 24)}}, consolidated=False)
    return path


def test_groupby_mean_and_anomaly_stream_in_a_budget_smaller_than_the_data(
    cube_path: Path, tmp_path: Path
) -> None:
    dask = xr.open_zarr(cube_path, consolidated=False)
    expected_clim = dask.t2m.groupby("time.month").mean().compute()
    expected_anomaly = (dask.t2m.groupby("time.month") - expected_clim).compute()
    with oc.Manager(max_bytes="512k"), xr.set_options(chunk_manager="oocarray"):
        ds = xr.open_zarr(cube_path, chunks={}, chunked_array_type="oocarray", consolidated=False)
        assert ds.t2m.nbytes > 4 * 512 * 1024
        clim = ds.t2m.groupby("time.month").mean().compute()
        anomaly = ds.t2m.groupby("time.month") - clim
        assert isinstance(anomaly.data, OOCLazyArray)
        anomaly.to_dataset(name="t2m").to_zarr(tmp_path / "anomaly.zarr", consolidated=False)
    xr.testing.assert_allclose(clim, expected_clim, rtol=1e-5)
    written = xr.open_zarr(tmp_path / "anomaly.zarr", consolidated=False).t2m.compute()
    xr.testing.assert_allclose(written, expected_anomaly, rtol=1e-5, atol=1e-3)


def test_groupby_of_unsorted_groups_equals_dask(cube_path: Path) -> None:
    dask = xr.open_zarr(cube_path, consolidated=False)
    ooc = xr.open_zarr(cube_path, chunks={}, chunked_array_type="oocarray", consolidated=False)
    labels = xr.DataArray(np.arange(dask.sizes["lon"]) % 5, dims="lon", name="band")
    for ds in (dask, ooc):
        ds.coords["band"] = labels
    with oc.Manager(max_bytes="512k"):
        ours = ooc.t2m.groupby("band").max().compute()
        ours_std = ooc.t2m.groupby("time.season").std().compute()
    xr.testing.assert_allclose(ours, dask.t2m.groupby("band").max().compute())
    xr.testing.assert_allclose(ours_std, dask.t2m.groupby("time.season").std().compute(), rtol=1e-4)


def test_to_zarr_appends_at_offsets_that_do_not_line_up_with_the_chunks(
    cube_path: Path, tmp_path: Path
) -> None:
    dask = xr.open_zarr(cube_path, consolidated=False)
    ooc = xr.open_zarr(cube_path, chunks={}, chunked_array_type="oocarray", consolidated=False)
    out = tmp_path / "appended.zarr"
    with oc.Manager(max_bytes="512k"):
        first = ooc.isel(time=slice(0, 45)).drop_encoding()
        first.to_zarr(out, consolidated=False, encoding={"t2m": {"chunks": (30, 8, 24)}})
        ooc.isel(time=slice(45, 200)).drop_encoding().to_zarr(
            out, append_dim="time", consolidated=False
        )
    written = xr.open_zarr(out, consolidated=False).compute()
    xr.testing.assert_identical(written.t2m, dask.t2m.isel(time=slice(0, 200)).compute())


def test_a_datasets_grouped_reductions_compute_together_equal_to_dask(cube_path: Path) -> None:
    dask = xr.open_zarr(cube_path, consolidated=False)
    ooc = xr.open_zarr(cube_path, chunks={}, chunked_array_type="oocarray", consolidated=False)
    dask["t2"], ooc["t2"] = dask.t2m * 2, ooc.t2m * 2
    with oc.Manager(max_bytes="512k"):
        grouped = ooc.groupby("time.month").mean()
        assert isinstance(grouped.t2.data, OOCLazyArray)  # lazy until computed, as with dask
        ours = grouped.compute()
    xr.testing.assert_allclose(ours, dask.groupby("time.month").mean().compute(), rtol=1e-5)
