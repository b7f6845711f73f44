"""Compressed spill: ``spill="zarr"`` and ``location="zarr"`` (native/zspill.c on the pager).

Arrays moved out are written as compressed chunks into an unnamed private file and paged back
on touch at the same address; writes after a page-in are kept (tracked dirty, encoded again on
the next spill); fork children see the data; a full disk is a SpillError.
"""

from __future__ import annotations

import errno
import os
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import oocarray as oc
from oocarray import _native
from oocarray._memory import _compressed
from testkit.children import run_python

pytestmark = pytest.mark.skipif(
    not _compressed.available()[0], reason="compressed spill needs kernel-mode userfaultfd"
)

MiB = 1 << 20


@pytest.fixture(autouse=True)
def _no_cached_regions() -> Iterator[None]:
    """Freed regions go back to the system: later tests that measure resident memory (the
    watcher's) must not find this module's large arrays in the region cache."""
    yield
    _native.region_cache(-1)


@pytest.fixture
def spill_dir(tmp_path: Path) -> Iterator[Path]:
    oc.configure(spill_dir=tmp_path)
    yield tmp_path
    oc.configure(spill_dir=None)


def spill_files(directory: Path) -> int:
    """Open descriptors of this process on (unnamed) files in the spill directory."""
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith(str(directory)):
            count += 1
    return count


DTYPES = ["int8", "uint16", "int32", "int64", "float32", "float64", "complex64", "bool"]


