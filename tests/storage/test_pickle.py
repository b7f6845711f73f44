"""Pickling a ChunkedArray reopens the same store by path in the receiving process; no data
and no store state travels."""

from __future__ import annotations

import concurrent.futures
import multiprocessing
import pickle
from pathlib import Path

import dask.array as da
import h5py
import numpy as np
import pytest
import zarr

import oocarray as oc
from oocarray.errors import ClosedError, ReadOnlyError, StoreNotFoundError

DATA = np.arange(4000, dtype=np.float32).reshape(500, 8)


def round_trip(x: oc.ChunkedArray) -> oc.ChunkedArray:
    blob = pickle.dumps(x)
    assert len(blob) < 1000  # the path and a few flags, never the data
    copy = pickle.loads(blob)
    assert isinstance(copy, oc.ChunkedArray) and copy is not x
    assert (copy.path, copy.format, copy.readonly) == (x.path, x.format, x.readonly)
    assert (copy.shape, copy.dtype, copy.chunks, copy.shards) == (
        x.shape,
        x.dtype,
        x.chunks,
        x.shards,
    )
    return copy


def test_zarr_v3_round_trip_shares_the_store(tmp_path: Path) -> None:
    x = oc.create(tmp_path / "x.zarr", DATA.shape, DATA.dtype, chunks=(100, 8))
    x[...] = DATA
    y = round_trip(x)
    np.testing.assert_array_equal(y[...], DATA)
    assert not y.readonly
    y[:100] = -1.0  # "r+" stays writable, and writes reach the same chunks
    np.testing.assert_array_equal(x[:100], -1.0)


def test_sharded_zarr_round_trip(tmp_path: Path) -> None:
    x = oc.create(tmp_path / "s.zarr", DATA.shape, DATA.dtype, chunks=(25, 8), shards=(100, 8))
    x[...] = DATA
    y = round_trip(x)
    assert y.shards == (100, 8)
    np.testing.assert_array_equal(y[130:170:3], DATA[130:170:3])


def test_zarr_v2_and_an_array_in_a_group_round_trip(tmp_path: Path) -> None:
    z = zarr.create_array(tmp_path / "v2.zarr", shape=DATA.shape, dtype=DATA.dtype,
                          chunks=(100, 8), zarr_format=2)  # fmt: skip
    z[...] = DATA
    np.testing.assert_array_equal(round_trip(oc.open(tmp_path / "v2.zarr"))[...], DATA)
    g = oc.create(tmp_path / "g.zarr", DATA.shape, DATA.dtype, dataset="a/b")
    g[...] = DATA
    oc.create(tmp_path / "g.zarr", (3,), "int8", dataset="other")  # the group holds two now
    np.testing.assert_array_equal(
        round_trip(oc.open(tmp_path / "g.zarr", dataset="a/b"))[...], DATA
    )


def test_hdf5_keeps_its_dataset(tmp_path: Path) -> None:
    path = tmp_path / "f.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("group/x", data=DATA)  # contiguous: memory-mapped
        f.create_dataset("y", data=DATA * 2, chunks=(100, 8), compression="gzip")
    for name, expected in (("group/x", DATA), ("y", DATA * 2)):
        with oc.open(path, dataset=name) as x, round_trip(x) as y:
            assert y.location == x.location
            np.testing.assert_array_equal(y[...], expected)


def test_npy_round_trip_in_both_modes(tmp_path: Path) -> None:
    path = tmp_path / "a.npy"
    np.save(path, DATA)
    for mode in ("r", "r+"):
        y = round_trip(oc.open(path, mode=mode))
        assert y.location == "mmap" and y.readonly == (mode == "r")
        np.testing.assert_array_equal(y[...], DATA)


def test_read_only_stays_read_only(tmp_path: Path) -> None:
    oc.create(tmp_path / "x.zarr", DATA.shape, DATA.dtype)[...] = DATA
    y = round_trip(oc.open(tmp_path / "x.zarr", mode="r"))
    assert y.readonly
    with pytest.raises(ReadOnlyError):
        y[0] = 1.0


def test_a_relative_path_travels_as_an_absolute_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    x = oc.create("rel.zarr", DATA.shape, DATA.dtype)
    x[...] = DATA
    blob = pickle.dumps(x)
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    np.testing.assert_array_equal(pickle.loads(blob)[...], DATA)


def test_a_closed_array_refuses(tmp_path: Path) -> None:
    x = oc.create(tmp_path / "x.zarr", DATA.shape, DATA.dtype)
    x.close()
    with pytest.raises(ClosedError, match="closed"):
        pickle.dumps(x)
    t = oc.temp((4,), "f8")
    t.close()
    with pytest.raises(ClosedError, match="deleted"):
        pickle.dumps(t)


def test_a_temporary_pickles_while_it_lives_and_the_copy_does_not_own_it() -> None:
    t = oc.from_numpy(DATA, chunks=(100, 8))
    blob = pickle.dumps(t)
    copy = pickle.loads(blob)
    np.testing.assert_array_equal(copy[...], DATA)
    copy.close()  # a copy borrows the data: closing it deletes nothing
    np.testing.assert_array_equal(t[...], DATA)
    np.testing.assert_array_equal(pickle.loads(blob)[::50], DATA[::50])
    t.close()  # the original owns it
    with pytest.raises(StoreNotFoundError, match=r"to_zarr"):
        pickle.loads(blob)


def _sum_in_child(x: oc.ChunkedArray) -> float:
    return float(x[...].sum(dtype=np.float64))


def test_a_spawned_process_reopens_by_path(tmp_path: Path) -> None:
    x = oc.create(tmp_path / "x.zarr", DATA.shape, DATA.dtype, chunks=(100, 8))
    x[...] = DATA
    t = oc.from_numpy(DATA * 2, chunks=(100, 8))
    context = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(1, mp_context=context) as pool:
        assert pool.submit(_sum_in_child, x).result() == DATA.sum(dtype=np.float64)
        assert pool.submit(_sum_in_child, t).result() == 2 * DATA.sum(dtype=np.float64)


def test_dask_names_each_graph_afresh(tmp_path: Path) -> None:
    # A path names a place, not its data: two graphs of one array must not share keys, or a
    # cluster could return what it computed before a write.
    x = oc.create(tmp_path / "x.zarr", DATA.shape, DATA.dtype)
    assert x.to_dask().name != x.to_dask().name
    assert isinstance(x.to_dask(), da.Array)
