"""oc.on_event(): listeners get manager, workspace, spill and budget events in order."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

import oocarray as oc
from oocarray._memory import _events

MiB = 2**20


@pytest.fixture
def events(tmp_path: Path) -> Iterator[list[oc.MemoryEvent]]:
    oc.configure(spill_dir=tmp_path)
    seen: list[oc.MemoryEvent] = []
    listener = oc.on_event(seen.append)
    yield seen
    oc.remove_listener(listener)
    oc.configure(spill_dir=None)


def test_events_arrive_in_order(events: list[oc.MemoryEvent]) -> None:
    with oc.Manager("outer", max_bytes="64M") as outer:
        a = np.ones(MiB // 8)
        oc.spill(a)
        oc.unspill(a)
        ws = oc.Workspace("loop", on_escape="pin")
        kept = []
        for i in range(2):
            with ws:
                y = np.ones(1000)
                if i == 1:
                    kept.append(y)
                del y
        ws.close()
        with outer.sub("inner"):
            b = np.ones(1000)
    got = [(e.kind, e.manager) for e in events]
    assert got == [
        ("manager_opened", "outer"),
        ("spill", "outer"),
        ("unspill", "outer"),
        ("manager_opened", "loop"),
        ("cycle_end", "loop"),
        ("escape", "loop"),
        ("cycle_end", "loop"),
        ("escape", "loop"),  # the escaped array is still alive when the workspace closes
        ("manager_closed", "loop"),
        ("manager_opened", "inner"),
        ("escape", "inner"),
        ("manager_closed", "inner"),
        ("escape", "outer"),
        ("manager_closed", "outer"),
    ]
    by_kind = {(e.kind, e.manager): e for e in events}
    assert by_kind[("spill", "outer")].details == {"bytes": MiB, "reason": "array"}
    assert by_kind[("unspill", "outer")].details["bytes"] == MiB
    cycles = [e for e in events if e.kind == "cycle_end"]
    assert [c.details["cycle"] for c in cycles] == [1, 2]
    assert [c.details["escaped"] for c in cycles] == [0, 1]
    assert cycles[0].workspace and cycles[0].path == "System/outer/loop"
    escape = next(e for e in events if e.kind == "escape")
    assert escape.details == {"count": 1, "cycle": 2, "on_escape": "pin"}
    closed = by_kind[("manager_closed", "inner")]
    assert closed.details == {"escaped": 1, "escaped_bytes": 8000}
    assert closed.path == "System/outer/inner" and not closed.workspace
    assert [e.time for e in events] == sorted(e.time for e in events)
    assert "manager_closed System/outer/inner: escaped=1" in str(closed)
    del a, b, kept


def test_budget_events(events: list[oc.MemoryEvent]) -> None:
    with oc.Manager("tight", max_bytes="1M", spill="fail"), pytest.raises(oc.MemoryBudgetError):
        np.ones(MiB)
    kinds = [e.kind for e in events]
    assert kinds == ["manager_opened", "over_budget", "budget_refusal", "manager_closed"]
    over, refusal = events[1], events[2]
    assert over.details == {"requested_bytes": 8 * MiB, "spill": "fail"}
    assert refusal.details["refused"] == "tight"
    assert refusal.details["limit_bytes"] == MiB
    assert refusal.details["requested_bytes"] == 8 * MiB


def test_spilling_a_manager_and_on_close_spill(events: list[oc.MemoryEvent]) -> None:
    with oc.Manager("parent"):
        with oc.Manager("child", on_close="spill") as child:
            a = np.ones(MiB // 8)
            b = np.ones(MiB // 8)
            child.spill()
            oc.unspill(a)
        spills = [e for e in events if e.kind == "spill"]
        assert [e.details["reason"] for e in spills] == ["manager", "on_close"]
        assert spills[0].details["bytes"] == 2 * MiB
        assert spills[1].details["bytes"] == MiB  # only a was back in RAM
    del a, b


def test_kinds_filter_and_removal() -> None:
    cycles: list[int] = []
    listener = oc.on_event(lambda e: cycles.append(e.details["cycle"]), kinds="cycle_end")
    ws = oc.Workspace("filtered")
    for _ in range(3):
        with ws:
            pass
    ws.close()
    oc.remove_listener(listener)
    assert cycles == [1, 2, 3]
    # Nothing registered: the memory layer's hook list is empty again (no cost).
    assert _events.listeners == []
    with oc.Manager("unheard"):
        pass
    assert cycles == [1, 2, 3]
    oc.remove_listener(listener)  # twice: ignored
    with pytest.raises(ValueError, match="unknown event kinds"):
        oc.on_event(print, kinds=("cycle-end",))
    with pytest.raises(TypeError, match="callable"):
        oc.on_event("print")  # type: ignore[arg-type]


def test_a_failing_listener_warns_and_the_others_still_hear() -> None:
    heard: list[str] = []

    def broken(event: oc.MemoryEvent) -> None:
        raise RuntimeError("listener bug")

    def hears(event: oc.MemoryEvent) -> None:
        heard.append(event.kind)

    oc.on_event(broken)
    oc.on_event(hears)
    try:
        with pytest.warns(RuntimeWarning, match="listener bug"), oc.Manager("noisy"):
            pass
    finally:
        oc.remove_listener(broken)
        oc.remove_listener(hears)
    assert heard == ["manager_opened", "manager_closed"]
    assert _events.listeners == []


def test_events_raised_inside_a_listener_come_after_it() -> None:
    order: list[str] = []

    def opens_a_manager(event: oc.MemoryEvent) -> None:
        order.append(f"start {event.kind} {event.manager}")
        if event.manager == "first":
            with oc.Manager("nested"):
                pass
        order.append(f"end {event.kind} {event.manager}")

    oc.on_event(opens_a_manager, kinds="manager_opened")
    try:
        with oc.Manager("first"):
            pass
    finally:
        oc.remove_listener(opens_a_manager)
    assert order == [
        "start manager_opened first",
        "end manager_opened first",
        "start manager_opened nested",
        "end manager_opened nested",
    ]


def test_events_from_other_threads_name_them(events: list[oc.MemoryEvent]) -> None:
    import threading

    def work() -> None:
        with oc.Manager("threaded"):
            pass

    t = threading.Thread(target=work, name="worker-7")
    t.start()
    t.join()
    assert {e.thread for e in events} == {"worker-7"}
    assert os.getpid() > 0
