"""Chunks served by the local chunk cache are decoded from its entry files by the native reader
(no copy of their bytes into Python), each entry checked whole against its CRC-32C first: a
damaged entry is fetched anew from the store and replaced, never decoded; the entry files are
closed when the read is done.  Against moto's S3 server on loopback."""

from __future__ import annotations

import os
import re

import numpy as np
import pytest

import oocarray as oc
from oocarray import _native
from oocarray._storage._objects._cache import ChunkCache
from oocarray._storage._paged._arrays import paging_available
from oocarray._storage._reader import CheckedFile
from testkit.stores import remote_array

_ENTRY = re.compile(r"[0-9a-f]{64}")


def _entries(directory) -> list[str]:
    found = []
    for root, _, names in os.walk(directory):
        found.extend(os.path.join(root, n) for n in names if _ENTRY.fullmatch(n))
    return sorted(found)


def _damage(path: str) -> None:
    """Flip one byte near the end of the entry file (in its payload)."""
    with open(path, "r+b") as f:
        f.seek(-3, os.SEEK_END)
        byte = f.read(1)
        f.seek(-3, os.SEEK_END)
        f.write(bytes([byte[0] ^ 0x5A]))


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def _epoch(y) -> float:
    return sum(float(b.sum(dtype=np.float64)) for b in oc.batches(y, 500, shuffle="chunks"))


def _no_reads_into_python(monkeypatch) -> None:
    """A cache hit may only open the entry: reading its payload in Python fails the test."""

    def refused(*args, **kwargs):
        raise AssertionError("a cached chunk's bytes were read into Python")

    monkeypatch.setattr(ChunkCache, "read", refused)
    monkeypatch.setattr(ChunkCache, "read_version", refused)
    monkeypatch.setattr(CheckedFile, "read", refused)


@pytest.fixture
def cached(s3, tmp_path):
    """An array of 40 chunks in the bucket, opened with a cache in ``tmp_path``, one epoch
    read (every chunk cached); (data, array, cache directory)."""
    data = np.random.default_rng(0).standard_normal((4000, 10)).astype(np.float32)
    remote_array(s3, "e.zarr", data, (100, 10))
    y = oc.open(s3.url("e.zarr"), storage_options=s3.storage_options, cache=tmp_path)
    assert _epoch(y) == pytest.approx(float(data.sum(dtype=np.float64)), rel=1e-6)
    assert len(_entries(tmp_path)) == 40
    return data, y, tmp_path


def test_a_cached_epoch_is_decoded_from_the_entry_files(cached, monkeypatch):
    data, y, _ = cached
    fetcher = y._store.fetcher
    _no_reads_into_python(monkeypatch)
    fds, hits = _open_fds(), fetcher.cache_hits
    assert _epoch(y) == pytest.approx(float(data.sum(dtype=np.float64)), rel=1e-6)
    assert np.array_equal(y[1234:2345], data[1234:2345])
    assert fetcher.cache_hits - hits >= 40
    assert _open_fds() <= fds  # every entry file closed once read


def test_a_damaged_entry_is_fetched_anew_and_replaced_never_decoded(cached):
    data, y, directory = cached
    fetcher = y._store.fetcher
    for path in _entries(directory)[:3]:
        _damage(path)
    before = fetcher.requests
    assert np.array_equal(y[...], data)
    # the listing, then one GET for each damaged entry (the others are served by the cache)
    assert fetcher.requests - before == 1 + 3
    before = fetcher.requests
    assert np.array_equal(y[...], data)  # the entries were replaced by whole ones
    assert fetcher.requests - before == 1


def test_a_damaged_entry_of_an_object_deleted_meanwhile_reads_as_never_written(s3, tmp_path):
    data = np.arange(4000 * 10, dtype=np.float32).reshape(4000, 10)
    remote_array(s3, "d.zarr", data, (100, 10))
    y = oc.open(s3.url("d.zarr"), storage_options=s3.storage_options, cache=tmp_path)
    assert np.array_equal(y[...], data)
    ours = y._store.fetcher
    key = y._store._key((0, 0))
    entry = ours.cache.open_version(ours.namespace, key, "no such version")
    assert entry is None  # another version: not served
    listed = ours.cache.lookup(ours.namespace, key)
    assert listed is not None
    entry = ours.cache.open_version(ours.namespace, key, listed.version)
    assert entry is not None and entry.nbytes == listed.nbytes
    _damage(listed.path)
    import obstore

    store = obstore.store.from_url(s3.url("d.zarr"), **s3.storage_options)
    obstore.delete(store, "c/0/0")
    entry.recover = lambda: ours._fetch_anew(key, _request(key))
    assert entry.read() is None  # damaged, and the object is gone
    entry.close()


def _request(key: str):
    from oocarray._storage._objects._requests import Request

    return Request(key)


