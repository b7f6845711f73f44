"""``ffill``/``bfill`` on oocarray-backed variables: xarray hands non-dask arrays whole to
numbagg or bottleneck, so the chunk manager refuses the conversion with a clear error instead
of loading the data (see ``oocarray/_xarray/_fill.py``)."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable

import numpy as np
import pytest
import xarray as xr

from oocarray._xarray._fill import FILL_REFUSED, refuse_whole_fill

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
    refuse_whole_fill()  # (called from here: not xarray's fill)
    data = _data()
    np.testing.assert_array_equal(np.asarray(data.data), data.compute().values)
    filled = data.compute().fillna(-1.0)
    assert float(filled[4, 0]) == -1.0
