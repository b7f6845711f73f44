"""``as_ndarray()`` of arrays in S3 (moto on loopback, in a process of its own): pages filled
from chunks a feeder process fetches on demand and ahead, evicted under the budget; chunks
never written read as the fill value; a chunk that cannot be fetched is a PagedChunkError in
the thread that touched it (the feeder's start and end: ``test_remote_feeder``)."""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import oocarray as oc
from oocarray._storage._paged._arrays import paging_available
from oocarray.errors import PagedChunkError
from testkit.objects import S3Server
from testkit.stores import remote_array

PAGING, WHY_NOT = paging_available()
pytestmark = pytest.mark.skipif(not PAGING, reason=f"as_ndarray() cannot page here: {WHY_NOT}")


@pytest.mark.parametrize("shards", [None, (1024, 32)], ids=["chunks", "shards"])
def test_a_scan_and_random_rows_of_a_remote_array_in_a_budget(s3, shards):
    data = np.random.default_rng(0).standard_normal((8192, 32)).astype(np.float32)
    y = remote_array(s3, "p.zarr", data, (256, 32), shards)
    with oc.Manager(max_bytes="2M") as m:  # the array is 1 MiB of 32 KiB chunks, times 1
        a = y.as_ndarray()
        assert float(a.sum(dtype=np.float64)) == pytest.approx(float(data.sum(dtype=np.float64)))
        rows = np.random.default_rng(1).integers(0, len(data), 200)
        assert np.array_equal(a[rows], data[rows])
        assert np.array_equal(a[::-1][:1000], data[::-1][:1000])  # a backward scan
        # A fill that finds nothing it may drop (the other units being filled just then) is
        # counted over the budget rather than made to wait (pg_charge): at most a chunk
        # (32 KiB) per pager worker, one per CPU from 2 to 8.  So are the bytes the read-ahead
        # receives while the pages and the chunks lent fill the budget: at most its window, a
        # quarter of the budget.  Seen with two busy jobs beside it: 78 KiB over (shards).
        workers = min(8, max(2, os.cpu_count() or 1))
        window = (2 << 20) // 4
        assert m.stats().peak_bytes <= (2 << 20) + workers * data[:256].nbytes + window
        del a


@pytest.mark.parametrize("mode", ["r", "r+"])
def test_chunks_never_written_read_as_the_fill_value(s3, mode):
    x = oc.create(
        s3.url("f.zarr"), (4096, 8), "int32", chunks=(512, 8), storage_options=s3.storage_options
    )
    x[512:1024] = 7  # one chunk written, the others never
    y = oc.open(s3.url("f.zarr"), mode, storage_options=s3.storage_options)
    a = y.as_ndarray(mode)
    assert a[:512].sum() == 0 and (a[512:1024] == 7).all() and a[1024:].sum() == 0
    assert a[::-1][:600].sum() == 0
    del a


@pytest.mark.parametrize("mode", ["r", "r+"])
def test_a_chunk_that_cannot_be_fetched_is_an_error_in_the_touching_thread(mode):
    """A server of its own, stopped once the array is open: the read-ahead of this process
    ("r") and the feeder both fail, and the touching thread gets the feeder's error."""
    server = S3Server()
    try:
        bucket = server.bucket()
        data = np.arange(4096 * 8, dtype=np.float64).reshape(4096, 8)
        y = remote_array(bucket, "e.zarr", data, (512, 8))
        options = {**bucket.storage_options, "retries": 0}
        y = oc.open(bucket.url("e.zarr"), mode, storage_options=options)
    finally:
        server.stop()
    a = y.as_ndarray(mode)
    with pytest.raises(PagedChunkError, match="could not be fetched"):
        a[5].copy()
    with pytest.raises(PagedChunkError, match="could not be fetched"):
        a[3000].copy()  # and again: each touch, the error, never a crash or a hang
    del a


