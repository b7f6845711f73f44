"""A climatology and an anomaly written with ``to_zarr`` through the oocarray chunk manager,
on a cube 6 times the budget, in a child under a hard memory limit (a cgroup of our own, needs
root) of that budget plus 64 MiB: nothing is killed and the results equal NumPy's.

The child imports and warms up first, then moves into the cgroup, whose limit counts only what
it allocates from there on."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import xarray as xr

from testkit import cgroup
from testkit.children import start_python

MiB = 1 << 20
BUDGET = 2 * MiB
DAYS, LAT, LON = 730, 64, 64  # 12 MiB of float32: 6 budgets

CHILD = """
import json, sys
import numpy as np, pandas as pd, xarray as xr
import oocarray as oc

def run(path, out):
    ds = xr.open_zarr(path, chunks={}, chunked_array_type="oocarray", consolidated=False)
    climatology = ds.t2m.groupby("time.month").mean()
    (ds.t2m - ds.t2m.mean("time")).to_dataset().drop_encoding().to_zarr(
        out, consolidated=False
    )
    return climatology.compute().values

small = xr.Dataset(
    {"t2m": (("time", "lat"), np.ones((40, 3), "f4"))},
    coords={"time": pd.date_range("2001-01-01", periods=40)},
)
small.to_zarr(sys.argv[2] + "/warm.zarr", consolidated=False)
with oc.Manager("warm-up"):
    run(sys.argv[2] + "/warm.zarr", sys.argv[2] + "/warm-out.zarr")
print("ready", flush=True)
sys.stdin.readline()  # the parent moved this process into the cgroup
with oc.Manager("limited", max_bytes=int(sys.argv[3])) as m:
    climatology = run(sys.argv[1], sys.argv[2] + "/anomaly.zarr")
    peak = m.stats().peak_bytes
print(json.dumps({"climatology": climatology.tolist(), "peak": peak}), flush=True)
"""


def test_groupby_mean_and_to_zarr_run_under_a_hard_limit(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    t2m = rng.normal(280, 10, (DAYS, LAT, LON)).astype(np.float32)
    time = pd.date_range("2001-01-01", periods=DAYS)
    ds = xr.Dataset({"t2m": (("time", "lat", "lon"), t2m)}, coords={"time": time})
    ds.to_zarr(
        tmp_path / "cube.zarr", encoding={"t2m": {"chunks": (10, LAT, LON)}}, consolidated=False
    )
    child = start_python(
        CHILD, str(tmp_path / "cube.zarr"), str(tmp_path), str(BUDGET), stdin=subprocess.PIPE
    )
    try:
        out = cgroup.run_after_warm_up(child, BUDGET + 64 * MiB, timeout=300)
    except cgroup.CgroupUnavailable as why:
        pytest.skip(str(why))
    report = json.loads(out.strip().splitlines()[-1])
    assert report["peak"] <= BUDGET
    expected = ds.t2m.groupby("time.month").mean().values
    np.testing.assert_allclose(np.asarray(report["climatology"]), expected, rtol=1e-5)
    written = xr.open_zarr(tmp_path / "anomaly.zarr", consolidated=False).t2m.values
    np.testing.assert_allclose(written, t2m - t2m.mean(axis=0), rtol=1e-4, atol=1e-3)
