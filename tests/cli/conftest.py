"""Fixtures of the command-line tests: a runner of ``oocarray`` in this process, and tiny
arrays in every format it reads."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from oocarray._cli import main
from tests.cli._helpers import FORMATS, Result, write


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str]) -> Callable[..., Result]:
    """Run ``oocarray ARGS`` in this process; returns the exit status and the output."""

    def run(*args: object) -> Result:
        code = main([str(a) for a in args])
        captured = capsys.readouterr()
        return Result(code, captured.out, captured.err)

    return run


@pytest.fixture(params=FORMATS)
def source(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, Path]:
    """The test data in each format: (format, path)."""
    fmt = str(request.param)
    return fmt, write(fmt, tmp_path)
