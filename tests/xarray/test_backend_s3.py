"""``engine="oocarray"`` on zarr stores in S3 (a moto server): the metadata through
zarr-python's fsspec store, the data through oocarray's object-store reader, both taking the
s3fs-style ``storage_options`` xarray users pass."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("moto.server", reason="the S3 server of these tests is moto's")
pytest.importorskip("s3fs", reason="xarray reads zarr metadata in S3 through s3fs")
pytest.importorskip("obstore", reason="oocarray reaches object stores through obstore")

import xarray as xr

from oocarray._xarray._backend_stores import OOCArrayBackendArray
from testkit.objects import Bucket, S3Server

_CORPUS = Path(__file__).with_name("corpus.py")
_spec = importlib.util.spec_from_file_location("xarray_corpus", _CORPUS)
assert _spec is not None and _spec.loader is not None
corpus = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(corpus)


@pytest.fixture(scope="module")
def bucket() -> Iterator[Bucket]:
    with S3Server() as server:
        yield server.bucket()


def s3fs_options(bucket: Bucket) -> dict[str, Any]:
    """The bucket's settings as s3fs (and so xarray and zarr-python users) write them."""
    options = bucket.storage_options
    return {
        "key": options["access_key_id"],
        "secret": options["secret_access_key"],
        "endpoint_url": options["endpoint"],
        "client_kwargs": {"region_name": options["region"]},
    }


def test_zarr_in_s3_round_trip(bucket: Bucket) -> None:
    options = s3fs_options(bucket)
    written = corpus.climate().drop_vars("station")
    url = bucket.url("cube.zarr")
    written.to_zarr(url, storage_options=options, mode="w", consolidated=False, zarr_format=2)
    ours = xr.open_dataset(url, engine="oocarray", storage_options=options, consolidated=False)
    theirs = xr.open_dataset(url, engine="zarr", storage_options=options, consolidated=False)
    data = ours.t2m.variable._data
    while not isinstance(data, OOCArrayBackendArray):
        data = data.array
    xr.testing.assert_identical(ours.load(), theirs.load())
    xr.testing.assert_identical(ours.t2m, written.t2m)


def test_obstore_style_options_work_too(bucket: Bucket) -> None:
    written = corpus.climate().drop_vars("station")
    url = bucket.url("native.zarr")
    written.to_zarr(url, storage_options=s3fs_options(bucket), mode="w", consolidated=False)
    ours = xr.open_dataset(
        url, engine="oocarray", storage_options=bucket.storage_options, consolidated=False
    )
    theirs = xr.open_dataset(
        url, engine="zarr", storage_options=s3fs_options(bucket), consolidated=False
    )
    xr.testing.assert_identical(ours.load(), theirs.load())


def test_credentials_never_in_errors(bucket: Bucket) -> None:
    options = s3fs_options(bucket)
    url = bucket.url("missing.zarr")
    with pytest.raises(FileNotFoundError) as caught:
        xr.open_dataset(url, engine="oocarray", storage_options=options, consolidated=False)
    assert options["secret"] not in str(caught.value)
    assert "missing.zarr" in str(caught.value)
