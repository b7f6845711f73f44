"""from_batches with ``dataset=``: stream outputs that share a zarr group xarray opens."""

from __future__ import annotations

import os

import numpy as np
import pytest
import xarray as xr

import oocarray as oc


def _batches(total: int, width: int) -> list[np.ndarray]:
    a = np.arange(total * width, dtype="float64").reshape(total, width)
    return [a[i : i + 7] for i in range(0, total, 7)]


def test_from_batches_into_a_group_with_create_and_to_zarr(tmp_path: os.PathLike[str]) -> None:
    group = os.path.join(tmp_path, "out.zarr")
    parts = _batches(30, 4)
    expected = np.concatenate(parts)
    oc.from_batches(
        parts,
        group,
        chunks=(8, 4),
        dataset="events",
        dimension_names=("row", "col"),
        attributes={"long_name": "events"},
    )
    col = oc.create(group, (4,), "int64", dataset="col", dimension_names=("col",))
    col[:] = np.array([10, 20, 30, 40])
    oc.from_numpy(expected.sum(axis=1), chunks=10).to_zarr(
        group, dataset="total", dimension_names=("row",), progress=False
    )
    ds = xr.open_zarr(group, consolidated=False)
    assert set(ds.data_vars) == {"events", "total"}
    assert ds["events"].dims == ("row", "col")
    assert ds["events"].attrs == {"long_name": "events"}
    np.testing.assert_array_equal(ds["events"].values, expected)
    np.testing.assert_array_equal(ds["total"].values, expected.sum(axis=1))
    np.testing.assert_array_equal(ds["col"].values, [10, 20, 30, 40])


def test_from_batches_append_in_a_group(tmp_path: os.PathLike[str]) -> None:
    group = os.path.join(tmp_path, "out.zarr")
    parts = _batches(20, 3)
    y = oc.from_batches(
        parts[:2], group, chunks=(5, 3), dataset="a/rows", dimension_names=("row", "col")
    )
    for part in parts[2:]:
        y.append(part)
    ds = xr.open_zarr(group, group="a", consolidated=False)
    np.testing.assert_array_equal(ds["rows"].values, np.concatenate(parts))


def test_from_batches_dataset_refusals(tmp_path: os.PathLike[str]) -> None:
    group = os.path.join(tmp_path, "out.zarr")
    oc.from_batches(_batches(10, 2), group, dataset="kept")
    with pytest.raises(oc.StoreExistsError):
        oc.from_batches(iter(()), group, dataset="kept")  # refused before the stream is read
    plain = os.path.join(tmp_path, "plain.zarr")
    oc.from_batches(_batches(10, 2), plain)
    with pytest.raises(ValueError, match="zarr array"):
        oc.from_batches(_batches(10, 2), plain, dataset="inner")
    np.testing.assert_array_equal(
        oc.open(group, dataset="kept")[:], np.concatenate(_batches(10, 2))
    )


def _halves(block: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return block * 0.5, block.sum(axis=1)


def test_map_chunks_several_named_outputs_in_one_group(tmp_path: os.PathLike[str]) -> None:
    group = os.path.join(tmp_path, "out.zarr")
    a = np.arange(60.0).reshape(20, 3)
    x = oc.from_numpy(a, chunks=(5, 3))
    rows = oc.create(group, (20,), "int64", dataset="dim_0", dimension_names=("dim_0",))
    rows[:] = np.arange(20) * 10
    half, total = oc.map_chunks(
        _halves, x, out=(group, group), dataset=("half", "total"), progress=False
    )
    assert (half.shape, total.shape) == ((20, 3), (20,))
    ds = xr.open_zarr(group, consolidated=False)
    np.testing.assert_array_equal(ds["half"].values, a * 0.5)
    np.testing.assert_array_equal(ds["total"].values, a.sum(axis=1))
    np.testing.assert_array_equal(ds["dim_0"].values, np.arange(20) * 10)
    # A rerun of the same job resumes (all blocks done) and keeps the other arrays.
    again = oc.map_chunks(_halves, x, out=(group, group), dataset=("half", "total"), progress=False)
    np.testing.assert_array_equal(again[0][:], a * 0.5)
    np.testing.assert_array_equal(oc.open(group, dataset="dim_0")[:], np.arange(20) * 10)


def test_map_chunks_dataset_refusals(tmp_path: os.PathLike[str]) -> None:
    x = oc.from_numpy(np.arange(10.0).reshape(10, 1), chunks=(5, 1))
    plain = os.path.join(tmp_path, "plain.zarr")
    oc.from_numpy(np.zeros((10, 1)), chunks=(5, 1)).to_zarr(plain, progress=False)
    with pytest.raises(ValueError, match="zarr array"):
        oc.map_chunks(np.negative, x, out=plain, dataset="inner", progress=False)
    group = os.path.join(tmp_path, "g.zarr")
    oc.create(group, (10, 1), "float64", dataset="theirs")  # not map_chunks' output
    with pytest.raises(oc.StoreExistsError):
        oc.map_chunks(np.negative, x, out=group, dataset="theirs", progress=False)
    with pytest.raises(TypeError, match="structure of out"):
        oc.map_chunks(np.negative, x, out=(group,), dataset="a", progress=False)


def test_map_chunks_writes_coords_into_its_group(tmp_path: os.PathLike[str]) -> None:
    group = os.path.join(tmp_path, "out.zarr")
    a = np.arange(20.0).reshape(10, 2)
    x = oc.from_numpy(a, chunks=(5, 2))
    coords = {"dim_0": (np.arange(10) * 3, {"units": "m"})}
    oc.map_chunks(np.negative, x, out=group, dataset="neg", coords=coords, progress=False)
    ds = xr.open_zarr(group, consolidated=False)
    np.testing.assert_array_equal(ds["neg"].values, -a)
    np.testing.assert_array_equal(ds["dim_0"].values, np.arange(10) * 3)
    assert ds["dim_0"].attrs == {"units": "m"}
    with pytest.raises(oc.StoreExistsError, match="coordinate 'dim_0'"):
        oc.map_chunks(
            np.negative,
            x,
            out=group,
            dataset="neg2",
            coords={"dim_0": np.arange(10)},
            progress=False,
        )
    assert not os.path.exists(os.path.join(group, "neg2"))


# zarr warns that consolidated metadata is an extension of v3 when the test consolidates.
@pytest.mark.filterwarnings("ignore:Consolidated metadata:UserWarning")
def test_map_chunks_refreshes_consolidated_metadata(tmp_path: os.PathLike[str]) -> None:
    import zarr

    group = os.path.join(tmp_path, "out.zarr")
    a = np.arange(20.0).reshape(10, 2)
    x = oc.from_numpy(a, chunks=(5, 2))
    x.to_zarr(group, dataset="x", progress=False)
    zarr.consolidate_metadata(group)
    oc.map_chunks(np.negative, x, out=group, dataset="neg", progress=False)
    ds = xr.open_zarr(group, consolidated=True)
    np.testing.assert_array_equal(ds["neg"].values, -a)
