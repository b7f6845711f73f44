"""``engine="oocarray"``: datasets equal to ``engine="zarr"`` / ``engine="h5netcdf"`` on the
same files (every variable, attribute and encoding), read lazily through oocarray."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import xarray as xr

from oocarray._xarray._backend import OOCArrayBackendEntrypoint
from oocarray._xarray._backend_stores import OOCArrayBackendArray

_CORPUS = Path(__file__).with_name("corpus.py")
_spec = importlib.util.spec_from_file_location("xarray_corpus", _CORPUS)
assert _spec is not None and _spec.loader is not None
corpus = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(corpus)

# zarr-python warns whenever it writes consolidated metadata for zarr v3 (not yet in the
# spec); xarray consolidates by default, and the corpus covers that layout on purpose.
pytestmark = pytest.mark.filterwarnings(
    "ignore:Consolidated metadata is currently not part:UserWarning"
)


def backend_array(var: xr.DataArray | xr.Variable) -> Any:
    """The backend array under xarray's lazy-indexing wrappers."""
    data = var.variable._data if isinstance(var, xr.DataArray) else var._data
    while not isinstance(data, OOCArrayBackendArray) and hasattr(data, "array"):
        data = data.array
    return data


def assert_same(ours: xr.Dataset, theirs: xr.Dataset) -> None:
    """Identical values, attributes and encodings."""
    xr.testing.assert_identical(ours, theirs)
    assert ours.encoding == theirs.encoding
    for name in theirs.variables:
        assert set(ours[name].encoding) == set(theirs[name].encoding), name
        for key, value in theirs[name].encoding.items():
            assert repr(ours[name].encoding[key]) == repr(value), (name, key)


STORES = [
    pytest.param({"zarr_format": 3, "consolidated": True}, id="zarr-v3-consolidated"),
    pytest.param({"zarr_format": 3, "consolidated": False}, id="zarr-v3"),
    pytest.param({"zarr_format": 2, "consolidated": True}, id="zarr-v2-consolidated"),
    pytest.param({"zarr_format": 2, "consolidated": False}, id="zarr-v2"),
]


@pytest.mark.parametrize("kwargs", STORES)
def test_zarr_opens_as_engine_zarr_does(tmp_path: Path, kwargs: dict[str, Any]) -> None:
    path = tmp_path / "cube.zarr"
    corpus.write_zarr(path, **kwargs)
    consolidated = kwargs["consolidated"]
    ours = xr.open_dataset(path, engine="oocarray", consolidated=consolidated)
    theirs = xr.open_dataset(path, engine="zarr", consolidated=consolidated)
    for name in ("t2m", "precip", "counts", "mask"):
        assert isinstance(backend_array(ours[name]), OOCArrayBackendArray), name
    assert_same(ours, theirs)


def test_netcdf4_opens_as_engine_h5netcdf_does(tmp_path: Path) -> None:
    path = tmp_path / "cube.nc"
    corpus.write_netcdf(path)
    ours = xr.open_dataset(path, engine="oocarray")
    theirs = xr.open_dataset(path, engine="h5netcdf")
    assert isinstance(backend_array(ours["t2m"]), OOCArrayBackendArray)
    assert_same(ours, theirs)
    assert ours.encoding["unlimited_dims"] == {"time"}


def test_decoded_values_match_what_was_written(tmp_path: Path) -> None:
    path = tmp_path / "cube.zarr"
    written = corpus.write_zarr(path)
    ours = xr.open_dataset(path, engine="oocarray").load()
    xr.testing.assert_allclose(ours.precip, written.precip, atol=0.006)
    xr.testing.assert_identical(ours.t2m, written.t2m)
    assert np.isnan(ours.precip[0, 0, :3]).all()


@pytest.mark.parametrize("fmt", ["zarr", "netcdf"])
def test_indexing_matches_the_other_engine(tmp_path: Path, fmt: str) -> None:
    path = tmp_path / ("cube.zarr" if fmt == "zarr" else "cube.nc")
    engine = "zarr" if fmt == "zarr" else "h5netcdf"
    (corpus.write_zarr if fmt == "zarr" else corpus.write_netcdf)(path)
    ours = xr.open_dataset(path, engine="oocarray")
    theirs = xr.open_dataset(path, engine=engine)
    selections: list[dict[str, Any]] = [
        {"time": 3},
        {"time": slice(5, 27, 3), "lon": slice(None, None, -1)},
        {"time": [0, 7, 39], "lat": [5, 1]},  # outer indexing on two axes
        {"time": xr.Variable("p", [1, 2, 30]), "lat": xr.Variable("p", [0, 4, 5])},
    ]
    for selection in selections:
        xr.testing.assert_identical(
            ours.t2m.isel(selection).load(), theirs.t2m.isel(selection).load()
        )


