"""Chunk reads: the native reader (raw bytes, zstd ranges, files and bytes in memory, the
native pool), one read's job table on every core, and the Python path that judges what the
native reader rejects."""

from __future__ import annotations

import contextlib
import gc
import multiprocessing
import os
import threading
import time
import weakref
from collections.abc import Iterator
from pathlib import Path

import google_crc32c
import h5py
import numcodecs
import numpy as np
import pytest
import zarr
import zarr.codecs
from hypothesis import given, settings
from hypothesis import strategies as st

import oocarray as oc
from oocarray import _native
from oocarray._storage import _pool

needs_zstd = pytest.mark.skipif(not _native.zstd_available(), reason="no libzstd here")

SMALL = 64 * 1024  # decoded whole, then the range copied
LARGE = 768 * 1024  # decoded as a stream that stops at the range's end
PREFIX = 4096 + 123  # stored bytes start here in the file, unaligned


def _data(nbytes: int, seed: int) -> np.ndarray:
    """Compressible but not trivial bytes: noise with runs."""
    rng = np.random.default_rng(seed)
    return (rng.integers(0, 40, nbytes) // 3).astype(np.uint8)


class StoredChunk:
    """One chunk written into a file at PREFIX, raw and as a zstd frame."""

    def __init__(self, directory: Path, nbytes: int, seed: int) -> None:
        self.data = _data(nbytes, seed)
        self.nbytes = nbytes
        self.files: dict[int, tuple[int, int]] = {}  # codec -> (fd, stored bytes)
        encoded = {
            _native.CODEC_RAW: self.data.tobytes(),
            _native.CODEC_ZSTD: numcodecs.Zstd(level=3, checksum=True).encode(self.data),
        }
        for codec, stored in encoded.items():
            path = directory / f"chunk-{nbytes}-{codec}"
            path.write_bytes(b"\xee" * PREFIX + bytes(stored) + b"\xee" * 77)
            self.files[codec] = (os.open(path, os.O_RDONLY), len(stored))

    def close(self) -> None:
        for fd, _ in self.files.values():
            os.close(fd)


@pytest.fixture(scope="module")
def stored(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[int, StoredChunk]]:
    directory = tmp_path_factory.mktemp("chunks")
    chunks = {n: StoredChunk(directory, n, seed=n) for n in (SMALL, LARGE)}
    yield chunks
    for chunk in chunks.values():
        chunk.close()


def _read(
    codec: int,
    source: int | bytes,
    stored: int,
    chunk_nbytes: int,
    skip: int,
    length: int,
    at: int = 0,
) -> tuple[np.ndarray, tuple[int, str] | None]:
    """One job of one read: the chunk's bytes from a file (a descriptor) or from memory."""
    dest = np.full(at + length + 16, 0xAB, dtype=np.uint8)
    row = [0, PREFIX, stored, skip, 0, at, length, codec, chunk_nbytes]
    failed, absent = _native.read_chunks(np.array([row], dtype=np.int64), [source], [dest], 1)
    assert len(failed) <= 1 and absent == []
    return dest, (failed[0] if failed else None)


def _in_memory(fd: int) -> bytes:
    """What the file of ``fd`` holds, as bytes fetched from elsewhere would be."""
    return os.pread(fd, os.fstat(fd).st_size, 0)


@needs_zstd
@settings(max_examples=150, deadline=None)
@given(
    codec=st.sampled_from(["raw", "zstd"]),
    size=st.sampled_from([SMALL, LARGE]),
    memory=st.booleans(),
    data=st.data(),
)
def test_native_ranges_match_the_chunks_bytes(
    stored: dict[int, StoredChunk], codec: str, size: int, memory: bool, data: st.DataObject
) -> None:
    chunk = stored[size]
    code = _native.CODEC_RAW if codec == "raw" else _native.CODEC_ZSTD
    fd, nbytes = chunk.files[code]
    source = _in_memory(fd) if memory else fd
    skip = data.draw(st.integers(0, size), label="skip")
    length = data.draw(st.integers(0, size - skip), label="length")
    at = data.draw(st.integers(0, 64), label="at")
    dest, failure = _read(code, source, nbytes, size, skip, length, at)
    assert failure is None
    assert np.array_equal(dest[at : at + length], chunk.data[skip : skip + length])
    # Bytes around the range are untouched.
    assert (dest[:at] == 0xAB).all() and (dest[at + length :] == 0xAB).all()


@needs_zstd
def test_native_reader_reports_damage(stored: dict[int, StoredChunk], tmp_path: Path) -> None:
    chunk = stored[LARGE]
    fd, nbytes = chunk.files[_native.CODEC_ZSTD]
    raw_fd, raw_nbytes = chunk.files[_native.CODEC_RAW]
    zstd = _native.CODEC_ZSTD
    cases = {
        "stored bytes cut short": (zstd, fd, nbytes - 100, LARGE, 0, LARGE),
        "a range that runs past the frame": (zstd, fd, nbytes - 100, LARGE, LARGE - 10, 10),
        "a frame of another size": (zstd, fd, nbytes, LARGE + 8, 0, LARGE + 8),
        "raw bytes of another size": (_native.CODEC_RAW, raw_fd, raw_nbytes - 1, LARGE, 0, 10),
        "not zstd at all": (zstd, raw_fd, 5000, LARGE, 0, LARGE),
        "a range outside the chunk": (zstd, fd, nbytes, LARGE, LARGE - 4, 8),
        "a closed file": (zstd, 987_654, nbytes, LARGE, 0, 10),
        "a size beyond the file": (_native.CODEC_RAW, raw_fd, raw_nbytes, LARGE + 10**6, 0, 10),
    }
    for name, (codec, f, n, chunk_nbytes, skip, length) in cases.items():
        _, failure = _read(codec, f, n, chunk_nbytes, skip, length)
        assert failure is not None, name
        assert failure[0] == 0 and failure[1], name
        if name != "a closed file":  # the same bytes in memory fail the same way
            _, failure = _read(codec, _in_memory(f), n, chunk_nbytes, skip, length)
            assert failure is not None and failure[0] == 0 and failure[1], name

    # A damaged byte inside the frame: the checksum (or the decoder) catches it.
    path = tmp_path / "damaged"
    stored_bytes = bytearray(os.pread(fd, nbytes, PREFIX))
    stored_bytes[nbytes // 2] ^= 0xFF
    path.write_bytes(b"\0" * PREFIX + stored_bytes)
    damaged = os.open(path, os.O_RDONLY)
    try:
        _, failure = _read(zstd, damaged, nbytes, LARGE, 0, LARGE)
        assert failure is not None
    finally:
        os.close(damaged)


def test_native_reader_refuses_bad_arguments(stored: dict[int, StoredChunk]) -> None:
    fd, nbytes = stored[SMALL].files[_native.CODEC_RAW]
    dest = np.zeros(16, np.uint8)

    def jobs(*row: int) -> np.ndarray:
        return np.array([row], dtype=np.int64)

    raw = _native.CODEC_RAW
    outside = "names a source or buffer that is not given, or bytes outside them"
    for bad in (
        jobs(0, PREFIX, nbytes, 0, 0, 8, 9, raw, SMALL),  # past the buffer's end
        jobs(0, PREFIX, nbytes, 0, 1, 0, 4, raw, SMALL),  # no buffer 1
        jobs(1, PREFIX, nbytes, 0, 0, 0, 4, raw, SMALL),  # no source 1
        jobs(0, -1, nbytes, 0, 0, 0, 4, raw, SMALL),  # a negative offset
        jobs(0, PREFIX, nbytes, 0, 0, 0, 4, -3, SMALL),  # no codec
    ):
        with pytest.raises(ValueError, match=outside):
            _native.read_chunks(bad, [fd], [dest], 2)
    with pytest.raises(ValueError, match="int64 table of 9 columns"):
        _native.read_chunks(np.zeros((1, 7), np.int64), [fd], [dest], 2)
    with pytest.raises(ValueError, match="int64 table of 9 columns"):
        _native.read_chunks(np.zeros((1, 9), np.float64), [fd], [dest], 2)
    with pytest.raises(ValueError, match="no file descriptor"):
        _native.read_chunks(jobs(0, 0, 4, 0, 0, 0, 4, raw, 4), [-5], [dest], 2)
    with pytest.raises(BufferError):
        _native.read_chunks(jobs(0, PREFIX, nbytes, 0, 0, 0, 4, raw, SMALL), [fd], [b"ro"], 2)
    # A codec with no native decoder is a failed job, for Python to decode: not an error.
    failed, _ = _native.read_chunks(jobs(0, PREFIX, nbytes, 0, 0, 0, 4, 99, SMALL), [fd], [dest], 2)
    assert len(failed) == 1 and "codec 99" in failed[0][1]


def test_every_failed_job_comes_back_and_the_others_are_decoded(
    stored: dict[int, StoredChunk],
) -> None:
    """One table with good and damaged jobs, files and memory mixed, on several threads: the
    good ones are all decoded, and every damaged one is named, in order, with its reason."""
    chunk = stored[SMALL]
    fd, nbytes = chunk.files[_native.CODEC_ZSTD]
    frame = _in_memory(fd)[PREFIX : PREFIX + nbytes]
    sources = [fd, frame, frame[:-40]]  # a file, the frame in memory, the frame cut short
    zstd = _native.CODEC_ZSTD
    rows, expect_failed = [], []
    for i in range(40):
        which = i % 3
        offset = PREFIX if which == 0 else 0
        stored_bytes = nbytes if which < 2 else nbytes - 40
        rows.append([which, offset, stored_bytes, 0, i, 0, SMALL, zstd, SMALL])
        if which == 2:
            expect_failed.append(i)
    dests = [np.zeros(SMALL, np.uint8) for _ in rows]
    failed, absent = _native.read_chunks(np.array(rows, np.int64), sources, dests, 4)
    assert [i for i, _ in failed] == expect_failed and absent == []
    assert all(reason for _, reason in failed)
    for i, dest in enumerate(dests):
        if i not in expect_failed:
            assert np.array_equal(dest, chunk.data), i


def test_paths_are_opened_by_their_jobs_and_missing_files_come_back_apart(
    stored: dict[int, StoredChunk], tmp_path: Path
) -> None:
    """A source given as a path is opened by the native job; a path of no file is a chunk
    never written (returned apart, its destination untouched); a path that cannot be read
    otherwise (a directory) is a failed job with the reason."""
    chunk = stored[SMALL]
    fd, nbytes = chunk.files[_native.CODEC_ZSTD]
    path = tmp_path / "c0"
    path.write_bytes(_in_memory(fd)[PREFIX : PREFIX + nbytes])
    (tmp_path / "a-directory").mkdir()
    sources = [str(path), str(tmp_path / "never-written"), str(tmp_path / "a-directory")]
    zstd = _native.CODEC_ZSTD
    rows = [[i % 3, 0, -1, 0, i, 0, SMALL, zstd, SMALL] for i in range(6)]
    dests = [np.full(SMALL, 7, np.uint8) for _ in rows]
    failed, absent = _native.read_chunks(np.array(rows, np.int64), sources, dests, 3)
    assert absent == [1, 4]
    assert [i for i, _ in failed] == [2, 5] and all("directory" in why for _, why in failed)
    assert np.array_equal(dests[0], chunk.data) and np.array_equal(dests[3], chunk.data)
    assert (dests[1] == 7).all() and (dests[4] == 7).all()


def test_an_array_read_from_threads_is_freed_with_its_last_reference(tmp_path: Path) -> None:
    """Each thread keeps its chunk read of an array for the next read: that must not keep the
    store alive (no reference cycle, so no wait for the garbage collector)."""
    x = oc.create(tmp_path / "a.zarr", (100, 4), np.float32, chunks=(10, 4))
    x[...] = 1.0
    y = oc.open(tmp_path / "a.zarr")
    threads = [threading.Thread(target=y.__getitem__, args=(slice(3, 40),)) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert y[5].sum() == 4.0
    store = weakref.ref(y._store)
    gc.disable()
    try:
        del y
        assert store() is None
    finally:
        gc.enable()


def test_hdf5_arrays_never_closed_leave_no_file_open(tmp_path: Path) -> None:
    path = tmp_path / "f.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset(
            "x", data=np.arange(512.0).reshape(64, 8), chunks=(8, 8), compression="gzip"
        )
    opened = len(os.listdir("/proc/self/fd"))
    for _ in range(20):
        x = oc.open(path)
        assert x._store._native_chunks() is not None  # type: ignore[attr-defined]
        assert x[9, 0] == 72.0
        del x
    gc.collect()
    assert len(os.listdir("/proc/self/fd")) <= opened


def test_a_store_under_a_name_that_is_no_utf8(tmp_path: Path) -> None:
    """Chunk files are opened by the native reader in the file system's encoding, as os.open
    opens them."""
    name = os.fsdecode(b"caf\xe9-\xff.zarr")  # undecodable bytes, kept as surrogates
    x = oc.create(tmp_path / name, (64, 4), np.int32, chunks=(8, 4))
    x[...] = np.arange(256, dtype=np.int32).reshape(64, 4)
    y = oc.open(tmp_path / name)
    assert np.array_equal(y[...], np.arange(256, dtype=np.int32).reshape(64, 4))
    assert np.array_equal(y[9], [36, 37, 38, 39])


def _pool_child(queue: multiprocessing.Queue[tuple[int, int, bool]]) -> None:
    before = _native.pool_workers()
    data = np.arange(8 * 4096, dtype=np.uint8)
    rows = [[0, i * 4096, 4096, 0, 0, i * 4096, 4096, _native.CODEC_RAW, 4096] for i in range(8)]
    dest = np.zeros_like(data)
    result = _native.read_chunks(np.array(rows, np.int64), [data.tobytes()], [dest], 2)
    queue.put((before, _native.pool_workers(), result == ([], []) and np.array_equal(dest, data)))


def test_the_native_pool_starts_again_in_a_forked_child() -> None:
    data = np.arange(8 * 4096, dtype=np.uint8)
    rows = [[0, i * 4096, 4096, 0, 0, i * 4096, 4096, _native.CODEC_RAW, 4096] for i in range(8)]
    dest = np.zeros_like(data)
    assert _native.read_chunks(np.array(rows, np.int64), [data.tobytes()], [dest], 2) == ([], [])
    assert np.array_equal(dest, data) and _native.pool_workers() >= 1
    context = multiprocessing.get_context("fork")
    queue: multiprocessing.Queue[tuple[int, int, bool]] = context.Queue()
    child = context.Process(target=_pool_child, args=(queue,))
    child.start()
    before, after, read = queue.get(timeout=60)
    child.join(60)
    assert child.exitcode == 0
    assert (before, read) == (0, True) and after >= 1  # none inherited; started on first use


@pytest.fixture(scope="module")
def sharded(tmp_path_factory: pytest.TempPathFactory) -> tuple[oc.ChunkedArray, np.ndarray]:
    tmp_path = tmp_path_factory.mktemp("sharded")
    data = np.arange(96 * 40, dtype=np.float32).reshape(96, 40) * 0.5
    data[::7] = np.random.default_rng(1).standard_normal((14, 40), dtype=np.float32)
    z = zarr.create_array(
        tmp_path / "s.zarr",
        shape=data.shape,
        chunks=(4, 40),
        shards=(16, 40),
        dtype="f4",
        fill_value=-2.0,
        compressors=zarr.codecs.ZstdCodec(level=1),
    )
    z[:64] = data[:64]
    z[80:84] = data[80:84]  # rows 64-79 and 84-95: never written, they read as the fill value
    data[64:80] = -2.0
    data[84:] = -2.0
    return oc.open(tmp_path / "s.zarr"), data


@contextlib.contextmanager
def _decoded_by_python(x: oc.ChunkedArray, python_path: bool) -> Iterator[None]:
    """Inside, ``x``'s chunks are decoded by the Python path (with ``python_path``)."""
    layout = x._store._layout  # type: ignore[attr-defined]
    native = layout.native_codec
    if python_path:
        layout.native_codec = None
    try:
        yield
    finally:
        layout.native_codec = native


@pytest.mark.parametrize("python_path", [False, True], ids=["native", "python"])
@settings(max_examples=80, deadline=None)
@given(data=st.data())
def test_reads_on_every_core_match_numpy(
    sharded: tuple[oc.ChunkedArray, np.ndarray], python_path: bool, data: st.DataObject
) -> None:
    x, expected = sharded
    with _decoded_by_python(x, python_path):
        start = data.draw(st.integers(-96, 95))
        stop = data.draw(st.integers(-96, 96))
        step = data.draw(st.sampled_from([1, 1, 2, 3, -1, -5]))
        columns = data.draw(st.sampled_from([slice(None), slice(3, 30, 4), 7, [0, 39, 5]]))
        key = (slice(start, stop, step), columns)
        assert np.array_equal(x[key], expected[key])
        row = data.draw(st.integers(-96, 95))
        assert np.array_equal(x[row], expected[row])
        assert np.array_equal(x[start:stop], expected[start:stop])


@pytest.mark.parametrize("python_path", [False, True], ids=["native", "python"])
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_integer_array_rows_over_many_chunks_match_numpy(
    sharded: tuple[oc.ChunkedArray, np.ndarray], python_path: bool, data: st.DataObject
) -> None:
    # x[rows] spread over many chunks decodes a few chunks at once on every core, then gathers.
    x, expected = sharded
    with _decoded_by_python(x, python_path):
        rows = np.array(data.draw(st.lists(st.integers(-96, 95), min_size=0, max_size=60)))
        rows = rows.astype(np.intp)
        columns = data.draw(st.sampled_from([slice(None), slice(3, 30, 4), 7, slice(39, None)]))
        assert np.array_equal(x[rows], expected[rows])
        assert np.array_equal(x[rows, columns], expected[rows, columns])
        assert np.array_equal(x[np.sort(rows)], expected[np.sort(rows)])


def test_a_damaged_chunk_in_an_integer_array_read_is_named(tmp_path: Path) -> None:
    x = oc.create(tmp_path / "a.zarr", (64, 8), np.int32, chunks=(2, 8))
    x[...] = np.arange(512, dtype=np.int32).reshape(64, 8)
    chunk = tmp_path / "a.zarr" / "c" / "17" / "0"
    chunk.write_bytes(chunk.read_bytes()[:-9])
    y = oc.open(tmp_path / "a.zarr")
    with pytest.raises(oc.CorruptChunkError, match=r"chunk \(17, 0\)"):
        y[np.array([1, 9, 35, 60, 34])]
    rows = np.array([63, 0, 5, 33, 5])
    assert np.array_equal(y[rows], np.arange(512, dtype=np.int32).reshape(64, 8)[rows])


def test_a_zstd_chunk_of_several_frames_is_read_by_the_python_path(tmp_path: Path) -> None:
    x = oc.create(tmp_path / "a.zarr", (8, 16), np.float32, chunks=(4, 16))
    x[...] = np.arange(128, dtype=np.float32).reshape(8, 16)
    # Rewrite chunk 1 as two zstd frames: valid zstd, which numcodecs decodes and the native
    # reader (one frame per chunk) hands back.
    rows = np.arange(64, 128, dtype=np.float32)
    frames = bytes(numcodecs.Zstd().encode(rows[:32]) + numcodecs.Zstd().encode(rows[32:]))
    crc32c = google_crc32c.value(frames).to_bytes(4, "little")  # the chain's crc32c codec
    (tmp_path / "a.zarr" / "c" / "1" / "0").write_bytes(frames + crc32c)
    y = oc.open(tmp_path / "a.zarr")
    assert np.array_equal(y[4:8], rows.reshape(4, 16))
    assert np.array_equal(y[5], rows[16:32])
    assert np.array_equal(y[:4], np.arange(64, dtype=np.float32).reshape(4, 16))


def test_a_failed_job_stops_the_read_and_names_its_chunk(tmp_path: Path) -> None:
    x = oc.create(tmp_path / "a.zarr", (64, 8), np.int32, chunks=(2, 8))
    x[...] = np.arange(512, dtype=np.int32).reshape(64, 8)
    chunk = tmp_path / "a.zarr" / "c" / "17" / "0"
    chunk.write_bytes(chunk.read_bytes()[:-9])
    y = oc.open(tmp_path / "a.zarr")
    with pytest.raises(oc.CorruptChunkError, match=r"chunk \(17, 0\).*c/17/0"):
        y[...]
    with pytest.raises(oc.CorruptChunkError, match=r"chunk \(17, 0\)"):
        y[31:40:3, 1:5]
    assert np.array_equal(y[:34], np.arange(272, dtype=np.int32).reshape(34, 8))


def test_reads_in_a_manager_allocate_there_and_keep_nothing(tmp_path: Path) -> None:
    x = oc.from_numpy(np.arange(200_000, dtype=np.float64).reshape(1000, 200), chunks=(50, 200))
    with oc.Manager("reads") as m:
        before = m.stats().current_bytes
        part = x[25:975, ::3]
        rows = x[100:300]
        assert oc.owner(part) is m and oc.owner(rows) is m
        # Scratch buffers of the read came from the manager and went back to it.
        assert m.stats().current_bytes - before == part.nbytes + rows.nbytes
        assert m.stats().total_count >= 3  # results and scratch, all counted here
    np.testing.assert_array_equal(rows[:, 0], np.arange(100, 300) * 200.0)


def test_reads_on_this_thread_use_one_runner_there_only() -> None:
    cores = _pool.workers()
    seen: list[int] = []
    with _pool.reads_on_this_thread():
        assert _pool.workers() == 1
        with _pool.reads_on_this_thread():
            pass
        assert _pool.workers() == 1  # (an inner one leaves it as it was)
        other = threading.Thread(target=lambda: seen.append(_pool.workers()))
        other.start()
        other.join()
    assert seen == [cores] and _pool.workers() == cores


def test_spread_runs_every_item_once_and_raises_after_every_runner_stopped() -> None:
    seen: list[int] = []
    lock = threading.Lock()

    def record(i: int, slot: int) -> None:
        assert 0 <= slot < 4
        with lock:
            seen.append(i)

    _pool.run_spread(100, record, 4)
    assert sorted(seen) == list(range(100))
    _pool.run_spread(0, record, 4)
    _pool.run_spread(3, record, 1)

    # Synchronised on events: job 0 fails while another job runs, and that job finishes only
    # once the failure is about to be recorded, so how far the others got never depends on
    # how fast threads are scheduled (60 s waits are hang guards only).
    running, failing = threading.Event(), threading.Event()
    finished: list[int] = []

    def fail_first(i: int, slot: int) -> None:
        if i == 0:
            assert running.wait(60)
            failing.set()
            raise KeyError("job 0")
        running.set()
        assert failing.wait(60)
        finished.append(i)

    with pytest.raises(KeyError, match="job 0"):
        _pool.run_spread(50, fail_first, 2)
    count = len(finished)
    assert 1 <= count < 49  # the failure stopped the rest
    time.sleep(0.05)
    assert len(finished) == count  # and nothing ran on after the call returned


def _read_in_child(path: str, queue: multiprocessing.Queue[float]) -> None:
    queue.put(float(oc.open(path)[...].sum()))


def test_reads_work_in_a_forked_child(tmp_path: Path) -> None:
    data = np.arange(40_000, dtype=np.float32).reshape(400, 100)
    x = oc.create(tmp_path / "a.zarr", data.shape, data.dtype, chunks=(10, 100))
    x[...] = data
    assert x[...].sum() == data.sum()  # the parent's pool has threads now
    context = multiprocessing.get_context("fork")
    queue: multiprocessing.Queue[float] = context.Queue()
    child = context.Process(target=_read_in_child, args=(str(tmp_path / "a.zarr"), queue))
    child.start()
    child.join(60)
    assert child.exitcode == 0
    assert queue.get(timeout=5) == float(data.sum())


def test_reads_from_many_threads_at_once_are_each_right(tmp_path: Path) -> None:
    data = np.random.default_rng(5).standard_normal((600, 64), dtype=np.float32)
    x = oc.create(tmp_path / "a.zarr", data.shape, data.dtype, chunks=(16, 64), shards=(64, 64))
    x[...] = data
    y = oc.create(tmp_path / "b.zarr", data.shape, data.dtype, chunks=(50, 64))
    y[...] = data
    errors: list[BaseException] = []

    def reader(seed: int) -> None:
        rng = np.random.default_rng(seed)
        try:
            for _ in range(60):
                a = int(rng.integers(0, 600))
                b = int(rng.integers(a, 601))
                for array in (x, y):
                    assert np.array_equal(array[a:b], data[a:b])
                    assert np.array_equal(array[a:b:3, 5:40:7], data[a:b:3, 5:40:7])
        except BaseException as error:  # reported by the main thread
            errors.append(error)

    threads = [threading.Thread(target=reader, args=(seed,)) for seed in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]


def test_reads_inside_a_workspace_cycle_leave_no_escapes(tmp_path: Path) -> None:
    data = np.arange(400 * 32, dtype=np.float64).reshape(400, 32)
    x = oc.create(tmp_path / "a.zarr", data.shape, data.dtype, chunks=(25, 32))
    x[...] = data
    ws = oc.Workspace("reads", on_escape="raise")
    starts = [int(s) for s in np.random.default_rng(3).integers(0, 340, 40)]
    sums = []
    for start in starts:  # many cycles: a pool thread holding on to a job's arrays would show
        with ws:
            part = x[start : start + 60, ::2]  # scratch buffers and the result in the arena
            rows = x[start : start + 60]  # row runs decoded straight into the result
            sums.append(float(part.sum()) + float(rows.sum()))
            del part, rows
    assert sums == [
        float(data[s : s + 60, ::2].sum()) + float(data[s : s + 60].sum()) for s in starts
    ]
    assert ws.stats().cycles == len(starts)
    ws.close()


def test_a_shard_index_that_fails_its_checksum_is_reported(tmp_path: Path) -> None:
    z = zarr.create_array(
        tmp_path / "s.zarr", shape=(64, 4), chunks=(4, 4), shards=(32, 4), dtype="i4"
    )
    z[...] = np.arange(256, dtype=np.int32).reshape(64, 4)
    shard = tmp_path / "s.zarr" / "c" / "0" / "0"
    stored = bytearray(shard.read_bytes())
    index_start = len(stored) - (16 * 8 + 4)
    # Swap the entries of inner chunks 0 and 1: every offset stays in bounds, the data moves.
    first, second = (
        stored[index_start : index_start + 16],
        stored[index_start + 16 : index_start + 32],
    )
    stored[index_start : index_start + 32] = second + first
    shard.write_bytes(bytes(stored))
    x = oc.open(tmp_path / "s.zarr")
    with pytest.raises(oc.CorruptChunkError, match="CRC-32C"):
        x[0]
    with pytest.raises(oc.CorruptChunkError, match="CRC-32C"):
        x[:40]
    assert np.array_equal(x[40:], np.arange(160, 256, dtype=np.int32).reshape(24, 4))


def test_large_uncompressed_reads_run_as_jobs_and_report_damage(tmp_path: Path) -> None:
    data = np.random.default_rng(9).integers(0, 2**31, (2600, 1024), dtype=np.int32)  # ~10 MiB
    x = oc.create(tmp_path / "a.zarr", data.shape, data.dtype, chunks=(128, 1024), codec="none")
    x[...] = data
    y = oc.open(tmp_path / "a.zarr")
    assert np.array_equal(y[...], data)  # over 8 MiB: the chunks are copied on every core
    assert np.array_equal(y[37:2590], data[37:2590])
    chunk = tmp_path / "a.zarr" / "c" / "11" / "0"
    chunk.write_bytes(chunk.read_bytes()[:-4096])
    with pytest.raises(oc.CorruptChunkError, match=r"chunk \(11, 0\).*c/11/0"):
        y[...]
    with pytest.raises(oc.CorruptChunkError, match="truncated"):
        y[1408 + 90 : 1408 + 120]  # rows still there: a chunk of the wrong size is damaged
    with pytest.raises(oc.CorruptChunkError, match="truncated"):
        y[1408 + 127]  # the row cut off


def test_the_read_ahead_hint_never_fails_a_read(tmp_path: Path) -> None:
    from oocarray._storage._zarr._chunk_files import will_need

    present = tmp_path / "chunk"
    present.write_bytes(b"x" * 8192)
    fd = os.open(present, os.O_RDONLY)
    os.close(fd)  # a closed descriptor: the hint's error is ignored
    will_need(
        [
            None,
            (str(present), 0, -1),
            (str(tmp_path / "never-written"), 0, -1),
            (fd, 0, 4096),
            (b"bytes in memory", 0, 15),  # type: ignore[list-item]
        ]
    )
    # And a cold read of many chunks (the hint given) returns every value.
    x = oc.create(tmp_path / "a.zarr", (64, 8), np.int32, chunks=(2, 8))
    x[...] = np.arange(512, dtype=np.int32).reshape(64, 8)
    for directory, _, names in os.walk(tmp_path / "a.zarr"):
        for name in names:
            chunk = os.open(os.path.join(directory, name), os.O_RDONLY)
            os.posix_fadvise(chunk, 0, 0, os.POSIX_FADV_DONTNEED)
            os.close(chunk)
    y = oc.open(tmp_path / "a.zarr")
    assert np.array_equal(y[3:61], np.arange(512, dtype=np.int32).reshape(64, 8)[3:61])
    rows = np.array([60, 1, 17, 33, 45])
    assert np.array_equal(y[rows], np.arange(512, dtype=np.int32).reshape(64, 8)[rows])


@pytest.mark.parametrize("codec", ["zstd", "none"])
def test_rows_of_one_chunk_read_as_one_job_fill_and_name_damage(tmp_path: Path, codec) -> None:
    data = np.arange(64 * 8, dtype=np.float32).reshape(64, 8)
    x = oc.create(tmp_path / "a.zarr", (64, 8), np.float32, chunks=(8, 8), codec=codec)
    x[:48] = data[:48]  # chunks 6 and 7 never written
    chunk = tmp_path / "a.zarr" / "c" / "2" / "0"
    chunk.write_bytes(chunk.read_bytes()[:-9])
    y = oc.open(tmp_path / "a.zarr")
    for i in (0, 7, 8, 47):
        assert np.array_equal(y[i], data[i])
    assert np.array_equal(y[9:15], data[9:15])
    assert not y[50].any() and not y[56:64].any()  # the fill value
    with pytest.raises(oc.CorruptChunkError, match=r"chunk \(2, 0\).*c/2/0"):
        y[17]
    assert np.array_equal(y[-1], np.zeros(8, np.float32))
