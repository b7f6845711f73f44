"""The native NEP 49 handler: every NumPy allocation path, routed, counted and released."""

from __future__ import annotations

import gc
import threading

import numpy as np
import pytest
from numpy._core.multiarray import get_handler_name

import oocarray as oc
from oocarray import _native

HEADER = _native.HEADER_BYTES
THRESHOLD = _native.get_large_threshold()


def block(arr: np.ndarray) -> tuple[int, ...]:
    info = _native.block_info(arr)
    assert info is not None, "array is not managed"
    return info


def test_outside_any_manager_numpy_is_untouched() -> None:
    a = np.ones(1000)
    assert _native.block_info(a) is None
    assert oc.owner(a) is None
    assert oc.location(a) is None
    assert get_handler_name(a) == "default_allocator"


def test_inside_a_manager_every_allocation_is_routed() -> None:
    with oc.Manager("routing") as m:
        a = np.ones(1000)
        assert get_handler_name(a) == "oocarray"
        b = a + 1
        c = np.concatenate([a, b])
        d = np.arange(10.0)
        for arr in (a, b, c, d):
            assert oc.owner(arr) is m
        assert m.stats().current_bytes == a.nbytes + b.nbytes + c.nbytes + d.nbytes
        del a, b, c, d, arr
        assert m.stats().current_bytes == 0


@pytest.mark.parametrize(
    "nbytes", [1, 8, 100, 1000, 4096, THRESHOLD - 1, THRESHOLD, 3 << 20, 9 << 20]
)
def test_sizes_are_counted_exactly_and_regions_start_at_the_threshold(nbytes: int) -> None:
    with oc.Manager() as m:
        a = np.empty(nbytes, np.uint8)
        _, _, size, flags, address, _ = block(a)
        assert size == nbytes
        assert m.stats().current_bytes == nbytes
        is_region = bool(flags & _native.FLAG_REGION)
        assert is_region == (nbytes >= THRESHOLD)
        if is_region:
            assert address % 4096 == 0, "regions are page aligned"
        else:
            assert address % 16 == 0, "small blocks keep malloc's alignment"
        a[:] = 7
        assert int(a.sum()) == 7 * nbytes
        del a
        assert m.stats().current_bytes == 0


def test_huge_regions_are_aligned_to_huge_pages() -> None:
    with oc.Manager():
        a = np.empty(8 << 20, np.uint8)
        assert block(a)[4] % (2 << 20) == 0


def test_zero_size_arrays_get_a_valid_block() -> None:
    with oc.Manager() as m:
        a = np.empty((0, 3))
        b = np.zeros(0, np.complex128)
        assert a.size == 0 and b.size == 0
        assert block(a)[2] >= 0
        assert m.stats().current_count == 2
        del a, b
        assert m.stats().current_bytes == 0


@pytest.mark.parametrize("n", [10, 10_000, 1_000_000])
def test_calloc_paths_return_zeros(n: int) -> None:
    # Dirty some memory first so a cached or reused block would show garbage.
    with oc.Manager():
        for _ in range(3):
            junk = np.full(n, 0xAB, np.uint8)
            del junk
        z = np.zeros(n, np.uint8)
        assert not z.any()


