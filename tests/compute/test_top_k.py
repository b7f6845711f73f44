"""``oc.top_k`` keeps the k largest or smallest values in one pass: the values and indices equal
a stable sort's in NumPy's order (NaN above every number, ties by index) over every dtype,
shape, chunking and axis, under a budget smaller than the data; bad arguments are errors."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

import oocarray as oc
from tests.compute.strategies import ALL_DTYPES, Case, cases, examples


def _expected(data: np.ndarray, k: int, axis: int | None, largest: bool) -> Any:
    """Values and indices of the k best by a stable sort of dense ranks in NumPy's order."""
    lines = data.reshape(1, -1) if axis is None else np.moveaxis(data, axis, -1)
    flat = lines.reshape(math.prod(lines.shape[:-1]), lines.shape[-1])
    values = np.empty((flat.shape[0], k), data.dtype)
    indices = np.empty((flat.shape[0], k), np.int64)
    for row, line in enumerate(flat):
        _, rank = np.unique(line, return_inverse=True)  # NaN last, all NaN equal
        order = np.lexsort((np.arange(line.size), -rank if largest else rank))[:k]
        values[row], indices[row] = line[order], order
    shape = (*lines.shape[:-1], k)
    if axis is None:
        return values[0], indices[0]
    values, indices = values.reshape(shape), indices.reshape(shape)
    return np.moveaxis(values, -1, axis), np.moveaxis(indices, -1, axis)


@st.composite
def _arguments(draw: st.DrawFn) -> tuple[Case, int | None, int, bool]:
    case = draw(cases(ALL_DTYPES, min_dims=1, max_dims=3))
    axis = draw(st.none() | st.integers(-case.data.ndim, case.data.ndim - 1))
    length = case.data.size if axis is None else case.data.shape[axis]
    return case, axis, draw(st.integers(0, min(length, 6))), draw(st.booleans())


@given(_arguments())
@examples(0.5)
def test_top_k_equals_a_stable_sort(arguments: tuple[Case, int | None, int, bool]) -> None:
    case, axis, k, largest = arguments
    lines = 1 if axis is None else case.data.size // max(1, case.data.shape[axis])
    # (the tiny budget that makes blocks single chunks must hold the candidates)
    assume(not case.one_chunk_per_block or 2 * lines * k * (case.data.itemsize + 8) < 2048)
    with case.blocks():
        values, indices = oc.top_k(case.chunked(), k, axis=axis, largest=largest, progress=False)
    expected_values, expected_indices = _expected(case.data, k, axis, largest)
    np.testing.assert_array_equal(values, expected_values)  # (NaN equal to NaN)
    np.testing.assert_array_equal(indices, expected_indices)
    assert values.dtype == case.data.dtype


def test_top_k_holds_k_per_line_under_a_small_budget() -> None:
    data = np.random.default_rng(5).standard_normal((4000, 64)).astype(np.float32)  # 1 MiB
    x = oc.from_numpy(data, chunks=(250, 64))
    with oc.Manager(max_bytes="256K"):
        values, indices = oc.top_k(x, 5, axis=0, progress=False)
        flat_values, flat_indices = oc.top_k(-x, 3, axis=None, largest=False, progress=False)
    np.testing.assert_array_equal(values, -np.sort(-data, axis=0)[:5])
    np.testing.assert_array_equal(np.take_along_axis(data, indices, axis=0), values)
    np.testing.assert_array_equal(flat_values, -np.sort(data, axis=None)[::-1][:3])
    np.testing.assert_array_equal(data.reshape(-1)[flat_indices], -flat_values)


def test_top_k_of_an_expression_and_a_plain_array() -> None:
    data = np.arange(24.0).reshape(4, 6) % 7
    x = oc.from_numpy(data, chunks=(2, 4))
    values, indices = oc.top_k(x * 2, 2, axis=1, largest=False, progress=False)
    expected_values, expected_indices = _expected(data * 2, 2, 1, False)
    np.testing.assert_array_equal(values, expected_values)
    np.testing.assert_array_equal(indices, expected_indices)
    np.testing.assert_array_equal(oc.top_k(data, 3, axis=None)[0], [6.0, 6.0, 6.0])


def test_top_k_refuses_bad_arguments_and_too_much_memory() -> None:
    x = oc.from_numpy(np.arange(100.0).reshape(10, 10), chunks=(5, 5))
    with pytest.raises(ValueError, match="k from 0 to 10"):
        oc.top_k(x, 11, axis=0)
    with pytest.raises(ValueError, match="k from 0 to 10"):
        oc.top_k(x, -1, axis=1)
    with pytest.raises(TypeError, match="integer k"):
        oc.top_k(x, 2.5)
    with pytest.raises(np.exceptions.AxisError):
        oc.top_k(x, 1, axis=2)
    with pytest.raises(ValueError, match="one or more axes"):
        oc.top_k(oc.from_numpy(np.float64(3.0)), 0, axis=0)
    big = oc.from_numpy(np.zeros((64, 40_000), np.float32), chunks=(64, 4000))
    with oc.Manager(max_bytes="1M"), pytest.raises(oc.MemoryBudgetError, match=r"np\.sort"):
        oc.top_k(big, 64, axis=0)


def test_ties_at_the_cut_keep_the_first_indices_whatever_the_chunking() -> None:
    data = np.array([3, 7, 7, 1, 7, 7, 0, 7, 2, 7] * 30, dtype=np.int16)
    first_sevens = np.flatnonzero(data == 7)[:4]
    for chunk in (1, 3, 7, 64, 300):
        x = oc.from_numpy(data, chunks=(chunk,))
        values, indices = oc.top_k(x, 4, axis=0, progress=False)
        np.testing.assert_array_equal(values, [7, 7, 7, 7])
        np.testing.assert_array_equal(indices, first_sevens)
        values, indices = oc.top_k(x, 5, axis=None, largest=False, progress=False)
        np.testing.assert_array_equal(values, [0, 0, 0, 0, 0])
        np.testing.assert_array_equal(indices, np.flatnonzero(data == 0)[:5])
