"""Workspaces: arenas reused by each cycle, learning and spill policies, and safe escapes."""

from __future__ import annotations

import errno
import os
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

import oocarray as oc
from oocarray import _native
from oocarray._memory import _manager
from oocarray._memory._physical import resident_memory
from testkit.children import run_python

MiB = 1 << 20


@pytest.fixture
def ws() -> Iterator[oc.Workspace]:
    workspace = oc.Workspace("test")
    yield workspace
    workspace.close()


def cycle_body(x: np.ndarray) -> float:
    y = x * 2 + 1
    z = y - x
    return float(z.sum())


def test_cycles_reuse_the_same_arena_memory(ws: oc.Workspace) -> None:
    x = np.ones(100_000)
    addresses = []
    for _ in range(5):
        with ws:
            y = x * 2
            addresses.append(y.ctypes.data)
            assert oc.location(y) == ("workspace" if ws.stats().cycles >= 1 else "ram")
            assert oc.owner(y) is ws
            del y
    # Cycle 1 learns; from cycle 2 on the arena hands out the same address every time.
    assert len(set(addresses[1:])) == 1
    assert addresses[1] % 64 == 0
    s = ws.stats()
    assert s.cycles == 5
    assert s.arena_allocations >= 4
    assert s.reallocations == 1


def test_first_loop_learning_sizes_the_arena_with_overallocation() -> None:
    ws = oc.Workspace("learn", allocation="overallocate", overallocation=0.5)
    with ws:
        a = np.empty(MiB, np.uint8)
        b = np.empty(2 * MiB, np.uint8)
        del a, b
    s = ws.stats()
    assert s.learned_bytes == MiB + 2 * MiB + 2 * _native.HEADER_BYTES
    assert s.size_bytes == 0, "the arena is made when the next cycle starts"
    with ws:
        pass
    assert s.learned_bytes * 1.5 <= ws.stats().size_bytes < s.learned_bytes * 1.5 + 8192
    with ws:
        c = np.empty(5 * MiB, np.uint8)  # more than the arena: external, learning is over
        del c
    assert ws.stats().size_bytes == pytest.approx(s.learned_bytes * 1.5, abs=8192)
    assert ws.stats().spilled_allocations == 1
    ws.close()


