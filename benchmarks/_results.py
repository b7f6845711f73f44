"""Machine-readable run records: what ``python -m benchmarks`` measured, as JSON.

A full run (not ``--quick``) writes one file into ``benchmarks/results/runs/`` (or
``--record DIR``): the commit, the date, the machine and its load before and after, and each
benchmark's rows (times per operation, ratio median and interquartile range, target, met),
extra tables and notes.  ``python -m benchmarks.table FILE`` prints the main table of a record
as Markdown, the same rows ``python -m benchmarks`` printed.
"""

from __future__ import annotations

import dataclasses
import datetime
import itertools
import json
import os
import platform
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from benchmarks._timing import ROW_HEADERS, Ratio, Result, Row, Table, TextRow, markdown_table

__all__ = ["RUNS", "head_commit", "load", "machine", "render_rows", "results_of", "write"]

ROOT = Path(__file__).resolve().parent.parent
RUNS = ROOT / "benchmarks" / "results" / "runs"
FORMAT = 1


def head_commit() -> str | None:
    try:
        out = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        )
    except (OSError, subprocess.CalledProcessError):
        return None
    return out.stdout.strip() or None


def machine() -> dict[str, Any]:
    """The machine a run measured: cores, memory, kernel, Python and NumPy, and its load."""
    import numpy as np

    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return {
        "cpus": os.cpu_count(),
        "memory_bytes": memory,
        "kernel": platform.release(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "load_average": list(os.getloadavg()),
    }


def _row(row: Row | TextRow) -> dict[str, Any]:
    kind = "times" if isinstance(row, Row) else "text"
    return {"kind": kind, **dataclasses.asdict(row)}


def write(
    results: Mapping[str, Result],
    quick: bool,
    folder: Path = RUNS,
    load_before: Any = None,
    page_cache: str = "warm",
    measured_at: str | None = None,
) -> Path:
    """Write one run's record into ``folder``; its path.  ``page_cache``: whether the read
    workloads ran from a warm page cache or evicted their files before every side (cold);
    ``measured_at``: the commit the run started at (taken at the start, as a tree may move on
    while a long run goes; by default the commit now)."""
    now = datetime.datetime.now(datetime.UTC)
    commit = measured_at or head_commit()
    record = {
        "format": FORMAT,
        "date": now.isoformat(timespec="seconds"),
        "commit": commit,
        "quick": quick,
        "page_cache": page_cache,
        "machine": machine() | {"load_average_before": load_before},
        "benchmarks": {
            key: {
                "rows": [_row(row) for row in result.rows],
                "tables": [dataclasses.asdict(table) for table in result.tables],
                "notes": list(result.notes),
            }
            for key, result in results.items()
        },
    }
    folder.mkdir(parents=True, exist_ok=True)
    stem = f"{now:%Y-%m-%dT%H%M%SZ}-{commit or 'nocommit'}"
    for attempt in itertools.count():  # never over an earlier record of the same second
        path = folder / (stem + (f"-{attempt}" if attempt else "") + ".json")
        try:
            with path.open("x") as out:
                out.write(json.dumps(record, indent=1) + "\n")
        except FileExistsError:
            continue
        return path
    raise AssertionError("unreachable")


def _from_dict(row: dict[str, Any]) -> Row | TextRow:
    fields = {k: v for k, v in row.items() if k != "kind"}
    if row["kind"] == "text":
        return TextRow(**fields)
    ratio = fields.pop("ratio")
    return Row(**fields, ratio=None if ratio is None else Ratio(**ratio))


def load(path: Path) -> dict[str, Result]:
    """The results of a record, benchmark by benchmark, as ``python -m benchmarks`` had them."""
    return results_of(json.loads(path.read_text()), path)


def results_of(record: dict[str, Any], path: Path) -> dict[str, Result]:
    """The results of a record already read from ``path`` (named in errors)."""
    if record.get("format") != FORMAT:
        raise ValueError(f"{path}: not a run record of format {FORMAT}")
    return {
        key: Result(
            rows=[_from_dict(row) for row in entry["rows"]],
            tables=[Table(t["title"], tuple(t["headers"]), t["rows"]) for t in entry["tables"]],
            notes=entry["notes"],
        )
        for key, entry in record["benchmarks"].items()
    }


def render_rows(results: Mapping[str, Result]) -> str:
    """The main table of every benchmark's rows, as Markdown."""
    rows = [row.cells() for result in results.values() for row in result.rows]
    return markdown_table(ROW_HEADERS, rows)
