"""Run records of the benchmarks (benchmarks/_results.py): what a run wrote reads back as the
same rows, and ``python -m benchmarks --record`` writes one."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks import __main__ as runner
from benchmarks import _results
from benchmarks._timing import Ratio, Result, Row, Table, TextRow


def test_a_record_reads_back_as_the_rows_it_was_written_from(tmp_path: Path) -> None:
    results = {
        "W2": Result(
            rows=[
                Row("W2", "np.empty", 9e-8, "plain NumPy", 8e-8, Ratio(1.1, 1.05, 1.2), 1.2),
                Row("W2 (CPU)", "cpu", 9e-8, "plain NumPy", None, None),
            ],
            tables=[Table("extra", ("a", "b"), [["1", "2"]])],
            notes=["a note"],
        ),
        "W4": Result(rows=[TextRow("W4", "peak", "250 MiB", "-", "-", "<= 320", "yes")], tables=[]),
    }
    path = _results.write(results, quick=True, folder=tmp_path, load_before=[1.0, 1.0, 1.0])
    record = json.loads(path.read_text())
    assert record["quick"] is True and record["machine"]["cpus"] >= 1
    assert record["machine"]["load_average_before"] == [1.0, 1.0, 1.0]
    back = _results.load(path)
    assert [r.render() for r in back.values()] == [r.render() for r in results.values()]
    assert _results.render_rows(back).count("\n| W") == 3


def test_the_runner_writes_a_record_where_asked(tmp_path: Path) -> None:
    assert runner.main(["--only", "W2", "--quick", "--record", str(tmp_path)]) == 0
    (path,) = tmp_path.glob("*.json")
    rows = _results.load(path)["W2"].rows
    assert [row.id for row in rows] == ["W2", "W2 (CPU)"]
