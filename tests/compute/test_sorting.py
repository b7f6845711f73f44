"""Sorting and selection of chunked arrays equal NumPy's on the same data, exactly: np.sort,
np.argsort (stable where asked: ties keep their order), np.partition and np.argpartition (a
partition property, NumPy's errors), np.searchsorted.  Over boolean, integer, float and
complex dtypes, 0-d to 3-d shapes (size-0 axes too), chunkings that split every axis, every
axis, NaNs and ties; lazily along axes whose lines fit, by the external merge sort
flattened, along 1-d arrays and along lines longer than memory, with data about eight times
the budget."""

from __future__ import annotations

import contextlib
import os
from typing import Any
from unittest import mock

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import oocarray as oc
from oocarray._compute import _external_sort, _sort_blocks, _sorting
from tests.compute.strategies import (
    BOOL,
    COMPLEXES,
    FLOATS,
    INTEGERS,
    assert_same_failure,
    cases,
    examples,
    outcome,
)


def _values(result: Any) -> np.ndarray:
    """A sort's result as an ndarray: ndarrays as they are, lazy and chunked ones read."""
    if isinstance(result, np.ndarray):
        return result
    assert isinstance(result, oc.Expr | oc.ChunkedArray), type(result)
    return np.asarray(result[...])


def _axis_options(ndim: int) -> st.SearchStrategy[Any]:
    options: list[Any] = [None]
    if ndim:
        options += list(range(-ndim, ndim))
    options.append(ndim)  # out of range: NumPy's AxisError
    return st.sampled_from(options)


def _check_sort(function: Any, data: np.ndarray, x: Any, **kwargs: Any) -> None:
    expected, expected_error, _ = outcome(function, data, **kwargs)
    ours, error, _ = outcome(lambda: _values(function(x, **kwargs)))
    what = f"np.{function.__name__}({kwargs})"
    if expected_error is not None:
        assert_same_failure(error, expected_error, what)
        return
    assert error is None, f"{what}: NumPy gave a value, oocarray raised {error!r}"
    assert ours.dtype == expected.dtype and ours.shape == expected.shape, what
    np.testing.assert_array_equal(ours, expected, err_msg=what)


@examples(0.3)
@given(
    case=cases(dtypes=(*BOOL, *INTEGERS, *FLOATS, *COMPLEXES), max_dims=3),
    data=st.data(),
    small_budget=st.booleans(),
)
def test_sort_and_stable_argsort_like_numpy(case: Any, data: Any, small_budget: bool) -> None:
    axis = data.draw(_axis_options(case.data.ndim))
    x = case.chunked()
    # A tiny working memory: lines that do not fit go to the external merge sort.
    with contextlib.ExitStack() as stack:
        if small_budget:
            for module, memory in ((_external_sort, 4096), (_sorting, 64), (_sort_blocks, 64)):
                stack.enter_context(mock.patch.object(module, "working_bytes", return_value=memory))
        _check_sort(np.sort, case.data, x, axis=axis)
        _check_sort(np.argsort, case.data, x, axis=axis, kind="stable")
        _check_sort(np.argsort, case.data, x, axis=axis, stable=True)


@examples(0.3)
@given(case=cases(dtypes=(*INTEGERS, *FLOATS), min_dims=1, max_dims=2), data=st.data())
def test_default_argsort_gives_a_sorting_permutation(case: Any, data: Any) -> None:
    axis = data.draw(st.sampled_from([None, -1, 0]))
    ours = _values(np.argsort(case.chunked(), axis=axis))
    flat = case.data.reshape(-1) if axis is None else case.data
    picked = np.take_along_axis(flat, ours, axis=-1 if axis is None else axis)
    np.testing.assert_array_equal(picked, np.sort(flat, axis=-1 if axis is None else axis))