def test_realloc_through_resize_grows_and_shrinks_with_exact_counts() -> None:
    with oc.Manager() as m:
        a = np.arange(100, dtype=np.int64)
        a.resize(THRESHOLD // 8 * 2, refcheck=False)  # small -> region
        assert m.stats().current_bytes == a.nbytes
        assert block(a)[3] & _native.FLAG_REGION
        assert np.array_equal(a[:100], np.arange(100))
        a.resize(1000, refcheck=False)  # region -> small
        assert m.stats().current_bytes == 8000
        assert np.array_equal(a[:100], np.arange(100))
        a.resize(10, refcheck=False)
        assert m.stats().current_bytes == 80
        assert a.tolist() == list(range(10))
        del a
        assert m.stats().current_bytes == 0


def test_realloc_through_fromiter_of_unknown_length() -> None:
    with oc.Manager() as m:
        a = np.fromiter((i * i for i in range(50_000)), dtype=np.int64)
        assert oc.owner(a) is m
        assert a[-1] == 49_999**2
        assert m.stats().current_bytes == a.nbytes


def test_realloc_over_budget_leaves_the_array_intact() -> None:
    with oc.Manager(max_bytes=100_000, spill="fail") as m:
        a = np.arange(1000, dtype=np.int64)
        with pytest.raises(MemoryError):
            a.resize(100_000, refcheck=False)
        assert a.tolist() == list(range(1000))
        assert m.stats().current_bytes == 8000


def test_data_written_through_views_reads_back_through_the_base() -> None:
    with oc.Manager() as m:
        a = np.zeros((64, 1024), np.float32)
        v = a[::2, 10:20]
        v[...] = 3.5
        t = a.T
        t[5, 1] = -1
        mv = memoryview(a)
        b = np.frombuffer(mv, dtype=np.float32)
        assert a[0, 10] == 3.5 and a[1, 10] == 0 and a[1, 5] == -1
        assert b[10] == 3.5
        for arr in (v, t, b, a.reshape(-1)):
            assert oc.owner(arr) is m
            assert oc.location(arr) == "ram"
            assert block(arr)[1] == block(a)[1]


def test_frees_from_other_threads_are_counted() -> None:
    with oc.Manager() as m:
        arrays = [np.ones(n) for n in (10, 1000, 100_000)]
    assert m.closed
    assert m.stats().current_count == 3

    def release() -> None:
        arrays.clear()

    t = threading.Thread(target=release)
    t.start()
    t.join()
    assert m.stats().current_bytes == 0
    assert m.stats().current_count == 0
    assert oc.system().stats().current_bytes >= 0


def test_frees_after_close_reach_the_closed_manager() -> None:
    parent = oc.Manager("parent")
    with parent.activate(), oc.Manager("child") as child:
        a = np.ones(5000)
    assert child.closed
    assert parent.stats().current_bytes == a.nbytes
    assert oc.owner(a) is parent
    del a
    assert parent.stats().current_bytes == 0
    assert child.stats().current_bytes == 0
    parent.close()


def test_manager_active_in_several_threads_counts_exactly() -> None:
    m = oc.Manager("shared")
    barrier = threading.Barrier(4)
    kept: list[np.ndarray] = []
    lock = threading.Lock()

    def work(seed: int) -> None:
        rng = np.random.default_rng(seed)
        barrier.wait()
        with m.activate():
            for i in range(2000):
                a = np.empty(int(rng.integers(1, 2000)))
                if i % 100 == 0:
                    with lock:
                        kept.append(a)

    threads = [threading.Thread(target=work, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert m.stats().current_bytes == sum(a.nbytes for a in kept)
    assert m.stats().current_count == len(kept)
    del kept[:]
    assert m.stats().current_bytes == 0
    m.close()


def test_activation_is_per_thread() -> None:
    seen: list[object] = []
    with oc.Manager():

        def other() -> None:
            seen.append(_native.block_info(np.ones(10)))

        t = threading.Thread(target=other)
        t.start()
        t.join()
    assert seen == [None]


def test_handler_is_restored_after_exit_and_after_errors() -> None:
    before = _native.get_handler()
    with pytest.raises(KeyError), oc.Manager():
        raise KeyError("boom")
    assert _native.get_handler() is before
    assert _native.block_info(np.ones(3)) is None


def test_huge_request_is_a_memory_error_not_a_crash() -> None:
    with oc.Manager(), pytest.raises(MemoryError):
        np.empty(2**60, np.uint8)


def test_thousands_of_mixed_allocations_leave_nothing_behind() -> None:
    rng = np.random.default_rng(0)
    with oc.Manager() as m:
        live = []
        for _ in range(3000):
            n = int(rng.choice([0, 1, 7, 100, 5000, 40_000, 300_000]))
            live.append(np.ones(n, np.uint8))
            if len(live) > 20:
                live.pop(int(rng.integers(0, len(live))))
        # NumPy asks for one byte for an empty array.
        assert m.stats().current_bytes == sum(a.nbytes or 1 for a in live)
        assert m.stats().current_count == len(live)
        live.clear()
        gc.collect()
        assert m.stats().current_bytes == 0
        assert m.stats().current_count == 0
