"""Writers with ``dataset=`` into a zarr group in an S3 bucket (moto): outputs xarray opens."""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr
import zarr

import oocarray as oc


def _store(bucket, key: str) -> zarr.storage.ObjectStore:
    import obstore.store

    return zarr.storage.ObjectStore(
        obstore.store.from_url(bucket.url(key), **bucket.storage_options), read_only=True
    )


def test_to_zarr_and_from_batches_share_an_s3_group(s3) -> None:
    a = np.arange(40.0).reshape(10, 4)
    url = s3.url("out.zarr")
    oc.from_numpy(a, chunks=(5, 4)).to_zarr(
        url,
        dataset="field",
        dimension_names=("row", "col"),
        attributes={"units": "K"},
        storage_options=s3.storage_options,
        progress=False,
    )
    oc.from_batches(
        [a[:3], a[3:]],
        url,
        chunks=(4, 4),
        dataset="copy",
        dimension_names=("row", "col"),
        storage_options=s3.storage_options,
    )
    ds = xr.open_zarr(_store(s3, "out.zarr"), consolidated=False)
    assert set(ds.data_vars) == {"field", "copy"}
    assert ds["field"].attrs == {"units": "K"}
    np.testing.assert_array_equal(ds["field"].values, a)
    np.testing.assert_array_equal(ds["copy"].values, a)
    with pytest.raises(ValueError, match="coords="):
        oc.from_numpy(a, chunks=(5, 4)).to_zarr(
            url,
            dataset="third",
            coords={"row": np.arange(10)},
            storage_options=s3.storage_options,
            progress=False,
        )
