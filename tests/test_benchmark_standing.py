"""BENCHMARKS.md's main table is the one the run records give (benchmarks/standing.py), and the
shared harness (benchmarks/_harness.py) reports missing peers and really starts cold rounds
from a cold page cache."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from benchmarks import __main__ as runner
from benchmarks import _results, standing
from benchmarks._harness import Peer, Sides, evict_page_cache
from benchmarks._timing import Ratio, Result, Row, TextRow


def test_benchmarks_md_shows_the_table_the_run_records_give() -> None:
    text = standing.BENCHMARKS_MD.read_text()
    assert standing.section(text) == standing.current(standing.IDS), (
        "BENCHMARKS.md's table is stale: run python -m benchmarks.standing --write"
    )


def _record(folder: Path, date: str, quick: bool, cache: str, ratio: float) -> Path:
    result = Result(
        rows=[Row("W5", "mean+std", 1.0, "dask", 2.0, Ratio(ratio, ratio, ratio), 0.67)],
        tables=[],
    )
    path = _results.write({"W5": result}, quick, folder, [1.5, 1.0, 1.0], page_cache=cache)
    record = json.loads(path.read_text())
    record["date"] = date
    named = folder / f"{date}-{cache}-{quick}.json"
    named.write_text(json.dumps(record))
    path.unlink()
    return named


def test_the_newest_full_run_of_each_page_cache_state_is_shown(tmp_path: Path) -> None:
    _record(tmp_path, "2026-11-01T00:00:00+00:00", False, "warm", 0.50)
    _record(tmp_path, "2026-11-03T00:00:00+00:00", False, "warm", 0.40)
    _record(tmp_path, "2026-11-04T00:00:00+00:00", True, "warm", 0.10)  # quick: not a record
    _record(tmp_path, "2026-11-02T00:00:00+00:00", False, "cold", 0.60)
    table = standing.current(["W5", "W7"], tmp_path)
    lines = table.splitlines()[2:]
    assert len(lines) == 3
    warm, cold, missing = lines
    assert "0.40x" in warm and "| warm |" in warm and "2026-11-03" in warm and "load 1.5" in warm
    assert "0.60x" in cold and "| cold |" in cold and "2026-11-02" in cold
    assert missing.startswith("| W7 | no run record yet |")
    assert "0.50x" not in table and "0.10x" not in table


def test_a_stale_table_is_found_and_rewritten_between_the_markers(tmp_path: Path) -> None:
    text = f"# title\n\n{standing.BEGIN}\n\nold table\n\n{standing.END}\n\nnotes after\n"
    assert standing.section(text) == "old table"
    new = standing.replaced(text, "| new |")
    assert standing.section(new) == "| new |"
    assert new.startswith("# title\n") and new.endswith("notes after\n")
    with pytest.raises(SystemExit, match="markers"):
        standing.section("no markers here")


def test_text_rows_and_missing_peers_render(tmp_path: Path) -> None:
    result = Result(
        rows=[
            TextRow("W4", "peak RSS", "250 MiB", "—", "—", "<= 320 MiB", "yes"),
            Row("W4", "vs a peer that is not installed", 1.0, "blosc2", None, None, 1.0),
        ],
        tables=[],
    )
    _results.write({"W4": result}, False, tmp_path, None)
    (row_text, row_missing) = standing.current(["W4"], tmp_path).splitlines()[2:]
    assert "| 250 MiB |" in row_text and "| yes |" in row_text
    assert "| missing |" in row_missing


def test_a_missing_peer_is_reported_missing_not_dropped() -> None:
    def not_installed() -> object:
        raise ImportError("No module named 'absent_peer'")

    sides = Sides.discover(
        "WX",
        {
            "oocarray": Peer("oocarray", lambda: lambda: (1.0, 42)),
            "absent": Peer("absent 1.0", not_installed),  # type: ignore[arg-type]
        },
    )
    assert list(sides.runs) == ["oocarray"]
    assert sides.notes() == [
        "WX: absent is not installed (No module named 'absent_peer'): its side is missing."
    ]
    seen: list[tuple[str, object]] = []
    sides.check(lambda name, got: seen.append((name, got)))
    assert seen == [("oocarray", 42)]
    timings = sides.time(rounds=2)
    row = timings.row("a workload", "oocarray", "absent", 1.0)
    assert row.peer_s is None and row.ratio is None
    assert row.cells()[3] == "missing"


def _resident_bytes(path: Path) -> int:
    out = subprocess.run(
        ["fincore", "--bytes", "--noheadings", "--output", "RES", str(path)],
        capture_output=True,
        text=True,
        check=True,
    )
    return int(out.stdout.split()[0])


@pytest.mark.skipif(shutil.which("fincore") is None, reason="util-linux fincore not installed")
def test_cold_rounds_start_every_side_with_the_files_out_of_the_page_cache(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    path = data / "chunk"
    path.write_bytes(os.urandom(4 << 20))
    path.read_bytes()
    assert _resident_bytes(path) > 0

    seen: dict[str, list[int]] = {"a": [], "b": []}

    def side(name: str) -> tuple[float, object]:
        seen[name].append(_resident_bytes(path))
        path.read_bytes()  # each side warms the file for the next
        return 1.0, None

    sides = Sides.discover(
        "WX",
        {
            "a": Peer("a", lambda: lambda: side("a")),
            "b": Peer("b", lambda: lambda: side("b")),
        },
    )
    warm = sides.time(rounds=2, files=[str(data)])
    assert warm.cache == "warm page cache"
    assert all(resident > 0 for resident in seen["a"] + seen["b"])
    seen = {"a": [], "b": []}
    cold = sides.time(rounds=2, files=[str(data)], cold=True)
    assert cold.cache == "cold page cache"
    assert seen == {"a": [0, 0], "b": [0, 0]}
    assert evict_page_cache([str(data)]) == 1
    with pytest.raises(ValueError, match="needs the files"):
        sides.time(rounds=1, cold=True)


def test_the_runner_runs_cold_only_the_read_workloads(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="no cold run"):
        runner.main(["--cold", "--only", "W2", "--quick", "--record", str(tmp_path)])
    assert runner.selected(None, cold=True) == ["W5", "W7", "W7R", "W8", "W11"]
