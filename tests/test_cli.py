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
        [sys.executable, "-m", "oocarray._cli", "--version"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0
    assert result.stdout.startswith("oocarray ")
