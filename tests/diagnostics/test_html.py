"""_repr_html_ of managers, workspaces, chunked arrays and reports: names, bars, escaping."""

from __future__ import annotations

from pathlib import Path

import numpy as np

import oocarray as oc

MiB = 2**20
EVIL = "<script>alert('x')</script>"


def test_manager_html_is_the_tree_with_bars() -> None:
    with oc.Manager("etl", max_bytes="16M") as etl:
        a = np.ones(4 * MiB // 8)
        with etl.sub(EVIL) as evil:
            page = etl._repr_html_()
            evil_page = evil._repr_html_()
    assert "<script>" not in page and "<script>" not in evil_page
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;" in page
    assert "etl" in page and "16.0 MiB" in page
    assert "class='oc-bar'" in page and "width:25.0%" in page  # 4 MiB of 16 MiB
    assert "no budget" in page  # the child has none
    assert page.count("<tr>") == 3  # header, etl, its child
    del a


def test_workspace_html() -> None:
    ws = oc.Workspace(EVIL, learning="over_time")
    with ws:
        np.ones(1000)
    page = ws._repr_html_()
    ws.close()
    assert "<script>" not in page and "&lt;script&gt;" in page
    assert "oocarray.Workspace" in page
    assert "arena" in page and "cycles" in page and "learning=over_time" in page


def test_chunked_array_html(tmp_path: Path) -> None:
    path = tmp_path / "a<b>.zarr"
    x = oc.create(path, (1000, 10), "float32", chunks=(100, 10))
    x[...] = 1.0
    page = x._repr_html_()
    assert "<table" in page and "logical" in page and "on disk" in page
    assert "(1000, 10)" in page and "float32" in page and "(100, 10)" in page
    assert "zstd" in page
    assert "a&lt;b&gt;.zarr" in page and "a<b>" not in page
    assert "39.1 KiB" in page  # logical bytes
    assert "class='oc-bar'" in page  # stored against logical
    x.close()
    assert "closed" in x._repr_html_()


def test_report_html() -> None:
    with oc.Manager(EVIL, max_bytes="8M"):
        a = np.ones(MiB // 8)
        page = oc.memory_report()._repr_html_()
        del a
    assert "<script>" not in page and "&lt;script&gt;" in page
    assert "anonymous" in page and "file-backed" in page and "max_bytes" in page
    assert "oc-managers" in page and "class='oc-bar'" in page