def test_strict_allocation_and_none_learning() -> None:
    strict = oc.Workspace("strict", allocation="strict")
    with strict:
        np.empty(MiB, np.uint8)
    with strict:
        pass
    assert strict.stats().size_bytes == (MiB + 2 * _native.HEADER_BYTES + 4095) // 4096 * 4096
    strict.close()
    fixed = oc.Workspace("fixed", learning="none", initial_size="1M")
    for n in (MiB // 2, 3 * MiB):
        with fixed:
            np.empty(n, np.uint8)
    assert fixed.stats().size_bytes == MiB
    assert fixed.stats().learned_bytes == 0
    fixed.close()


def test_over_time_learning_keeps_growing() -> None:
    ws = oc.Workspace("grow", learning="over_time", allocation="strict")
    sizes = []
    for n in (MiB, 3 * MiB, 2 * MiB, 5 * MiB):
        with ws:
            np.empty(n, np.uint8)
        with ws:
            pass
        sizes.append(ws.stats().size_bytes)
    assert sizes[0] < sizes[1] == sizes[2] < sizes[3]
    ws.close()


def test_spill_external_allocates_outside_a_full_arena() -> None:
    ws = oc.Workspace("ext", learning="none", initial_size="1M", spill="external")
    with ws:
        small = np.ones(1000)
        big = np.ones(MiB)  # 8 MiB: cannot fit
        assert oc.location(small) == "workspace"
        assert oc.location(big) == "ram"
        assert big.sum() == MiB
        del small, big
    s = ws.stats()
    assert s.spilled_allocations == 1
    assert s.external_allocations == 1
    assert s.size_bytes == MiB
    ws.close()


def test_spill_reallocate_grows_the_arena_for_the_next_cycle() -> None:
    ws = oc.Workspace("realloc", learning="none", initial_size="1M", spill="reallocate")
    with ws:
        np.ones(MiB)
    assert ws.stats().size_bytes == MiB
    with ws:
        big = np.ones(MiB)
        assert oc.location(big) == "workspace"
        del big
    assert ws.stats().size_bytes > 8 * MiB
    assert ws.stats().reallocations == 2
    ws.close()


def test_spill_fail_raises_workspace_full() -> None:
    ws = oc.Workspace("full", learning="none", initial_size="1M", spill="fail")
    with ws:
        np.ones(1000)
        with pytest.raises(oc.WorkspaceFullError) as caught:
            np.ones(MiB)
        assert isinstance(caught.value, MemoryError)
        assert "'full'" in str(caught.value)
    ws.close()


def test_escape_raises_names_the_array_and_keeps_its_data() -> None:
    ws = oc.Workspace("leaky")
    with ws:
        np.full((300, 7), 0.0)  # the first cycle teaches the arena its size
    with pytest.raises(oc.WorkspaceLeakError) as caught, ws:
        leaked = np.full((300, 7), 5.0)
    message = str(caught.value)
    assert "'leaky'" in message
    assert "shape=(300, 7)" in message
    assert "oc.detach" in message
    # The pinned memory is never handed out again while `leaked` lives.
    for _ in range(3):
        with ws:
            junk = np.full((300, 7), -1.0)
            del junk
    assert (leaked == 5.0).all()
    assert ws.stats().pinned_bytes > 0
    assert ws.stats().escapes == 1
    del leaked
    assert ws.stats().pinned_bytes == 0
    ws.close()


def test_escape_with_pin_only_counts() -> None:
    ws = oc.Workspace("pinned", on_escape="pin")
    kept = []
    for i in range(4):
        with ws:
            kept.append(np.full(10_000, float(i)))
    assert [a[0] for a in kept] == [0.0, 1.0, 2.0, 3.0]
    assert ws.stats().escapes == 4
    kept.clear()
    assert ws.stats().pinned_bytes == 0
    ws.close()


def test_detach_copies_out_to_the_parent() -> None:
    with oc.Manager("outer") as outer:
        ws = oc.Workspace("inner")
        results = []
        for i in range(3):
            with ws:
                y = np.full(1000, float(i)) * 2
                out = oc.detach(y)
                del y
                assert oc.owner(out) is outer
                assert oc.location(out) == "ram"
                results.append(out)
        assert [r[0] for r in results] == [0.0, 2.0, 4.0]
        ws.close()


def test_workspace_is_a_manager_in_the_tree() -> None:
    with oc.Manager("parent", max_bytes="64M") as parent:
        ws = oc.Workspace("loop")
        assert ws.parent is parent
        for _ in range(2):
            with ws:
                np.ones(MiB)
        assert parent.stats().ram_bytes >= ws.stats().size_bytes > 0
        dump = parent.debug_dump()
        assert "loop [open]" in dump
        assert "workspace: arena" in dump
        with ws, oc.Manager("inside") as inside:
            z = np.ones(100)
            assert oc.owner(z) is inside
            assert oc.location(z) == "ram"
            del z
        ws.close()


def test_arena_counts_against_the_parent_budget() -> None:
    with oc.Manager("small", max_bytes="4M", spill="fail"):
        ws = oc.Workspace("too-big", learning="none", initial_size="8M")
        with ws:
            a = np.ones(1000)  # no arena (the budget refused it): external
            assert oc.location(a) == "ram"
            del a
        assert ws.stats().size_bytes == 0
        ws.close()


def test_nested_workspaces() -> None:
    outer = oc.Workspace("outer")
    inner = oc.Workspace("inner")
    for _ in range(3):
        with outer:
            a = np.ones(1000)
            with inner:
                b = np.ones(1000) + a
                assert oc.owner(b) is inner
                total = float(b.sum())
                del b
            assert oc.owner(a) is outer
            del a
    assert total == 2000.0
    inner.close()
    outer.close()


def test_one_thread_at_a_time() -> None:
    ws = oc.Workspace("single")
    errors: list[BaseException] = []
    entered = threading.Event()
    release = threading.Event()

    def hold() -> None:
        with ws:
            entered.set()
            release.wait(60)  # a hang guard only: set once the main thread tried

    t = threading.Thread(target=hold)
    t.start()
    assert entered.wait(60)  # a hang guard only
    try:
        with ws:
            pass
    except RuntimeError as error:
        errors.append(error)
    release.set()
    t.join()
    assert len(errors) == 1
    assert "one thread at a time" in str(errors[0])
    with pytest.raises(RuntimeError, match="already in a cycle"), ws, ws:
        pass
    ws.close()


def test_destroy_workspaces_of_this_thread() -> None:
    a = oc.Workspace("a")
    b = oc.Workspace("b")
    with a:
        pass
    assert oc.destroy_workspaces() >= 2
    assert a.closed
    assert b.closed
    with pytest.raises(oc.ClosedError), a:
        pass


@pytest.mark.no_sanitizer  # ASan's allocator holds freed memory in quarantine
def test_rss_stays_flat_over_a_thousand_cycles() -> None:
    ws = oc.Workspace("flat")
    x = np.ones(500_000, np.float32)
    for _ in range(20):
        with ws:
            cycle_body(x)
    before = resident_memory().anon_bytes
    for _ in range(1000):
        with ws:
            cycle_body(x)
    growth = resident_memory().anon_bytes - before
    assert growth <= MiB
    ws.close()


def test_arena_in_a_temporary_file(tmp_path: os.PathLike[str]) -> None:
    oc.configure(spill_dir=tmp_path)
    try:
        ws = oc.Workspace("filed", location="mmap")
        for _ in range(3):
            with ws:
                total = cycle_body(np.ones(200_000))
        assert total == 400_000.0
        assert ws.stats().size_bytes > 0
        ws.close()
    finally:
        oc.configure(spill_dir=None)


def test_config_object_and_validation() -> None:
    config = oc.WorkspaceConfig(initial_size="2M", learning="none", spill="fail")
    ws = oc.Workspace("configured", config)
    assert ws.config.initial_size == 2 * MiB
    ws.close()
    with pytest.raises(ValueError, match="learning"):
        oc.WorkspaceConfig(learning="sometimes")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="initial_size"):
        oc.WorkspaceConfig(initial_size="2G", max_size="1G")
    with pytest.raises(TypeError, match="unknown workspace policies"):
        oc.Workspace("x", colour="red")
    with pytest.raises(TypeError, match="either config"):
        oc.Workspace("x", config, learning="none")


