"""``oc.rechunk`` with an object store on either side (moto's S3 on loopback): from a bucket to
local disk and from local disk into a bucket, in a budget, read back by oocarray and
zarr-python."""

from __future__ import annotations

import numpy as np
import zarr
import zarr.storage

import oocarray as oc
from testkit.stores import remote_array


def _values() -> np.ndarray:
    return np.random.default_rng(5).standard_normal((400, 60)).astype("f4")


def test_rechunk_from_a_bucket_to_local_disk(s3, tmp_path):
    values = _values()
    x = remote_array(s3, "rows.zarr", values, (20, 60))
    y = oc.rechunk(x, (400, 6), tmp_path / "cols.zarr", max_mem="64K", progress=False)
    assert y.chunks == (400, 6)
    np.testing.assert_array_equal(y[...], values)
    np.testing.assert_array_equal(zarr.open_array(tmp_path / "cols.zarr", mode="r")[...], values)


def test_rechunk_into_a_bucket_reads_back_with_zarr_python(s3, tmp_path):
    import obstore.store

    values = _values()
    x = oc.create(tmp_path / "rows.zarr", values.shape, values.dtype, chunks=(20, 60))
    x[...] = values
    url = s3.url("cols.zarr")
    y = oc.rechunk(
        x, (400, 6), url, max_mem="64K", storage_options=s3.storage_options, progress=False
    )
    np.testing.assert_array_equal(y[...], values)
    back = oc.open(url, storage_options=s3.storage_options)
    assert back.chunks == (400, 6)
    np.testing.assert_array_equal(back[...], values)
    store = zarr.storage.ObjectStore(
        obstore.store.from_url(url, **s3.storage_options), read_only=True
    )
    np.testing.assert_array_equal(zarr.open_array(store, mode="r")[...], values)
