"""The command line as a whole: help, versions, usage errors, and end-to-end runs."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from testkit import children
from tests.cli._helpers import Result


@pytest.mark.parametrize("command", [[], ["info"], ["stats"], ["convert"], ["demo"], ["bench"]])
def test_help_everywhere(command: list[str], cli: Callable[..., Result]) -> None:
    result = cli(*command, "--help")
    assert result.code == 0
    assert result.out.startswith("usage: oocarray")
    assert result.err == ""


def test_version(cli: Callable[..., Result]) -> None:
    result = cli("--version")
    assert result.code == 0
    assert result.out.startswith("oocarray ")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "the following arguments are required: COMMAND"),
        (["frobnicate"], "invalid choice: 'frobnicate'"),
        (["info"], "the following arguments are required: path"),
        (["stats", "x.npy", "--max-ram", "lots"], "argument --max-ram"),
        (["stats", "x.npy", "--axis", "one"], "expected an axis number"),
        (["convert", "a.npy"], "required: dst"),
        (["convert", "a.npy", "b.zarr", "--chunks", "4,x"], "positive integers"),
        (["convert", "a.npy", "b.zarr", "--chunks", "0,4"], "at least 1"),
        (["demo", "--size", "-1G"], "argument --size"),
        (["info", "x.npy", "--bogus"], "unrecognized arguments: --bogus"),
    ],
)
def test_usage_errors_are_one_line_and_exit_2(
    args: list[str], message: str, cli: Callable[..., Result]
) -> None:
    result = cli(*args)
    assert result.code == 2
    line = result.one_error_line()
    assert message in line
    assert "--help" in line


def run_cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return children.run(["-m", "oocarray", *args], cwd=cwd, keep_settings=True)


def test_python_dash_m_oocarray_runs_the_command_line() -> None:
    result = run_cli("--version")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("oocarray ")


def test_end_to_end_errors_are_one_line_without_a_traceback(tmp_path: Path) -> None:
    missing = run_cli("info", str(tmp_path / "missing.zarr"))
    assert missing.returncode == 1
    assert missing.stderr.count("\n") == 1
    assert missing.stderr.startswith("oocarray info: error: ")
    assert "does not exist" in missing.stderr
    usage = run_cli("stats")
    assert usage.returncode == 2
    assert usage.stderr.count("\n") == 1
    assert "Traceback" not in missing.stderr + usage.stderr


def test_end_to_end_convert_then_info_and_stats(tmp_path: Path) -> None:
    import numpy as np

    np.save(tmp_path / "a.npy", np.arange(24.0).reshape(6, 4))
    converted = run_cli("convert", "a.npy", "a.zarr", "--chunks", "2,4", cwd=tmp_path)
    assert converted.returncode == 0, converted.stderr
    info = run_cli("info", "a.zarr", "--json", cwd=tmp_path)
    assert info.returncode == 0, info.stderr
    assert '"chunks": [\n    2,\n    4\n  ]' in info.stdout
    stats = run_cli("stats", "a.zarr", cwd=tmp_path)
    assert stats.returncode == 0, stats.stderr
    assert "mean" in stats.stdout


def test_a_traceback_only_when_asked(tmp_path: Path, cli: Callable[..., Result]) -> None:
    with pytest.raises(FileNotFoundError):
        cli("--traceback", "info", tmp_path / "missing.npy")


def test_ctrl_c_exits_130_in_one_line(
    monkeypatch: pytest.MonkeyPatch, cli: Callable[..., Result]
) -> None:
    import oocarray._cli._info as info

    def interrupted(args: object) -> int:
        raise KeyboardInterrupt

    monkeypatch.setattr(info, "run", interrupted)
    result = cli("info", "x.npy")
    assert result.code == 130
    assert result.err == "oocarray info: interrupted\n"


def test_an_unexpected_error_is_one_line_naming_it(
    monkeypatch: pytest.MonkeyPatch, cli: Callable[..., Result]
) -> None:
    import oocarray._cli._info as info

    def broken(args: object) -> int:
        raise RuntimeError("something odd\nmore detail")

    monkeypatch.setattr(info, "run", broken)
    result = cli("info", "x.npy")
    assert result.code == 1
    line = result.one_error_line()
    assert "unexpected RuntimeError: something odd" in line
    assert "--traceback" in line
