"""Writers that put arrays inside a zarr group (``dataset=``) so xarray opens the outputs."""

from __future__ import annotations

import os

import numpy as np
import pytest
import xarray as xr

import oocarray as oc


def _values() -> np.ndarray:
    return np.arange(24.0, dtype="float32").reshape(4, 6)


def test_to_zarr_into_a_group_opens_in_xarray(tmp_path: os.PathLike[str]) -> None:
    group = os.path.join(tmp_path, "out.zarr")
    a = _values()
    x = oc.from_numpy(a, chunks=(2, 3))
    (x * 2).to_zarr(
        group,
        dataset="double",
        dimension_names=("y", "x"),
        attributes={"units": "K"},
        progress=False,
    )
    (x + 1).to_zarr(group, dataset="plus_one", dimension_names=("y", "x"), progress=False)
    ds = xr.open_zarr(group, consolidated=False)
    assert set(ds.data_vars) == {"double", "plus_one"}
    assert ds["double"].dims == ("y", "x")
    assert ds["double"].attrs == {"units": "K"}
    np.testing.assert_array_equal(ds["double"].values, a * 2)
    np.testing.assert_array_equal(ds["plus_one"].values, a + 1)


def test_to_zarr_and_create_share_a_group(tmp_path: os.PathLike[str]) -> None:
    group = os.path.join(tmp_path, "out.zarr")
    a = _values()
    t = oc.create(group, (4,), "int64", dataset="y", dimension_names=("y",))
    t[:] = np.arange(4) * 10
    oc.from_numpy(a, chunks=(2, 6)).to_zarr(
        group, dataset="field", dimension_names=("y", "x"), progress=False
    )
    ds = xr.open_zarr(group, consolidated=False)
    np.testing.assert_array_equal(ds["y"].values, np.arange(4) * 10)
    np.testing.assert_array_equal(ds["field"].values, a)
    assert "y" in ds.coords


def test_to_zarr_dataset_existing_name_follows_mode(tmp_path: os.PathLike[str]) -> None:
    group = os.path.join(tmp_path, "out.zarr")
    x = oc.from_numpy(_values(), chunks=(2, 3))
    x.to_zarr(group, dataset="a", progress=False)
    (x + 1).to_zarr(group, dataset="b", progress=False)
    with pytest.raises(oc.StoreExistsError):
        x.to_zarr(group, dataset="a", progress=False)
    (x * 3).to_zarr(group, dataset="a", mode="w", progress=False)
    np.testing.assert_array_equal(oc.open(group, dataset="a")[:], _values() * 3)
    np.testing.assert_array_equal(oc.open(group, dataset="b")[:], _values() + 1)


def test_to_zarr_dataset_on_a_plain_array_is_refused(tmp_path: os.PathLike[str]) -> None:
    path = os.path.join(tmp_path, "plain.zarr")
    x = oc.from_numpy(_values(), chunks=(2, 3))
    x.to_zarr(path, progress=False)
    with pytest.raises(ValueError, match="zarr array"):
        x.to_zarr(path, dataset="inner", progress=False)
    np.testing.assert_array_equal(oc.open(path)[:], _values())


# zarr warns that consolidated metadata is an extension of v3 when the test consolidates.
@pytest.mark.filterwarnings("ignore:Consolidated metadata:UserWarning")
def test_consolidated_metadata_follows_new_outputs(tmp_path: os.PathLike[str]) -> None:
    import zarr

    group = os.path.join(tmp_path, "out.zarr")
    x = oc.from_numpy(_values(), chunks=(2, 3))
    x.to_zarr(group, dataset="first", dimension_names=("y", "x"), progress=False)
    zarr.consolidate_metadata(group)
    (x + 1).to_zarr(group, dataset="second", dimension_names=("y", "x"), progress=False)
    oc.from_batches(
        [_values()[:3], _values()[3:]], group, dataset="rows", dimension_names=("y", "x")
    )
    ds = xr.open_zarr(group, consolidated=True)
    assert set(ds.data_vars) == {"first", "second", "rows"}
    np.testing.assert_array_equal(ds["second"].values, _values() + 1)
    np.testing.assert_array_equal(ds["rows"].values, _values())


def test_coords_written_beside_outputs(tmp_path: os.PathLike[str]) -> None:
    group = os.path.join(tmp_path, "cube.zarr")
    a = _values()
    days = np.arange(4, dtype="int64")
    lon = np.linspace(0.0, 50.0, 6)
    coords = {"time": (days, {"units": "days since 2000-01-01", "calendar": "standard"})}
    x = oc.from_numpy(a, chunks=(2, 3))
    x.to_zarr(
        group,
        dataset="t2m",
        dimension_names=("time", "lon"),
        coords={**coords, "lon": (lon, {"units": "degrees_east"})},
        progress=False,
    )
    # A second output passes the same coordinates: they are kept, not refused.
    (x - 1).to_zarr(
        group, dataset="anomaly", dimension_names=("time", "lon"), coords=coords, progress=False
    )
    ds = xr.open_zarr(group, consolidated=False)
    assert set(ds.coords) == {"time", "lon"}
    assert ds["time"].dtype.kind == "M"  # xarray's CF decoding of the units
    assert str(ds["time"].values[1])[:10] == "2000-01-02"
    np.testing.assert_array_equal(ds["lon"].values, lon)
    np.testing.assert_array_equal(ds["anomaly"].values, a - 1)
    with pytest.raises(oc.StoreExistsError, match="coordinate 'time'"):
        x.to_zarr(group, dataset="third", coords={"time": days + 1}, progress=False)
    assert not os.path.exists(os.path.join(group, "third"))  # refused before writing
    with pytest.raises(ValueError, match="coords="):
        oc.create(os.path.join(tmp_path, "lone.zarr"), (4,), "f8", coords={"time": days})


def test_a_group_written_by_zarr_keeps_its_arrays(tmp_path: os.PathLike[str]) -> None:
    import zarr

    group = os.path.join(tmp_path, "theirs.zarr")
    root = zarr.open_group(store=group, mode="w", zarr_format=3)
    theirs = root.create_array("theirs", shape=(4,), dtype="f8", dimension_names=("y",))
    theirs[...] = np.arange(4.0)
    x = oc.from_numpy(_values(), chunks=(2, 3))
    x.to_zarr(group, dataset="ours", dimension_names=("y", "x"), progress=False)
    with pytest.raises(oc.StoreExistsError):
        x.to_zarr(group, mode="w", progress=False)  # the group itself is never replaced
    ds = xr.open_zarr(group, consolidated=False)
    np.testing.assert_array_equal(ds["theirs"].values, np.arange(4.0))
    np.testing.assert_array_equal(ds["ours"].values, _values())
    v2 = os.path.join(tmp_path, "v2.zarr")
    zarr.open_group(store=v2, mode="w", zarr_format=2)
    with pytest.raises(ValueError, match="v2 group"):
        x.to_zarr(v2, dataset="ours", progress=False)
