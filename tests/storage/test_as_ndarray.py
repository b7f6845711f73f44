"""Chunk-backed ndarrays: ``x.as_ndarray()`` of a zarr array is a plain ndarray whose pages are
filled from the chunks on first touch (userfaultfd, native/pager.c).

Everything here needs userfaultfd with kernel-mode faults (root, /dev/userfaultfd or
vm.unprivileged_userfaultfd=1) and is skipped without it, but for the refusal tests."""

from __future__ import annotations

import multiprocessing
import os
import pickle
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import numcodecs
import numpy as np
import pytest
import zarr
import zarr.codecs
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import oocarray as oc
from oocarray import _native
from oocarray._storage._paged import paging_available

needs_paging = pytest.mark.skipif(
    not paging_available()[0], reason=f"no chunk-backed ndarrays here: {paging_available()[1]}"
)
ROOT = str(Path(__file__).resolve().parents[2])


def _store(path: Path, data: np.ndarray, rows: int, codec: str = "zstd", **kw: object) -> str:
    x = oc.create(path, data.shape, data.dtype, chunks=(rows, *data.shape[1:]), codec=codec, **kw)
    x[...] = data
    return str(path)


DATA = np.random.default_rng(1).standard_normal((1000, 48)).astype(np.float32)


@pytest.fixture
def zstd_store(tmp_path: Path) -> str:
    return _store(tmp_path / "a.zarr", DATA, 64)  # 12 KiB chunks: a fault fills several


# ---- reads ----

_DTYPES = ["float32", "int16", "uint8", "float64", ">i4", "complex64"]


@needs_paging
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    shape=st.lists(st.integers(1, 40), min_size=1, max_size=3).map(tuple),
    rows=st.integers(1, 50),
    dtype=st.sampled_from(_DTYPES),
    codec=st.sampled_from(["zstd", "none"]),
    sharded=st.booleans(),
    data=st.data(),
)
def test_reads_equal_the_array_in_ram(
    shape: tuple[int, ...], rows: int, dtype: str, codec: str, sharded: bool, data: st.DataObject
) -> None:
    rows = min(rows, shape[0])
    values = (np.arange(np.prod(shape)) * 7 % 251).astype(dtype).reshape(shape)
    with tempfile.TemporaryDirectory() as tmp:
        shards = (rows * 2, *shape[1:]) if sharded else None
        path = _store(Path(tmp) / "a.zarr", values, rows, codec, shards=shards)
        view = oc.open(path).as_ndarray()
        assert type(view) is np.ndarray and not view.flags.writeable
        assert view.shape == shape and view.dtype == np.dtype(dtype)
        start = data.draw(st.integers(0, shape[0] - 1))
        stop = data.draw(st.integers(start, shape[0]))
        step = data.draw(st.integers(1, 5))
        assert np.array_equal(view[start:stop:step], values[start:stop:step])
        assert np.array_equal(view[::-1], values[::-1])
        assert np.array_equal(np.asarray(view), values)


@needs_paging
def test_zarr_v2_and_absent_chunks_with_a_fill_value(tmp_path: Path) -> None:
    z = zarr.create_array(
        store=str(tmp_path / "v2.zarr"),
        shape=(300, 5),
        chunks=(40, 5),
        dtype="int32",
        fill_value=-3,
        zarr_format=2,
        compressors=numcodecs.Zstd(level=1),
    )
    z[0:40] = 1
    z[200:240] = 2  # the other chunks were never written
    expected = np.full((300, 5), -3, dtype=np.int32)
    expected[0:40], expected[200:240] = 1, 2
    view = oc.open(tmp_path / "v2.zarr").as_ndarray()
    assert np.array_equal(view, expected)
    zeros = oc.create(tmp_path / "z.zarr", (5000, 64), "float32", chunks=(1024, 64))
    empty = zeros.as_ndarray()
    assert not empty.any()
    assert zeros.paging_stats()[0]["zero_fills"] > 0  # the shared zero page, no copies


