"""The manager tree: scopes, budgets, close policies, ownership and diagnostics."""

from __future__ import annotations

import dataclasses
import threading

import numpy as np
import pytest

import oocarray as oc


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
    m = oc.Manager("closing")
    with m.activate():
        closer = threading.Thread(target=m.close)
        closer.start()
        closer.join()
        with pytest.raises(oc.ClosedError):
            np.ones(10)


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
