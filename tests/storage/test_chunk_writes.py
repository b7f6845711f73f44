"""Chunk writes: shards, writes on every core, a full disk, and writes from many threads."""

from __future__ import annotations

import errno
import threading
from pathlib import Path

import google_crc32c
import h5py
import numcodecs
import numpy as np
import pytest
import zarr
import zarr.codecs

import oocarray as oc


def test_create_writes_shards_that_zarr_python_and_tensorstore_read(tmp_path: Path) -> None:
    data = np.arange(200 * 24, dtype=np.float32).reshape(200, 24)
    x = oc.create(tmp_path / "s.zarr", data.shape, data.dtype, chunks=(8, 24), shards=(64, 24))
    assert (x.chunks, x.shards) == ((8, 24), (64, 24))
    assert "in shards (64, 24)" in repr(x)
    x[...] = data
    assert x.chunk_writes == 4  # one write per shard, never one per inner chunk
    x[10:20, 3] = -1.0  # part of a shard: read, updated, rewritten
    data[10:20, 3] = -1.0
    assert x.chunk_writes == 5 and x.chunk_reads == 1
    assert np.array_equal(oc.open(tmp_path / "s.zarr")[...], data)
    d = x.to_dask()
    assert d.chunksize == (64, 24)  # one dask task per shard, the unit of storage
    assert np.array_equal(d.compute(scheduler="threads"), data)
    z = zarr.open_array(tmp_path / "s.zarr", mode="r")
    assert z.shards == (64, 24) and z.chunks == (8, 24)
    assert np.array_equal(z[...], data)
    ts = pytest.importorskip("tensorstore")
    t = ts.open(
        {"driver": "zarr3", "kvstore": {"driver": "file", "path": str(tmp_path / "s.zarr")}},
        read=True,
    ).result()
    assert np.array_equal(t[...].read().result(), data)


def test_create_picks_inner_chunks_and_checks_shards(tmp_path: Path) -> None:
    x = oc.create(tmp_path / "a.zarr", (4096, 1024), np.float32, shards=(512, 1024))
    assert x.shards == (512, 1024)
    assert x.chunks == (32, 1024)  # halved along the rows until at most 128 KiB
    assert np.prod(x.chunks) * 4 <= 128 * 1024
    assert oc.create(tmp_path / "b.zarr", (100, 10), "u1", shards=(25, 10)).chunks == (25, 10)
    assert oc.create(tmp_path / "c.zarr", (10,), "f8", chunks=5).shards is None
    with pytest.raises(ValueError, match="multiple of chunks"):
        oc.create(tmp_path / "d.zarr", (100, 10), "f4", chunks=(10, 10), shards=(25, 10))
    with pytest.raises(ValueError, match="shards must be"):
        oc.create(tmp_path / "e.zarr", (100, 10), "f4", shards=(25,))
    with pytest.raises(ValueError, match="shards must be positive"):
        oc.create(tmp_path / "f.zarr", (100, 10), "f4", shards=(0, 10))


@pytest.mark.parametrize("codec", ["zstd", "lz4", "gzip", "none"])
def test_writes_of_many_chunks_on_every_core_read_back_everywhere(
    codec: str, tmp_path: Path
) -> None:
    rng = np.random.default_rng(11)
    data = (rng.standard_normal((1000, 70)) * 100).round().astype(np.float32)
    x = oc.create(tmp_path / "a.zarr", data.shape, data.dtype, chunks=(30, 32), codec=codec)
    x[...] = data  # 34 x 3 chunks, the last row and column of chunks partly outside
    assert x.chunk_writes == 34 * 3 and x.chunk_reads == 0
    x[95:905:3, 10:50] = -data[95:905:3, 10:50]  # partial chunks: read, updated, rewritten
    data[95:905:3, 10:50] *= -1
    x[-1] = 7.0
    data[-1] = 7.0
    assert np.array_equal(oc.open(tmp_path / "a.zarr")[...], data)
    assert np.array_equal(zarr.open_array(tmp_path / "a.zarr", mode="r")[...], data)
    assert list((tmp_path / "a.zarr").rglob(".tmp-*")) == []


