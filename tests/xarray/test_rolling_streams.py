"""``rolling(...)`` reductions on the oocarray chunk manager stream in one pass: each window
reduction is an element-wise lazy node (its blocks read a halo), never a result-sized
accumulator; results equal xarray on NumPy data, within a budget smaller than the data."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import hypothesis.strategies as st
import numpy as np
import pytest
import xarray as xr
from hypothesis import given, settings

import oocarray as oc
from oocarray._compute._deferred import Deferred
from oocarray._compute._nodes import Node
from oocarray._xarray._lazy import OOCLazyArray
from oocarray._xarray._windows import WindowReduction

Operation = Callable[[xr.DataArray], xr.DataArray]


def _cube(time: int = 120, chunk: int = 25) -> tuple[xr.DataArray, xr.DataArray]:
    """The same (time, y, x) float32 data on NumPy and chunked on oocarray; NaNs scattered,
    a run of them longer than some windows, and a whole chunk of NaN at one point."""
    values = np.random.default_rng(5).normal(10, 3, (time, 4, 5)).astype(np.float32)
    values[::7, 0, 0] = np.nan
    values[10:22, 1, 2] = np.nan
    values[chunk : 2 * chunk, 3, 4] = np.nan
    numpy = xr.DataArray(values, dims=("time", "y", "x"), name="t")
    return numpy, numpy.chunk(time=chunk, chunked_array_type="oocarray")


def _nodes(node: Node) -> Iterator[Node]:
    yield node
    for child in node.children():
        yield from _nodes(child)


OPERATIONS: list[Operation] = [
    lambda a: a.rolling(time=7).mean(),
    lambda a: a.rolling(time=7).sum(),
    lambda a: a.rolling(time=7).std(),
    lambda a: a.rolling(time=7).var(),
    lambda a: a.rolling(time=7).max(),
    lambda a: a.rolling(time=7).min(),
    lambda a: a.rolling(time=3).prod(),
    lambda a: a.rolling(time=7).count(),
    lambda a: a.rolling(time=6, center=True).mean(),
    lambda a: a.rolling(time=5, center=True, min_periods=2).sum(),
    lambda a: a.rolling(time=4, center=True, min_periods=1).std(),
    lambda a: a.rolling(time=30, min_periods=1).max(),  # a window longer than a chunk
    lambda a: a.rolling(time=3, y=2).mean(),
    lambda a: a.rolling(time=3).construct("w").mean("w"),  # nanmean
    lambda a: a.rolling(time=4).construct("w").std("w", ddof=1),  # nanstd, ddof
    lambda a: a.rolling(time=4).construct("w").var("w", skipna=False),
    lambda a: a.rolling(time=4).construct("w").min("w"),  # nanmin
    lambda a: (a.fillna(0) * 2).astype(np.int32).rolling(time=4).sum(),  # integer sums
]


@pytest.mark.parametrize("operation", OPERATIONS)
def test_rolling_equals_xarray_on_numpy(operation: Operation) -> None:
    numpy, ours = _cube()
    expected = operation(numpy)
    result = operation(ours)
    assert isinstance(result.data, OOCLazyArray)  # lazy until asked
    computed = result.compute()
    assert computed.dtype == expected.dtype
    xr.testing.assert_allclose(computed, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("operation", OPERATIONS[:12])
def test_window_reductions_are_element_wise_nodes(operation: Operation) -> None:
    _, ours = _cube()
    tree = operation(ours).data.lazy._tree()
    kinds = [type(node) for node in _nodes(tree)]
    assert WindowReduction in kinds
    assert Deferred not in kinds  # no accumulator of the result's size


def test_a_dataset_rolls_every_variable() -> None:
    numpy, ours = _cube()
    expected = numpy.to_dataset().rolling(time=4, center=True, min_periods=1).mean()
    result = ours.to_dataset().rolling(time=4, center=True, min_periods=1).mean()
    xr.testing.assert_allclose(result.compute(), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "operation",
    [
        lambda a: a.rolling(time=7).mean(),
        lambda a: a.rolling(time=7, center=True, min_periods=3).std(),
        lambda a: a.rolling(time=12).max(),
    ],
)
def test_they_stream_within_a_budget_several_times_smaller(operation: Operation) -> None:
    numpy, ours = _cube(time=2000, chunk=100)  # 160 kB of data, 160 kB of result
    with oc.Manager(max_bytes="48k") as manager:
        total = operation(ours).sum(("y", "x")).compute()
        assert manager.stats().peak_bytes <= 48 * 1024
    xr.testing.assert_allclose(total, operation(numpy).sum(("y", "x")), rtol=1e-4)


@settings(max_examples=25, deadline=None)
@given(
    length=st.integers(1, 40),
    chunk=st.integers(1, 12),
    window=st.integers(1, 15),
    center=st.booleans(),
    min_periods=st.one_of(st.none(), st.integers(1, 15)),
    reduction=st.sampled_from(["mean", "sum", "std", "max", "min", "count"]),
    nans=st.lists(st.integers(0, 39), max_size=20),
)
def test_rolling_matches_numpy_for_any_window_and_chunks(
    length: int,
    chunk: int,
    window: int,
    center: bool,
    min_periods: int | None,
    reduction: str,
    nans: list[int],
) -> None:
    window = min(window, length)
    if min_periods is not None:
        min_periods = min(min_periods, window)
    values = np.arange(length, dtype=np.float64) % 7 - 3.0
    values[[i for i in nans if i < length]] = np.nan
    numpy = xr.DataArray(np.stack([values, values[::-1]], axis=1), dims=("time", "x"))
    ours = numpy.chunk(time=chunk, chunked_array_type="oocarray")

    def roll(a: xr.DataArray) -> xr.DataArray:
        rolling = a.rolling(time=window, center=center, min_periods=min_periods)
        result: xr.DataArray = getattr(rolling, reduction)()
        return result

    xr.testing.assert_allclose(roll(ours).compute(), roll(numpy), rtol=1e-9, atol=1e-9)
