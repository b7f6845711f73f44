"""Which type each way of making an array gives: the compute layer's ChunkedArray (a
storage-layer StoredArray with operators and reductions) from every public constructor and
every result that is an array; plain StoredArrays stay plain, pickled too."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest

import oocarray as oc
from oocarray import _storage
from oocarray._storage import StoredArray

MiB = 2**20


def test_every_public_constructor_gives_a_chunked_array(tmp_path: Path) -> None:
    data = np.arange(64.0).reshape(16, 4)
    np.save(tmp_path / "a.npy", data)
    made = {
        "create": oc.create(tmp_path / "c.zarr", (16, 4), "f8", chunks=(4, 4)),
        "open": oc.open(tmp_path / "a.npy"),
        "temp": oc.temp((16, 4), "f8"),
        "from_numpy": oc.from_numpy(data, chunks=(4, 4)),
        "to_zarr": (oc.open(tmp_path / "a.npy") + 1).to_zarr(tmp_path / "z.zarr"),
        "from_batches": oc.from_batches([data[:8], data[8:]], tmp_path / "b.zarr"),
        "map_chunks": oc.map_chunks(lambda b: b * 2, data, out=str(tmp_path / "m.zarr")),
    }
    for how, array in made.items():
        assert type(array) is oc.ChunkedArray, how
        assert isinstance(array, StoredArray), how
        assert type(pickle.loads(pickle.dumps(array))) is oc.ChunkedArray, how
    np.testing.assert_array_equal(made["to_zarr"][...], data + 1)
    np.testing.assert_array_equal(made["map_chunks"][...], data * 2)


def test_from_dask_gives_a_chunked_array() -> None:
    da = pytest.importorskip("dask.array")
    x = oc.from_dask(da.ones((8, 2), chunks=(4, 2)))
    assert type(x) is oc.ChunkedArray and float(x.sum()) == 16.0


def test_a_result_over_the_budget_is_a_temporary_chunked_array() -> None:
    x = oc.from_numpy(np.ones((512, 512)), chunks=(64, 512))  # 2 MiB
    with oc.Manager("small", max_bytes=MiB):
        result = (x * 2).compute(progress=False)
    assert type(result) is oc.ChunkedArray
    assert float(result.max()) == 2.0


def test_the_storage_layer_alone_gives_stored_arrays(tmp_path: Path) -> None:
    stored = _storage.create(tmp_path / "s.zarr", (4,), "i8")
    stored[...] = np.arange(4)
    assert type(stored) is StoredArray and not isinstance(stored, oc.ChunkedArray)
    assert not hasattr(stored, "sum")  # operators and reductions are the compute layer's
    again = pickle.loads(pickle.dumps(stored))
    assert type(again) is StoredArray
    np.testing.assert_array_equal(again[...], np.arange(4))
