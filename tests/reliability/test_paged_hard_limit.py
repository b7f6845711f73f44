"""Chunk-backed ndarrays under a hard memory limit (issue 13): in a child process under a
cgroup memory limit of 256 MiB, ``np.mean``, ``np.percentile``, scikit-learn's
``IncrementalPCA.partial_fit`` loop and a SciPy filter over ``oc.open(store).as_ndarray()`` of
a 320 MiB zstd store (inside ``oc.Manager(max_bytes="32M")``) complete with the same results as the
same code on the raw data, and no OOM kill; plain NumPy loading the raw ``.npy`` in the same
cgroup is killed.

The children, the data and the references are those of benchmark W11-hard
(``benchmarks/w11_hard/``, 8 GiB in 1 GiB there): references are computed outside the
cgroup from ``np.load(npy, mmap_mode="r")``, in column and row blocks, and compared exactly
(means, percentiles, the filter's output per column by SHA-256) or up to sign and a float32
tolerance (the PCA's components).  One child runs the four computations in turn; each test
checks one.  ``OOCARRAY_RELIABILITY_LONG=1`` uses a 2 GiB store.  Skipped, with the reason,
where no memory cgroup can be made or userfaultfd is unavailable; the filter's test where
SciPy is not installed.

The budget leaves the 256 MiB room for what it does not count: the interpreter and its
modules (about 48 MiB anonymous, and 82 MiB more for scikit-learn's imports), LAPACK's
work arrays in the PCA's SVD (malloc'd, not NumPy's) and the page cache of the files read.
Column blocks of 4 columns keep each ``np.percentile`` copy (20 MiB) and its partition
buffer inside the budget.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest

from benchmarks import w11_hard
from oocarray._storage._paged._arrays import paging_available
from testkit import cgroup
from tests.reliability._helpers import LONG

MiB = 1 << 20
# 10 times the budget and more than the limit: plain NumPy cannot load it there, and every
# step must stream.  (512 MiB took 40 % longer and tests nothing more.)
STORE_BYTES = (2048 if LONG else 320) * MiB
LIMIT = 256 * MiB
BUDGET = 32 * MiB
PERCENTILE_COLUMNS = 4
TIMEOUT = 900 if LONG else 300
HAVE_SCIPY = importlib.util.find_spec("scipy") is not None

pytestmark = [
    pytest.mark.no_sanitizer,  # a cgroup limit: a sanitizer's runtime needs more
    # Every test on one worker: the module's fixtures (a 320 MiB store, its reference and the
    # child's run, about 70 s) are then made once, not once per worker.
    pytest.mark.xdist_group("paged-hard-limit"),
]


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> w11_hard.Data:
    """The store, the raw .npy and the reference, where a cgroup and userfaultfd exist."""
    ok, why = paging_available()
    if not ok:
        pytest.skip(f"no chunk-backed ndarrays here: {why}")
    why = cgroup.unavailable(LIMIT)
    if why is not None:
        pytest.skip(f"no memory cgroup here: {why}")
    data, _ = w11_hard.make_data(str(tmp_path_factory.mktemp("w11-hard")), STORE_BYTES)
    w11_hard.run_reference(data, timeout=TIMEOUT)
    return data


@pytest.fixture(scope="module")
def paged(data: w11_hard.Data) -> tuple[w11_hard.Outcome, dict[str, Any]]:
    """One child in the cgroup running every computation on ``as_ndarray()``; its outcome
    and each step's check against the reference."""
    steps = [s for s in w11_hard.STEPS if HAVE_SCIPY or s != "filter"]
    outcome = w11_hard.run_limited(
        data,
        steps,
        "oc",
        limit_bytes=LIMIT,
        budget_bytes=BUDGET,
        percentile_columns=PERCENTILE_COLUMNS,
        timeout=TIMEOUT,
    )
    assert outcome.returncode == 0, (
        f"killed or failed: rc {outcome.returncode}, OOM kills {outcome.oom_kills}, "
        f"timed out {outcome.timed_out}\n{outcome.stderr[-3000:]}"
    )
    return outcome, w11_hard.check_outcome(outcome, data.reference())


def test_completes_under_the_limit_without_an_oom_kill(
    data: w11_hard.Data, paged: tuple[w11_hard.Outcome, dict[str, Any]]
) -> None:
    outcome, _ = paged
    assert outcome.oom_kills in (None, 0), outcome
    assert outcome.peak_bytes is None or outcome.peak_bytes <= LIMIT
    assert [p for p in Path(data.spill_dir).rglob("*") if not p.is_dir()] == []


@pytest.mark.parametrize("step", ["mean", "mean64", "percentile", "pca", "filter"])
def test_same_results_as_on_the_raw_data(
    paged: tuple[w11_hard.Outcome, dict[str, Any]], step: str
) -> None:
    if step == "filter" and not HAVE_SCIPY:
        pytest.skip("scipy is not installed: no scipy.ndimage filter to run")
    _, checks = paged
    ok, detail = checks[step]
    assert ok, detail


def test_plain_numpy_loading_the_raw_file_is_killed(data: w11_hard.Data) -> None:
    outcome = w11_hard.run_limited(
        data, ["load"], "numpy", limit_bytes=LIMIT, budget_bytes=BUDGET, timeout=TIMEOUT
    )
    assert outcome.killed, f"not killed: rc {outcome.returncode} {outcome.stderr[-500:]}"
    assert outcome.oom_kills in (None, 1), outcome
