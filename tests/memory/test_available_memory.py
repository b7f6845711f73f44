"""The memory available to the process (``_physical.available_memory``): the kernel's
``MemAvailable``, or the memory cgroup's limit where lower, which is what decides whether data
can stay in the page cache (large reads and writes past it: rechunk's scatter buffer and
outputs, rows of arrays larger than memory)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from oocarray._memory import _physical
from testkit import cgroup

MiB = 1 << 20


def _mem_total() -> int:
    with open("/proc/meminfo", encoding="ascii") as info:
        for line in info:
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no MemTotal")


def test_available_memory_is_at_most_the_machines() -> None:
    assert 0 < _physical.available_memory() <= _mem_total()


def _fake_cgroups(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cgroups: str, limits: dict[str, str]
) -> None:
    proc = tmp_path / "cgroup"
    proc.write_text(cgroups)
    monkeypatch.setattr(_physical, "_PROC_CGROUP", str(proc))
    v1, v2 = tmp_path / "v1", tmp_path / "v2"
    monkeypatch.setattr(_physical, "_CGROUP_V1", (str(v1), "memory.limit_in_bytes"))
    monkeypatch.setattr(_physical, "_CGROUP_V2", (str(v2), "memory.max"))
    for where, value in limits.items():
        path = tmp_path / where
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(value + "\n")


def test_the_lowest_limit_along_the_ancestors_is_the_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fake_cgroups(
        tmp_path,
        monkeypatch,
        "4:memory:/pod/job\n0::/pod/job\n",
        {
            "v1/memory.limit_in_bytes": "9223372036854771712",  # v1's "no limit"
            "v1/pod/memory.limit_in_bytes": str(300 * MiB),
            "v1/pod/job/memory.limit_in_bytes": str(500 * MiB),
            "v2/pod/job/memory.max": "max",
        },
    )
    assert _physical.cgroup_memory_limit() == 300 * MiB
    assert _physical.available_memory() == 300 * MiB


def test_no_limit_or_nothing_to_read_is_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fake_cgroups(tmp_path, monkeypatch, "0::/a\n", {"v2/a/memory.max": "max"})
    assert _physical.cgroup_memory_limit() is None
    assert 0 < _physical.available_memory() <= _mem_total()  # MemAvailable alone
    monkeypatch.setattr(_physical, "_PROC_CGROUP", str(tmp_path / "absent"))
    assert _physical.cgroup_memory_limit() is None


def test_a_process_in_a_memory_cgroup_sees_its_limit() -> None:
    limit = 192 * MiB
    why = cgroup.unavailable(limit)
    if why is not None:
        pytest.skip(f"no memory cgroup here: {why}")
    code = (
        "from oocarray._memory._physical import available_memory, cgroup_memory_limit\n"
        "print(cgroup_memory_limit(), available_memory())"
    )
    with cgroup.memory_cgroup(limit) as group:
        done = subprocess.run(
            group.command([sys.executable, "-c", code]),
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        )
    seen, available = (int(word) for word in done.stdout.split())
    assert seen == limit
    assert 0 < available <= limit
