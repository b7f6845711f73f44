"""Same-address spill, budgets that spill, max_physical_bytes, and disk safety."""

from __future__ import annotations

import errno
import gc
import os
import signal
import stat
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import oocarray as oc
from oocarray import _native
from oocarray._memory import _physical, _refusals
from oocarray._memory._units import format_bytes
from testkit.children import run_python, start_python

REGION = _native.get_large_threshold()


@pytest.fixture
def spill_dir(tmp_path: Path) -> Iterator[Path]:
    oc.configure(spill_dir=tmp_path)
    yield tmp_path / f"oocarray-{os.getuid()}"
    oc.configure(spill_dir=None)


def test_spill_and_unspill_keep_the_address_and_the_data(spill_dir: Path) -> None:
    with oc.Manager("s") as m:
        a = np.arange(2_000_000, dtype=np.float64)
        view = a[10:20]
        address = a.ctypes.data
        assert oc.spill(a) == a.nbytes
        assert a.ctypes.data == address
        assert oc.location(a) == "mmap"
        assert oc.location(view) == "mmap"
        assert view[3] == 13.0
        assert a[-1] == 1_999_999.0
        s = m.stats()
        assert s.ram_bytes == 0
        assert s.spilled_bytes == a.nbytes
        assert s.current_bytes == a.nbytes
        assert s.spills == 1
        assert s.spill_moved_bytes == a.nbytes
        view[0] = -1.0  # writes to a spilled array land in the file
        assert oc.spill(a) == 0, "already on disk"
        assert oc.unspill(a) == a.nbytes
        assert a.ctypes.data == address
        assert oc.location(a) == "ram"
        assert a[10] == -1.0
        assert np.array_equal(a[11:], np.arange(11, 2_000_000, dtype=np.float64))
        s = m.stats()
        assert s.ram_bytes == a.nbytes
        assert s.spilled_bytes == 0
        assert s.unspills == 1
        assert oc.unspill(a) == 0
        del a, view
        assert m.stats().current_bytes == 0


def test_spill_releases_resident_memory(spill_dir: Path) -> None:
    with oc.Manager():
        a = np.ones(64 << 20, np.uint8)
        before = _physical.resident_memory().anon_bytes
        oc.spill(a)
        after = _physical.resident_memory().anon_bytes
        assert before - after >= 60 << 20
        assert int(a[::4096].sum()) == (64 << 20) // 4096


