"""The oocarray command line."""

from __future__ import annotations

import subprocess
import sys

import pytest

from oocarray._cli import main


def test_demo_runs_and_shows_the_tree(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--budget", "32M"]) == 0
    out = capsys.readouterr().out
    assert "etl [open]" in out
    assert "batch-3 [open]" in out
    assert "placed on disk" in out
    assert "'mmap'" in out
    assert "MemoryBudgetError" in out
    assert "etl.closed=True" in out


def test_demo_rejects_a_bad_budget(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--budget", "lots"]) == 2
    assert "--budget" in capsys.readouterr().err


def test_console_script_entry_point() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "oocarray", "--version"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0
    assert result.stdout.startswith("oocarray ")


@pytest.mark.parametrize(
    ("budget", "message"),
    [("0", "at least 1.0 MiB"), ("1P", "the spill directory has"), ("2Gb", "bits")],
)
def test_demo_refuses_a_budget_it_cannot_run_in_one_line(
    budget: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["demo", "--budget", budget]) == 2
    captured = capsys.readouterr()
    assert captured.err.startswith("oocarray: error: --budget")
    assert message in captured.err
    assert len(captured.err.strip().splitlines()) == 1
    assert "Traceback" not in captured.err + captured.out


def test_python_dash_m_oocarray_runs_the_command_line() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "oocarray", "--version"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("oocarray ")
