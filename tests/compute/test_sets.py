"""Set functions out of core equal NumPy's on the same data: np.unique with every combination of
return_index, return_inverse, return_counts and equal_nan, unique_values/counts/inverse/all and
np.isin, over every dtype, shape (0-d to 3-d, size-0 axes), chunking and NaN pattern; and with
many distinct values under a budget several times smaller than the data, where the tables spill
to temporary arrays and are merged externally."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import oocarray as oc
from oocarray._compute import _sets, _unique
from tests.compute.strategies import (
    ALL_DTYPES,
    Case,
    assert_same_failure,
    cases,
    examples,
    numpy_outcome,
    outcome,
)


def _loaded(value: Any) -> Any:
    """A result's values: ndarrays as they are, temporary arrays and expressions computed."""
    if isinstance(value, np.ndarray):
        return value
    if isinstance(value, oc.ChunkedArray):
        return value[...]
    computed = value.compute()
    return computed if isinstance(computed, np.ndarray) else computed[...]


def _assert_inverse(ours: Any, expected: np.ndarray, values: np.ndarray, data: Any, what: str):
    assert ours.shape == expected.shape and ours.dtype == expected.dtype, what
    np.testing.assert_array_equal(values[ours], data, err_msg=f"{what}: inverse")


def check_unique(case: Case, **flags: Any) -> None:
    what = f"np.unique({flags}) on {case!r}"
    expected, expected_error, _ = numpy_outcome(np.unique, case.data, **flags)
    x = case.chunked()
    with case.blocks():
        ours, error, _ = outcome(np.unique, x, **flags)
    if expected_error is not None:
        assert_same_failure(error, expected_error, what)
        return
    if error is not None:
        raise AssertionError(f"{what}: NumPy returned {expected!r}") from error
    if not isinstance(expected, tuple):
        expected, ours = (expected,), (ours,)
    assert len(ours) == len(expected), what
    names = ["values"] + [
        k.removeprefix("return_")
        for k in ("return_index", "return_inverse", "return_counts")
        if flags.get(k)
    ]
    values = _loaded(ours[0])
    for name, mine, theirs in zip(names, ours, expected, strict=True):
        mine = _loaded(mine)
        if name == "inverse" and not flags.get("equal_nan", True):
            # NumPy numbers distinct NaNs in an unstable sort's order: check what it means
            _assert_inverse(mine, theirs, values, case.data, what)
            continue
        assert mine.dtype == theirs.dtype and mine.shape == theirs.shape, (
            f"{what}: {name} {mine.dtype}{mine.shape} != {theirs.dtype}{theirs.shape}"
        )
        np.testing.assert_array_equal(mine, theirs, err_msg=f"{what}: {name}")


@examples(1.0)
@given(case=cases(dtypes=ALL_DTYPES), data=st.data())
def test_unique_matches_numpy(case: Case, data: st.DataObject) -> None:
    flags = {
        name: data.draw(st.booleans(), label=name)
        for name in ("return_index", "return_inverse", "return_counts", "equal_nan")
    }
    check_unique(case, **flags)


@examples(0.5)
@given(case=cases(dtypes=ALL_DTYPES))
def test_array_api_unique_functions_match_numpy(case: Case) -> None:
    x = case.chunked()
    what = repr(case)
    with case.blocks():
        values = np.unique_values(x)
        counts = np.unique_counts(x)
        inverse = np.unique_inverse(x)
        every = np.unique_all(x)
    np.testing.assert_array_equal(values, np.sort(np.unique_values(case.data)), err_msg=what)
    for ours, theirs in zip(counts, np.unique_counts(case.data), strict=True):
        np.testing.assert_array_equal(_loaded(ours), theirs, err_msg=what)
    expected = np.unique_inverse(case.data)
    np.testing.assert_array_equal(inverse[0], expected[0], err_msg=what)
    _assert_inverse(_loaded(inverse[1]), expected[1], inverse[0], case.data, what)
    for ours, theirs in zip(every, np.unique_all(case.data), strict=True):
        np.testing.assert_array_equal(_loaded(ours), theirs, err_msg=what)


def test_results_are_numpys_named_tuples() -> None:
    x = oc.from_numpy(np.array([2, 1, 2]), chunks=(2,))
    # (the handler's answer: np.unique_counts(x) passes it through the public wrapper)
    result = _sets.unique_counts(x)
    assert type(result) is type(np.unique_counts(np.zeros(0)))
    assert result.values.tolist() == [1, 2] and result.counts.tolist() == [1, 2]


def test_unique_of_rows_is_refused() -> None:
    x = oc.from_numpy(np.zeros((4, 3)), chunks=(2, 3))
    with pytest.raises(TypeError, match=r"np\.unique\(\.\.\., axis=0\)"):
        np.unique(x, axis=0)


