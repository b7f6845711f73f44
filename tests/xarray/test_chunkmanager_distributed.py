"""The oocarray chunk manager on a ``dask.distributed`` cluster (two worker processes on
loopback, each with its own oocarray budget): ``compute`` and ``to_zarr`` run their blocks on
the workers, with a client given or active, and equal the same computation on one machine."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import xarray as xr

import oocarray as oc
from testkit.clusters import loopback_client

distributed = pytest.importorskip("distributed")

WORKER_BUDGET = 1 << 20


@pytest.fixture(scope="module")
def client() -> Iterator[distributed.Client]:
    with loopback_client() as c:
        c.register_plugin(oc.dask.MemoryBudgetPlugin(max_bytes=WORKER_BUDGET))
        yield c


@pytest.fixture
def cube(tmp_path: Path) -> tuple[xr.Dataset, xr.Dataset]:
    time = pd.date_range("2001-01-01", periods=365, freq="D")
    t2m = np.random.default_rng(4).normal(280, 10, (365, 6, 8)).astype("float32")
    ds = xr.Dataset({"t2m": (("time", "lat", "lon"), t2m)}, coords={"time": time})
    path = tmp_path / "cube.zarr"
    ds.to_zarr(path, encoding={"t2m": {"chunks": (73, 6, 8)}}, consolidated=False)
    return oc.open_dataset(path, consolidated=False), ds


def _peaks(client: distributed.Client) -> list[int]:
    stats = oc.dask.budget_stats(client).values()
    return [s.peak_bytes for s in stats if s is not None]


def test_compute_with_a_client_runs_blocks_on_the_workers(
    client: distributed.Client, cube: tuple[xr.Dataset, xr.Dataset]
) -> None:
    ooc, ds = cube
    anomaly = ooc.t2m - ooc.t2m.mean("time")
    ours = anomaly.compute(client=client)
    # (NumPy's float32 mean of 365 values near 280 is itself off by up to 3e-4; oocarray's
    # streaming mean is closer to the float64 one: a float32 tolerance, not 1e-4)
    xr.testing.assert_allclose(ours, ds.t2m - ds.t2m.mean("time"), rtol=1e-5, atol=1e-3)
    peaks = _peaks(client)
    assert len(peaks) == 2 and max(peaks) > 0  # the workers' budgets saw the blocks
    assert all(p <= WORKER_BUDGET for p in peaks)


def test_an_active_client_is_used_for_block_functions(
    client: distributed.Client, cube: tuple[xr.Dataset, xr.Dataset]
) -> None:
    ooc, ds = cube

    def norm(a: np.ndarray) -> np.ndarray:
        return np.sqrt((a * a).sum(axis=-1))

    def run(data: xr.Dataset) -> xr.DataArray:
        return xr.apply_ufunc(
            norm, data.t2m, input_core_dims=[["lon"]], dask="parallelized", output_dtypes=["f4"]
        )

    with client.as_current():
        ours = run(ooc).compute()
    xr.testing.assert_allclose(ours, run(ds.chunk(time=73)).compute(), rtol=1e-5)


def test_to_zarr_writes_blocks_from_the_workers(
    client: distributed.Client, cube: tuple[xr.Dataset, xr.Dataset], tmp_path: Path
) -> None:
    ooc, ds = cube
    anomaly = (ooc - ooc.mean("time")).drop_encoding()
    anomaly.to_zarr(
        tmp_path / "anomaly.zarr",
        consolidated=False,
        chunkmanager_store_kwargs={"client": client},
    )
    written = xr.open_zarr(tmp_path / "anomaly.zarr", consolidated=False).compute()
    xr.testing.assert_allclose(written, ds - ds.mean("time"), rtol=1e-5, atol=1e-3)


def test_a_failing_block_raises_its_error_here(
    client: distributed.Client, cube: tuple[xr.Dataset, xr.Dataset]
) -> None:
    ooc, _ = cube

    def refuse(a: np.ndarray) -> np.ndarray:
        raise ArithmeticError("this block refuses")

    broken = xr.apply_ufunc(refuse, ooc.t2m, dask="parallelized", output_dtypes=["f4"])
    with pytest.raises(ArithmeticError, match="this block refuses"):
        broken.compute(client=client)
