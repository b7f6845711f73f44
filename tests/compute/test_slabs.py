"""Reductions of ufunc expressions evaluated in cache-sized slabs (``_compute/_slabs.py``)
equal NumPy's on the same data: exactly for integers, booleans and extremes, within the
rounding bound of test_reductions for float sums.  Small slabs (``SLAB_BYTES`` lowered) give
many slabs a block and a shorter last one; stores uncompressed (rows read straight into the
slab buffers), compressed (each block read whole, then cut in slabs) and ``.npy`` (memory
mapped) give each way of reading."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import oocarray as oc
from oocarray._compute import _slabs
from oocarray._compute._nodes import as_node
from oocarray._compute._reduction_kinds import make_reduction
from oocarray._compute._slabs import plan_slabs


@pytest.fixture
def small_slabs(monkeypatch: pytest.MonkeyPatch) -> None:
    """Slabs of a few KiB: a block of these tests' arrays is many slabs."""
    monkeypatch.setattr(_slabs, "SLAB_BYTES", 4096)


def _stored(data: np.ndarray, kind: str, chunks: tuple[int, ...], path: str) -> oc.ChunkedArray:
    if kind == "npy":
        np.save(os.path.join(path, "x.npy"), data)
        opened = oc.open(os.path.join(path, "x.npy"))
        assert isinstance(opened, oc.ChunkedArray)
        return opened
    return oc.from_numpy(data, chunks=chunks, codec=kind)


def _sum_bound(values: np.ndarray, expected: Any, axis: Any) -> Any:
    """As test_reductions: both sum the same terms in different orders, so each is within
    (n + 2) rounding errors of the sum of magnitudes."""
    eps = np.finfo(np.asarray(expected).dtype).eps
    n = values.size if axis is None else values.shape[axis]
    keepdims = np.ndim(expected) == values.ndim and values.ndim > 0 and axis is not None
    magnitude = np.nansum(np.abs(values.astype(np.float64)), axis=axis, keepdims=keepdims)
    return eps * (n + 2) * magnitude + 2 * eps * np.abs(expected)


def _check(ours: Any, expected: Any, values: np.ndarray, name: str, axis: Any) -> None:
    ours, expected = np.asarray(ours), np.asarray(expected)
    assert ours.dtype == expected.dtype and ours.shape == expected.shape
    if name in ("sum", "nansum") and expected.dtype.kind == "f":
        np.testing.assert_array_equal(np.isnan(ours), np.isnan(expected))
        finite = np.isfinite(expected)
        bound = np.broadcast_to(_sum_bound(values, expected, axis), expected.shape)
        assert np.all(np.abs(ours - expected)[finite] <= bound[finite])
    else:
        np.testing.assert_array_equal(ours, expected)


W1C: Callable[[Any], Any] = lambda x: (x * 2 + 1) - x  # noqa: E731


@pytest.mark.usefixtures("small_slabs")
@pytest.mark.parametrize("kind", ["none", "zstd", "npy"])
@pytest.mark.parametrize("name", ["sum", "prod", "min", "max", "nansum", "nanmax", "any", "all"])
def test_reductions_of_an_expression_equal_numpy(kind: str, name: str, tmp_path: Any) -> None:
    rng = np.random.default_rng(7)
    data = rng.standard_normal(10_007).astype(np.float32)
    data[rng.integers(0, data.size, 20)] = np.nan if name.startswith("nan") else 0.5
    x = _stored(data, kind, (1000,), str(tmp_path))
    if name == "prod":  # 10k float32 factors near 1, multiplied in another order
        expected = np.prod(data * 1e-3 + 1)
        ours = (x * 1e-3 + 1).prod()
        assert ours.dtype == expected.dtype and np.isclose(ours, expected, rtol=1e-4)
        return
    _check(getattr(np, name)(W1C(x)), getattr(np, name)(W1C(data)), W1C(data), name, None)


@pytest.mark.usefixtures("small_slabs")
@pytest.mark.parametrize("kind", ["none", "lz4"])
@pytest.mark.parametrize("axis", [None, 0, 1])
@pytest.mark.parametrize("keepdims", [False, True])
def test_two_dimensional_reductions_along_each_axis(
    kind: str, axis: Any, keepdims: bool, tmp_path: Any
) -> None:
    data = np.random.default_rng(3).standard_normal((1_003, 24))
    x = _stored(data, kind, (100, 24), str(tmp_path))
    means = data[:50].mean(axis=0)  # a per-column constant, broadcast along the rows
    expr = (x - means) * (x + 2.0)
    values = (data - means) * (data + 2.0)
    for name in ("sum", "max", "min"):
        ours = getattr(expr, name)(axis=axis, keepdims=keepdims)
        expected = getattr(np, name)(values, axis=axis, keepdims=keepdims)
        _check(ours, expected, values, name, axis)


@pytest.mark.usefixtures("small_slabs")
def test_integer_and_boolean_results_are_exact() -> None:
    data = np.arange(-5_000, 5_001, dtype=np.int16)
    x = oc.from_numpy(data, chunks=(777,), codec="none")
    assert int((x * 3 - 1).sum()) == int((data * 3 - 1).sum())
    assert (x * 3 - 1).sum().dtype == (data * 3 - 1).sum().dtype
    assert int(np.count_nonzero(x % 7)) == int(np.count_nonzero(data % 7))
    assert bool((x < 5_001).all()) and not bool((x > 5_000).any())
    assert int((x & 0xFF).max()) == int((data & 0xFF).max())


