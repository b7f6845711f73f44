"""The manager tree: scopes, budgets, close policies, ownership and diagnostics."""

from __future__ import annotations

import asyncio
import dataclasses
import errno
import gc
import pickle
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

import oocarray as oc
from oocarray import _native
from oocarray._memory import _manager


def test_system_is_the_root_and_default_parent() -> None:
    root = oc.system()
    assert root.name == "System"
    assert root.parent is None
    m = oc.Manager("top")
    assert m.parent is root
    assert m in root.children
    m.close()
    assert m not in root.children
    with pytest.raises(ValueError, match="cannot be closed"):
        root.close()


def test_active_manager_is_the_default_parent_and_sub_nests() -> None:
    with oc.Manager("outer") as outer:
        inner = oc.Manager("inner")
        assert inner.parent is outer
        with outer.sub("batch") as batch, oc.Manager("deeper") as deeper:
            assert batch.parent is outer
            assert deeper.parent is batch
            a = np.ones(100)
            assert oc.owner(a) is deeper
        inner.close()


def test_explicit_allocation_and_fill() -> None:
    m = oc.Manager("explicit")
    e = m.empty((3, 4), np.int32)
    z = m.zeros(5)
    f = m.full((2, 2), 7, np.int16)
    s = m.asarray([1, 2, 3], dtype=np.float32)
    for arr in (e, z, f, s):
        assert oc.owner(arr) is m
    assert e.shape == (3, 4)
    assert e.dtype == np.int32
    assert not z.any()
    assert f.tolist() == [[7, 7], [7, 7]]
    assert s.dtype == np.float32
    assert m.asarray(s) is s, "an array m already owns is not copied"
    assert m.stats().current_bytes == e.nbytes + z.nbytes + f.nbytes + s.nbytes
    m.close()


def test_stats_is_a_frozen_dataclass_with_exact_bytes() -> None:
    with oc.Manager("stats", max_bytes="1M") as m:
        a = np.ones(1000)
        b = np.ones(10, np.int8)
        s = m.stats()
        assert dataclasses.is_dataclass(s)
        with pytest.raises(dataclasses.FrozenInstanceError):
            s.current_bytes = 0  # type: ignore[misc]
        assert s.current_bytes == 8010
        assert s.current_count == 2
        assert s.max_bytes == 1 << 20
        assert s.ram_bytes == 8010
        assert s.total_bytes >= 8010
        del a, b


def test_peak_tracks_and_resets() -> None:
    with oc.Manager() as m:
        a = np.ones(10_000)
        del a
        assert m.stats().peak_bytes >= 80_000
        assert m.stats().current_bytes == 0
        m.reset_peak()
        assert m.stats().peak_bytes == 0
        b = np.ones(100)
        assert 800 <= m.stats().peak_bytes < 80_000
        del b


def test_budget_refuses_with_memory_budget_error_and_dump() -> None:
    with oc.Manager("tight", max_bytes="64K", spill="fail") as m:
        a = np.ones(4096)  # 32 KiB
        with pytest.raises(oc.MemoryBudgetError) as caught:
            np.ones(8192)
        assert isinstance(caught.value, MemoryError)
        message = str(caught.value)
        assert "'tight'" in message
        assert "64.0 KiB" in message
        assert "tight [open]" in message, "the message carries the debug dump"
        assert m.stats().current_bytes == a.nbytes, "the refused request left no trace"
        b = np.ones(4000)  # still fits
        del a, b


def test_budget_covers_the_subtree_and_children_get_only_what_is_left() -> None:
    with oc.Manager("parent", max_bytes=100_000) as parent:
        a = np.ones(8000, np.uint8)
        with parent.sub("child", max_bytes=1_000_000, spill="fail") as child:
            b = np.ones(90_000, np.uint8)
            with pytest.raises(oc.MemoryBudgetError, match="'parent'"):
                np.ones(3000, np.uint8)
            assert child.stats().current_bytes == 90_000
            assert parent.stats().current_bytes == 98_000
            del b
        del a
        assert parent.stats().current_bytes == 0


def test_explicit_allocation_over_budget() -> None:
    m = oc.Manager(max_bytes=1000, spill="fail")
    with pytest.raises(oc.MemoryBudgetError):
        m.empty(1000)
    assert m.stats().current_bytes == 0
    m.close()


def test_keep_on_close_hands_escapes_to_the_parent() -> None:
    with oc.Manager("etl") as etl:
        with etl.sub("batch") as batch:
            c = np.arange(1000.0)
            d = np.ones(10)
            batch.keep(c)
        assert batch.closed
        assert oc.owner(c) is etl
        assert oc.owner(d) is etl
        stats = etl.stats()
        assert stats.escaped == 1, "the kept array is not an escape"
        assert stats.escaped_bytes == d.nbytes
        assert stats.own_bytes == c.nbytes + d.nbytes
        assert c.sum() == 499500.0
        del c, d
        assert etl.stats().current_bytes == 0


