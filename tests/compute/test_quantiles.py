"""Quantiles, percentiles and medians of chunked arrays equal NumPy's on the same data: exactly
for the methods that pick a value (lower, higher, nearest, inverted_cdf, closest_observation),
within a few rounding errors for the interpolating ones; with NumPy's dtypes, shapes, errors
and All-NaN warnings.  Over integer, boolean and float dtypes, 0-d to 3-d shapes (size-0 axes
too), chunkings that split every axis, every axis form, keepdims, q scalar or 1-d, NaN
patterns, both the blockwise path (reduced axes whole in each chunk) and the exact selection
(tiny candidate limits and bin counts force several histogram passes), and under budgets
several times smaller than the data."""

from __future__ import annotations

import contextlib
import threading
import warnings
from collections.abc import Iterator
from typing import Any
from unittest import mock

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import oocarray as oc
from oocarray._compute import _order_keys, _quantiles, _selection, _selection_passes
from tests.compute.strategies import (
    BOOL,
    FLOATS,
    INTEGERS,
    assert_like_numpy_result,
    assert_same_failure,
    axes,
    cases,
    examples,
    outcome,
)

PICKING = ("lower", "higher", "nearest", "inverted_cdf", "closest_observation")
INTERPOLATING = (
    "linear",
    "midpoint",
    "averaged_inverted_cdf",
    "interpolated_inverted_cdf",
    "hazen",
    "weibull",
    "median_unbiased",
    "normal_unbiased",
)
QUANTILE_FUNCTIONS = ("quantile", "percentile", "nanquantile", "nanpercentile")
MEANINGFUL_WARNINGS = ("All-NaN slice encountered", "Mean of empty slice")


@contextlib.contextmanager
def narrow_selection(candidates: int, bins: int) -> Iterator[None]:
    """Selection with at most ``candidates`` gathered and ``bins`` bins per pass, so small
    arrays go through several histogram passes."""
    with (
        mock.patch.object(_selection, "candidate_limit", return_value=candidates),
        mock.patch.object(_selection, "MAX_BINS", bins),
    ):
        yield


def _meaningful(messages: list[str]) -> set[str]:
    return {m for m in messages if any(m.startswith(w) for w in MEANINGFUL_WARNINGS)}


def _compare(name: str, ours: Any, expected: Any, exact: bool) -> None:
    assert_like_numpy_result(ours, expected, name)
    if exact or np.asarray(expected).dtype.kind not in "fc":
        np.testing.assert_array_equal(ours, expected, err_msg=name)
    else:
        eps = float(np.finfo(np.asarray(expected).dtype).eps)
        np.testing.assert_allclose(ours, expected, rtol=8 * eps, atol=0, err_msg=name)


def _check(function: Any, data: np.ndarray, x: Any, *args: Any, exact: bool, **kwargs: Any) -> None:
    expected, expected_error, expected_warnings = outcome(function, data, *args, **kwargs)
    ours, error, our_warnings = outcome(function, x, *args, **kwargs)
    what = f"np.{function.__name__}{args} {kwargs}"
    if expected_error is not None:
        assert_same_failure(error, expected_error, what)
        return
    assert error is None, f"{what}: NumPy gave a value, oocarray raised {error!r}"
    _compare(what, ours, expected, exact)
    assert _meaningful(our_warnings) == _meaningful(expected_warnings), what


quantile_arguments = st.tuples(
    st.sampled_from(QUANTILE_FUNCTIONS),
    st.sampled_from(PICKING + INTERPOLATING),
    st.one_of(
        st.sampled_from([0.0, 0.5, 1.0, 0.3]),
        st.lists(st.sampled_from([0.0, 0.1, 0.25, 0.5, 0.9, 1.0]), min_size=1, max_size=4),
    ),
    st.booleans(),
)


