"""``oocarray stats``: every format, axes, NaNs, JSON, and bad input."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from tests.cli._helpers import DATA, Result, write


def test_stats_json_on_every_format(source: tuple[str, Path], cli: Callable[..., Result]) -> None:
    _, path = source
    result = cli("stats", path, "--json", "--max-ram", "64M")
    assert result.code == 0, result.err
    stats = result.json()
    assert stats["shape"] == [20, 6]
    assert stats["axis"] == 0
    columns = stats["columns"]
    assert [c["index"] for c in columns] == list(range(6))
    np.testing.assert_allclose([c["mean"] for c in columns], np.nanmean(DATA, axis=0), rtol=1e-5)
    np.testing.assert_allclose([c["std"] for c in columns], np.nanstd(DATA, axis=0), rtol=1e-4)
    np.testing.assert_allclose([c["min"] for c in columns], np.nanmin(DATA, axis=0), rtol=1e-6)
    np.testing.assert_allclose([c["max"] for c in columns], np.nanmax(DATA, axis=0), rtol=1e-6)
    assert [c["nan_count"] for c in columns] == [0, 0, 1, 0, 0, 0]
    assert 0 < stats["peak_managed_bytes"] <= 64 << 20


def test_stats_text(source: tuple[str, Path], cli: Callable[..., Result]) -> None:
    _, path = source
    result = cli("stats", path)
    assert result.code == 0, result.err
    lines = result.out.splitlines()
    assert "shape (20, 6), float32" in lines[0]
    assert lines[1].split() == ["column", "mean", "std", "min", "max", "nan"]
    assert lines[4].split()[0] == "2"
    assert lines[4].split()[-1] == "1"  # the NaN
    assert "budget" in lines[-1]


def test_stats_axes(tmp_path: Path, cli: Callable[..., Result]) -> None:
    path = write("zarr3", tmp_path)
    rows = cli("stats", path, "--axis", "1", "--json").json()["columns"]
    assert len(rows) == 20
    assert rows[3]["nan_count"] == 1
    assert rows[0]["max"] == pytest.approx(DATA[0].max())
    whole = cli("stats", path, "--axis", "all", "--json").json()["columns"]
    assert len(whole) == 1
    assert whole[0]["index"] is None
    assert whole[0]["mean"] == pytest.approx(float(np.nanmean(DATA)), rel=1e-5)
    assert cli("stats", path, "--axis", "-1", "--json").json()["columns"][0]["index"] == 0
    result = cli("stats", path, "--axis", "2")
    assert result.code == 2
    assert "out of range" in result.one_error_line()


def test_stats_long_tables_are_cut_unless_all(tmp_path: Path, cli: Callable[..., Result]) -> None:
    path = write("npy", tmp_path)
    cut = cli("stats", path, "--axis", "1")
    assert "... 0 more" not in cut.out
    assert "more rows" not in cut.out  # 20 rows: all shown
    np.save(path, np.ones((3, 50), np.int32))
    cut = cli("stats", path)
    assert "... 30 more rows" in cut.out
    every = cli("stats", path, "--all")
    assert "more rows" not in every.out
    assert len(every.out.splitlines()) == 50 + 3


def test_stats_of_integers_bools_and_an_all_nan_column(
    tmp_path: Path, cli: Callable[..., Result]
) -> None:
    np.save(tmp_path / "i.npy", np.arange(12, dtype=np.int64).reshape(4, 3))
    rows = cli("stats", tmp_path / "i.npy", "--json").json()["columns"]
    assert [r["mean"] for r in rows] == [4.5, 5.5, 6.5]
    assert [r["nan_count"] for r in rows] == [0, 0, 0]
    np.save(tmp_path / "b.npy", np.array([[True, False], [True, True]]))
    assert cli("stats", tmp_path / "b.npy", "--json").code == 0
    nan = np.ones((4, 2))
    nan[:, 1] = np.nan
    np.save(tmp_path / "n.npy", nan)
    rows = cli("stats", tmp_path / "n.npy", "--json").json()["columns"]
    assert rows[1] == {
        "index": 1,
        "mean": None,
        "std": None,
        "min": None,
        "max": None,
        "nan_count": 4,
    }
    text = cli("stats", tmp_path / "n.npy")
    assert text.code == 0
    assert "nan" in text.out.splitlines()[3]


def test_stats_bad_input(tmp_path: Path, cli: Callable[..., Result]) -> None:
    assert "does not exist" in cli("stats", tmp_path / "nope.h5").one_error_line()
    np.save(tmp_path / "s.npy", np.array(["a", "b"]))
    result = cli("stats", tmp_path / "s.npy")
    assert result.code == 1
    assert "numeric" in result.one_error_line()
    np.save(tmp_path / "e.npy", np.zeros((0, 2)))
    assert "empty" in cli("stats", tmp_path / "e.npy").one_error_line()
    (tmp_path / "x.bin").write_bytes(b"\x00" * 64)
    assert cli("stats", tmp_path / "x.bin").code == 1


def test_stats_of_a_damaged_zarr_chunk(tmp_path: Path, cli: Callable[..., Result]) -> None:
    path = write("zarr3", tmp_path)
    chunk = next(p for p in path.rglob("*") if p.is_file() and p.name != "zarr.json")
    chunk.write_bytes(b"garbage" * 10)
    result = cli("stats", path)
    assert result.code == 1
    result.one_error_line()


def test_stats_of_a_truncated_npy(tmp_path: Path, cli: Callable[..., Result]) -> None:
    path = write("npy", tmp_path)
    path.write_bytes(path.read_bytes()[:-100])
    result = cli("stats", path)
    assert result.code == 1
    result.one_error_line()
