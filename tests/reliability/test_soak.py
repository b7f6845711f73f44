"""Issue 15, item 4: soak.  Workspace cycles and manager rounds repeated many times in a fresh
interpreter: after a warm-up, resident memory grows by at most 1 MiB, and the process ends with
the same open file descriptors (``/proc/self/fd``) and threads (``threading.active_count()``
and ``/proc/self/task``) as it had after the warm-up.

CI runs 2,000 cycles and 200 rounds; the long mode (``OOCARRAY_RELIABILITY_LONG=1``) the
10,000 and 1,000 of the issue.  The figures of a long run are in RELIABILITY.md."""

from __future__ import annotations

import json
import os

import pytest

from testkit.children import run_python

from ._helpers import rounds

RSS_GROWTH_LIMIT = 1 << 20

PROBE = """
    import gc, json, os, threading
    import numpy as np
    import oocarray as oc

    def rss():
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

    def snapshot():
        gc.collect()
        return {
            "rss": rss(),
            "fds": sorted(os.listdir("/proc/self/fd")),
            "threads": threading.active_count(),
            "tasks": len(os.listdir("/proc/self/task")),
        }
"""

WORKSPACE_SOAK = """
    x = np.arange(100_000, dtype=np.float64)
    expected = float((x * 2 + 1).sum())
    ws = oc.Workspace("soak")
    ws_file = oc.Workspace("soak-file", location="mmap")

    def cycles(n):
        for i in range(n):
            with ws:
                y = x * 2 + 1
                assert float(y.sum()) == expected
                z = np.sqrt(y)
                del y, z
            if i % 10 == 0:
                with ws_file:
                    w = x + 1
                    del w

    cycles({warm})
    before = snapshot()
    cycles({n})
    after = snapshot()
    assert ws.stats().cycles == {warm} + {n}
    ws.close(); ws_file.close()
    print(json.dumps({{"before": before, "after": after}}))
"""

MANAGER_SOAK = """
    parent = oc.Manager("soak-parent")

    def round_(i):
        with oc.Manager(f"r{{i}}", parent=parent, max_bytes="2M", spill="evict") as m:
            arrays = [np.full(1 << 18, i % 251, np.uint8) for _ in range(12)]  # 3 MiB
            m.spill()
            assert all(int(a[0]) == i % 251 and int(a[-1]) == i % 251 for a in arrays)
            with m.sub("child", location="mmap") as s:
                b = np.ones(1 << 16)
                assert oc.owner(b) is s
                del b
            ws = oc.Workspace("w", parent=m)
            for _ in range(3):
                with ws:
                    c = np.arange(10_000) * 2
                    del c
            ws.close()
            del arrays

    for i in range({warm}):
        round_(i)
    before = snapshot()
    for i in range({n}):
        round_(i)
    after = snapshot()
    s = parent.stats()
    assert s.current_bytes == 0 and s.current_count == 0, s
    assert parent.children == ()
    parent.close()
    print(json.dumps({{"before": before, "after": after, "spills": s.spills}}))
"""


def check(result_stdout: str) -> dict[str, dict[str, object]]:
    figures: dict[str, dict[str, object]] = json.loads(result_stdout.strip().splitlines()[-1])
    before, after = figures["before"], figures["after"]
    growth = int(after["rss"]) - int(before["rss"])  # type: ignore[call-overload]
    print(
        f"RSS {before['rss']} -> {after['rss']} ({growth:+d} bytes), "
        f"fds {len(before['fds'])} -> {len(after['fds'])}, "  # type: ignore[arg-type]
        f"threads {before['threads']} -> {after['threads']}, "
        f"tasks {before['tasks']} -> {after['tasks']}"
    )
    assert growth <= RSS_GROWTH_LIMIT, f"RSS grew by {growth} bytes"
    assert after["fds"] == before["fds"], "file descriptors leaked"
    assert after["threads"] == before["threads"], "threads leaked"
    assert after["tasks"] == before["tasks"], "native threads leaked"
    return figures


@pytest.mark.no_sanitizer
def test_workspace_cycles_do_not_grow_memory_files_or_threads() -> None:
    n = rounds(2000, 10_000)
    result = run_python(PROBE + WORKSPACE_SOAK.format(warm=200, n=n), timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    check(result.stdout)


@pytest.mark.no_sanitizer
def test_manager_rounds_do_not_grow_memory_files_or_threads() -> None:
    n = rounds(200, 1000)
    result = run_python(PROBE + MANAGER_SOAK.format(warm=50, n=n), timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    figures = check(result.stdout)
    assert int(figures["spills"]) > 0  # type: ignore[call-overload]


def test_soak_probe_sees_this_process() -> None:
    """The probe's sources exist here (a check that the soak measures something)."""
    assert os.path.isdir("/proc/self/fd")
    assert os.path.isdir("/proc/self/task")
