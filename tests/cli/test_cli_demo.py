"""``oocarray demo``: the main job, tiny, in this process and end to end."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest

from testkit import children
from tests.cli._helpers import Result

MIB = 1 << 20


def test_demo_runs_every_step(tmp_path: Path, cli: Callable[..., Result]) -> None:
    result = cli("demo", "--size", "4M", "--max-ram", "64M", "--keep", tmp_path, "--no-progress")
    assert result.code == 0, result.err
    out = result.out
    for step in ("1. generate", "2. statistics", "3. normalise", "4. train", "5. memory"):
        assert step in out
    assert 'oc.Manager("demo", max_bytes="64M")' in out
    losses = [float(v) for v in re.findall(r"epoch \d loss (.*)", out)[0].split()]
    assert losses[-1] < losses[0]  # the model learns
    assert "target" in out
    assert (tmp_path / "raw.zarr" / "zarr.json").is_file()
    assert (tmp_path / "normalised.zarr" / "zarr.json").is_file()
    info = cli("info", tmp_path / "raw.zarr", "--json").json()
    assert info["codec"] == "blosc(lz4)"
    assert info["logical_bytes"] == 4 * MIB


def test_demo_budget_is_an_alias_of_max_ram(cli: Callable[..., Result]) -> None:
    result = cli("demo", "--size", "2M", "--budget", "32M", "--epochs", "1", "--no-progress")
    assert result.code == 0, result.err
    assert 'max_bytes="32M"' in result.out
    assert "Data in " in result.out
    assert "removed at the end" in result.out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--max-ram", "lots"], "argument --max-ram"),
        (["--budget", "2Gb"], "bits"),
        (["--max-ram", "1M"], "at least 16.0 MiB"),
        (["--size", "1K"], "--size must be at least"),
        (["--epochs", "0"], "--epochs must be at least 1"),
        (["--size", "1P"], "free"),
    ],
)
def test_demo_refuses_what_it_cannot_run_in_one_line(
    args: list[str], message: str, cli: Callable[..., Result]
) -> None:
    result = cli("demo", *args)
    assert result.code in (1, 2)
    assert message in result.one_error_line()


def test_demo_end_to_end_peaks_below_its_budget() -> None:
    budget_mib = 64
    result = children.run(
        ["-m", "oocarray", "demo", "--size", "16M", "--max-ram", "64M"], keep_settings=True
    )
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    text = " ".join(result.stdout.split())
    peak = re.search(r"Peak resident memory ([\d.]+) MiB .*? and ([\d.]+) MiB \(VmHWM", text)
    assert peak is not None, result.stdout
    sampled, hwm = float(peak.group(1)), float(peak.group(2))
    # The interpreter and its libraries take about 30 MiB before anything runs, and buffers
    # that NumPy does not allocate (codecs, zarr) come on top of the budget's NumPy memory.
    assert sampled < budget_mib + 64, result.stdout
    assert hwm < budget_mib + 96, result.stdout
    numpy_peak = re.search(r"total\s+[\d.]+ s\s+([\d.]+) MiB", result.stdout)
    assert numpy_peak is not None
    assert float(numpy_peak.group(1)) <= budget_mib