@pytest.mark.usefixtures("small_slabs")
def test_one_pass_shares_its_reads_between_reductions() -> None:
    data = np.random.default_rng(5).standard_normal(20_000).astype(np.float32)
    x = oc.from_numpy(data, chunks=(3_000,), codec="none")
    expr = W1C(x)
    low, high, total = oc.compute(
        expr.min(compute=False), expr.max(compute=False), expr.sum(compute=False)
    )
    assert low == W1C(data).min() and high == W1C(data).max()
    _check(total, W1C(data).sum(), W1C(data), "sum", None)


def test_a_budget_several_times_smaller_than_the_data() -> None:
    data = np.random.default_rng(9).standard_normal(2_000_000).astype(np.float32)  # 8 MB
    x = oc.from_numpy(data, chunks=(100_000,), codec="none")
    with oc.Manager(max_bytes="2M"):
        total = W1C(x).sum()
        high = np.tanh(x * 0.5).max()
    _check(total, W1C(data).sum(), W1C(data), "sum", None)
    assert high == np.tanh(data * 0.5).max()


def test_the_w1c_step_computes_in_one_temporary() -> None:
    x = oc.from_numpy(np.zeros(1000, np.float32), chunks=(100,), codec="none")
    reduction = make_reduction("sum", W1C(x)._node)
    plan = plan_slabs([reduction], x.shape)
    assert plan is not None
    assert len(plan.temporaries) == 1 and len(plan.row_reads) == 1  # x read once, one buffer
    assert [step.ufunc for step in plan.steps] == [np.multiply, np.add, np.subtract]


def test_what_is_left_to_the_block_loop() -> None:
    x = oc.from_numpy(np.ones((100, 4)), chunks=(10, 4), codec="none")
    packed = oc.from_numpy(np.ones((100, 4)), chunks=(10, 4), codec="zstd")
    row = oc.from_numpy(np.ones(4), chunks=(4,), codec="none")

    def streamed(name: str, expr: Any) -> bool:
        reduction = make_reduction(name, as_node(expr._node if hasattr(expr, "_node") else expr))
        return plan_slabs([reduction], expr.shape) is not None

    assert streamed("sum", x * 2) and streamed("sum", x) and streamed("max", packed * 2)
    assert not streamed("mean", x * 2)  # moments merge in their own way
    assert not streamed("sum", packed)  # nothing to save: no operation, a whole-chunk decode
    assert not streamed("sum", np.where(x > 1, x, 0))  # not a ufunc
    assert not streamed("sum", x + row)  # a chunked array broadcast along the rows


@st.composite
def _expressions(draw: st.DrawFn) -> tuple[np.ndarray, tuple[int, ...], Callable[[Any], Any]]:
    rows = draw(st.integers(1, 400))
    columns = draw(st.sampled_from([None, 1, 3, 16]))
    shape = (rows,) if columns is None else (rows, columns)
    dtype = draw(st.sampled_from([np.float32, np.float64, np.int32]))
    data = np.random.default_rng(draw(st.integers(0, 99))).integers(-50, 50, shape).astype(dtype)
    chunks = (draw(st.integers(1, rows)), *shape[1:])
    operations = draw(
        st.lists(
            st.sampled_from(["add", "multiply", "subtract", "maximum", "negative", "square"]),
            min_size=1,
            max_size=4,
        )
    )
    scalar = draw(st.sampled_from([2, 3, -1]))

    def expr(x: Any) -> Any:
        value = x
        for name in operations:
            function = getattr(np, name)
            value = function(value) if function.nin == 1 else function(value, scalar)
            value = value - x if name == "square" else value  # x read by more than one node
        return value

    return data, chunks, expr


@settings(max_examples=40, deadline=None)
@given(
    case=_expressions(),
    name=st.sampled_from(["sum", "max", "min"]),
    axis=st.sampled_from([None, 0, -1]),
)
def test_random_expressions_equal_numpy(
    case: tuple[np.ndarray, tuple[int, ...], Callable[[Any], Any]], name: str, axis: Any
) -> None:
    data, chunks, expr = case
    old = _slabs.SLAB_BYTES
    _slabs.SLAB_BYTES = 1024  # many slabs a block (a fixture would span every example)
    try:
        x = oc.from_numpy(data, chunks=chunks, codec="none")
        with np.errstate(over="ignore"):
            ours = getattr(expr(x), name)(axis=axis)
            values = expr(data)
            expected = getattr(np, name)(values, axis=axis)
    finally:
        _slabs.SLAB_BYTES = old
    _check(ours, expected, values, name, axis)


@pytest.mark.usefixtures("small_slabs")
def test_blocks_that_cut_the_columns_read_whole_rows_arrays_as_blocks() -> None:
    # y's chunks split the columns, and y comes first: the pass's blocks follow its chunks,
    # so x (whole rows in its chunks, read by rows elsewhere) is read a block at a time.
    data = np.random.default_rng(11).standard_normal((300, 8))
    x = oc.from_numpy(data, chunks=(40, 8), codec="none")
    y = oc.from_numpy(data[::-1].copy(), chunks=(30, 3), codec="none")
    values = data[::-1] * data + 1
    for axis in (None, 0, 1):
        _check(((y * x) + 1).sum(axis=axis), values.sum(axis=axis), values, "sum", axis)
        _check(((y * x) + 1).max(axis=axis), values.max(axis=axis), values, "max", axis)