def test_native_zstd_frames_carry_size_and_checksum_as_asked(tmp_path: Path) -> None:
    data = np.arange(4096, dtype=np.int64).reshape(64, 64)
    x = oc.create(tmp_path / "a.zarr", data.shape, data.dtype, chunks=(64, 64))
    x[...] = data
    stored = (tmp_path / "a.zarr" / "c" / "0" / "0").read_bytes()
    decoded = numcodecs.Zstd().decode(stored[:-4])
    assert np.array_equal(np.frombuffer(decoded, np.int64), data.ravel())
    descriptor = stored[4]
    assert descriptor >> 6 != 0  # the frame header holds the content size
    assert (descriptor >> 2) & 1 == 0  # no frame checksum: the codec says checksum=False
    frame = stored[:-4]  # then the crc32c codec's CRC-32C of the frame
    assert int.from_bytes(stored[-4:], "little") == google_crc32c.value(frame)
    zarr.create_array(
        tmp_path / "b.zarr",
        shape=data.shape,
        chunks=data.shape,
        dtype=data.dtype,
        compressors=zarr.codecs.ZstdCodec(level=3, checksum=True),  # the frame's own checksum
    )
    oc.open(tmp_path / "b.zarr", mode="r+")[...] = data  # the native writer, as the codec says
    stored = (tmp_path / "b.zarr" / "c" / "0" / "0").read_bytes()
    assert (stored[4] >> 2) & 1 == 1
    assert np.array_equal(oc.open(tmp_path / "b.zarr")[...], data)


def test_a_full_disk_during_a_write_is_an_error_and_leaves_no_files(tiny_tmpfs: Path) -> None:
    noise = np.random.default_rng(2).standard_normal((4096, 512)).astype(np.float32)  # 8 MiB
    x = oc.create(tiny_tmpfs / "a.zarr", noise.shape, noise.dtype, chunks=(256, 512))
    with pytest.raises(OSError, match="No space left") as caught:
        x[...] = noise  # noise hardly compresses: 8 MiB cannot fit a 4 MiB disk
    assert caught.value.errno == errno.ENOSPC
    assert list((tiny_tmpfs / "a.zarr").rglob(".tmp-*")) == []
    written = oc.open(tiny_tmpfs / "a.zarr")
    for i in range(16):  # every chunk is whole: the one written, or the fill value
        block = written[i * 256 : (i + 1) * 256]
        assert np.array_equal(block, noise[i * 256 : (i + 1) * 256]) or not block.any()


def _write_rows_from_threads(arrays: list[oc.ChunkedArray], rows: int, threads: int) -> None:
    """Thread t writes rows t, t + threads, ...: every chunk is written in part by all of
    them at once."""
    start = threading.Barrier(threads)

    def work(t: int) -> None:
        x = arrays[t % len(arrays)]
        start.wait()
        for i in range(t, rows, threads):
            x[i] = i + 1

    workers = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()


@pytest.mark.parametrize(
    ("codec", "shards"), [("zstd", None), ("none", None), ("lz4", None), ("zstd", (64, 4))]
)
def test_threads_writing_rows_of_one_chunk_lose_none(
    tmp_path: Path, codec: str, shards: tuple[int, ...] | None
) -> None:
    path = tmp_path / "a.zarr"
    oc.create(path, (256, 4), "float64", chunks=(16, 4), codec=codec, shards=shards)
    # Two arrays open on the same path share the chunks' locks.
    arrays = [oc.open(path, mode="r+"), oc.open(path, mode="r+")]
    _write_rows_from_threads(arrays, 256, 8)
    got = oc.open(path)[:, 0]
    assert np.array_equal(got, np.arange(1, 257)), f"{int((got == 0).sum())} rows lost"


def test_threads_writing_rows_of_one_hdf5_chunk_lose_none(tmp_path: Path) -> None:
    with h5py.File(tmp_path / "f.h5", "w") as f:
        f.create_dataset("x", shape=(256, 4), chunks=(16, 4), dtype="f8", compression="gzip")
    _write_rows_from_threads([oc.open(tmp_path / "f.h5", mode="r+")], 256, 8)
    assert np.array_equal(oc.open(tmp_path / "f.h5")[:, 0], np.arange(1, 257))
