"""``oc.rechunk`` from every format oocarray opens (.npy, zarr v2, sharded zarr v3; HDF5 is in
test_rechunk.py), and into sharded output: the result equals the input for oocarray and
zarr-python, with the chunks and shards asked."""

from __future__ import annotations

import numpy as np
import pytest
import zarr

import oocarray as oc

VALUES = np.arange(60 * 40, dtype="f4").reshape(60, 40)


def _npy(path):
    np.save(path / "in.npy", VALUES)
    return path / "in.npy"


def _zarr_v2(path):
    z = zarr.create_array(
        path / "v2.zarr", shape=VALUES.shape, chunks=(5, 40), dtype="f4", zarr_format=2
    )
    z[...] = VALUES
    return path / "v2.zarr"


def _sharded(path):
    z = zarr.create_array(
        path / "sh.zarr", shape=VALUES.shape, chunks=(5, 8), shards=(20, 40), dtype="f4"
    )
    z[...] = VALUES
    return path / "sh.zarr"


@pytest.mark.parametrize("make", [_npy, _zarr_v2, _sharded], ids=["npy", "zarr-v2", "sharded"])
def test_rechunk_reads_every_format(tmp_path, make):
    source = make(tmp_path)
    y = oc.rechunk(source, (60, 8), tmp_path / "out.zarr", progress=False)
    assert y.chunks == (60, 8)
    np.testing.assert_array_equal(y[...], VALUES)
    np.testing.assert_array_equal(zarr.open_array(tmp_path / "out.zarr", mode="r")[...], VALUES)


def test_a_zarr_v2_source_goes_through_the_scatter_pass_in_a_small_budget(tmp_path):
    source = _zarr_v2(tmp_path)
    plan = oc.rechunk(source, (60, 8), tmp_path / "out.zarr", max_mem="8K", dry_run=True)
    assert plan.strategy == "scatter" and plan.peak_bytes <= 8 << 10
    y = oc.rechunk(source, (60, 8), tmp_path / "out.zarr", max_mem="8K", progress=False)
    np.testing.assert_array_equal(y[...], VALUES)


def test_rechunk_writes_shards_that_zarr_python_reads(tmp_path):
    x = oc.open(_zarr_v2(tmp_path))
    plan = oc.rechunk(x, (6, 8), tmp_path / "out.zarr", shards=(30, 40), max_mem="1M", dry_run=True)
    assert plan.peak_bytes <= 1 << 20
    y = oc.rechunk(x, (6, 8), tmp_path / "out.zarr", shards=(30, 40), max_mem="1M", progress=False)
    np.testing.assert_array_equal(y[...], VALUES)
    z = zarr.open_array(tmp_path / "out.zarr", mode="r")
    assert (z.chunks, z.shards) == ((6, 8), (30, 40))
    np.testing.assert_array_equal(z[...], VALUES)
    with pytest.raises(ValueError, match="shard"):  # shards must be whole chunks
        oc.rechunk(x, (6, 8), tmp_path / "bad.zarr", shards=(31, 40), progress=False)