@examples(0.5)
@given(
    case=cases(dtypes=(*BOOL, *INTEGERS, *FLOATS), max_dims=3),
    data=st.data(),
    arguments=quantile_arguments,
    narrow=st.sampled_from([None, (1, 4), (6, 16)]),
)
def test_quantiles_like_numpy(case: Any, data: Any, arguments: Any, narrow: Any) -> None:
    name, method, q, keepdims = arguments
    axis = data.draw(axes(case.data.ndim, invalid=False))
    if name.endswith("percentile"):
        q = [100 * v for v in q] if isinstance(q, list) else 100 * q
    x = case.chunked()
    context = narrow_selection(*narrow) if narrow else contextlib.nullcontext()
    with context:
        _check(
            getattr(np, name),
            case.data,
            x,
            q,
            axis=axis,
            method=method,
            keepdims=keepdims,
            exact=method in PICKING,
        )


@examples(0.5)
@given(
    case=cases(dtypes=(*INTEGERS, *FLOATS), max_dims=3),
    data=st.data(),
    name=st.sampled_from(["median", "nanmedian"]),
    keepdims=st.booleans(),
    narrow=st.sampled_from([None, (1, 4)]),
)
def test_medians_like_numpy(case: Any, data: Any, name: str, keepdims: bool, narrow: Any) -> None:
    axis = data.draw(axes(case.data.ndim, invalid=False))
    context = narrow_selection(*narrow) if narrow else contextlib.nullcontext()
    with context:
        function = getattr(np, name)
        _check(function, case.data, case.chunked(), axis=axis, keepdims=keepdims, exact=False)


@pytest.mark.parametrize("method", PICKING + INTERPOLATING)
def test_percentiles_of_data_several_times_the_budget(method: str) -> None:
    rng = np.random.default_rng(5)
    data = rng.standard_cauchy((24_000, 5))  # heavy tails: bins by value spread unevenly
    data[rng.random(data.shape) < 0.02] = np.nan
    data[:, 3] = np.round(data[:, 3])  # many ties
    data[:100, 4] = np.inf
    x = oc.from_numpy(data, chunks=(1000, 2))
    q = [0, 1, 37.5, 50, 99, 100]
    with oc.Manager(max_bytes="256K"):
        ours = np.nanpercentile(x, q, axis=0, method=method)
        plain = np.percentile(x, q, axis=0, method=method)
    with np.errstate(invalid="ignore"):  # (inf - inf, interpolating next to infinities)
        expected = np.nanpercentile(data, q, axis=0, method=method)
        expected_plain = np.percentile(data, q, axis=0, method=method)
    _compare(method, ours, expected, method in PICKING)
    _compare(method, plain, expected_plain, method in PICKING)


@pytest.mark.parametrize("dtype", ["int8", "uint16", "int64", "uint64", "float16", "float32"])
def test_order_statistics_over_the_whole_array_in_a_small_budget(dtype: str) -> None:
    rng = np.random.default_rng(2)
    if np.dtype(dtype).kind in "iu":
        info = np.iinfo(dtype)
        data = rng.integers(info.min, info.max, (40_000,), dtype=dtype, endpoint=True)
    else:
        data = rng.normal(0, 100, 40_000).astype(dtype)
    x = oc.from_numpy(data, chunks=3000)
    with oc.Manager(max_bytes="128K"), narrow_selection(64, 64):
        lower = np.quantile(x, [0, 0.01, 0.5, 0.99, 1], method="lower")
        median = np.median(x)
    np.testing.assert_array_equal(lower, np.quantile(data, [0, 0.01, 0.5, 0.99, 1], method="lower"))
    _compare("median", median, np.median(data), exact=False)


