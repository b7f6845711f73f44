"""Small arrays placed on disk reuse freed heap-file slots that stay mapped (native/heap.c):
no system call per allocation, and nothing of the reuse shows through — a reused slot of
``np.zeros`` is zeros, data never crosses between arrays or into a forked child, a full disk
takes the kept slots' blocks back, and over-budget allocations call Python only when it has
something to do (a collection, an event listener, a refusal to explain)."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

import oocarray as oc
from oocarray import _native
from oocarray._memory import _refusals
from testkit.children import run_python

SLOT_ELEMENTS = 1024  # float64: 8 KiB of data, a slot of 12 KiB with its header page


@pytest.fixture
def spill_dir(tmp_path: Path) -> Iterator[Path]:
    oc.configure(spill_dir=tmp_path)
    yield tmp_path
    oc.configure(spill_dir=None)


def reused() -> int:
    return _native.heap_kept()[2]


def test_freed_slots_are_reused_and_data_never_crosses(spill_dir: Path) -> None:
    with oc.Manager("small", location="mmap"):
        first = [np.full(SLOT_ELEMENTS, i, np.float64) for i in range(40)]
        assert {oc.location(a) for a in first} == {"mmap"}
        addresses = {a.ctypes.data for a in first[::2]}
        before = reused()
        del first[::2]  # 20 slots freed, kept mapped
        assert _native.heap_kept()[0] >= 20
        second = [np.full(SLOT_ELEMENTS, 100 + i, np.float64) for i in range(20)]
        assert reused() - before == 20
        assert {a.ctypes.data for a in second} == addresses  # the same mappings again
        assert all((a == 2 * i + 1).all() for i, a in enumerate(first))
        assert all((a == 100 + i).all() for i, a in enumerate(second))


def test_zeros_on_a_reused_slot_are_zeros(spill_dir: Path) -> None:
    with oc.Manager("small", location="mmap"):
        dirty = np.full(SLOT_ELEMENTS, 7.0)
        address = dirty.ctypes.data
        del dirty
        before = reused()
        clean = np.zeros(SLOT_ELEMENTS)
        assert reused() - before == 1 and clean.ctypes.data == address
        assert not clean.any()
        ones = np.ones(SLOT_ELEMENTS // 2)  # another size: another slot class
        assert (ones == 1).all()


def test_a_forked_child_never_shares_the_kept_slots(spill_dir: Path) -> None:
    with oc.Manager("small", location="mmap"):
        freed = [np.full(SLOT_ELEMENTS, -1.0) for _ in range(8)]
        del freed  # kept mapped in the parent
        ready_r, ready_w = os.pipe()
        go_r, go_w = os.pipe()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - runs in the child
            code = 1
            try:
                mine = [np.full(SLOT_ELEMENTS, 5.0) for _ in range(8)]
                os.write(ready_w, b"x")
                os.read(go_r, 1)  # the parent has written its arrays meanwhile
                code = 0 if all((a == 5.0).all() for a in mine) else 2
            finally:
                os._exit(code)
        os.read(ready_r, 1)
        before = reused()
        parents = [np.full(SLOT_ELEMENTS, 9.0) for _ in range(8)]  # the kept slots again
        assert reused() - before == 8
        os.write(go_w, b"x")
        _, status = os.waitpid(pid, 0)
        for fd in (ready_r, ready_w, go_r, go_w):
            os.close(fd)
        assert os.waitstatus_to_exitcode(status) == 0
        assert all((a == 9.0).all() for a in parents)


FULL_DISK = """
import numpy as np, oocarray as oc
from oocarray import _native
with oc.Manager("small", location="mmap"):
    small = [np.full(1024, float(i)) for i in range(200)]  # 200 slots of 12 KiB: 2.3 MiB
    del small
    print("kept", _native.heap_kept()[1])
    big = np.full(3 << 17, 1.0)  # 3 MiB in a file of its own: only with the kept blocks back
    print("big", oc.location(big), float(big.sum()), "kept", _native.heap_kept()[1])
"""


def test_a_full_disk_takes_the_kept_slots_back(tiny_tmpfs: Path) -> None:
    result = run_python(FULL_DISK, env={"OOCARRAY_SPILL_DIR": str(tiny_tmpfs)})
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.splitlines()
    assert lines[0] == f"kept {200 * 12 << 10}"
    assert lines[1] == f"big mmap {float(3 << 17)} kept 0"


@pytest.fixture
def pressure_calls() -> Iterator[list[tuple[int, int]]]:
    calls: list[tuple[int, int]] = []

    def count(node_id: int, nbytes: int) -> bool:
        calls.append((node_id, nbytes))
        return False

    _native.set_pressure_callback(count)
    try:
        yield calls
    finally:
        _native.set_pressure_callback(_refusals.relieve_pressure)
        _native.set_pressure_quiet(0.0, False)


def test_over_budget_allocations_call_python_only_when_needed(
    spill_dir: Path, pressure_calls: list[tuple[int, int]]
) -> None:
    _native.set_pressure_quiet(time.monotonic() + 3600, False)  # as after a collection
    with oc.Manager("full", max_bytes=1):
        quiet = [np.empty(100) for _ in range(20)]
        assert pressure_calls == []  # placed on disk without taking the GIL
        _native.set_pressure_quiet(time.monotonic() + 3600, True)  # an event listener waits
        heard = [np.empty(100) for _ in range(20)]
        assert len(pressure_calls) == 20
        assert {oc.location(a) for a in quiet + heard} == {"mmap"}
    _native.set_pressure_quiet(time.monotonic() + 3600, False)
    with oc.Manager("strict", max_bytes=1, spill="fail"), pytest.raises(oc.MemoryBudgetError):
        np.empty(100)  # a refusal: Python takes its snapshot for the message
    assert len(pressure_calls) == 21


def test_event_listeners_see_every_over_budget_allocation(spill_dir: Path) -> None:
    seen: list[str] = []

    def listener(event: oc.MemoryEvent) -> None:
        seen.append(event.kind)

    oc.on_event(listener, kinds="over_budget")
    try:
        _refusals.collect_garbage_throttled()  # opens a quiet window, if it may run
        with oc.Manager("full", max_bytes=1):
            arrays = [np.empty(100) for _ in range(30)]
        assert len(arrays) == 30 and len(seen) >= 30
    finally:
        oc.remove_listener(listener)