@pytest.mark.parametrize("dtype", ["float64", "int16", "uint8"])
def test_external_sort_of_data_eight_times_the_budget(dtype: str) -> None:
    rng = np.random.default_rng(1)
    data = (rng.normal(0, 50, 40_000)).astype(dtype)  # many ties in the integer dtypes
    if dtype == "float64":
        data[rng.random(data.shape) < 0.01] = np.nan
        data[:5] = np.inf
    x = oc.from_numpy(data, chunks=7000)
    # (argsort's indices are 8 bytes each: the budget is an eighth of them too, at most)
    with oc.Manager(max_bytes=max(data.nbytes, 8 * data.size) // 8):
        ordered = np.sort(x)
        order = np.argsort(x, kind="stable")
        assert isinstance(ordered, oc.ChunkedArray) and isinstance(order, oc.ChunkedArray)
        np.testing.assert_array_equal(ordered[...], np.sort(data))
        np.testing.assert_array_equal(order[...], np.argsort(data, kind="stable"))


def test_merge_levels_when_runs_are_too_many_to_merge_at_once() -> None:
    rng = np.random.default_rng(2)
    data = rng.integers(0, 100, (60, 500)).astype(np.int32)
    x = oc.from_numpy(data, chunks=(7, 90))
    levels = []
    merge = _external_sort._merge

    def counted(*args: Any, last: bool) -> None:
        levels.append(last)
        merge(*args, last=last)

    with (
        mock.patch.object(_external_sort, "working_bytes", return_value=40_000),
        mock.patch.object(_external_sort, "MIN_MERGE_ITEMS", 1 << 30),
        mock.patch.object(_external_sort, "PREFERRED_MERGE_ITEMS", 1 << 30),
        mock.patch.object(_external_sort, "_merge", counted),
    ):
        order = np.argsort(x, axis=None, kind="stable")
        ordered = np.sort(x, axis=None)
    assert levels.count(False) > 2  # runs merged two at a time, level after level
    np.testing.assert_array_equal(_values(order), np.argsort(data, axis=None, kind="stable"))
    np.testing.assert_array_equal(_values(ordered), np.sort(data, axis=None))


def test_sorting_along_an_axis_whose_lines_fit_is_lazy() -> None:
    rng = np.random.default_rng(3)
    data = rng.normal(size=(300, 40))
    data[5, 7] = np.nan
    x = oc.from_numpy(data, chunks=(64, 9))
    lazy = np.sort(x, axis=0)
    assert isinstance(lazy, oc.Expr)
    np.testing.assert_array_equal(lazy[10:20, 3:5], np.sort(data, axis=0)[10:20, 3:5])
    with oc.Manager(max_bytes="256K"):
        order = np.argsort(x * 2, axis=0, stable=True).compute()
    np.testing.assert_array_equal(_values(order), np.argsort(data * 2, axis=0, stable=True))


def test_partition_and_argpartition_partition_every_kth() -> None:
    rng = np.random.default_rng(4)
    data = rng.integers(0, 20, (50, 30))
    x = oc.from_numpy(data, chunks=(11, 7))
    for axis, kth in ((0, [3, 40]), (1, 5), (-1, -1), (None, [0, 100, 1499])):
        parted = _values(np.partition(x, kth, axis=axis))
        flat = data.reshape(-1) if axis is None else data
        along = -1 if axis is None else axis
        expected_at = np.take(np.sort(flat, axis=along), kth, axis=along)
        np.testing.assert_array_equal(np.take(parted, kth, axis=along), expected_at)
        indices = _values(np.argpartition(x, kth, axis=axis))
        picked = np.take_along_axis(flat, indices, axis=along)
        np.testing.assert_array_equal(np.take(picked, kth, axis=along), expected_at)
    for kth in (50, -51):
        _check_sort(np.partition, data, x, kth=kth, axis=0)
    with pytest.raises(TypeError, match="Partition index must be integer"):
        np.partition(x, 1.5)


@examples(0.3)
@given(
    data=st.lists(st.integers(-50, 50), min_size=0, max_size=300),
    chunk=st.integers(1, 40),
    wanted=st.lists(st.integers(-60, 60), min_size=0, max_size=20),
    side=st.sampled_from(["left", "right"]),
)
def test_searchsorted_like_numpy(data: list[int], chunk: int, wanted: list[int], side: Any) -> None:
    ordered = np.sort(np.array(data, dtype=np.int64))
    x = oc.from_numpy(ordered, chunks=chunk)
    values = np.array(wanted, dtype=np.int64)
    np.testing.assert_array_equal(
        np.searchsorted(x, values, side=side), np.searchsorted(ordered, values, side=side)
    )
    if wanted:
        assert np.searchsorted(x, wanted[0], side=side) == np.searchsorted(
            ordered, wanted[0], side=side
        )
        lazy = np.searchsorted(x, oc.from_numpy(values, chunks=3), side=side)
        assert isinstance(lazy, oc.Expr)
        np.testing.assert_array_equal(lazy[...], np.searchsorted(ordered, values, side=side))


def test_searchsorted_with_nans_reads_only_the_chunks_it_needs() -> None:
    ordered = np.sort(np.r_[np.arange(1000.0), [np.nan] * 10])
    x = oc.from_numpy(ordered, chunks=64)
    lookup = _sorting.SortedLookup(x)
    values = np.array([-1.0, 5.5, 640.0, 999.0, np.inf, np.nan])
    for side in ("left", "right"):
        np.testing.assert_array_equal(
            lookup.find(values, side), np.searchsorted(ordered, values, side=side)
        )
    assert len(lookup.firsts) < 16  # a binary search: not every chunk's first element


def test_arguments_chunked_arrays_do_not_take() -> None:
    x = oc.from_numpy(np.arange(10.0), chunks=3)
    with pytest.raises(TypeError, match="order="):
        np.sort(x, order="a")
    with pytest.raises(ValueError, match="can't be provided at the same time"):
        np.sort(x, kind="stable", stable=True)
    with pytest.raises(ValueError, match="kind"):
        np.argsort(x, kind="bogo")
    with pytest.raises(TypeError, match="sorter="):
        np.searchsorted(x, 3.0, sorter=np.arange(10))
    with pytest.raises(ValueError, match="1-d"):
        np.searchsorted(oc.from_numpy(np.ones((2, 2)), chunks=1), 1.0)


@pytest.mark.parametrize(
    ("shape", "chunks", "axis"),
    [
        ((40_000, 12), (3000, 12), 0),  # tall: every chunk holds every line
        ((6, 30_000, 5), (2, 4000, 5), 1),  # a middle axis, chunks split the others
        ((12, 40_000), (12, 3000), -1),  # the last axis, chunked
    ],
)
def test_sorting_along_a_chunked_axis_in_blocks_of_lines(
    shape: tuple[int, ...], chunks: tuple[int, ...], axis: int
) -> None:
    """Lines too long for a lazy sort but a few of which fit are sorted many at a time (no
    external sort per line); values, stable argsort and partition equal NumPy's, with data
    several times the budget."""
    rng = np.random.default_rng(4)
    data = np.round(rng.normal(size=shape), 1).astype(np.float32)  # ties
    data[rng.random(shape) < 0.01] = np.nan
    x = oc.from_numpy(data, chunks=chunks)
    with oc.Manager(max_bytes=data.nbytes // 3) as manager:
        ordered = np.sort(x, axis=axis)
        order = np.argsort(x, axis=axis, kind="stable")
        parted = np.partition(x, [3, 500], axis=axis)
        assert isinstance(ordered, oc.ChunkedArray) and isinstance(order, oc.ChunkedArray)
        np.testing.assert_array_equal(ordered[...], np.sort(data, axis=axis))
        np.testing.assert_array_equal(order[...], np.argsort(data, axis=axis, kind="stable"))
        np.testing.assert_array_equal(
            np.take(_values(parted), [3, 500], axis),
            np.take(np.sort(data, axis=axis), [3, 500], axis),
        )
        assert manager.stats().peak_bytes <= data.nbytes // 3


def test_sorting_lines_in_blocks_stays_in_an_eighth_of_the_data() -> None:
    rng = np.random.default_rng(5)
    data = rng.integers(-1000, 1000, (20_000, 16)).astype(np.int64)
    x = oc.from_numpy(data, chunks=(2500, 16))
    with oc.Manager(max_bytes=data.nbytes // 8) as manager:
        ordered = np.sort(x, axis=0)
        np.testing.assert_array_equal(ordered[...], np.sort(data, axis=0))
        assert manager.stats().peak_bytes <= data.nbytes // 8


def test_lines_longer_than_the_budget_are_sorted_one_at_a_time() -> None:
    rng = np.random.default_rng(6)
    data = rng.normal(size=(20_000, 2))
    x = oc.from_numpy(data, chunks=(2500, 2))
    # One line (160 KB) and its sorting do not fit: an external merge sort per line.
    with oc.Manager(max_bytes="96K"):
        ordered = np.sort(x, axis=0)
        order = np.argsort(x, axis=0, kind="stable")
        np.testing.assert_array_equal(ordered[...], np.sort(data, axis=0))
        np.testing.assert_array_equal(order[...], np.argsort(data, axis=0, kind="stable"))


def test_external_sort_spills_runs_raw_in_a_budget_and_leaves_no_files() -> None:
    """Runs go to an unnamed scratch file and rounds are merged on several threads: the
    values, a stable argsort and NaN last equal NumPy's; the peak stays within a budget an
    eighth of the data; nothing is left in the spill directory."""
    from oocarray._memory._spill_files import private_dir

    rng = np.random.default_rng(7)
    data = np.round(rng.normal(size=300_000), 2).astype(np.float32)  # many ties
    data[rng.random(data.shape) < 0.02] = np.nan
    x = oc.from_numpy(data, chunks=20_000)
    before = set(os.listdir(private_dir()))
    budget = data.size * (4 + 16) // 8  # argsort carries two indices per value
    with oc.Manager(max_bytes=budget) as manager:
        ordered = np.sort(x)
        order = np.argsort(x, kind="stable")
        np.testing.assert_array_equal(ordered[...], np.sort(data))
        np.testing.assert_array_equal(order[...], np.argsort(data, kind="stable"))
        assert manager.stats().peak_bytes <= budget
    assert set(os.listdir(private_dir())) <= before


@pytest.mark.parametrize(
    ("shape", "axis"), [((1, 0), 0), ((3, 0), 0), ((2, 0, 4), 0), ((2, 3, 0), 1)]
)
@pytest.mark.parametrize("small_budget", [False, True])
def test_empty_arrays_sort_along_any_axis(
    shape: tuple[int, ...], axis: int, small_budget: bool
) -> None:
    a = np.zeros(shape, bool)
    x = oc.from_numpy(a, chunks=tuple(max(1, n) for n in shape))
    with contextlib.ExitStack() as stack:
        if small_budget:  # (where the line blocks planned a chunk of 0 lines and divided by 0)
            for module, memory in ((_external_sort, 4096), (_sorting, 64), (_sort_blocks, 64)):
                stack.enter_context(mock.patch.object(module, "working_bytes", return_value=memory))
        for function, kwargs in ((np.sort, {}), (np.argsort, {"kind": "stable"})):
            got = np.asarray(function(x, axis=axis, **kwargs)[...])
            expected = function(a, axis=axis, **kwargs)
            assert (got.shape, got.dtype) == (expected.shape, expected.dtype)
