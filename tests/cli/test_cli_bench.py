"""``oocarray bench``: the benchmark runner, in this process."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.cli._helpers import Result


def test_bench_lists_the_benchmarks(cli: Callable[..., Result]) -> None:
    result = cli("bench", "--list")
    assert result.code == 0, result.err
    ids = [line.split()[0] for line in result.out.splitlines()]
    assert "W2" in ids
    assert "W9" in ids


def test_bench_runs_one_quick_benchmark(cli: Callable[..., Result]) -> None:
    result = cli("bench", "--only", "W2")
    assert result.code == 0, result.err
    assert "| W2 |" in result.out
    assert "running W2" in result.err


def test_bench_refuses_an_unknown_id_in_one_line(cli: Callable[..., Result]) -> None:
    result = cli("bench", "--only", "NOPE")
    assert result.code == 2
    assert "unknown benchmark" in result.one_error_line()


def test_bench_outside_a_checkout_says_where_to_run_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cli: Callable[..., Result]
) -> None:
    import oocarray._cli._bench as bench

    def missing() -> None:
        raise bench.UsageError("the benchmarks ship with the source", "oocarray bench")

    monkeypatch.setattr(bench, "find_runner", missing)
    result = cli("bench")
    assert result.code == 2
    assert "ship with the source" in result.one_error_line()