@pytest.mark.parametrize("fmt", ["zarr", "netcdf"])
def test_opening_reads_no_data_variable_chunks(tmp_path: Path, fmt: str) -> None:
    path = tmp_path / ("cube.zarr" if fmt == "zarr" else "cube.nc")
    (corpus.write_zarr if fmt == "zarr" else corpus.write_netcdf)(path)
    ds = xr.open_dataset(path, engine="oocarray")
    arrays = {name: backend_array(ds[name]) for name in ("t2m", "precip", "counts")}
    assert all(array.chunked.chunk_reads == 0 for array in arrays.values())
    ds.t2m.isel(time=0).load()
    assert arrays["t2m"].chunked.chunk_reads == 2  # the (10, 3, 8) chunks of both lat halves
    assert arrays["precip"].chunked.chunk_reads == 0


def test_chunks_follow_the_stored_chunks(tmp_path: Path) -> None:
    path = tmp_path / "cube.zarr"
    corpus.write_zarr(path)
    ds = xr.open_dataset(path, engine="oocarray", chunks={})
    assert ds.t2m.chunks == ((10,) * 4, (3, 3), (8,))
    assert ds.t2m.encoding["preferred_chunks"] == {"time": 10, "lat": 3, "lon": 8}


@pytest.mark.parametrize("fmt", ["zarr", "netcdf"])
def test_datatree_and_groups(tmp_path: Path, fmt: str) -> None:
    path = tmp_path / ("cube.zarr" if fmt == "zarr" else "cube.nc")
    engine = "zarr" if fmt == "zarr" else "h5netcdf"
    (corpus.write_zarr if fmt == "zarr" else corpus.write_netcdf)(path)
    ours = xr.open_datatree(path, engine="oocarray")
    theirs = xr.open_datatree(path, engine=engine)
    assert isinstance(backend_array(ours["ocean"]["depth_mean"]), OOCArrayBackendArray)
    xr.testing.assert_identical(ours, theirs)
    child = xr.open_dataset(path, engine="oocarray", group="ocean")
    assert_same(child, xr.open_dataset(path, engine=engine, group="ocean"))
    groups = xr.open_groups(path, engine="oocarray", group="ocean")
    assert list(groups) == list(xr.open_groups(path, engine=engine, group="ocean"))
    xr.testing.assert_identical(next(iter(groups.values())), child)


def test_open_mfdataset_concatenates_files(tmp_path: Path) -> None:
    whole = corpus.climate().drop_vars("station")
    paths = []
    for i, part in enumerate([whole.isel(time=slice(0, 20)), whole.isel(time=slice(20, 40))]):
        paths.append(tmp_path / f"part{i}.zarr")
        part.to_zarr(paths[-1], mode="w")
    combine: dict[str, Any] = {
        "combine": "by_coords",
        "data_vars": "minimal",
        "coords": "minimal",
        "compat": "override",
        "join": "outer",
    }
    ours = xr.open_mfdataset(paths, engine="oocarray", **combine)
    theirs = xr.open_mfdataset(paths, engine="zarr", **combine)
    xr.testing.assert_identical(ours.load(), theirs.load())


def test_guess_can_open(tmp_path: Path) -> None:
    entry = OOCArrayBackendEntrypoint()
    corpus.write_zarr(tmp_path / "cube.zarr")
    corpus.write_netcdf(tmp_path / "cube.nc")
    (tmp_path / "renamed.dat").write_bytes((tmp_path / "cube.nc").read_bytes())
    (tmp_path / "fake.nc").write_bytes(b"CDF\x01 netCDF3 is not HDF5")
    (tmp_path / "empty").mkdir()
    assert entry.guess_can_open(tmp_path / "cube.zarr")
    assert entry.guess_can_open(str(tmp_path / "cube.nc"))
    assert entry.guess_can_open(tmp_path / "renamed.dat")  # by the signature bytes
    assert entry.guess_can_open("s3://bucket/cube.zarr")
    assert not entry.guess_can_open(tmp_path / "fake.nc")
    assert not entry.guess_can_open(tmp_path / "empty")
    assert not entry.guess_can_open(123)
    assert "oocarray" in xr.backends.list_engines()


