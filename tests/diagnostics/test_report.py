"""oc.memory_report(): its figures agree with /proc and with the managers' stats()."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

import oocarray as oc

MiB = 2**20


@pytest.fixture
def spill_dir(tmp_path: Path) -> Iterator[Path]:
    oc.configure(spill_dir=tmp_path)
    yield tmp_path / f"oocarray-{os.getuid()}"
    oc.configure(spill_dir=None)


def _proc_status() -> dict[str, int]:
    values = {}
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            key, _, rest = line.partition(":")
            if key in ("RssAnon", "RssShmem", "RssFile", "VmHWM"):
                values[key] = int(rest.split()[0]) * 1024
    return values


def test_resident_memory_agrees_with_proc() -> None:
    before = _proc_status()
    report = oc.memory_report()
    after = _proc_status()
    r = report.resident
    for field, key in (
        ("anon_bytes", "RssAnon"),
        ("shmem_bytes", "RssShmem"),
        ("file_bytes", "RssFile"),
    ):
        low, high = sorted((before[key], after[key]))
        assert low - 4 * MiB <= getattr(r, field) <= high + 4 * MiB, field
    assert r.total_bytes == r.anon_bytes + r.shmem_bytes + r.file_bytes
    assert r.peak_bytes >= r.total_bytes - 4 * MiB
    assert r.pss_bytes is not None and r.pss_bytes > 0


def test_resident_memory_sees_an_allocation() -> None:
    base = oc.memory_report().resident.anon_bytes
    with oc.Manager("grow"):
        a = np.ones(64 * MiB // 8)
        grown = oc.memory_report().resident.anon_bytes
        del a
    assert grown - base >= 60 * MiB


def test_managers_and_workspaces_agree_with_stats(spill_dir: Path) -> None:
    with oc.Manager("etl", max_bytes="64M") as etl:
        a = np.ones(2 * MiB // 8)
        b = np.ones(4 * MiB // 8)
        oc.spill(b)
        ws = oc.Workspace("step")
        for _ in range(2):
            with ws:
                c = a * 2
                del c
        with etl.sub("batch") as batch:
            d = np.zeros(MiB // 8)
            report = oc.memory_report()
            etl_stats, batch_stats, ws_stats = etl.stats(), batch.stats(), ws.stats()
        ws.close()
    assert report.managers.name == "System" and report.managers.kind == "system"
    got = report.find("etl")
    assert got.path == "System/etl"
    assert (got.current_bytes, got.ram_bytes, got.spilled_bytes, got.count) == (
        etl_stats.current_bytes,
        etl_stats.ram_bytes,
        etl_stats.spilled_bytes,
        etl_stats.current_count,
    )
    assert got.spilled_bytes == 4 * MiB
    assert got.max_bytes == 64 * MiB
    assert report.find("System/etl/batch").ram_bytes == batch_stats.ram_bytes == MiB
    step = report.find("step")
    assert step.kind == "workspace"
    assert (step.cycles, step.arena_bytes) == (ws_stats.cycles, ws_stats.size_bytes)
    assert [c.name for c in got.children] == ["step", "batch"]
    assert report.managed_bytes >= got.current_bytes
    assert report.spill.file_bytes >= 4 * MiB
    assert report.spill.directory == str(spill_dir)
    del a, b, d


def test_text_shows_the_tree_budgets_and_disk(spill_dir: Path) -> None:
    oc.configure(max_bytes="1G")
    with oc.Manager("etl", max_bytes="64M"):
        a = np.ones(4 * MiB // 8)
        t = oc.from_numpy(np.arange(1000.0))
        text = str(oc.memory_report())
        t.close()
        del a
    assert text.startswith("oocarray memory report (pid ")
    assert "anonymous" in text and "shared" in text and "file-backed" in text
    assert "max_bytes 1.0 GiB" in text
    assert "└─ etl" in text
    assert "64.0 MiB" in text and "[" in text and "%" in text
    assert str(spill_dir) in text
    assert "temporary arrays" in text.lower()
    assert "(owner etl)" in text


def test_temporaries_are_listed_with_their_disk_space(spill_dir: Path) -> None:
    with oc.Manager("scratch"):
        t = oc.from_numpy(np.arange(100_000.0))
        report = oc.memory_report()
    temporaries = report.spill.temporaries
    assert len(temporaries) == 1
    assert temporaries[0].path == t.path
    assert temporaries[0].owner == "scratch"
    assert temporaries[0].stored_bytes > 0
    assert report.spill.temporary_bytes == temporaries[0].stored_bytes
    t.close()
    assert oc.memory_report().spill.temporaries == ()


def test_to_dict_is_plain_data() -> None:
    with oc.Manager("dicts"):
        report = oc.memory_report()
    data = report.to_dict()
    json.dumps(data)
    assert data["resident"]["total_bytes"] == report.resident.total_bytes
    assert data["managers"]["children"][-1]["name"] == "dicts"
    assert data["config"]["max_bytes"] == oc.config().max_bytes


def test_report_is_frozen() -> None:
    report = oc.memory_report()
    with pytest.raises(AttributeError):
        report.pid = 1  # type: ignore[misc]
    with pytest.raises(KeyError, match="no manager named"):
        report.find("nothing-like-this")
