"""Issue 15, item 4: many threads creating, activating, allocating in and closing managers and
workspaces at once.  Every byte is counted exactly, nothing deadlocks (each test's threads are
joined against a deadline; a thread still running then fails the test with every thread's
stack), and the data each thread wrote is what it reads back."""

from __future__ import annotations

import faulthandler
import random
import sys
import threading
import time
from collections.abc import Callable

import numpy as np
import pytest

import oocarray as oc

from ._helpers import rounds

THREADS = 8
DEADLINE_S = 120.0


def holds(a: np.ndarray, value: int) -> bool:
    """Whether every byte of ``a`` is ``value``, checked without a NumPy allocation (which
    would be counted by the active manager and spoil the exact totals)."""
    return a.tobytes() == bytes([value]) * a.nbytes


def run_threads(target: Callable[[int], None], n: int = THREADS) -> None:
    """Run ``target(i)`` in ``n`` threads started together; re-raise the first failure; fail
    with every thread's stack if one is still running at the deadline (a deadlock)."""
    errors: list[BaseException] = []
    start = threading.Barrier(n)

    def body(i: int) -> None:
        try:
            start.wait(timeout=30)
            target(i)
        except BaseException as error:
            errors.append(error)

    threads = [
        threading.Thread(target=body, args=(i,), name=f"worker-{i}", daemon=True) for i in range(n)
    ]
    for t in threads:
        t.start()
    deadline = time.monotonic() + DEADLINE_S
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    stuck = [t.name for t in threads if t.is_alive()]
    if stuck:
        faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
        pytest.fail(f"deadlock: {stuck} still running after {DEADLINE_S:.0f} s")
    if errors:
        raise errors[0]


def test_threads_create_activate_allocate_close_managers() -> None:
    """Each thread opens managers under one shared parent (some nested, some activated with
    ``activate()`` rather than ``with``), allocates arrays of known sizes, checks its own
    counters, and closes them; the parent's totals are the exact sum afterwards."""
    parent = oc.Manager("parent")
    n_rounds = rounds(100, 1000)
    expected_bytes = [0] * THREADS
    expected_count = [0] * THREADS

    def work(i: int) -> None:
        rng = random.Random(i)
        for r in range(n_rounds):
            sizes = [4096 * rng.randint(1, 64) for _ in range(rng.randint(1, 6))]
            with oc.Manager(f"t{i}-r{r}", parent=parent) as m:
                arrays = []
                for k, size in enumerate(sizes):
                    a = np.empty(size, np.uint8)
                    a.fill((i * 31 + k) % 251)
                    arrays.append(a)
                    del a
                assert oc.owner(arrays[0]) is m
                if r % 3 == 0:
                    with m.sub(f"t{i}-r{r}-sub") as s:
                        b = np.empty(8192, np.uint8)
                        b.fill(7)
                        assert oc.owner(b) is s
                        assert holds(b, 7)
                        del b
                    sizes.append(8192)
                s0 = m.stats()
                assert s0.total_count == len(sizes)
                assert s0.total_bytes == sum(sizes)
                for k, a in enumerate(arrays):
                    assert holds(a, (i * 31 + k) % 251)
                del arrays, a
                assert m.stats().current_bytes == 0
            other = oc.Manager(f"t{i}-r{r}-act", parent=parent)
            with other.activate():
                c = np.zeros(4096 * (1 + r % 4), np.uint8)
                sizes.append(c.nbytes)
                del c
            other.close()
            expected_bytes[i] += sum(sizes)
            expected_count[i] += len(sizes)

    run_threads(work)
    s = parent.stats()
    assert s.current_bytes == 0
    assert s.current_count == 0
    assert s.total_count == sum(expected_count)
    assert s.total_bytes == sum(expected_bytes)
    assert parent.children == ()
    parent.close()


def test_threads_share_one_budgeted_manager_that_spills() -> None:
    """Eight threads allocate arrays of 256-768 KiB into one manager of 4 MiB
    (``spill="evict"``): arrays are moved to disk and back under contention; every array
    keeps its data, the counts are exact."""
    n_rounds = rounds(40, 400)
    shared = oc.Manager("shared", max_bytes="4M", spill="evict")
    totals = [0] * THREADS

    def work(i: int) -> None:
        kept: list[tuple[np.ndarray, int]] = []
        with shared.activate():
            for r in range(n_rounds):
                value = (i * 17 + r) % 253
                a = np.empty(262144 * (1 + r % 3), np.uint8)  # spilled from 256 KiB
                a.fill(value)
                totals[i] += a.nbytes
                kept.append((a, value))
                if len(kept) > 4:
                    old, v = kept.pop(0)
                    assert holds(old, v)
                    del old
                if r % 4 == 0:
                    shared.spill()
        for a, v in kept:
            assert holds(a, v)

    run_threads(work)
    s = shared.stats()
    assert s.current_bytes == 0
    assert s.current_count == 0
    assert s.total_bytes == sum(totals)
    assert s.total_count == THREADS * n_rounds
    assert s.spills > 0
    assert s.spill_moved_bytes > 0
    shared.close()


def test_threads_run_workspace_cycles_beside_managers() -> None:
    """Each thread owns a workspace under a shared parent and runs cycles; half of them also
    open and close plain managers between cycles; the parent ends with nothing live."""
    parent = oc.Manager("ws-parent")
    n_cycles = rounds(100, 1000)
    x = np.arange(50_000, dtype=np.float64)
    expected = float((x * 2 + 1).sum())

    def work(i: int) -> None:
        ws = oc.Workspace(f"ws-{i}", parent=parent)
        for c in range(n_cycles):
            with ws:
                y = x * 2 + 1
                assert float(y.sum()) == expected
                del y
            if i % 2 and c % 5 == 0:
                with oc.Manager(f"m-{i}-{c}", parent=parent):
                    z = np.ones(10_000)
                    assert float(z.sum()) == 10_000.0
                    del z
        assert ws.stats().cycles == n_cycles
        ws.close()

    run_threads(work)
    s = parent.stats()
    assert s.current_bytes == 0
    assert s.current_count == 0
    assert parent.children == ()
    parent.close()


def test_closing_a_manager_while_other_threads_allocate_in_it() -> None:
    """A manager is closed while threads still have it active: their later allocations go to
    the nearest open ancestor (they do not fail), and the ancestor's totals stay exact."""
    parent = oc.Manager("closing-parent")
    victim = oc.Manager("victim", parent=parent)
    go = threading.Event()
    done = [0] * 4

    def work(i: int) -> None:
        if i == 0:
            go.wait(10)
            time.sleep(0.02)
            victim.close()
            return
        with victim.activate():
            go.set()
            after = 0
            while after < rounds(200, 2000):
                after += victim.closed
                a = np.empty(4096, np.uint8)
                a.fill(i)
                assert holds(a, i)
                done[i] += a.nbytes
                del a

    run_threads(work, n=4)
    assert victim.closed
    s = parent.stats()
    assert s.current_bytes == 0
    assert s.total_bytes == sum(done)
    parent.close()