@settings(max_examples=20, deadline=None)
@given(
    dtype=st.sampled_from(DTYPES),
    rows=st.integers(1, 600),
    cols=st.integers(1, 700),
    seed=st.integers(0, 2**32 - 1),
)
def test_data_comes_back_identical(dtype: str, rows: int, cols: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    with oc.Manager(spill="zarr"):
        a = (rng.integers(-1000, 1000, size=(rows, cols)) / 7).astype(dtype)
        expected = np.array(a, copy=True)
        address = a.ctypes.data
        moved = oc.spill(a)
        if moved == 0:  # under the region threshold: stays in RAM
            assert oc.location(a) == "ram"
        else:
            assert oc.location(a) == "zarr"
        assert a.ctypes.data == address
        # a view first (pages come back where touched), then everything
        np.testing.assert_array_equal(a[rows // 2 :, ::3], expected[rows // 2 :, ::3])
        np.testing.assert_array_equal(a, expected)
        oc.spill(a)  # nothing written: clean pages dropped, nothing encoded
        oc.unspill(a)
        assert oc.location(a) == "ram"
        np.testing.assert_array_equal(a, expected)
        del a


def test_writes_after_page_in_persist_and_survive_a_second_spill(spill_dir: Path) -> None:
    with oc.Manager(spill="zarr") as m:
        a = np.arange(4 * MiB, dtype=np.int64)  # 32 MiB, 32 units
        b = a.copy()
        oc.spill(a)
        a[10] = -1  # a unit paged in, then written
        a[-3:] = 7  # the last unit
        a[2 * MiB : 2 * MiB + 100] *= 3  # read-modify-write of another
        b[10] = -1
        b[-3:] = 7
        b[2 * MiB : 2 * MiB + 100] *= 3
        disk_before = m.stats().compressed_disk_bytes
        oc.spill(a)  # written units encoded again, everything dropped
        s = m.stats()
        assert s.compressed_disk_bytes >= disk_before
        assert s.ram_bytes == b.nbytes, "pages of the spilled array stayed counted in RAM"
        np.testing.assert_array_equal(a, b)
        a[11] = 5
        b[11] = 5
        oc.spill(a)
        oc.spill(a)
        np.testing.assert_array_equal(a, b)
        oc.unspill(a)
        a[12] = 6
        b[12] = 6
        np.testing.assert_array_equal(a, b)
        del a


def test_threads_touching_the_same_spilled_array(spill_dir: Path) -> None:
    with oc.Manager(spill="zarr"):
        a = np.arange(8 * MiB, dtype=np.int32).reshape(-1, 1024)  # 32 MiB
        expected = a.copy()
        oc.spill(a)
        errors: list[BaseException] = []
        barrier = threading.Barrier(8)

        def work(i: int, a: np.ndarray) -> None:
            try:
                barrier.wait()
                for _ in range(3):
                    assert int(a[:, 0].sum(dtype=np.int64)) == int(
                        expected[:, 0].sum(dtype=np.int64)
                    )
                rows = slice(i, None, 8)
                a[rows, 1] = -i  # every thread writes its own rows, across every unit
            except BaseException as error:
                errors.append(error)

        threads = [threading.Thread(target=work, args=(i, a)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors
        for i in range(8):
            expected[i::8, 1] = -i
        oc.spill(a)
        np.testing.assert_array_equal(a, expected)
        del a


def test_fork_child_sees_the_data_and_stays_apart(spill_dir: Path) -> None:
    with oc.Manager(spill="zarr"):
        a = np.arange(3 * MiB, dtype=np.float64)  # 24 MiB
        a[MiB] = 0.5
        expected = a.copy()
        oc.spill(a)
        _ = a[:10].sum()  # one unit resident before the fork, the rest not
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child
            ok = bool(np.array_equal(a, expected))
            a[:] = -1.0  # the child's writes stay in the child
            oc.spill(a)  # a child never writes into the parent's file
            ok = ok and bool((a == -1.0).all())
            os._exit(0 if ok else 1)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0, "the child saw other data"
        np.testing.assert_array_equal(a, expected)
        oc.spill(a)
        np.testing.assert_array_equal(a, expected)
        del a


def test_disk_savings_on_ids_and_rounded_floats(spill_dir: Path) -> None:
    n = 4 * MiB
    with oc.Manager(spill="zarr") as m:
        ids = np.arange(n, dtype=np.int64)  # 32 MiB
        oc.spill(ids)
        ratio_ids = m.stats().compressed_disk_bytes / ids.nbytes
        rng = np.random.default_rng(0)
        t = np.linspace(0, 60, n, dtype=np.float32)
        floats = np.round(50 + 10 * np.sin(t) + rng.normal(0, 1, n).astype(np.float32), 2)
        floats = floats.astype(np.float32)
        before = m.stats().compressed_disk_bytes
        oc.spill(floats)
        ratio_floats = (m.stats().compressed_disk_bytes - before) / floats.nbytes
        assert ratio_ids <= 1 / 20, ratio_ids
        assert ratio_floats <= 0.8, ratio_floats
        assert ids[12345] == 12345
        del ids, floats


def test_stats_show_logical_and_compressed_bytes(spill_dir: Path) -> None:
    with oc.Manager(spill="zarr") as m:
        a = np.zeros(2 * MiB, dtype=np.int64)  # 16 MiB
        s = m.stats()
        assert (s.compressed_bytes, s.compressed_disk_bytes) == (0, 0)
        assert oc.spill(a) == a.nbytes
        s = m.stats()
        assert s.spilled_bytes == s.compressed_bytes == a.nbytes
        assert 0 < s.compressed_disk_bytes < a.nbytes // 100
        assert s.spills == 1 and s.ram_bytes == 0
        oc.unspill(a)
        s = m.stats()
        assert (s.spilled_bytes, s.compressed_bytes, s.compressed_disk_bytes) == (0, 0, 0)
        assert s.unspills == 1 and s.ram_bytes == a.nbytes
        del a


def test_files_are_gone_after_the_arrays(spill_dir: Path) -> None:
    before = spill_files(spill_dir)
    with oc.Manager(spill="zarr") as m:
        arrays = [np.full(MiB, i, dtype=np.int32) for i in range(3)]
        for x in arrays:
            oc.spill(x)
        assert spill_files(spill_dir) == before + 3
        oc.unspill(arrays[0])
        assert spill_files(spill_dir) == before + 2
        del arrays, x
        assert m.stats().compressed_disk_bytes == 0
    assert spill_files(spill_dir) == before
    assert list((spill_dir / f"oocarray-{os.getuid()}").iterdir()) == []


def test_eviction_under_a_budget_writes_compressed_chunks(spill_dir: Path) -> None:
    with oc.Manager(max_bytes="48M", spill="zarr") as m:
        arrays = [np.full(2 * MiB, i, dtype=np.int64) for i in range(5)]  # 5 x 16 MiB
        places = [oc.location(x) for x in arrays]
        assert places[0] == "zarr" and places[-1] == "ram", places
        s = m.stats()
        assert s.ram_bytes <= 48 * MiB
        assert s.compressed_bytes >= 2 * 16 * MiB
        for i, x in enumerate(arrays):
            assert (x == i).all()
        del arrays, x


def test_location_zarr_starts_compressed_and_keeps_writes(spill_dir: Path) -> None:
    with oc.Manager(location="zarr") as m:
        a = np.zeros((1024, 1024), dtype=np.float64)  # 8 MiB
        small = np.ones(1000)
        assert oc.location(a) == "zarr"
        assert oc.location(small) == "mmap"
        assert m.stats().ram_bytes == 0
        assert not a.any()
        a[::7, 3] = 2.5
        oc.spill(a)
        assert m.stats().ram_bytes == 0
        assert a.sum() == 2.5 * len(range(0, 1024, 7))
        b = a * 2  # a temporary in the same place
        assert oc.location(b) == "zarr"
        assert b[7, 3] == 5.0
        del a, b, small


def test_a_system_call_writes_into_a_spilled_array(spill_dir: Path, tmp_path: Path) -> None:
    data = np.arange(MiB, dtype=np.int64)
    path = tmp_path / "raw.bin"
    data.tofile(path)
    with oc.Manager(spill="zarr"):
        a = np.zeros(2 * MiB, dtype=np.int64)
        oc.spill(a)
        with open(path, "rb") as f:
            assert f.readinto(memoryview(a[:MiB])) == data.nbytes  # the kernel writes
        oc.spill(a)
        np.testing.assert_array_equal(a[:MiB], data)
        assert not a[MiB:].any()
        del a


def test_falls_back_to_mmap_with_one_warning() -> None:
    result = run_python(
        """
        import warnings, numpy as np, oocarray as oc
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            m1 = oc.Manager(spill="zarr")
            m2 = oc.Manager(location="zarr")
        print(len(caught), caught[0].category.__name__, m1.spill_policy, m2.location)
        with m1:
            a = np.arange(1_000_000)
            oc.spill(a)
            print(oc.location(a), a[999_999])
            del a
        """,
        env={"OOCARRAY_USERFAULTFD": "0"},
        keep_settings=True,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == [
        "1",
        "CompressedSpillFallbackWarning",
        "mmap",
        "mmap",
        "mmap",
        "999999",
    ]


def test_full_disk_is_a_spill_error_not_a_crash(tiny_tmpfs: Path) -> None:
    result = run_python(
        """
        import errno, numpy as np, oocarray as oc
        with oc.Manager(spill="zarr") as m:
            a = np.random.default_rng(0).random(2_000_000)  # 16 MB of noise, 4 MB disk
            b = a.copy()
            try:
                oc.spill(a)
            except oc.SpillError as error:
                assert error.errno == errno.ENOSPC, error
                print("spill:", error)
            assert oc.location(a) == "ram" and (a == b).all()
            assert m.stats().compressed_disk_bytes == 0
            ids = np.arange(2_000_000)  # compresses to almost nothing: fits
            oc.spill(ids)
            print(oc.location(ids), ids[-1])
            del a, ids
        print("exited normally")
        """,
        env={"OOCARRAY_SPILL_DIR": str(tiny_tmpfs)},
        keep_settings=True,
    )
    assert result.returncode == 0, result.stderr
    assert "spill: [ENOSPC]" in result.stdout
    assert "zarr 1999999" in result.stdout
    assert "exited normally" in result.stdout
    assert errno.ENOSPC


def test_writes_during_the_move_are_not_lost(spill_dir: Path) -> None:
    with oc.Manager(spill="zarr"):
        a = np.zeros(2 * MiB, dtype=np.int64)  # 16 MiB, 16 units
        spots = np.arange(4) * (a.size // 4)  # four units, one element each
        stop = threading.Event()
        last = [0]

        def writer(a: np.ndarray) -> None:
            i = 0
            while not stop.is_set():
                i += 1
                a[spots + i % 4] = i
                last[0] = i

        t = threading.Thread(target=writer, args=(a,))
        t.start()
        try:
            for _ in range(4):
                oc.spill(a)
                oc.spill(a)
                oc.unspill(a)
        finally:
            stop.set()
            t.join()
        i = last[0]
        assert i > 0
        np.testing.assert_array_equal(a[spots + i % 4], i)
        oc.spill(a)
        np.testing.assert_array_equal(a[spots + i % 4], i)
        del a


def test_written_pages_are_encoded_under_budget_pressure(spill_dir: Path) -> None:
    """location="zarr": an array four times the budget, written block by block, stays within
    the budget: dirty units are encoded and dropped by the pager when the budget is reached."""
    with oc.Manager(max_bytes="8M", location="zarr") as m:
        a = np.zeros((32, MiB // 8), dtype=np.int64)  # 32 MiB in 32 one-MiB rows
        assert oc.location(a) == "zarr"
        for k in range(32):
            a[k] = k
        assert m.stats().peak_bytes <= 8 * MiB + 2 * MiB, m.stats().peak_bytes
        assert m.stats().compressed_disk_bytes > 0
        for k in range(32):
            assert int(a[k].min()) == int(a[k].max()) == k
        assert m.stats().peak_bytes <= 8 * MiB + 2 * MiB, m.stats().peak_bytes
        del a


MREMAP_WHILE_WRITING = """
import threading, time
import numpy as np, oocarray as oc

stop = time.monotonic() + 4
rounds = {}
with oc.Manager(spill="zarr") as m:
    def writer(k):
        with m.activate():
            a = np.zeros(32 << 20, dtype=np.uint8)
        n = 0
        while time.monotonic() < stop:
            oc.spill(a)
            a[:: 1 << 20] += 1  # per 1 MiB unit: a fill, then a write-protect fault
            n += 1
        assert (a[:: 1 << 20] == n).all() and not a[1 :: 1 << 20].any()
        rounds[k] = n

    def mover(k):
        with m.activate():
            b = np.full(1 << 20, k + 1, dtype=np.uint8)
        n = 0
        while time.monotonic() < stop:
            oc.spill(b)  # its range moves into place with mremap: an event for the reader
            oc.unspill(b)
            n += 1
        assert (b == k + 1).all()
        rounds[k] = n

    threads = [threading.Thread(target=writer, args=(k,)) for k in (0, 1)]
    threads += [threading.Thread(target=mover, args=(k,)) for k in (2, 3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
print(sorted(rounds))
"""


def test_spills_moving_into_place_while_others_write_never_hang() -> None:
    """An mremap of a registered range makes the kernel refuse write-protect changes (EAGAIN)
    until the pager's reader reads its event: the reader must not wait for them itself (it
    did, and every thread touching paged memory hung, within seconds of this loop)."""
    result = run_python(MREMAP_WHILE_WRITING, keep_settings=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[0, 1, 2, 3]"