def test_a_damaged_chunk_in_the_store_is_an_error_naming_it(s3):
    data = np.ones((2048, 8), dtype=np.float32)
    y = remote_array(s3, "d.zarr", data, (512, 8))
    key = s3.url("d.zarr").split("/", 3)[3] + "/c/1/0"
    s3.server.boto3().put_object(Bucket=s3.name, Key=key, Body=b"\x28\xb5\x2f\xfd" + b"x" * 64)
    a = y.as_ndarray()
    assert a[:512].sum() == 512 * 8
    with pytest.raises(PagedChunkError, match="chunk 1"):
        a[600].copy()


def test_as_ndarray_r_plus_writes_changed_chunks_back_with_one_put_each(s3):
    import zarr
    import zarr.storage

    data = np.zeros((4096, 16), dtype=np.float32)
    remote_array(s3, "w.zarr", data, (512, 16))
    x = oc.open(s3.url("w.zarr"), "r+", storage_options=s3.storage_options)
    with oc.Manager(max_bytes="1M"):  # write-backs under budget pressure happen too
        a = x.as_ndarray("r+")
        a[100] = 1.0
        a[3000:3100] = 2.0
        a[-1] = 3.0
        x.flush()
        del a
    expected = data.copy()
    expected[100], expected[3000:3100], expected[-1] = 1.0, 2.0, 3.0
    import obstore.store

    store = obstore.store.from_url(s3.url("w.zarr"), **s3.storage_options)
    read = zarr.open_array(zarr.storage.ObjectStore(store, read_only=True), mode="r")[...]
    assert np.array_equal(read, expected)
    assert np.array_equal(
        oc.open(s3.url("w.zarr"), storage_options=s3.storage_options)[...], expected
    )
    b = x.as_ndarray("r+")
    b[7] = 9.0  # no flush: written back and put when the last view goes
    del b
    gc.collect()
    expected[7] = 9.0
    assert np.array_equal(
        oc.open(s3.url("w.zarr"), storage_options=s3.storage_options)[...], expected
    )


def test_chunks_that_cannot_be_put_are_kept_and_named(s3, monkeypatch):
    import re
    import shutil
    import sys
    import warnings

    remote_array(s3, "k.zarr", np.zeros((2048, 16), np.float32), (512, 16))
    x = oc.open(s3.url("k.zarr"), "r+", storage_options=s3.storage_options)
    a = x.as_ndarray("r+")
    a[3] = 5.0

    def refused(objects):
        raise oc.ObjectStoreError("the store refused the put")

    monkeypatch.setattr(x._store, "_put_all", refused)
    with pytest.raises(oc.ObjectStoreError):
        x.flush()
    # The release tries the put again, refused too: an error nobody can catch, dropped here
    # (pytest's hook would keep it, and with it the array, alive).
    monkeypatch.setattr(sys, "unraisablehook", lambda unraisable: None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        del a
        gc.collect()
    messages = [str(w.message) for w in caught if "could not be put" in str(w.message)]
    assert messages
    kept = re.search(r"kept in (\S+) ", messages[0]).group(1)
    try:
        assert os.path.exists(os.path.join(kept, "0"))  # the written chunk's file, not lost
    finally:
        shutil.rmtree(kept, ignore_errors=True)


def test_an_r_plus_array_alive_at_exit_is_put_and_the_process_ends(s3):
    """No flush(), no manager closed: at exit its chunks are put (through the event loop's
    thread, which module teardown could no longer start) before its chunk files go."""
    data = np.zeros((4096, 16), dtype=np.float32)
    remote_array(s3, "exit.zarr", data, (256, 16))
    script = (
        "import json, sys, oocarray as oc\n"
        "x = oc.open(sys.argv[1], 'r+', storage_options=json.loads(sys.argv[2]))\n"
        "view = x.as_ndarray('r+')\n"
        "view[5] = 7.0\n"
        "view[4000] = 9.0\n"
    )
    args = [sys.executable, "-c", script, s3.url("exit.zarr"), json.dumps(s3.storage_options)]
    done = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Exception ignored" not in done.stderr, done.stderr[-2000:]
    y = oc.open(s3.url("exit.zarr"), storage_options=s3.storage_options)
    data[5], data[4000] = 7.0, 9.0
    assert np.array_equal(y[...], data)