@pytest.mark.parametrize("tallies", [0, 1, 2])
@pytest.mark.parametrize("axis", [0, (0, 2)])
def test_counts_tallied_by_worker_or_by_block_give_numpys_quantiles(
    tallies: int, axis: Any
) -> None:
    """Blocks count into their worker's tally where their counts are a contiguous part of the
    whole (kept cells of one row), else into counts of their own: either way, or both in one
    pass (fewer tallies than workers), the quantiles are NumPy's."""
    rng = np.random.default_rng(6)
    data = rng.normal(size=(600, 6, 5)).astype(np.float32)
    data[rng.random(data.shape) < 0.03] = np.nan
    # chunks that split the kept axes: over axis 0, a block's counts are then not one
    # contiguous part of the whole; over axes 0 and 2 they are
    x = oc.from_numpy(data, chunks=(50, 4, 3))
    q = [0.5, 3, 50, 97]
    counted: list[bool] = []
    contiguous: list[bool] = []
    tally, is_contiguous = (
        _selection_passes.BinCounts._tally,
        _selection_passes.BinCounts._contiguous,
    )

    def counting_tally(self: Any) -> Any:
        made = tally(self)
        counted.append(made is not None)
        return made

    def seen_contiguous(self: Any, target: Any) -> bool:
        contiguous.append(is_contiguous(self, target))
        return contiguous[-1]

    with (
        mock.patch.object(_selection_passes, "TALLIES", tallies),
        mock.patch.object(_selection_passes.BinCounts, "_tally", counting_tally),
        mock.patch.object(_selection_passes.BinCounts, "_contiguous", seen_contiguous),
        narrow_selection(64, 64),
    ):
        ours = np.nanpercentile(x, q, axis=axis, method="lower")
    expected = np.nanpercentile(data, q, axis=axis, method="lower")
    np.testing.assert_array_equal(ours, expected)
    assert contiguous and all(contiguous) == any(contiguous) == (axis != 0)
    assert any(counted) == (tallies > 0 and axis != 0)


def _passes(function: Any, *args: Any, **kwargs: Any) -> tuple[Any, int]:
    """``function``'s result and how many passes over the data its selection took."""
    passes = 0
    evaluate = _selection.evaluate

    def counting(*a: Any, **k: Any) -> Any:
        nonlocal passes
        passes += 1
        return evaluate(*a, **k)

    with mock.patch.object(_selection, "evaluate", counting):
        return function(*args, **kwargs), passes


def test_the_summary_pass_counts_over_a_sample_s_range() -> None:
    """Floats are counted in bins over a sample's range in the summary's pass: two passes where
    the ranks fall inside the sample's range; more, and the same results, where they fall in
    the end bins (sorted data, a column the sample sees as constant or as NaN only)."""
    rng = np.random.default_rng(8)
    data = rng.normal(size=(20_000, 6))
    data[:, 1] = np.sort(data[:, 1])
    data[:, 2] = np.where(np.arange(20_000) % 2500 < 100, rng.normal(size=20_000), 7.0)
    data[:, 3] = np.where(np.arange(20_000) % 2500 < 100, rng.normal(size=20_000), np.nan)
    data[:, 4] = np.inf
    data[:50, 5] = -np.inf
    q = [0, 1, 50, 99, 100]
    for method in ("linear", "lower", "median_unbiased"):
        with np.errstate(invalid="ignore"):  # (inf - inf, interpolating between infinities)
            expected = np.nanpercentile(data, q, axis=0, method=method)
        with narrow_selection(2000, 256), np.errstate(invalid="ignore"):
            ours, passes = _passes(
                np.nanpercentile, oc.from_numpy(data, chunks=(1000, 6)), q, axis=0, method=method
            )
        _compare(method, ours, expected, method == "lower")
        assert passes > 2  # (the sorted column needs a pass more)
        with narrow_selection(2000, 256):
            normal = oc.from_numpy(data[:, [0]], chunks=(1000, 1))
            ours, passes = _passes(np.percentile, normal, q, axis=0, method=method)
        _compare(method, ours, np.percentile(data[:, [0]], q, axis=0, method=method), False)
        assert passes == 2


def test_a_block_with_more_candidates_than_room_is_gathered_again() -> None:
    """The gathering pass makes room for what the block before found: a block beyond its room
    is read again with room for all of its values, and the quantiles are NumPy's."""
    rng = np.random.default_rng(11)
    data = rng.normal(size=(8000, 3)).astype(np.float32)
    rooms: list[tuple[int, int]] = []
    gather = _selection_passes._native.key_gather

    def recording(*args: Any) -> int:
        found = gather(*args)
        rooms.append((len(args[5]), found))
        return found

    with (
        mock.patch.object(_selection_passes, "GATHER_ROOM", 1),
        mock.patch.object(_selection_passes._native, "key_gather", recording),
    ):
        ours = np.percentile(oc.from_numpy(data, chunks=(1000, 3)), [10, 50, 90], axis=0)
    np.testing.assert_array_equal(ours, np.percentile(data, [10, 50, 90], axis=0))
    # (one block here: every value is a candidate, gathered once more with room for all)
    assert rooms[:2] == [(1, data.size), (data.size, data.size)]
    assert all(found <= room for room, found in rooms if room > 1)


