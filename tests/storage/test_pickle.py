"""Pickling a ChunkedArray reopens the same store by path in the receiving process; no data
and no store state travels.  (Each format's round trip, in both modes, is the store contract's,
``test_store_contract.py``.)"""

from __future__ import annotations

import concurrent.futures
import multiprocessing
import pickle
from pathlib import Path

import dask.array as da
import h5py
import numpy as np
import pytest

import oocarray as oc
from oocarray.errors import ClosedError, StoreNotFoundError
from testkit.stores import round_trip

DATA = np.arange(4000, dtype=np.float32).reshape(500, 8)


def test_an_array_in_a_zarr_group_round_trips(tmp_path: Path) -> None:
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
