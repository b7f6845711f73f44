"""Hard memory limits (issue 15, item 2): in a child process under a cgroup memory limit of
320 MiB, work on several times that much data completes with its data intact under
``oc.Manager(max_bytes="256M")``, where the plain-NumPy equivalent is killed by the kernel.

The children are those of benchmark W4-hard (``benchmarks/w4_hard.py``): arrays allocated and
read back, a streaming mean/std of a zarr array through the compute layer, and an epoch of
``oc.batches(shuffle="chunks")``.  512 MiB per workload by default; 4 GiB of arrays and a
2 GiB zarr array with ``OOCARRAY_RELIABILITY_LONG=1``.  Skipped, with the reason, where no
memory cgroup can be made (not root, no memory controller)."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks import w4_hard
from testkit import cgroup
from tests.reliability._helpers import LONG

MiB = 1 << 20
ARRAYS_BYTES = (4096 if LONG else 512) * MiB
ZARR_BYTES = (2048 if LONG else 512) * MiB
TIMEOUT = 600 if LONG else 120


@pytest.fixture(scope="module")
def cgroups() -> None:
    """Skip the module where no memory cgroup can be made."""
    why = cgroup.unavailable(w4_hard.LIMIT)
    if why is not None:
        pytest.skip(f"no memory cgroup here: {why}")


@pytest.fixture(scope="module")
def data(cgroups: None, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The zarr array of the reduction and the epoch, with its reference statistics."""
    path = tmp_path_factory.mktemp("w4-hard")
    w4_hard.make_data(str(path), ZARR_BYTES)
    (path / "spill").mkdir()
    return path


def _check(ours: w4_hard.Outcome, plain: w4_hard.Outcome) -> None:
    assert plain.killed, f"plain NumPy was not killed: rc {plain.returncode} {plain.stderr[-500:]}"
    assert plain.oom_kills in (None, 1), plain
    assert ours.returncode == 0, f"killed or failed: rc {ours.returncode}\n{ours.stderr[-2000:]}"
    assert ours.report is not None and ours.report["intact"], ours.report
    assert ours.oom_kills in (None, 0), ours


def test_arrays_over_the_limit_complete_under_a_budget(data: Path) -> None:
    size = str(ARRAYS_BYTES)
    spill = str(data / "spill")
    ours = w4_hard.run_limited("arrays", "oc", size, spill_dir=spill, timeout=TIMEOUT)
    plain = w4_hard.run_limited("arrays", "numpy", size, spill_dir=spill, timeout=TIMEOUT)
    _check(ours, plain)
    assert [p for p in (data / "spill").rglob("*") if not p.is_dir()] == []


@pytest.mark.parametrize("workload", ["reduce", "epoch"])
def test_a_zarr_array_over_the_limit_is_reduced_and_fed(data: Path, workload: str) -> None:
    spill = str(data / "spill")
    ours = w4_hard.run_limited(workload, "oc", str(data), spill_dir=spill, timeout=TIMEOUT)
    plain = w4_hard.run_limited(workload, "numpy", str(data), spill_dir=spill, timeout=TIMEOUT)
    _check(ours, plain)