def test_small_arrays_stay_in_ram_and_unmanaged_arrays_are_refused(spill_dir: Path) -> None:
    with oc.Manager():
        small = np.ones(100)
        assert oc.spill(small) == 0
        assert oc.location(small) == "ram"
    with pytest.raises(ValueError, match="outside any manager"):
        oc.spill(np.ones(REGION))
    with pytest.raises(TypeError):
        oc.spill([1, 2, 3])  # type: ignore[arg-type]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["spill", "unspill", "write", "read"]),
            st.integers(0, 2),
            st.integers(0, 10**9),
        ),
        min_size=1,
        max_size=25,
    )
)
def test_any_sequence_of_spill_unspill_and_writes_keeps_the_data(
    ops: list[tuple[str, int, int]],
) -> None:
    sizes = [REGION // 8, 3 * REGION // 8 + 5, (5 << 20) // 8]
    with oc.Manager():
        arrays = [np.arange(n, dtype=np.float64) for n in sizes]
        models = [np.arange(n, dtype=np.float64) for n in sizes]
        views = [a[1::3] for a in arrays]
        for op, which, value in ops:
            a, model = arrays[which], models[which]
            if op == "spill":
                oc.spill(a)
            elif op == "unspill":
                oc.unspill(a)
            elif op == "write":
                start = value % len(a)
                a[start : start + 1000] = value
                model[start : start + 1000] = value
                views[which][::7] += 1
                model[1::3][::7] += 1
            assert np.array_equal(a, model)
        for a, model, v in zip(arrays, models, views, strict=True):
            assert np.array_equal(a, model)
            assert np.array_equal(v, model[1::3])


def test_writes_from_another_thread_during_spills_are_not_lost(spill_dir: Path) -> None:
    with oc.Manager():
        b = np.zeros((16 << 20) // 8)
        stop, writing = threading.Event(), threading.Event()
        rounds: list[int] = []

        def writer() -> None:
            k = 0
            while not stop.is_set():
                np.add(b, 1, out=b)  # releases the GIL: runs while the main thread spills
                k += 1
                writing.set()
            rounds.append(k)

        thread = threading.Thread(target=writer)
        thread.start()
        assert writing.wait(60)  # the writer runs (a hang guard only)
        for _ in range(5):
            time.sleep(0.01)
            oc.spill(b)
            time.sleep(0.01)
            oc.unspill(b)
        stop.set()
        thread.join()
        assert rounds[0] > 0
        assert b.min() == b.max() == rounds[0]


def test_mmap_policy_places_over_budget_arrays_on_disk(spill_dir: Path) -> None:
    budget = 4 << 20
    with oc.Manager("m", max_bytes=budget) as m:
        arrays = [np.full(REGION * 2, i, np.uint8) for i in range(20)]  # 10 MiB in all
        s = m.stats()
        assert s.ram_bytes <= budget
        assert s.mmap_bytes > 0
        assert s.ram_bytes + s.mmap_bytes == sum(a.nbytes for a in arrays)
        assert {oc.location(a) for a in arrays} == {"ram", "mmap"}
        for i, a in enumerate(arrays):
            assert a.min() == a.max() == i
        del arrays, a
        assert m.stats().current_bytes == 0


def test_evict_policy_moves_the_oldest_arrays_out_first(spill_dir: Path) -> None:
    budget = 3 * REGION * 2 + (64 << 10)  # three arrays and room for small temporaries
    with oc.Manager("e", max_bytes=budget, spill="evict") as m:
        first = np.full(REGION * 2, 1, np.uint8)
        second = np.full(REGION * 2, 2, np.uint8)
        third = np.full(REGION * 2, 3, np.uint8)
        fourth = np.full(REGION * 2, 4, np.uint8)  # over budget: evicts `first`
        assert oc.location(first) == "mmap"
        assert [oc.location(a) for a in (second, third, fourth)] == ["ram"] * 3
        fifth = np.full(REGION * 2, 5, np.uint8)  # evicts `second`, the oldest in RAM
        assert oc.location(second) == "mmap"
        assert m.stats().ram_bytes <= budget
        assert m.stats().spills == 2
        for value, a in enumerate((first, second, third, fourth, fifth), start=1):
            assert a.min() == a.max() == value


def test_fail_policy_raises_and_counts_stay_exact() -> None:
    with oc.Manager("f", max_bytes=REGION * 2, spill="fail") as m:
        a = np.ones(REGION, np.uint8)
        with pytest.raises(oc.MemoryBudgetError):
            np.ones(REGION * 2, np.uint8)
        assert m.stats().current_bytes == a.nbytes


def test_garbage_is_collected_before_refusing(monkeypatch: pytest.MonkeyPatch) -> None:
    with oc.Manager("gc", max_bytes=REGION * 3, spill="fail") as m:
        cycle: list[object] = [np.ones(REGION * 2, np.uint8)]
        cycle.append(cycle)  # unreachable once dropped, but only the collector frees it
        del cycle
        monkeypatch.setattr(_refusals, "_next_allowed", 0.0)  # past the collection throttle
        b = np.ones(REGION * 2, np.uint8)  # fits only after the cycle is collected
        assert m.stats().ram_bytes == b.nbytes


def test_location_mmap_places_everything_but_tiny_arrays_on_disk(spill_dir: Path) -> None:
    with oc.Manager("disk", location="mmap") as m:
        big = np.arange(1000, dtype=np.float64)  # 8000 bytes: on disk
        tiny = np.ones(10)
        zeros = np.zeros(5000)
        assert oc.location(big) == "mmap"
        assert oc.location(tiny) == "ram"
        assert not zeros.any()
        s = m.stats()
        assert s.mmap_bytes == big.nbytes + zeros.nbytes
        assert s.ram_bytes == tiny.nbytes
        assert m.location == "mmap"
        assert big.sum() == 499500.0


def test_on_close_spill_moves_escapes_to_disk_but_not_kept_arrays(spill_dir: Path) -> None:
    with oc.Manager("outer") as outer:
        with outer.sub("inner", on_close="spill") as inner:
            escaped = np.ones(REGION * 2, np.uint8)
            kept = inner.keep(np.ones(REGION * 2, np.uint8))
        assert oc.location(escaped) == "mmap"
        assert oc.location(kept) == "ram"
        assert escaped.sum() == REGION * 2
        assert outer.stats().spilled_bytes == escaped.nbytes


def test_manager_spill_moves_the_whole_subtree(spill_dir: Path) -> None:
    with oc.Manager("tree") as tree:
        a = np.ones(REGION * 2, np.uint8)
        with tree.sub("child"):
            b = np.ones(REGION * 2, np.uint8)
            assert tree.spill() == a.nbytes + b.nbytes
            assert oc.location(a) == oc.location(b) == "mmap"
            assert tree.stats().ram_bytes == 0


def test_unspill_respects_the_budget(spill_dir: Path) -> None:
    with oc.Manager("b", max_bytes=REGION * 3, spill="fail") as m:
        a = np.ones(REGION * 2, np.uint8)
        oc.spill(a)
        b = np.ones(REGION * 2, np.uint8)
        with pytest.raises(oc.MemoryBudgetError):
            oc.unspill(a)
        assert oc.location(a) == "mmap"
        del b
        assert oc.unspill(a) == a.nbytes
        assert m.stats().ram_bytes == a.nbytes


def test_max_spill_bytes_caps_the_disk(spill_dir: Path) -> None:
    oc.configure(max_spill_bytes=REGION * 3)
    with oc.Manager():
        a = np.ones(REGION * 2, np.uint8)
        b = np.ones(REGION * 2, np.uint8)
        oc.spill(a)
        with pytest.raises(oc.SpillError) as caught:
            oc.spill(b)
        assert caught.value.errno == errno.ENOSPC
        assert isinstance(caught.value, OSError)
        assert "the max_spill_bytes limit was reached" in str(caught.value)
        assert oc.location(b) == "ram"
        assert b.sum() == REGION * 2
    oc.configure(max_spill_bytes=None)


def test_private_directory_and_file_modes(spill_dir: Path) -> None:
    with oc.Manager():
        a = np.ones(REGION * 4, np.uint8)
        oc.spill(a)
        assert stat.S_IMODE(os.stat(spill_dir).st_mode) == 0o700
        assert os.listdir(spill_dir) == [], "spill files have no name"
        start = a.ctypes.data
        end = start + REGION * 4
        mapping = Path(f"/proc/self/map_files/{start:x}-{end:x}")
        try:
            info = os.stat(mapping)
        except PermissionError:
            pytest.skip("reading /proc/self/map_files needs CAP_SYS_ADMIN")
        assert stat.S_IMODE(info.st_mode) == 0o600
        assert info.st_nlink == 0, "the file is unlinked"


def test_max_physical_bytes_spills_down_to_the_watermark(spill_dir: Path) -> None:
    limit = _physical.resident_memory().anon_bytes + (64 << 20)
    oc.configure(max_physical_bytes=limit)
    try:
        with oc.Manager("watched") as m:
            arrays = [np.ones(8 << 20, np.uint8) for _ in range(16)]  # 128 MiB
            _physical.check_now()
            rss = _physical.resident_memory()
            assert rss.anon_bytes + rss.shmem_bytes <= limit
            stats = m.stats()  # moved by allocations themselves, or by the watcher
            assert stats.spilled_bytes + stats.mmap_bytes > 0
            assert all(int(a[::4096].sum()) == (8 << 20) // 4096 for a in arrays)
    finally:
        oc.configure(max_physical_bytes=None)


def test_full_disk_is_a_spill_error_not_a_crash(tiny_tmpfs: Path) -> None:
    result = run_python(
        """
        import errno, numpy as np, oocarray as oc
        with oc.Manager(max_bytes="64M") as m:
            a = np.arange(2_000_000, dtype=np.float64)  # 16 MB cannot fit a 4 MB disk
            try:
                oc.spill(a)
            except oc.SpillError as error:
                assert error.errno == errno.ENOSPC, error
                print("spill:", error)
            assert oc.location(a) == "ram" and a[-1] == 1_999_999
            try:
                b = np.ones(10_000_000)  # over budget: placing it on disk fails too
            except oc.MemoryBudgetError as error:
                print("allocate:", str(error).splitlines()[0])
        print("exited normally")
        """,
        env={"OOCARRAY_SPILL_DIR": str(tiny_tmpfs)},
        keep_settings=True,
    )
    assert result.returncode == 0, result.stderr
    assert "spill: [ENOSPC]" in result.stdout
    assert "no space left" in result.stdout.lower()
    assert "allocate:" in result.stdout
    assert "exited normally" in result.stdout


def test_kill_minus_nine_mid_spill_leaves_no_files(tmp_path: Path) -> None:
    child = start_python(
        """
        import numpy as np, oocarray as oc
        with oc.Manager():
            a = np.ones(64 << 20, np.uint8)
            print("ready", flush=True)
            while True:
                oc.spill(a)
                oc.unspill(a)
        """,
        env={"OOCARRAY_SPILL_DIR": str(tmp_path)},
        keep_settings=True,
        stderr=None,
    )
    assert child.stdout is not None
    assert child.stdout.readline().strip() == "ready"
    time.sleep(0.5)
    child.send_signal(signal.SIGKILL)
    child.wait(timeout=30)
    child.stdout.close()
    assert child.returncode == -signal.SIGKILL
    leftovers = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert leftovers == []


def test_dump_and_stats_show_placement(spill_dir: Path) -> None:
    with oc.Manager("shown") as m:
        a = np.ones(REGION * 2, np.uint8)
        oc.spill(a)
        oc.unspill(a)
        oc.spill(a)
        dump = m.debug_dump()
        s = m.stats()
    assert f"spilled {format_bytes(a.nbytes)}" in dump
    assert "spills 2" in dump
    assert "unspills 1" in dump
    assert (s.spills, s.unspills) == (2, 1)
    assert s.spill_moved_bytes == 2 * a.nbytes
    del a
    gc.collect()


def test_full_disk_under_location_mmap_is_a_clear_memory_error(tiny_tmpfs: Path) -> None:
    result = run_python(
        """
        import numpy as np, oocarray as oc
        with oc.Manager("ondisk", location="mmap"):
            try:
                np.ones(2_000_000)
            except MemoryError as error:
                assert isinstance(error, oc.OOCArrayError)
                print("allocate:", error)
        print("exited normally")
        """,
        env={"OOCARRAY_SPILL_DIR": str(tiny_tmpfs)},
        keep_settings=True,
    )
    assert result.returncode == 0, result.stderr
    assert "cannot place 15.3 MiB on disk for manager 'ondisk'" in result.stdout
    assert "ENOSPC" in result.stdout
    assert "exited normally" in result.stdout


def test_resize_over_budget_follows_the_spill_policy(spill_dir: Path) -> None:
    with oc.Manager("grow", max_bytes=REGION) as m:
        a = np.arange(1000, dtype=np.int64)
        a.resize(REGION, refcheck=False)  # 8x the budget: moved, and placed on disk
        assert oc.location(a) == "mmap"
        assert a[:1000].tolist() == list(range(1000))
        assert m.stats().ram_bytes < REGION
        assert m.stats().mmap_bytes == a.nbytes


def test_small_arrays_over_budget_get_a_file_and_the_budget_holds(spill_dir: Path) -> None:
    with oc.Manager("full", max_bytes=REGION * 2) as m:
        old = np.ones(REGION * 2, np.uint8)  # fills the budget exactly
        small = np.arange(100.0)
        assert oc.location(small) == "mmap"
        assert oc.location(old) == "ram", "the mmap policy moves nothing else out"
        assert m.stats().ram_bytes == REGION * 2
        assert small.sum() == 4950.0


def test_sixteen_mib_regions_are_cached() -> None:
    _native.region_cache(-1)
    with oc.Manager():
        a = np.empty(16 << 20, np.uint8)
        del a
    assert _native.region_cache()[0] >= 16 << 20


def test_default_spill_directory_is_not_in_memory() -> None:
    from oocarray._memory import _spill_files

    assert _spill_files._is_in_memory("/dev/shm") == os.path.ismount("/dev/shm")
    base = _spill_files.default_base()
    assert os.path.isdir(base)
    if os.path.isdir("/var/tmp") and not _spill_files._is_in_memory("/var/tmp"):
        assert not _spill_files._is_in_memory(base)


def test_watcher_looks_more_often_near_its_limit() -> None:
    watcher = _physical._Watcher()
    rss = _physical.resident_memory()
    watcher.limit = (rss.anon_bytes + rss.file_bytes + rss.shmem_bytes) * 100
    assert watcher.check() == _physical.INTERVAL_S
    watcher.limit = int((rss.anon_bytes + rss.file_bytes + rss.shmem_bytes) * 1.5)
    assert watcher.check() == _physical.NEAR_INTERVAL_S


def test_collections_before_refusals_are_spaced_by_their_cost(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = iter([100.0, 100.4, 100.5, 104.5, 104.6, 104.65])
    monkeypatch.setattr(_refusals.time, "monotonic", lambda: next(clock))
    monkeypatch.setattr(_refusals, "_next_allowed", 0.0)
    assert _refusals.collect_garbage_throttled()  # took 0.4 s: the next waits 4 s
    assert not _refusals.collect_garbage_throttled()  # at 100.5
    assert _refusals.collect_garbage_throttled()  # at 104.5, took 0.1 s
    assert not _refusals.collect_garbage_throttled()  # at 104.65: ten times 0.1 s not yet past