def _spills(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Records the length of every table spilled to temporary arrays."""
    spilled: list[int] = []
    spill = _unique.spill

    def recording(table: _unique.Table, limit: int) -> _unique.Table:
        spilled.append(len(table))
        return spill(table, limit)

    monkeypatch.setattr(_unique, "spill", recording)
    return spilled


def test_many_distinct_values_spill_and_merge_under_a_small_budget(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rng = np.random.default_rng(7)
    data = rng.integers(0, 150_000, size=(300, 500))  # 1.2 MB, about 95k distinct values
    data[rng.random(data.shape) < 0.01] = 5  # one value many times
    x = oc.from_numpy(data, chunks=(64, 128))
    spilled = _spills(monkeypatch)
    with oc.Manager(max_bytes="300K"):
        values, index, counts = np.unique(x, return_index=True, return_counts=True)
        # the inverse needs the distinct values (760 KB) in memory: refused, with the budget
        with pytest.raises(oc.MemoryBudgetError, match="return_inverse"):
            np.unique(x, return_inverse=True)
    assert len(spilled) > 2, "the table never spilled"
    assert isinstance(values, oc.ChunkedArray)  # larger than the budget: a temporary array
    expected = np.unique(data, return_index=True, return_counts=True)
    for ours, theirs in zip((values, index, counts), expected, strict=True):
        np.testing.assert_array_equal(_loaded(ours), theirs)


def test_inverse_of_spilled_tables_under_a_small_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(9)
    data = rng.integers(-10_000, 10_000, size=(500, 500)).astype(np.int32)  # 1 MB
    x = oc.from_numpy(data, chunks=(100, 100))
    spilled = _spills(monkeypatch)
    with oc.Manager(max_bytes="250K"):
        values, inverse = np.unique(x, return_inverse=True)
        assert isinstance(inverse, oc.Expr)
        inverse_values = inverse.compute()
        table = np.unique_all(x)
    assert spilled, "the table never spilled"
    expected = np.unique_all(data)
    np.testing.assert_array_equal(_loaded(values), expected.values)
    np.testing.assert_array_equal(_loaded(inverse_values), expected.inverse_indices)
    for ours, theirs in zip(table, expected, strict=True):
        np.testing.assert_array_equal(_loaded(ours), theirs)


def test_distinct_floats_spill_with_nans(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(8)
    data = rng.normal(size=150_000).astype(np.float32)  # 600 KB, all distinct
    data[rng.random(data.shape) < 0.05] = np.nan
    x = oc.from_numpy(data, chunks=(5000,))
    spilled = _spills(monkeypatch)
    with oc.Manager(max_bytes="200K"):
        values, counts = np.unique(x, return_counts=True)
        distinct_nans = np.unique_counts(x)
    assert spilled, "the table never spilled"
    expected = np.unique(data, return_counts=True)
    np.testing.assert_array_equal(_loaded(values), expected[0])
    np.testing.assert_array_equal(_loaded(counts), expected[1])
    np.testing.assert_array_equal(_loaded(distinct_nans[1]), np.unique_counts(data).counts)


# -- isin -----------------------------------------------------------------------------------


@examples(0.5)
@given(case=cases(dtypes=ALL_DTYPES, min_dims=1), data=st.data())
def test_isin_matches_numpy(case: Case, data: st.DataObject) -> None:
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16), label="seed"))
    flat = case.data.reshape(-1)
    size = data.draw(st.integers(0, 20), label="tests")
    test = flat[rng.integers(0, flat.size, size)] if flat.size else flat[:0]
    test = np.concatenate([test, np.asarray([1, 0], dtype=case.data.dtype)])
    chunked = data.draw(st.booleans(), label="chunked test elements")
    invert = data.draw(st.booleans(), label="invert")
    kind = data.draw(st.sampled_from([None, "sort", "table"]), label="kind")
    what = f"np.isin(invert={invert}, kind={kind}, chunked={chunked}) on {case!r}"
    expected, expected_error, _ = numpy_outcome(np.isin, case.data, test, invert=invert, kind=kind)
    tests = oc.from_numpy(test, chunks=(max(1, test.size // 3),)) if chunked else test
    x = case.chunked()
    with case.blocks():
        ours, error, _ = outcome(lambda: _loaded(np.isin(x, tests, invert=invert, kind=kind)))
    if expected_error is not None:
        assert_same_failure(error, expected_error, what)
        return
    if error is not None:
        raise AssertionError(f"{what}: NumPy returned {expected!r}") from error
    np.testing.assert_array_equal(ours, expected, err_msg=what, strict=True)


def test_isin_of_an_ndarray_in_chunked_test_elements() -> None:
    tests = oc.from_numpy(np.array([3, 5, 7, 5]), chunks=(2,))
    element = np.arange(9).reshape(3, 3)
    np.testing.assert_array_equal(np.isin(element, tests), np.isin(element, [3, 5, 7]))


def test_the_array_api_variants_keep_numpy_s_field_names() -> None:
    data = np.array([3, 1, 3, 2, 2, 2])
    x = oc.from_numpy(data, chunks=4)
    counts = np.unique_counts(x)
    assert type(counts).__name__ == "UniqueCountsResult"
    assert counts.values.tolist() == [1, 2, 3] and counts.counts.tolist() == [1, 3, 2]
    found = np.unique_all(x)
    assert found.indices.tolist() == [1, 3, 0]
    assert (
        np.asarray(found.inverse_indices).tolist() == np.unique_all(data).inverse_indices.tolist()
    )
