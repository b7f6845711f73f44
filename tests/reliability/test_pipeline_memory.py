"""The README's ETL pipeline within its budget (issue 21, item 5): every step of it
(``from_batches``, ``append``, ``oc.compute``, ``to_zarr``, ``as_ndarray().max()``) inside
``oc.Manager(max_bytes=BUDGET)`` on five times the budget of data keeps the process's resident
memory within baseline + budget + 32 MiB, during the step (its peak) and after it, in a child
under a cgroup memory limit of baseline + budget + 64 MiB; the baseline is the resident memory
after the imports.  What oocarray allocates for the work (decode and encode buffers, zstd
contexts, the pager's staging buffers, freed regions kept for reuse) counts against the budget
or is bounded by it, and is given back when each step ends.

The same bounds are checked without a cgroup (for any user); the cgroup run is skipped, with
the reason, where no memory cgroup can be made (not root, no memory controller), and both
where userfaultfd is unavailable (``as_ndarray`` of a zstd array needs it)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from oocarray._storage._paged._arrays import paging_available
from testkit import cgroup
from testkit.children import run_python

pytestmark = pytest.mark.no_sanitizer  # a cgroup limit: a sanitizer's runtime needs more

MiB = 1 << 20
BUDGET = 32 * MiB
DATA = 160 * MiB
SLACK = 32 * MiB  # what the bound allows over the budget
LIMIT_SLACK = 64 * MiB  # the cgroup's room over the budget

IMPORTS = """
import json, os, sys
import numpy as np
import zarr
import oocarray as oc
"""

# The README's pipeline (its ETL section, and as_ndarray() of the result), with the resident
# memory after each step and its peak during the step (VmHWM, reset before each step).
PIPELINE = (
    IMPORTS
    + """
def status(key):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    raise KeyError(key)

def reset_peak():
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")

budget, data, path = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
baseline = status("VmRSS")
steps = []

def step(name):
    steps.append({"step": name, "rss": status("VmRSS"), "peak": status("VmHWM")})
    print(json.dumps(steps[-1]), file=sys.stderr, flush=True)
    reset_peak()

rng = np.random.default_rng(0)
rows = data // (64 * 4)

def raw_blocks(rows):
    done = 0
    while done < rows:
        n = min(int(rng.integers(5_000, 20_000)), rows - done)
        done += n
        yield rng.normal(3.0, 2.0, (n, 64))

reset_peak()
with oc.Manager("etl", max_bytes=budget):
    x = oc.from_batches(raw_blocks(rows - 30_000), os.path.join(path, "raw.zarr"),
                        dtype="float32", chunks=(8192, 64))
    step("from_batches")
    for block in raw_blocks(30_000):
        x.append(block)
    del block
    step("append")
    mean, std = oc.compute(x.mean(axis=0, compute=False), x.std(axis=0, compute=False))
    step("compute")
    train = ((x - mean) / std).astype("f4").to_zarr(os.path.join(path, "train.zarr"),
                                                    chunks=(8192, 64))
    step("to_zarr")
    a = train.as_ndarray()
    top = float(a.max())
    del a
    step("as_ndarray().max()")
expected = max(float(train[i:i + 65536].max()) for i in range(0, len(train), 65536))
print(json.dumps({"baseline": baseline, "steps": steps, "rows": len(train),
                  "max": top, "expected": expected}))
"""
)


@pytest.fixture(scope="module")
def paging() -> None:
    """Skip where the pipeline's last step cannot run: as_ndarray() of zstd chunks."""
    ok, why = paging_available()
    if not ok:
        pytest.skip(f"as_ndarray() of zstd chunks cannot page here: {why}")


@pytest.fixture(scope="module")
def baseline(paging: None) -> int:
    """Resident memory after the imports, in a child of its own; skips where no memory
    cgroup can be made."""
    why = cgroup.unavailable(1 << 30)
    if why is not None:
        pytest.skip(f"no memory cgroup here: {why}")
    result = run_python(
        IMPORTS
        + """
with open("/proc/self/status") as f:
    print(next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmRSS:")))
"""
    )
    assert result.returncode == 0, result.stderr
    return int(result.stdout.split()[-1])


def _check(report: dict[str, Any]) -> None:
    """The right data, and every step within baseline + budget + SLACK, during and after."""
    assert report["rows"] == DATA // 256
    assert report["max"] == report["expected"]
    bound = report["baseline"] + BUDGET + SLACK
    over = [
        f"{s['step']}: resident {s['rss'] / MiB:.1f} MiB, peak {s['peak'] / MiB:.1f} MiB"
        for s in report["steps"]
        if s["rss"] > bound or s["peak"] > bound
    ]
    assert len(report["steps"]) == 5
    assert not over, (
        f"over baseline {report['baseline'] / MiB:.1f} + budget {BUDGET / MiB:.0f} + "
        f"{SLACK / MiB:.0f} MiB = {bound / MiB:.1f} MiB: {over}"
    )


def test_each_step_of_the_readme_pipeline_gives_its_memory_back(
    paging: None, tmp_path: Path
) -> None:
    """Without a cgroup (any user): resident memory after and during each step."""
    result = run_python(
        PIPELINE, str(BUDGET), str(DATA), str(tmp_path), env={"OMP_NUM_THREADS": "1"}, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    _check(json.loads(result.stdout.strip().splitlines()[-1]))


def test_the_readme_pipeline_is_not_killed_under_its_budget(baseline: int, tmp_path: Path) -> None:
    """In a cgroup of baseline + budget + LIMIT_SLACK: not OOM-killed, and within bounds."""
    limit = baseline + BUDGET + LIMIT_SLACK
    with cgroup.memory_cgroup(limit) as group:
        result = run_python(
            PIPELINE,
            str(BUDGET),
            str(DATA),
            str(tmp_path),
            env={"OMP_NUM_THREADS": "1"},
            timeout=300,
            wrap=group.command,
        )
        kills = group.oom_kills()
    assert result.returncode == 0, (
        f"killed or failed under a limit of {limit / MiB:.1f} MiB (rc {result.returncode}, "
        f"OOM kills {kills}); steps so far:\n{result.stderr[-3000:]}"
    )
    assert kills in (None, 0)
    _check(json.loads(result.stdout.strip().splitlines()[-1]))


def test_regions_freed_under_a_budget_are_kept_within_a_sixteenth_of_it() -> None:
    """The cache of freed regions is memory no budget counts: bounded by the budget."""
    result = run_python(
        """
import numpy as np, oocarray as oc
from oocarray import _native
_native.region_cache(-1)
with oc.Manager(max_bytes="32M"):
    arrays = [np.ones(1 << 20, np.uint8) for _ in range(8)]
    del arrays
print(_native.region_cache()[0])
"""
    )
    assert result.returncode == 0, result.stderr
    assert int(result.stdout.split()[-1]) <= 2 * MiB