@pytest.mark.parametrize(
    ("mode", "expected"),
    [("bypass", "ram external=0 escapes=0"), ("spill_everything", "ram external=3 escapes=3")],
)
def test_debug_switches(mode: str, expected: str) -> None:
    code = """
        import numpy as np, oocarray as oc
        ws = oc.Workspace("dbg", on_escape="pin")
        for _ in range(3):
            with ws:
                a = np.empty(1000)
        s = ws.stats()
        print(oc.location(a), f"external={s.external_allocations} escapes={s.escapes}")
        """
    result = run_python(code, env={"OOCARRAY_WORKSPACES": mode}, keep_settings=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == expected


class CycleMachine(RuleBasedStateMachine):
    """Random cycles, escapes, detaches and nesting: escaped data is never overwritten."""

    def __init__(self) -> None:
        super().__init__()
        self.ws = oc.Workspace(
            "machine",
            on_escape="pin",
            learning="over_time",
            spill="reallocate",
        )
        self.inner = oc.Workspace("machine-inner", on_escape="pin")
        self.escaped: list[tuple[np.ndarray, float]] = []
        self.detached: list[tuple[np.ndarray, float]] = []
        self.counter = 0.0

    def _fill(self, n: int) -> tuple[np.ndarray, float]:
        self.counter += 1
        return np.full(n, self.counter), self.counter

    @rule(
        sizes=st.lists(st.integers(1, 40_000), min_size=1, max_size=6),
        keep=st.lists(st.booleans(), min_size=6, max_size=6),
        detach=st.lists(st.booleans(), min_size=6, max_size=6),
        nested=st.booleans(),
    )
    def cycle(self, sizes: list[int], keep: list[bool], detach: list[bool], nested: bool) -> None:
        with self.ws:
            made = [self._fill(n) for n in sizes]
            if nested:
                with self.inner:
                    made.append(self._fill(777))
            for i, (arr, value) in enumerate(made):
                assert (arr == value).all()
                if detach[i % 6]:
                    self.detached.append((oc.detach(arr), value))
                elif keep[i % 6]:
                    self.escaped.append((arr, value))
            del made, arr

    @precondition(lambda self: self.escaped)
    @rule(index=st.integers(0, 100))
    def drop_escaped(self, index: int) -> None:
        self.escaped.pop(index % len(self.escaped))

    @invariant()
    def escaped_and_detached_data_is_intact(self) -> None:
        for arr, value in self.escaped + self.detached:
            assert (arr == value).all()

    def teardown(self) -> None:
        self.escaped.clear()
        self.detached.clear()
        self.inner.close()
        self.ws.close()


TestCycleMachine = CycleMachine.TestCase
TestCycleMachine.settings = settings(
    max_examples=max(60, settings.default.max_examples // 4),  # the "long" profile asks for more
    stateful_step_count=25,
    deadline=None,
)


# ---- location="mmap": every cycle on disk, or a SpillError (issue 10)


def _is_file_backed(arr: np.ndarray) -> bool:
    """Whether the memory under ``arr`` is a mapping of a file (read from /proc/self/maps)."""
    address = arr.__array_interface__["data"][0]
    with open("/proc/self/maps", encoding="utf-8") as maps:
        for line in maps:
            fields = line.split(maxsplit=5)
            start, end = (int(x, 16) for x in fields[0].split("-"))
            if start <= address < end:
                return len(fields) == 6 and fields[5].strip() not in ("", "[heap]")
    raise AssertionError("address not mapped")


def test_every_cycle_of_an_mmap_workspace_is_on_disk(tmp_path: os.PathLike[str]) -> None:
    oc.configure(spill_dir=tmp_path)
    ws = oc.Workspace("filed", location="mmap")
    try:
        for cycle in range(3):
            with ws:
                a = np.ones(200_000)  # the first, learning cycle has no arena yet
                assert _is_file_backed(a), f"cycle {cycle} put its array in RAM"
                assert oc.location(a) == ("mmap" if cycle == 0 else "workspace")
                del a
        assert ws.stats().size_bytes > 0
    finally:
        ws.close()


def test_an_arena_file_that_cannot_be_made_raises_spill_error(tmp_path: os.PathLike[str]) -> None:
    oc.configure(spill_dir=tmp_path, max_spill_bytes="1M")
    ws = oc.Workspace("filed", location="mmap", initial_size="8M")
    try:
        with (
            pytest.raises(oc.SpillError, match="max_spill_bytes limit was reached") as caught,
            ws,
        ):
            pass
        assert caught.value.errno == errno.ENOSPC
        assert "arena file of workspace 'filed'" in str(caught.value)
        assert _manager.active_manager() is None, "the refused cycle left nothing active"
        assert ws.stats().cycles == 0
    finally:
        ws.close()


def test_a_full_disk_refuses_the_learning_cycle_with_spill_error(tiny_tmpfs: Path) -> None:
    oc.configure(spill_dir=tiny_tmpfs)
    ws = oc.Workspace("filed", location="mmap")
    try:
        with ws, pytest.raises(oc.SpillError, match="No space left on device") as caught:
            np.ones(1_000_000)  # 8 MB on a 4 MiB disk
        assert caught.value.errno == errno.ENOSPC
        assert isinstance(caught.value, MemoryError), "still what NumPy raises"
        ws_big = oc.Workspace("big", location="mmap", initial_size="8M")
        with pytest.raises(oc.SpillError, match="arena file"), ws_big:
            pass
        ws_big.close()
    finally:
        ws.close()


# ---- a workspace inherits its parent's spill and location (issue 10)


def test_a_workspace_inherits_spill_and_location(tmp_path: os.PathLike[str]) -> None:
    oc.configure(spill_dir=tmp_path)
    with oc.Manager("strict", max_bytes="4M", spill="fail", location="mmap") as strict:
        ws = oc.Workspace("loop")
        assert (ws.location, ws.config.location, ws.spill_policy) == ("mmap", "mmap", "fail")
        ws.close()
    with oc.Manager("strict", max_bytes="4M", spill="fail"):
        ws = oc.Workspace("loop")
        assert ws.config.location == "ram"
        with pytest.raises(oc.MemoryBudgetError, match="the budget of 'strict'"), ws:
            np.ones(1_000_000)  # 8 MB outside the (empty) arena: refused, not put on disk
        ws.close()
    del strict


def test_an_arena_the_budget_refuses_is_not_a_disk_error(tmp_path: os.PathLike[str]) -> None:
    oc.configure(spill_dir=tmp_path)
    with oc.Manager("small", max_bytes="1M"):
        ws = oc.Workspace("filed", location="mmap", initial_size="8M")
        with ws:  # the cycle runs outside the arena, its large arrays on disk
            a = np.ones(200_000)
            assert oc.location(a) == "mmap"
            del a
        assert ws.stats().size_bytes == 0
        ws.close()


def test_closing_the_parent_releases_an_open_workspaces_arena() -> None:
    with oc.Manager("arena-parent-top") as top:
        parent = top.sub("arena-parent")
        ws = oc.Workspace("arena-child", parent=parent, initial_size=8 << 20)
        for _ in range(3):
            with ws:
                (np.ones(1 << 20) * 2).sum()
        assert top.stats().current_bytes >= 8 << 20  # the arena, counted up the tree
        parent.close()  # closes the open workspace with it
        assert ws.closed
        assert top.stats().current_bytes < 1 << 20, top.stats()
