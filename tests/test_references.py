"""References in comments, docstrings and the README point at files, tests and names that
exist (``tools/check_references.py``)."""

from __future__ import annotations

from pathlib import Path

from tools import check_references

# native/ and the benchmarks name the workplace's notes and performance targets, which are not
# in the repository.
CHECKED = (
    "README.md",
    "docs",
    "tests",
    "tools",
    "oocarray/__init__.py",
    "oocarray/errors.py",
    "oocarray/dask.py",
    "oocarray/_memory",
    "oocarray/_storage",
    "oocarray/_compute",
    "oocarray/_feed",
    "oocarray/_diagnostics",
    "oocarray/_cli",
)


def test_references_resolve() -> None:
    problems = [p for path in check_references.files(CHECKED) for p in check_references.check(path)]
    assert problems == []


def test_the_check_sees_a_stale_reference(tmp_path: Path) -> None:
    stale = tmp_path / "stale.py"
    stale.write_text(
        '"""See ``tests/memory/test_gone.py`` and ``oocarray._memory._manager.gone``."""\n'
        "# and oocarray/_memory/_manager.py::Manager, which is there\n"
    )
    problems = list(check_references.check(str(stale)))
    assert len(problems) == 2
    assert "tests/memory/test_gone.py (no such file)" in problems[0]
    assert "oocarray._memory._manager.gone (does not resolve)" in problems[1]
