"""xarray's routes that hand non-dask arrays whole to numbagg or bottleneck (``ffill``/``bfill``,
rolling with either enabled): on oocarray-backed variables the conversion is refused with a
clear error instead of loading the data (see ``oocarray/_xarray/_whole_routes.py``)."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable

import numpy as np
import pytest
import xarray as xr

from oocarray._xarray._whole_routes import FILL_REFUSED, ROLLING_REFUSED, refuse_whole_routes

Fill = Callable[[xr.DataArray], xr.DataArray]
FILLS: list[Fill] = [
    lambda a: a.ffill("time"),
    lambda a: a.bfill("time", limit=2),
    lambda a: a.to_dataset().ffill("time", limit=1).t,
]
HAS_FILL_LIBRARY = any(importlib.util.find_spec(m) for m in ("bottleneck", "numbagg"))


def _data() -> xr.DataArray:
    values = np.arange(24.0).reshape(12, 2)
    values[3:7, 0] = np.nan
    return xr.DataArray(values, dims=("time", "x"), name="t").chunk(
        time=4, chunked_array_type="oocarray"
    )


@pytest.mark.skipif(not HAS_FILL_LIBRARY, reason="neither bottleneck nor numbagg is installed")
@pytest.mark.parametrize("fill", FILLS)
def test_a_fill_is_refused_rather_than_loaded(fill: Fill) -> None:
    with pytest.raises(NotImplementedError, match="ffill/bfill"):
        fill(_data())


@pytest.mark.skipif(HAS_FILL_LIBRARY, reason="bottleneck or numbagg is installed")
@pytest.mark.parametrize("fill", FILLS)
def test_without_a_fill_library_xarray_stops_before_reading(fill: Fill) -> None:
    # xarray imports bottleneck before it looks at the array, as for NumPy data
    with pytest.raises(ModuleNotFoundError, match="bottleneck"):
        fill(_data())
    with pytest.raises(ModuleNotFoundError, match="bottleneck"):
        fill(_data().compute())


def test_the_message_names_the_fills_and_what_to_do() -> None:
    assert "ffill/bfill" in FILL_REFUSED
    assert ".compute().ffill(" in FILL_REFUSED and "chunked_array_type='dask'" in FILL_REFUSED


def test_other_conversions_to_numpy_are_not_refused() -> None:
    refuse_whole_routes()  # (called from here: not one of xarray's routes)
    data = _data()
    np.testing.assert_array_equal(np.asarray(data.data), data.compute().values)
    filled = data.compute().fillna(-1.0)
    assert float(filled[4, 0]) == -1.0


def _moving_sum(values: np.ndarray, window: int, min_count: int, axis: int) -> np.ndarray:
    """What ``bottleneck.move_sum`` computes, in NumPy: the C kernel xarray would call."""
    values = np.asarray(values)  # as bottleneck converts its argument
    windows = np.lib.stride_tricks.sliding_window_view(values, window, axis=axis)
    return np.pad(
        windows.sum(axis=-1),
        [(window - 1, 0) if a == axis else (0, 0) for a in range(values.ndim)],
        constant_values=np.nan,
    )


def test_rolling_through_a_whole_array_kernel_is_refused_with_the_option_to_turn_off() -> None:
    # xarray's own bottleneck route, given a kernel that converts its argument as bottleneck's
    # do (bottleneck is not installed here); numbagg's route converts the same way.
    rolling = _data().rolling(time=3)
    with pytest.raises(NotImplementedError, match=r"use_bottleneck=False, use_numbagg=False"):
        rolling._bottleneck_reduce(_moving_sum, keep_attrs=False)
    assert "rolling" in ROLLING_REFUSED
    # With the option off (here: bottleneck absent), the same rolling sum streams and is right.
    streamed = _data().rolling(time=3, min_periods=3).sum().compute()
    expected = _moving_sum(_data().compute().values, 3, 3, 0)
    np.testing.assert_allclose(streamed.values, expected)