def test_missing_path_names_it(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere.zarr"
    with pytest.raises(FileNotFoundError, match=r"nowhere\.zarr"):
        xr.open_dataset(missing, engine="oocarray")


def test_a_file_that_is_not_hdf5_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "fake.nc"
    path.write_bytes(b"CDF\x01 netCDF3 is not HDF5")
    with pytest.raises(ValueError, match=r"fake\.nc.*neither"):
        xr.open_dataset(path, engine="oocarray")


def test_a_damaged_hdf5_file_raises(tmp_path: Path) -> None:
    good = tmp_path / "cube.nc"
    corpus.write_netcdf(good)
    damaged = tmp_path / "damaged.nc"
    damaged.write_bytes(good.read_bytes()[:600])
    with pytest.raises(OSError, match=r"damaged\.nc"):
        xr.open_dataset(damaged, engine="oocarray")


def test_a_slice_reads_only_the_chunks_it_needs(tmp_path: Path) -> None:
    path = tmp_path / "big.zarr"
    big = xr.Dataset(
        {"v": (("time", "x"), np.arange(800 * 1000, dtype="float64").reshape(800, 1000))},
        coords={"time": np.arange(800), "x": np.arange(1000)},
    )
    big["v"].encoding["chunks"] = (50, 1000)
    big.to_zarr(path, mode="w", consolidated=False)  # 6.4 MB in 16 chunks
    ds = xr.open_dataset(path, engine="oocarray", consolidated=False, cache=False)
    chunked = backend_array(ds.v).chunked
    rows = ds.v.isel(time=slice(100, 110)).values
    np.testing.assert_array_equal(rows, big.v.values[100:110])
    assert chunked.chunk_reads == 1
    np.testing.assert_array_equal(ds.v.isel(time=[5, 790]).values, big.v.values[[5, 790]])
    assert chunked.chunk_reads == 3


def test_plain_hdf5_gets_phony_dimensions_as_h5netcdf_names_them(tmp_path: Path) -> None:
    import h5py

    path = tmp_path / "plain.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("grid", data=np.arange(60.0).reshape(6, 10), chunks=(3, 10))
        f["grid"].attrs["units"] = "m"
        f.attrs["origin"] = "h5py"
    ours = xr.open_dataset(path, engine="oocarray")
    theirs = xr.open_dataset(path, engine="h5netcdf", phony_dims="access")
    assert isinstance(backend_array(ours["grid"]), OOCArrayBackendArray)
    assert_same(ours, theirs)


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_unwritten_chunks_read_as_the_fill_value(tmp_path: Path, zarr_format: int) -> None:
    import zarr

    path = tmp_path / "sparse.zarr"
    root = zarr.open_group(path, mode="w", zarr_format=zarr_format)
    kwargs: dict[str, Any] = (
        {"dimension_names": ["y", "x"]} if zarr_format == 3 else {"attributes": {}}
    )
    array = root.create_array(
        "sparse", shape=(8, 8), chunks=(4, 4), dtype="int16", fill_value=-7, **kwargs
    )
    if zarr_format == 2:
        array.attrs["_ARRAY_DIMENSIONS"] = ["y", "x"]
    array[:4, :4] = 1
    ours = xr.open_dataset(path, engine="oocarray", consolidated=False)
    theirs = xr.open_dataset(path, engine="zarr", consolidated=False)
    assert isinstance(backend_array(ours["sparse"]), OOCArrayBackendArray)
    assert_same(ours, theirs)


@pytest.mark.parametrize("fmt", ["zarr", "netcdf"])
def test_datasets_pickle_as_dask_workers_need(tmp_path: Path, fmt: str) -> None:
    import pickle

    path = tmp_path / ("cube.zarr" if fmt == "zarr" else "cube.nc")
    (corpus.write_zarr if fmt == "zarr" else corpus.write_netcdf)(path)
    ds = xr.open_dataset(path, engine="oocarray", chunks={})
    again = pickle.loads(pickle.dumps(ds))
    xr.testing.assert_identical(again.load(), ds.load())
