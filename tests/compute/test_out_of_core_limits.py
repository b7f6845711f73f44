"""Every out-of-core NumPy function on data 8 times its budget, in a process under a hard
memory limit (a cgroup of our own, needs root) of that budget plus 64 MiB: nothing is killed,
and every result equals NumPy's on the same data.

The child imports and warms up first (its interpreter, NumPy, zarr and the compute layer's
modules are not what is measured), then moves into the cgroup, whose limit counts only what
it allocates from there on."""

from __future__ import annotations

import json
import subprocess

import numpy as np
import pytest

import oocarray as oc
from testkit import cgroup
from testkit.children import start_python

MiB = 1 << 20
BUDGET = 4 * MiB
ROWS, COLUMNS = 131_072, 64  # 32 MiB of float32: 8 budgets
IDS = 4 * MiB  # 32 MiB of int64 ids
DISTINCT = 1000

CHILD = """
import json, sys
import numpy as np
import oocarray as oc

x = oc.open(sys.argv[1])
ids = oc.open(sys.argv[2])
small = np.linspace(-1, 1, x.shape[1] * 8, dtype=np.float32).reshape(-1, 8)


def work():
    out = {}
    out["percentile"] = np.percentile(x, [1, 50, 99], axis=0)
    out["median"] = np.median(x)
    ranked = np.sort(ids)
    out["sort"] = np.concatenate([ranked[:5], ranked[-5:], ranked[::500_000]])
    values, counts = np.unique(ids, return_counts=True)
    out["unique"] = np.concatenate([values, counts])
    out["isin"] = np.isin(ids, [3, 5, 7]).sum()
    out["cumsum"] = np.cumsum(x, axis=0)[-1]
    out["diff"] = np.diff(x, axis=0).sum(axis=0)
    out["gram"] = x.T @ x
    out["product"] = (x @ small).sum(axis=0)
    out["transpose"] = x.T.sum(axis=1)
    out["reshape"] = x.reshape(-1, 2 * x.shape[1]).sum(axis=0)
    out["flip_roll"] = np.roll(np.flip(x, 0), 1000, axis=0)[:3]
    out["take"] = np.take(x, [5, 100_000, 7], axis=0)
    out["pad"] = np.pad(x, 2, mode="edge").sum(axis=0)
    far = np.flatnonzero(x > 3.5)
    out["nonzero"] = np.asarray(far[:20])
    out["mask"] = np.array([len(x[x > 3.5]), len(far)])
    return {k: np.asarray(v).tolist() for k, v in out.items()}


with oc.Manager("warm-up"):  # imports and first calls of every path, before the limit
    warm = oc.from_numpy(np.ones((64, 4), np.float32), chunks=(16, 4))
    np.percentile(warm, 50, axis=0), np.sort(warm, axis=None), np.unique(warm), warm.T @ warm
print("ready", flush=True)
sys.stdin.readline()  # the parent moved this process into the cgroup
with oc.Manager("limited", max_bytes=int(sys.argv[3])) as m:
    result = work()
    peak = m.stats().peak_bytes
print(json.dumps({"result": result, "peak": peak}), flush=True)
"""


def _expected(x: np.ndarray, ids: np.ndarray) -> dict[str, np.ndarray]:
    small = np.linspace(-1, 1, x.shape[1] * 8, dtype=np.float32).reshape(-1, 8)
    ranked = np.sort(ids)
    values, counts = np.unique(ids, return_counts=True)
    far = np.flatnonzero(x > 3.5)
    return {
        "percentile": np.percentile(x, [1, 50, 99], axis=0),
        "median": np.median(x),
        "sort": np.concatenate([ranked[:5], ranked[-5:], ranked[::500_000]]),
        "unique": np.concatenate([values, counts]),
        "isin": np.isin(ids, [3, 5, 7]).sum(),
        "cumsum": np.cumsum(x, axis=0, dtype=np.float64)[-1],
        "diff": np.diff(x, axis=0).sum(axis=0, dtype=np.float64),
        "gram": x.astype(np.float64).T @ x,
        "product": (x.astype(np.float64) @ small).sum(axis=0),
        "transpose": x.T.sum(axis=1, dtype=np.float64),
        "reshape": x.reshape(-1, 2 * x.shape[1]).sum(axis=0, dtype=np.float64),
        "flip_roll": np.roll(np.flip(x, 0), 1000, axis=0)[:3],
        "take": np.take(x, [5, 100_000, 7], axis=0),
        "pad": np.pad(x, 2, mode="edge").sum(axis=0, dtype=np.float64),
        "nonzero": far[:20],
        "mask": np.array([len(x[x > 3.5]), len(far)]),
    }


def test_every_function_runs_on_8_budgets_of_data_under_a_hard_limit(tmp_path) -> None:
    rng = np.random.default_rng(24)
    data = rng.normal(size=(ROWS, COLUMNS)).astype(np.float32)
    ids = rng.integers(0, DISTINCT, IDS)
    x = oc.create(str(tmp_path / "x.zarr"), data.shape, data.dtype, chunks=(4096, COLUMNS))
    x[...] = data
    y = oc.create(str(tmp_path / "ids.zarr"), ids.shape, ids.dtype, chunks=(131_072,))
    y[...] = ids
    child = start_python(CHILD, x.path, y.path, str(BUDGET), stdin=subprocess.PIPE)
    try:
        out = cgroup.run_after_warm_up(child, BUDGET + 64 * MiB, timeout=600)
    except cgroup.CgroupUnavailable as why:
        pytest.skip(str(why))
    report = json.loads(out.strip().splitlines()[-1])
    assert report["peak"] <= BUDGET
    expected = _expected(data, ids)
    for name, want in expected.items():
        got = np.asarray(report["result"][name])
        if want.dtype.kind in "iub":
            np.testing.assert_array_equal(got, want, err_msg=name)
        else:
            np.testing.assert_allclose(got, want, rtol=2e-4, atol=2e-3, err_msg=name)