def test_a_damaged_range_entry_of_a_shard_is_fetched_anew(s3, tmp_path):
    data = np.random.default_rng(2).standard_normal((4000, 8)).astype(np.float32)
    remote_array(s3, "s.zarr", data, (50, 8), (1000, 8))  # 4 shards of 20 inner chunks
    y = oc.open(s3.url("s.zarr"), storage_options=s3.storage_options, cache=tmp_path)
    assert np.array_equal(y[...], data)
    entries = _entries(tmp_path)
    assert entries
    _damage(entries[0])
    _damage(entries[-1])
    assert np.array_equal(y[...], data)
    assert np.array_equal(y[...], data)


@pytest.fixture
def codec_libraries():
    """The native reader's codec libraries, as opening an array loads them (a test that
    calls the reader directly may run first in its process)."""
    from oocarray._storage._zarr._layout import _load_libraries

    _load_libraries()


def test_the_native_reader_checks_a_cache_entry_before_decoding_it(tmp_path, codec_libraries):
    import google_crc32c

    payload = np.arange(1024, dtype=np.uint8).tobytes()
    path = tmp_path / "entry"
    path.write_bytes(b"header" + payload)
    seed = int(google_crc32c.value(b"v1"))
    crc = int(google_crc32c.extend(seed, payload))
    fd = os.open(path, os.O_RDONLY)
    try:
        table = np.array([[0, 6, len(payload), 0, 0, 0, len(payload), _native.CODEC_RAW, 1024]])
        out = np.zeros(1024, np.uint8)
        failed, absent = _native.read_chunks(table, [(fd, seed, crc)], [out], 1)
        assert (failed, absent) == ([], []) and out.tobytes() == payload
        out[:] = 0
        failed, _ = _native.read_chunks(table, [(fd, seed, crc ^ 1)], [out], 1)
        assert len(failed) == 1 and "CRC-32C" in failed[0][1]
        assert not out.any()  # nothing of a damaged entry is decoded
        with pytest.raises(TypeError):
            _native.read_chunks(table, [(fd, seed)], [out], 1)
    finally:
        os.close(fd)


@pytest.mark.parametrize("codec", ["raw", "zstd"])
def test_a_cache_entry_of_a_chunk_with_a_crc32c_is_checked_both_ways_in_one_pass(
    tmp_path, codec, codec_libraries
):
    # The entry's CRC-32C is combined from the chunk's own (one pass over the bytes): both
    # still refuse their damage, and each says which failed.
    import google_crc32c
    import numcodecs

    data = np.arange(4096, dtype=np.uint8)
    body = data.tobytes() if codec == "raw" else numcodecs.Zstd(level=3).encode(data)
    kind = _native.CODEC_RAW if codec == "raw" else _native.CODEC_ZSTD

    def entry(trailer: int) -> tuple[bytes, int]:
        payload = body + trailer.to_bytes(4, "little")
        return payload, int(google_crc32c.extend(seed, payload))

    seed = int(google_crc32c.value(b"etag-1"))
    good = int(google_crc32c.value(body))
    for trailer, entry_off, expected in [
        (good, 0, None),
        (good, 1, "cache entry's CRC-32C"),  # the entry damaged
        (good ^ 1, 0, "the CRC-32C checksum does not match"),  # the chunk stored damaged
    ]:
        payload, crc = entry(trailer)
        path = tmp_path / "entry"
        path.write_bytes(b"header" + payload)
        fd = os.open(path, os.O_RDONLY)
        try:
            row = [0, 6, len(payload), 0, 0, 0, 4096, kind | _native.CODEC_CRC32C, 4096]
            out = np.zeros(4096, np.uint8)
            failed, absent = _native.read_chunks(
                np.array([row]), [(fd, seed, crc ^ entry_off)], [out], 1
            )
        finally:
            os.close(fd)
        if expected is None:
            assert (failed, absent) == ([], []) and np.array_equal(out, data)
        else:
            assert len(failed) == 1 and expected in failed[0][1] and not out.any()


@pytest.mark.skipif(not paging_available()[0], reason="as_ndarray() cannot page here")
def test_as_ndarray_of_a_cached_array_reads_whole_entries(cached):
    data, y, directory = cached
    _damage(_entries(directory)[5])
    a = y.as_ndarray()
    assert np.array_equal(a, data)
    del a


def test_entries_beyond_the_open_file_limit_are_read_into_buffers(cached, monkeypatch):
    from oocarray._storage._objects import _fetcher

    data, y, _ = cached
    monkeypatch.setattr(_fetcher, "MAX_OPEN_ENTRIES", CheckedFile.open_now() + 3)
    read = ChunkCache.read_version
    calls = []
    most = []

    def counted(self, *args, **kwargs):
        calls.append(args[1])
        most.append(CheckedFile.open_now())
        return read(self, *args, **kwargs)

    monkeypatch.setattr(ChunkCache, "read_version", counted)
    before = CheckedFile.open_now()
    assert _epoch(y) == pytest.approx(float(data.sum(dtype=np.float64)), rel=1e-6)
    assert calls  # the read-ahead ran into the limit: those entries were read into buffers
    assert max(most) <= before + 3
    assert CheckedFile.open_now() == before  # all closed again