@needs_paging
def test_threads_faulting_the_same_chunks_see_the_same_data(zstd_store: str) -> None:
    view = oc.open(zstd_store).as_ndarray()
    results: list[bool] = []
    barrier = threading.Barrier(8)

    def read(k: int) -> None:
        barrier.wait()
        results.append(np.array_equal(view[k % 3 :: 3], DATA[k % 3 :: 3]))

    threads = [threading.Thread(target=read, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [True] * 8


@needs_paging
def test_views_pickling_and_c_code(zstd_store: str, tmp_path: Path) -> None:
    view = oc.open(zstd_store).as_ndarray()
    part = view[100:300, ::2]
    del view  # the views keep the mapping
    assert np.array_equal(part, DATA[100:300, ::2])
    again = pickle.loads(pickle.dumps(part))
    assert type(again) is np.ndarray and np.array_equal(again, DATA[100:300, ::2])
    whole = oc.open(zstd_store).as_ndarray()
    np.save(tmp_path / "copy.npy", whole)  # C code reading the pages
    assert np.array_equal(np.load(tmp_path / "copy.npy"), DATA)
    assert np.allclose(np.percentile(whole[:, 0], 99), np.percentile(DATA[:, 0], 99))


@needs_paging
def test_system_calls_read_and_write_unfilled_pages(zstd_store: str, tmp_path: Path) -> None:
    view = oc.open(zstd_store).as_ndarray()
    fd = os.open(tmp_path / "out.bin", os.O_WRONLY | os.O_CREAT)
    try:
        assert os.write(fd, view[500:]) == DATA[500:].nbytes  # the kernel reads missing pages
    finally:
        os.close(fd)
    with open(tmp_path / "in.bin", "wb") as f:
        f.write(view[:500])
    assert np.array_equal(np.fromfile(tmp_path / "out.bin", np.float32), DATA[500:].ravel())
    assert np.array_equal(np.fromfile(tmp_path / "in.bin", np.float32), DATA[:500].ravel())
    x = oc.open(zstd_store, mode="r+")
    target = x.as_ndarray("r+")
    with open(tmp_path / "out.bin", "rb") as f:
        assert f.readinto(target[:500]) == DATA[500:1000].nbytes  # the kernel writes them
    assert x.flush() > 0
    assert np.array_equal(oc.open(zstd_store)[:500], DATA[500:])


# ---- memory ----


@needs_paging
def test_resident_chunks_stay_within_the_budget_and_come_back(tmp_path: Path) -> None:
    data = np.random.default_rng(2).standard_normal((8192, 128)).astype(np.float32)  # 4 MiB
    path = _store(tmp_path / "big.zarr", data, 256)  # 128 KiB chunks
    x = oc.open(path)
    with oc.Manager(max_bytes="1M") as m:
        view = x.as_ndarray()
        for _ in range(2):  # the second pass refills what the first dropped
            for i in range(0, len(data), 512):
                assert np.array_equal(view[i : i + 512], data[i : i + 512])
                assert x.paging_stats()[0]["resident_bytes"] <= 1 << 20
        stats = x.paging_stats()[0]
        assert stats["evictions"] > 0 and stats["fills"] > 2 * 32 - 8
        assert m.stats().peak_bytes <= (1 << 20) + 512 * 128 * 4
        del view
        assert m.stats().current_bytes == 0  # released with the mapping


# ---- processes ----


_shared: list[np.ndarray] = []


def _check_shared(start: int) -> bool:
    return bool(np.array_equal(_shared[0][start:], DATA[start:]))


@needs_paging
def test_a_forked_child_reads_the_data_not_zero_pages(zstd_store: str) -> None:
    view = oc.open(zstd_store).as_ndarray()
    assert view[0, 0] == DATA[0, 0]  # some chunks filled before the fork, most not
    pid = os.fork()
    if pid == 0:
        ok = np.array_equal(view, DATA)
        os._exit(0 if ok else 3)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    _shared[:] = [view]
    try:
        with multiprocessing.get_context("fork").Pool(2) as pool:
            assert pool.map(_check_shared, [0, 300, 700]) == [True] * 3
    finally:
        _shared.clear()
    assert np.array_equal(view, DATA)  # and the parent still serves its own


@needs_paging
def test_a_damaged_chunk_is_corrupt_chunk_error_with_a_reason_never_a_hang(zstd_store: str) -> None:
    chunk = Path(zstd_store) / "c" / "3" / "0"
    chunk.write_bytes(chunk.read_bytes()[:50])
    code = (
        "import oocarray as oc, sys\n"
        f"v = oc.open({zstd_store!r}).as_ndarray()\n"
        "print(float(v[:64].sum()), flush=True)\n"  # chunk 0 is fine
        "try:\n"
        "    v[3 * 64 + 1].sum()\n"
        "except oc.CorruptChunkError as error:\n"
        "    print(error)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT
    )
    assert result.returncode == 0, result.stderr
    assert "chunk 3" in result.stdout and "cannot be decoded" in result.stdout


@needs_paging
def test_no_handler_thread_is_left_behind(zstd_store: str) -> None:
    view = oc.open(zstd_store).as_ndarray()
    assert view.sum() != 0 and _native.pager_threads() > 0
    del view
    assert _native.pager_threads() == 0  # stopped with the last array
    code = (
        "import oocarray as oc, os, numpy as np\n"
        f"v = oc.open({zstd_store!r}).as_ndarray()\n"
        "print(len(os.listdir('/proc/self/task')) > 1, float(v[10, 0]))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT
    )
    assert result.returncode == 0, result.stderr  # exits with an array alive, no hang
    assert result.stdout.split()[0] == "True"


# ---- writing ----


def _chunk_files(path: str) -> dict[str, int]:
    return {str(p): p.stat().st_ino for p in (Path(path) / "c").rglob("*") if p.is_file()}


@needs_paging
def test_written_chunks_go_back_whole_and_zarr_python_reads_them(tmp_path: Path) -> None:
    data = np.arange(4096 * 16, dtype=np.int64).reshape(4096, 16)  # 32 KiB chunks
    path = _store(tmp_path / "w.zarr", data, 256)
    before = _chunk_files(path)
    x = oc.open(path, mode="r+")
    view = x.as_ndarray("r+")
    assert view.flags.writeable
    view[300:310] = -1  # chunk 1
    view[4000] += 5  # the last chunk
    assert view[2000, 3] == data[2000, 3]  # read, never written
    assert x.paging_stats()[0]["dirty_units"] == 2
    assert x.flush() == 4  # the two units, two chunks each
    assert x.flush() == 0
    expected = data.copy()
    expected[300:310] = -1
    expected[4000] += 5
    assert np.array_equal(zarr.open_array(path, mode="r")[...], expected)
    after = _chunk_files(path)
    # Written back a fill unit at a time (64 KiB: two chunks here), never the whole array.
    assert 2 <= sum(before[k] != after[k] for k in before) <= 4
    assert not list(Path(path).rglob(".tmp-*"))
    view[5] = 9  # written back when the last view goes
    del view
    expected[5] = 9
    assert np.array_equal(oc.open(path)[...], expected)
    view = x.as_ndarray("r+")
    view[7] = 1
    x.close()  # close writes back too
    expected[7] = 1
    assert np.array_equal(oc.open(path)[...], expected)
    with pytest.raises(oc.ReadOnlyError):
        oc.open(path).as_ndarray("r+")


# ---- what is refused ----


def test_unpageable_stores_are_refused_with_the_rewrite(tmp_path: Path) -> None:
    x = oc.create(tmp_path / "cols.zarr", (100, 8), "float32", chunks=(10, 4))
    with pytest.raises(NotImplementedError, match="span every axis but the first"):
        x.as_ndarray()
    y = oc.create(tmp_path / "blosc.zarr", (100, 8), "float32", chunks=(10, 8), codec="lz4")
    del y  # paged read-only; the native writer encodes raw and zstd only
    with pytest.raises(NotImplementedError, match=r"mode='r'.*codec='zstd'"):
        oc.open(tmp_path / "blosc.zarr", mode="r+").as_ndarray("r+")
    bz2 = zarr.create_array(
        tmp_path / "bz2.zarr",
        shape=(100, 8),
        chunks=(10, 8),
        dtype="f4",
        zarr_format=2,
        compressors=numcodecs.BZ2(),
    )
    del bz2  # a codec only Python decodes
    with pytest.raises(NotImplementedError, match="codec='zstd'"):
        oc.open(tmp_path / "bz2.zarr").as_ndarray()
    s = oc.create(tmp_path / "s.zarr", (100, 8), "float32", chunks=(10, 8), shards=(20, 8))
    with pytest.raises(NotImplementedError, match="sharded"):
        oc.open(tmp_path / "s.zarr", mode="r+").as_ndarray("r+")
    del s
    odd = oc.create(tmp_path / "odd.zarr", (100, 3), "float32", chunks=(10, 3))
    with pytest.raises(NotImplementedError, match="rows per chunk"):
        oc.open(tmp_path / "odd.zarr", mode="r+").as_ndarray("r+")
    del odd


def test_the_kill_switch_says_how_to_turn_it_back_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    x = oc.create(tmp_path / "a.zarr", (10, 4), "float32")
    monkeypatch.setenv("OOCARRAY_USERFAULTFD", "0")
    with pytest.raises(oc.PagingUnavailableError, match="OOCARRAY_USERFAULTFD"):
        x.as_ndarray()
    assert issubclass(oc.PagingUnavailableError, OSError)


def test_the_message_without_userfaultfd_says_how_to_enable_it() -> None:
    from oocarray._storage import _paged

    saved = dict(_paged._checked)
    _paged._checked[os.getpid()] = (1, False)  # as if EPERM
    try:
        ok, why = paging_available()
    finally:
        _paged._checked.clear()
        _paged._checked.update(saved)
    assert not ok
    assert "vm.unprivileged_userfaultfd=1" in why and "/dev/userfaultfd" in why