def test_whole_lines_in_each_chunk_reduce_block_by_block() -> None:
    rng = np.random.default_rng(3)
    data = rng.normal(size=(30, 400))
    data[4, 7] = np.nan
    data[9] = np.nan
    x = oc.from_numpy(data, chunks=(7, 400))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ours = np.nanquantile(x, [0.2, 0.7], axis=1)
    assert [str(w.message) for w in caught] == ["All-NaN slice encountered"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected = np.nanquantile(data, [0.2, 0.7], axis=1)
    np.testing.assert_array_equal(ours, expected)
    np.testing.assert_array_equal(np.median(x, axis=1), np.median(data, axis=1))


class _CountingLock:
    """A lock that counts how often it is taken."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.taken = 0

    def __enter__(self) -> None:
        self.lock.acquire()
        self.taken += 1

    def __exit__(self, *exc: object) -> None:
        self.lock.release()


def test_blocks_that_cannot_warn_run_side_by_side() -> None:
    """Only a block that warns is run again under the lock that catching warnings takes, so
    the others run on every worker at once; floating-point warnings still reach the caller."""
    data = np.random.default_rng(4).normal(size=(64, 300))
    x = oc.from_numpy(data, chunks=(4, 300))
    counting = _CountingLock()
    with mock.patch.object(_quantiles, "_CATCHING", counting):
        np.testing.assert_array_equal(np.median(x, axis=1), np.median(data, axis=1))
        np.testing.assert_array_equal(
            np.nanpercentile(x, [5, 95], axis=1), np.nanpercentile(data, [5, 95], axis=1)
        )
        assert counting.taken == 0
        data[9, :2] = [np.inf, -np.inf]  # lerp between -inf and inf: "invalid value"
        x = oc.from_numpy(data, chunks=(4, 300))
        expected, _, expected_warnings = outcome(np.quantile, data, [0.0001, 0.5], axis=1)
        ours, error, our_warnings = outcome(np.quantile, x, [0.0001, 0.5], axis=1)
    assert error is None and counting.taken == 1
    np.testing.assert_array_equal(ours, expected)
    assert expected_warnings and set(our_warnings) == set(expected_warnings)


def test_a_lazy_expression_is_reduced_too() -> None:
    data = np.arange(1000, dtype=np.float64).reshape(100, 10) % 37
    x = oc.from_numpy(data, chunks=(9, 4))
    np.testing.assert_array_equal(
        np.percentile(x * 2 - 1, [5, 95], axis=0, method="nearest"),
        np.percentile(data * 2 - 1, [5, 95], axis=0, method="nearest"),
    )


def test_arguments_numpy_refuses_and_those_chunked_arrays_do_not_take() -> None:
    x = oc.from_numpy(np.arange(20.0), chunks=6)
    with pytest.raises(ValueError, match=r"Percentiles must be in the range \[0, 100\]"):
        np.percentile(x, 101)
    with pytest.raises(ValueError, match=r"Quantiles must be in the range \[0, 1\]"):
        np.quantile(x, [0.5, -0.1])
    with pytest.raises(ValueError, match="is not a valid method"):
        np.quantile(x, 0.5, method="guess")
    with pytest.raises(TypeError, match="weights="):
        np.quantile(x, 0.5, method="inverted_cdf", weights=np.ones(20))
    with pytest.raises(TypeError, match="out="):
        np.median(x, out=np.empty(()))
    with pytest.raises(TypeError, match="real numbers"):
        np.quantile(oc.from_numpy(np.ones(4, complex), chunks=2), 0.5)


@given(st.lists(st.floats(allow_nan=False, width=32), min_size=1, max_size=50))
def test_order_keys_sort_as_the_values(values: list[float]) -> None:
    array = np.array([*values, np.inf, -np.inf, 0.0], np.float32)
    keys, finite = _order_keys.order_keys(array)
    assert finite is not None and finite.all()
    order = np.argsort(keys, kind="stable")
    ordered = array[order]
    assert (ordered[1:] >= ordered[:-1]).all()
    back = _order_keys.from_keys(keys.astype(np.uint64), array.dtype)
    np.testing.assert_array_equal(back.view(np.uint32), array.view(np.uint32))