def test_raise_on_close_names_the_escaped_arrays_and_keeps_them_valid() -> None:
    scope = oc.Manager("strict", on_close="raise")
    with scope.activate():
        leaked = np.full((7, 3), 2.0)
        fine = np.ones(5)
        scope.keep(fine)
    with pytest.raises(oc.ScopeLeakError) as caught:
        scope.close()
    message = str(caught.value)
    assert "'strict'" in message
    assert "shape=(7, 3)" in message
    assert "shape=(5,)" not in message
    assert scope.closed
    assert leaked.sum() == 42.0


def test_raise_policy_without_escapes_closes_quietly() -> None:
    with oc.Manager(on_close="raise") as m:
        a = np.ones(100)
        del a
        kept = oc.detach(np.ones(3))
    assert m.closed
    assert oc.owner(kept) is oc.system()


def test_raise_policy_never_counts_garbage_in_a_cycle_as_an_escape() -> None:
    """An array that only a reference cycle (garbage) holds is no escape, however recently a
    collection ran: the throttled collection made this error depend on the clock (a state
    machine failed in one test order and passed in another)."""
    from oocarray._memory import _refusals

    class Holder:
        pass

    _refusals.collect_garbage_throttled()  # a collection has just run (or did before) ...
    assert not _refusals.collect_garbage_throttled()  # ... so the next is throttled
    gc_was = gc.isenabled()
    gc.disable()
    try:
        with oc.Manager("cyclic", on_close="raise") as m:
            holder = Holder()
            holder.array = np.ones(3)  # type: ignore[attr-defined]
            holder.me = holder  # type: ignore[attr-defined]
            del holder  # garbage now, freed only by a collection
        assert m.closed and m.stats().escaped == 0
    finally:
        if gc_was:
            gc.enable()


def test_raise_policy_does_not_hide_a_propagating_exception() -> None:
    def leak_and_fail() -> None:
        with oc.Manager(on_close="raise"):
            x = np.ones(10)
            raise KeyError(str(x.size))

    with pytest.raises(KeyError):
        leak_and_fail()


def test_closed_manager_refuses_allocations() -> None:
    m = oc.Manager("done")
    m.close()
    assert m.closed
    m.close()  # closing twice is fine
    with pytest.raises(oc.ClosedError):
        m.empty(3)
    with pytest.raises(oc.ClosedError), m:
        pass
    with pytest.raises(oc.ClosedError):
        oc.Manager(parent=m)


def test_implicit_allocation_in_a_manager_closed_by_another_thread() -> None:
    """The closing thread cannot reach this thread's handler: NumPy still allocates through
    the closed manager, and the array belongs to its nearest open ancestor."""
    with oc.Manager("parent", max_bytes=10_000, spill="fail") as parent:
        m = parent.sub("closing")
        with m.activate():
            closer = threading.Thread(target=m.close)
            closer.start()
            closer.join()
            assert _manager.active_manager() is parent
            a = np.ones(10)
            assert oc.owner(a) is parent
            with pytest.raises(oc.MemoryBudgetError, match="the budget of 'parent'"):
                np.ones(2000)  # the parent's budget and spill policy apply
        assert parent.stats().current_bytes == 80
        del a


def test_closing_a_parent_closes_its_children() -> None:
    parent = oc.Manager("p")
    child = parent.sub("c")
    grandchild = child.sub("g")
    parent.close()
    assert child.closed
    assert grandchild.closed


def test_attach_moves_an_array_within_budget() -> None:
    a_scope = oc.Manager("a")
    b_scope = oc.Manager("b", max_bytes=10_000)
    x = a_scope.full(1000, 1.0)  # 8000 bytes
    b_scope.attach(x)
    assert oc.owner(x) is b_scope
    assert a_scope.stats().current_bytes == 0
    assert b_scope.stats().current_bytes == 8000
    y = a_scope.full(1000, 2.0)
    with pytest.raises(oc.MemoryBudgetError):
        b_scope.attach(y)
    assert oc.owner(y) is a_scope
    with pytest.raises(ValueError, match="asarray"):
        b_scope.attach(np.ones(3))
    a_scope.close()
    b_scope.close()


def test_keep_refuses_arrays_of_other_managers() -> None:
    one = oc.Manager("one")
    two = oc.Manager("two")
    x = one.zeros(10)
    with pytest.raises(ValueError, match="'one'"):
        two.keep(x)
    with pytest.raises(ValueError, match="no manager"):
        two.keep(np.zeros(3))
    one.close()
    two.close()


