"""A two-pass rechunk to local disk resumes in either pass: its middle store is kept inside the
output array's directory with a progress marker of its own, and removed at the end."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import zarr

import oocarray as oc
from oocarray._compute._rechunk import _run
from oocarray._compute._rechunk._resume import MARKER, Marker, units


def _two_pass_source(tmp_path: Path) -> tuple[oc.ChunkedArray, np.ndarray]:
    values = np.random.default_rng(26).random((64, 32, 32)).astype("f4")  # 256 KiB
    x = oc.create(tmp_path / "src.zarr", values.shape, values.dtype, chunks=(1, 32, 32))
    x[...] = values
    plan = oc.rechunk(x, (64, 8, 8), max_mem="96K", dry_run=True, strategy="two-pass")
    assert plan.strategy == "two-pass" and len(plan.passes) == 2
    return x, values


def _count_reads(monkeypatch: pytest.MonkeyPatch, x: oc.ChunkedArray) -> list[object]:
    """The keys ``x`` is read with from now on (until the patch is undone)."""
    reads: list[object] = []
    original = type(x).__getitem__

    def counted(self, key):
        if self is x:
            reads.append(key)
        return original(self, key)

    monkeypatch.setattr(type(x), "__getitem__", counted)
    return reads


def _stop_after(monkeypatch: pytest.MonkeyPatch, path_part: str, count: int) -> None:
    """Ctrl-C once ``count`` blocks of the marker whose path holds ``path_part`` are recorded."""
    original = Marker.record

    def record(self: Marker, unit: int) -> None:
        original(self, unit)
        if path_part in self.path and len(self.done) >= count:
            raise KeyboardInterrupt

    monkeypatch.setattr(Marker, "record", record)


def test_a_rerun_continues_pass_one_where_it_stopped(tmp_path, monkeypatch):
    x, values = _two_pass_source(tmp_path)
    out = tmp_path / "out.zarr"
    middle = out / _run.INTERMEDIATE_NAME
    _stop_after(monkeypatch, _run.INTERMEDIATE_NAME, 5)
    with pytest.raises(KeyboardInterrupt):
        oc.rechunk(x, (64, 8, 8), out, max_mem="96K", strategy="two-pass", progress=False)
    monkeypatch.undo()
    recorded = units(zarr.open_array(middle, mode="r").attrs[MARKER]["done"])
    assert len(recorded) >= 5
    assert MARKER in zarr.open_array(out, mode="r").attrs
    source_reads = _count_reads(monkeypatch, x)
    y = oc.rechunk(x, (64, 8, 8), out, max_mem="96K", strategy="two-pass", progress=False)
    monkeypatch.undo()
    np.testing.assert_array_equal(y[...], values)
    # Pass 1 read only the blocks its marker did not record (8 blocks of 8 planes in all).
    assert len(source_reads) == 8 - len(recorded)
    assert {key[0].start // 8 for key in source_reads}.isdisjoint(recorded)
    assert not middle.exists()
    assert MARKER not in zarr.open_array(out, mode="r").attrs
    np.testing.assert_array_equal(zarr.open_array(out, mode="r")[...], values)


def test_a_rerun_after_pass_one_goes_straight_to_pass_two(tmp_path, monkeypatch):
    x, values = _two_pass_source(tmp_path)
    out = tmp_path / "out.zarr"
    original = Marker.record

    def record(self: Marker, unit: int) -> None:
        original(self, unit)
        if _run.INTERMEDIATE_NAME not in self.path:  # the output's marker: pass 2 has begun
            raise KeyboardInterrupt

    monkeypatch.setattr(Marker, "record", record)
    with pytest.raises(KeyboardInterrupt):
        oc.rechunk(x, (64, 8, 8), out, max_mem="96K", strategy="two-pass", progress=False)
    monkeypatch.undo()
    middle = out / _run.INTERMEDIATE_NAME
    total = len(units(zarr.open_array(middle, mode="r").attrs[MARKER]["done"]))
    assert total == 8  # every block of pass 1 (64 planes, 8 a block)
    source_reads = _count_reads(monkeypatch, x)
    y = oc.rechunk(x, (64, 8, 8), out, max_mem="96K", strategy="two-pass", progress=False)
    monkeypatch.undo()
    assert source_reads == []  # pass 1 was whole: the source is not read again
    np.testing.assert_array_equal(y[...], values)
    assert not middle.exists()


def test_the_middle_is_not_reused_for_another_source(tmp_path, monkeypatch):
    x, values = _two_pass_source(tmp_path)
    out = tmp_path / "out.zarr"
    _stop_after(monkeypatch, _run.INTERMEDIATE_NAME, 5)
    with pytest.raises(KeyboardInterrupt):
        oc.rechunk(x, (64, 8, 8), out, max_mem="96K", strategy="two-pass", progress=False)
    monkeypatch.undo()
    other = np.flip(values, axis=0).copy()
    z = oc.create(tmp_path / "other.zarr", other.shape, other.dtype, chunks=(1, 32, 32))
    z[...] = other
    y = oc.rechunk(z, (64, 8, 8), out, max_mem="96K", strategy="two-pass", mode="w", progress=False)
    np.testing.assert_array_equal(y[...], other)
    assert not (out / _run.INTERMEDIATE_NAME).exists()
