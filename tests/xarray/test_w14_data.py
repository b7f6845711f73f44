"""W14's climate cube: deterministic, chunk by chunk, and decoded by xarray as CF data."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from datasets.w14_data import TIME_CHUNK, cube_shape, t2m_block, write_cube

xr = pytest.importorskip("xarray")


def test_cube_shape_keeps_years_at_small_sizes_and_a_fine_grid_at_full_size() -> None:
    small = cube_shape(64 << 20)
    assert (small.days, small.lat, small.lon) == (2048, 64, 128)
    full = cube_shape(4 << 30)
    assert (full.lat, full.lon) == (360, 720)
    assert abs(full.nbytes - (4 << 30)) < full.lat * full.lon * 4
    assert full.chunks == (TIME_CHUNK, 90, 180)


def test_blocks_are_the_same_on_every_call() -> None:
    shape = cube_shape(4 << 20)
    np.testing.assert_array_equal(t2m_block(shape, 3), t2m_block(shape, 3))
    assert not np.array_equal(t2m_block(shape, 3), t2m_block(shape, 4))


def test_xarray_decodes_the_written_cube(tmp_path: Path) -> None:
    shape = write_cube(str(tmp_path / "cube.zarr"), 12 << 20)  # 384 days
    ds = xr.open_zarr(tmp_path / "cube.zarr", chunks=None)
    assert ds.t2m.shape == (shape.days, shape.lat, shape.lon)
    assert ds.t2m.dtype == np.float32
    assert ds.t2m.attrs["units"] == "K"
    assert ds.time.values[0] == np.datetime64("2000-01-01")
    assert ds.time.values[-1] == np.datetime64("2000-01-01") + np.timedelta64(shape.days - 1, "D")
    np.testing.assert_array_equal(ds.t2m.values[TIME_CHUNK : 2 * TIME_CHUNK], t2m_block(shape, 1))
    # northern summer is warmer than northern winter, and the other way round in the south
    monthly = ds.t2m.groupby("time.month").mean(("time", "lon"))
    assert float(monthly.sel(month=7)[0] - monthly.sel(month=1)[0]) > 10
    assert float(monthly.sel(month=7)[-1] - monthly.sel(month=1)[-1]) < -10