def test_detach_releases_from_every_scope() -> None:
    with oc.Manager("scope", max_bytes="1M") as m:
        x = np.ones(1000)
        assert oc.detach(x) is x
        assert oc.owner(x) is oc.system()
        assert m.stats().current_bytes == 0
        plain = np.arange(3)
    unmanaged = np.ones(3)
    assert oc.detach(unmanaged) is unmanaged
    assert plain.sum() == 3


def test_debug_dump_shows_the_tree() -> None:
    with oc.Manager("etl", max_bytes="2M") as etl:
        a = np.ones(1000)
        with etl.sub("batch"):
            b = np.ones(500)
            dump = etl.debug_dump()
        del a, b
    lines = dump.splitlines()
    assert lines[0].startswith("etl [open] 11.7 KiB in 2 arrays, RAM 11.7 KiB of budget 2.0 MiB")
    assert lines[1].startswith("└─ batch [open] 3.9 KiB in 1 arrays")


def test_trace_records_allocation_sites() -> None:
    oc.configure(trace=True)
    scope = oc.Manager("traced", on_close="raise")
    with scope.activate():
        leaked = np.ones(321)  # the line the trace must name
        dump = scope.debug_dump()
    assert "test_trace_records_allocation_sites" in dump
    with pytest.raises(oc.ScopeLeakError) as caught:
        scope.close()
    assert "allocated at" in str(caught.value)
    assert "test_manager.py" in str(caught.value)
    del leaked


def test_manager_repr_and_properties() -> None:
    m = oc.Manager("shown", max_bytes="1G", on_close="raise")
    assert "shown" in repr(m)
    assert "open" in repr(m)
    assert m.on_close == "raise"
    m.max_bytes = "2G"
    assert m.max_bytes == 2 << 30
    m.max_bytes = None
    assert m.max_bytes is None
    m.close()
    assert "closed" in repr(m)


def test_system_budget_comes_from_configure() -> None:
    oc.configure(max_bytes="1M")
    assert oc.system().max_bytes == 1 << 20
    with oc.Manager(spill="fail"), pytest.raises(oc.MemoryBudgetError, match="'System'"):
        np.ones(1 << 20)
    oc.configure(max_bytes=None)
    assert oc.system().max_bytes is None


def test_many_short_scopes_do_not_accumulate() -> None:
    with oc.Manager("loop") as loop:
        for _ in range(500):
            with loop.sub():
                np.ones(100).sum()
        assert len(loop._children) == 0
        assert loop.stats().total_count >= 500
        assert loop.stats().current_bytes == 0


# ---- leaving `with` blocks out of order never leaves a thread unable to allocate (issue 10)


def _reader() -> Iterator[int]:
    with oc.Manager("reader"):
        yield 1
        yield 2


def test_a_generator_closed_inside_another_block_leaves_the_thread_able_to_allocate() -> None:
    handler = _native.get_handler()
    rows = _reader()
    next(rows)  # "reader" is active now, in this thread
    with oc.Manager("other") as other:  # a child of "reader"
        rows.close()  # closes "reader", and "other" with it
        a = np.ones(3)
        assert oc.owner(a) is oc.system(), "the nearest open ancestor"
    b = np.ones(3)
    assert oc.owner(b) is None, "outside every block NumPy's own allocator is back"
    assert _manager.active_manager() is None
    assert _native.get_handler() is handler
    assert other.closed
    del a, b


def test_exits_out_of_order_restore_by_identity() -> None:
    handler = _native.get_handler()
    first, second = oc.Manager("first"), oc.Manager("second")
    first.__enter__()
    second.__enter__()
    first.__exit__(None, None, None)
    a = np.ones(3)
    assert oc.owner(a) is second
    second.__exit__(None, None, None)
    b = np.ones(3)
    assert oc.owner(b) is None
    assert _native.get_handler() is handler
    del a, b


def test_an_asyncio_task_running_after_its_block_allocates_in_the_open_ancestor() -> None:
    seen: list[object] = []

    async def work() -> None:
        await asyncio.sleep(0.01)  # runs after "request" has closed
        arr = np.ones(1000)
        seen.extend([oc.owner(arr), _manager.active_manager()])
        with oc.Manager("in-task") as inner:
            seen.append(inner.parent)
        with pytest.raises(oc.MemoryBudgetError, match="the budget of 'server'"):
            np.ones(200_000)  # the open ancestor's budget and spill policy apply
        del arr

    async def serve() -> None:
        with oc.Manager("server", max_bytes="1M", spill="fail") as server:
            with server.sub("request"):
                task = asyncio.create_task(work())
            await task
            assert seen == [server, server, server]
            assert server.stats().current_bytes == 0

    asyncio.run(serve())


def test_a_closed_manager_still_refuses_explicit_allocations_while_active() -> None:
    with oc.Manager("parent") as parent:
        m = parent.sub("m")
        with m.activate():
            m.close()
            a = np.ones(3)
            assert oc.owner(a) is parent
            with pytest.raises(oc.ClosedError, match="'m' is closed"):
                m.empty(3)
        assert parent.stats().escaped == 0, "allocated after the close: not an escape"
        del a


# ---- children inherit spill and location (issue 10)


def test_a_child_inherits_spill_and_location_unless_given() -> None:
    with oc.Manager("strict", max_bytes="4M", spill="fail", location="mmap") as strict:
        child = strict.sub("batch")
        assert (child.spill_policy, child.location) == ("fail", "mmap")
        other = strict.sub("other", spill="evict", location="ram")
        assert (other.spill_policy, other.location) == ("evict", "ram")
    with (
        oc.Manager("strict", max_bytes="4M", spill="fail"),
        oc.Manager("batch"),
        pytest.raises(oc.MemoryBudgetError, match="the budget of 'strict'"),
    ):
        np.ones(1_000_000)  # 8 MB: refused, not placed on disk
    assert (oc.system().spill_policy, oc.system().location) == ("mmap", "ram")
    with oc.Manager("top") as top:
        assert (top.spill_policy, top.location) == ("mmap", "ram")


# ---- the system budget has one source of truth (issue 10)


def test_system_max_bytes_and_config_agree() -> None:
    oc.system().max_bytes = "2M"
    assert oc.config().max_bytes == 2 << 20
    oc.configure(trace=False)
    assert oc.system().max_bytes == 2 << 20, "a later configure() keeps it"
    oc.configure(max_bytes="3M")
    assert oc.system().max_bytes == 3 << 20


# ---- the budget error shows the tree as it was when the allocation was refused (issue 10)


def test_budget_error_dump_is_taken_at_the_refusal() -> None:
    with oc.Manager("tight", max_bytes="2M", spill="fail") as m:
        try:
            np.concatenate([np.ones(100_000), np.ones(100_000)])  # 1.6 MB more: refused
        except oc.MemoryBudgetError as caught:
            message = str(caught)
        else:
            raise AssertionError("not refused")
        assert m.stats().current_bytes == 0, "the temporaries are gone when it is caught"
    headline, dump = message.split("\n", 1)
    assert "1.5 MiB of it is in use" in headline
    assert dump.startswith("tight [open] 1.5 MiB in 2 arrays"), dump


# ---- edges (issue 10)


@pytest.mark.parametrize("shape", [np.array([2, 3]), np.array(4), [np.int32(2), 3], range(1, 3)])
def test_shapes_may_be_any_integer_sequence_or_array(shape: object) -> None:
    with oc.Manager() as m:
        a = m.zeros(shape)
        assert a.shape == np.zeros(shape).shape  # type: ignore[call-overload]
        del a


@pytest.mark.parametrize("shape", [np.array([2.0, 3.0]), np.array([[2, 3]]), "23", [True]])
def test_shapes_that_numpy_refuses_are_refused(shape: object) -> None:
    with oc.Manager() as m, pytest.raises(TypeError, match="shape"):
        m.zeros(shape)


def test_a_manager_cannot_be_pickled_and_says_why() -> None:
    with oc.Manager("etl") as m:
        with pytest.raises(TypeError, match=r"Manager objects cannot be pickled: a manager owns"):
            pickle.dumps(m)
        ws = oc.Workspace("w", parent=m)
        with pytest.raises(TypeError, match="Workspace objects cannot be pickled"):
            pickle.dumps(ws)
        ws.close()


def test_escaped_bytes_go_down_when_escaped_arrays_are_freed() -> None:
    with oc.Manager("outer") as outer:
        with outer.sub("inner"):
            a = np.ones(1000)
            b = np.ones(500)
        assert (outer.stats().escaped, outer.stats().escaped_bytes) == (2, 12_000)
        del a
        assert (outer.stats().escaped, outer.stats().escaped_bytes) == (1, 4000)
        oc.detach(b)
        assert (outer.stats().escaped, outer.stats().escaped_bytes) == (0, 0)
        del b


def test_reaching_max_spill_bytes_says_so(tmp_path: Path) -> None:
    oc.configure(spill_dir=tmp_path, max_spill_bytes="1M")
    with oc.Manager("etl", max_bytes="1M") as m:
        with pytest.raises(oc.MemoryBudgetError) as over_budget:
            np.ones(300_000)  # 2.3 MiB: over the budget, and over the disk cap
        with m.sub("filed", location="mmap"), pytest.raises(oc.SpillError) as placed:
            np.ones(300_000)
    for caught in (over_budget, placed):
        message = str(caught.value)
        assert "the max_spill_bytes limit was reached: 0 B of 1.0 MiB is in use" in message
        assert "2.3 MiB more was needed" in message
        assert "oc.configure(max_spill_bytes=...)" in message
        assert "No space left on device" not in message
    assert placed.value.errno == errno.ENOSPC
