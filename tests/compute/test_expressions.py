"""Lazy expressions equal NumPy on the same data: operators with Python scalars (NEP 50 weak
types), NumPy scalars, broadcast ndarrays and other chunked arrays chunked differently; ufuncs
with one and two outputs; astype, where, clip, round, isnan, isfinite, map_blocks; concatenate
and stack; indexing an expression; materialising it (compute, asarray, to_zarr), also beyond
the budget.  What is not supported raises TypeError and loads nothing."""

from __future__ import annotations

import operator
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import oocarray as oc
from tests.compute.strategies import (
    ALL_DTYPES,
    FLOATS,
    INTEGERS,
    Case,
    assert_same_failure,
    cases,
    chunkings,
    examples,
    numpy_outcome,
    outcome,
    values,
)

BINARY_OPERATORS: dict[str, Callable[[Any, Any], Any]] = {
    "+": operator.add,
    "-": operator.sub,
    "*": operator.mul,
    "/": operator.truediv,
    "//": operator.floordiv,
    "%": operator.mod,
    "**": operator.pow,
    "&": operator.and_,
    "|": operator.or_,
    "^": operator.xor,
    "<<": operator.lshift,
    ">>": operator.rshift,
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
    "==": operator.eq,
    "!=": operator.ne,
}
PYTHON_SCALARS = (2, -1, 0, 300, 2.5, 0.5, -0.0, True, 1j)
NUMPY_SCALARS = (np.float32(1.5), np.float64(-2.0), np.int16(3), np.uint8(7), np.bool_(True))


def materialised(lazy: Any) -> np.ndarray:
    """``lazy.compute()``: an ndarray, or a temporary chunked array when over the budget."""
    result = lazy.compute(progress=False)
    if isinstance(result, oc.ChunkedArray):
        return result[...]
    assert isinstance(result, np.ndarray), type(result)
    return result


def assert_expression_matches(
    build: Callable[..., Any], case: Case, lazy_args: tuple[Any, ...], numpy_args: tuple[Any, ...]
) -> None:
    """``build(*lazy_args)`` evaluated equals ``build(*numpy_args)``: the same error kind, or
    the same dtype, shape and values (NaNs where NumPy has them)."""
    expected, expected_error, _ = numpy_outcome(build, *numpy_args)
    with case.blocks():
        lazy, error, _ = outcome(build, *lazy_args)
        if error is None:
            ours, error, _ = outcome(materialised, lazy)
    what = f"{build} on {case!r} with {numpy_args[1:]!r}"
    if expected_error is not None:
        assert_same_failure(error, expected_error, what)
        return
    if error is not None:
        raise AssertionError(f"{what}: NumPy gave {expected!r}") from error
    expected = np.asarray(expected)
    assert lazy.dtype == expected.dtype, f"{what}: dtype {lazy.dtype} != {expected.dtype}"
    assert ours.dtype == expected.dtype, f"{what}: computed dtype {ours.dtype}"
    assert lazy.shape == expected.shape, f"{what}: shape {lazy.shape} != {expected.shape}"
    np.testing.assert_array_equal(ours, expected, err_msg=what, strict=True)


@st.composite
def _other_operand(draw: st.DrawFn, case: Case) -> tuple[Any, Any, str]:
    """``(lazy side, NumPy side, kind)`` of the other operand."""
    kind = draw(st.sampled_from(["python", "numpy", "columns", "chunked"]))
    if kind == "python":
        value = draw(st.sampled_from(PYTHON_SCALARS))
        return value, value, kind
    if kind == "numpy":
        value = draw(st.sampled_from(NUMPY_SCALARS))
        return value, value, kind
    shape = case.data.shape
    dtype = draw(st.sampled_from(("int32", "uint8", "float32", "float64", "bool")))
    if kind == "columns" and shape:  # per-column values that broadcast along the other axes
        column_values = draw(values(shape[-1:], dtype, nan_patterns=("none",)))
        return column_values, column_values, kind
    other = draw(values(shape, dtype, nan_patterns=("none", "some")))
    chunks = draw(chunkings(shape))
    return oc.from_numpy(other, chunks=chunks), other, "chunked"


@examples(0.5)
@given(
    case=cases(dtypes=ALL_DTYPES, max_dims=2, nan_patterns=("none", "some")),
    data=st.data(),
)
def test_operators_match_numpy(case: Case, data: st.DataObject) -> None:
    """Each operator both ways round; weak Python scalars keep the array's dtype (NEP 50)."""
    x = case.chunked()
    other_lazy, other_numpy, _ = data.draw(_other_operand(case))
    for _ in range(3):
        symbol = data.draw(st.sampled_from(sorted(BINARY_OPERATORS)), label="operator")
        op = BINARY_OPERATORS[symbol]
        if data.draw(st.booleans(), label="reversed"):
            assert_expression_matches(
                lambda a, b, op=op: op(b, a), case, (x, other_lazy), (case.data, other_numpy)
            )
        else:
            assert_expression_matches(op, case, (x, other_lazy), (case.data, other_numpy))


def test_python_scalars_are_weak() -> None:
    """NEP 50: ``float32 * 2.0`` stays float32, ``int8 + 1`` stays int8, ``uint8 + 300`` is an
    OverflowError as in NumPy."""
    x32 = oc.from_numpy(np.ones(5, np.float32), chunks=2)
    assert (x32 * 2.0).dtype == np.float32
    assert (2.0 * x32).compute().dtype == np.float32
    assert (x32 * np.float64(2.0)).dtype == np.float64
    x8 = oc.from_numpy(np.arange(5, dtype=np.int8), chunks=2)
    assert (x8 + 1).dtype == np.int8
    assert (x8 / 2).dtype == np.float64
    with pytest.raises(OverflowError):
        oc.from_numpy(np.ones(3, np.uint8), chunks=2) + 300


UNARY_UFUNCS = (np.sqrt, np.negative, np.absolute, np.isnan, np.isfinite, np.sign, np.floor)
TRANSCENDENTAL = (np.exp, np.sin, np.log1p, np.tanh)


@examples(0.3)
@given(case=cases(dtypes=(*FLOATS, "int16", "complex128"), max_dims=2), data=st.data())
def test_ufuncs_match_numpy(case: Case, data: st.DataObject) -> None:
    x = case.chunked()
    other_data = data.draw(values(case.data.shape, "float64", nan_patterns=("none",)))
    y = oc.from_numpy(other_data, chunks=data.draw(chunkings(case.data.shape)))
    for ufunc in UNARY_UFUNCS:
        assert_expression_matches(ufunc, case, (x,), (case.data,))
    for binary in (np.add, np.maximum, np.fmin, np.arctan2, np.hypot):
        assert_expression_matches(binary, case, (x, y), (case.data, other_data))
    for ufunc in TRANSCENDENTAL:  # the fused kernel may round the last bit its own way
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            expected = ufunc(case.data)
            with case.blocks():
                ours = np.asarray(ufunc(x))
        assert ours.dtype == expected.dtype, ufunc
        tolerance = 4 * np.finfo(expected.dtype).eps
        np.testing.assert_allclose(ours, expected, rtol=tolerance, atol=tolerance, err_msg=ufunc)


@examples(0.2)
@given(case=cases(dtypes=("int32", "float32", "float64"), max_dims=2), data=st.data())
def test_two_output_ufuncs_give_two_expressions(case: Case, data: st.DataObject) -> None:
    x = case.chunked()
    divisor = data.draw(st.sampled_from([3, 2.5, -4]))
    for ufunc, args, numpy_args in (
        (np.divmod, (x, divisor), (case.data, divisor)),
        (np.modf, (x,), (case.data,)),
        (np.frexp, (x,), (case.data,)),
    ):
        expected, expected_error, _ = numpy_outcome(ufunc, *numpy_args)
        ours, error, _ = outcome(ufunc, *args)
        if expected_error is not None:
            assert_same_failure(error, expected_error, ufunc.__name__)
            continue
        assert error is None, error
        assert isinstance(ours, tuple)
        assert len(ours) == len(expected) == 2
        for lazy, wanted in zip(ours, expected, strict=True):
            with np.errstate(all="ignore"), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                np.testing.assert_array_equal(np.asarray(lazy), wanted, strict=True)


@examples(0.3)
@given(case=cases(dtypes=ALL_DTYPES, max_dims=3, nan_patterns=("none", "some")), data=st.data())
def test_casts_where_clip_round_and_map_blocks_match_numpy(case: Case, data: st.DataObject) -> None:
    x = case.chunked()
    a = case.data
    target = data.draw(st.sampled_from(("float64", "float32", "int64", "bool", "complex128")))
    low, high = sorted(
        data.draw(st.lists(st.sampled_from([-1, 0, 0.5, 3]), min_size=2, max_size=2))
    )
    decimals = data.draw(st.sampled_from([0, 1, -1]))
    checks: list[tuple[Callable[..., Any], Any, Any]] = [
        (lambda v: v.astype(target), x, a),
        (lambda v: np.astype(v, target), x, a),
        (lambda v: np.where(v > 0, v, 0), x, a),
        (lambda v: np.where(v != 0, 1.5, v), x, a),
        (lambda v: np.clip(v, low, high), x, a),
        (lambda v: v.clip(low, high), x, a),
        (lambda v: v.clip(max=high), x, a),
        (np.isnan, x, a),
        (np.isfinite, x, a),
        (lambda v: v.round(decimals), x, a),
        (lambda v: np.round(v, decimals), x, a),
    ]
    for build, lazy, eager in checks:
        assert_expression_matches(build, case, (lazy,), (eager,))
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (complex infinities: NaN parts, as in NumPy)
        expected = a * 2 + 1
        doubled = x.map_blocks(lambda block: block * 2 + 1, dtype=expected.dtype)
        np.testing.assert_array_equal(np.asarray(doubled), expected, strict=True)


@examples(0.25)
@given(
    data=st.data(),
    dtype=st.sampled_from(("int16", "float32", "float64")),
    shape=hnp.array_shapes(min_dims=1, max_dims=3, min_side=0, max_side=7),
)
def test_concatenate_and_stack_match_numpy(
    data: st.DataObject, dtype: str, shape: tuple[int, ...]
) -> None:
    """Parts chunked differently, joined along any axis, and an expression as a part."""
    axis = data.draw(st.integers(-len(shape), len(shape) - 1), label="axis")
    parts = []
    for _ in range(data.draw(st.integers(1, 3), label="parts")):
        part_shape = list(shape)
        part_shape[axis] = data.draw(st.integers(0, 6))
        values_ = data.draw(values(tuple(part_shape), dtype, nan_patterns=("none",)))
        parts.append((values_, oc.from_numpy(values_, chunks=data.draw(chunkings(part_shape)))))
    joined = np.concatenate([lazy for _, lazy in parts] + [parts[0][1] * 2], axis=axis)
    expected = np.concatenate([eager for eager, _ in parts] + [parts[0][0] * 2], axis=axis)
    assert joined.shape == expected.shape
    np.testing.assert_array_equal(np.asarray(joined), expected, strict=True)
    same_shape = [parts[0][1], parts[0][1] + 1, parts[0][1]]
    stack_axis = data.draw(st.integers(-len(shape) - 1, len(shape)), label="stack axis")
    stacked = np.stack(same_shape, axis=stack_axis)
    expected_stack = np.stack([parts[0][0], parts[0][0] + 1, parts[0][0]], axis=stack_axis)
    np.testing.assert_array_equal(materialised(stacked), expected_stack, strict=True)


@examples(0.4)
@given(case=cases(dtypes=("int32", "float64"), min_dims=1, nan_patterns=("none",)), data=st.data())
def test_indexing_an_expression_matches_numpy(case: Case, data: st.DataObject) -> None:
    """Integers (negative too), slices with any step (negative too) and an ellipsis."""
    x = case.chunked()
    expression = x * 2 - 1
    expected_whole = case.data * 2 - 1
    for _ in range(4):
        key = data.draw(
            hnp.basic_indices(case.data.shape, allow_newaxis=False, allow_ellipsis=True),
            label="index",
        )
        expected, expected_error, _ = numpy_outcome(operator.getitem, expected_whole, key)
        ours, error, _ = outcome(operator.getitem, expression, key)
        if expected_error is not None:
            assert_same_failure(error, expected_error, f"[{key!r}]")
            continue
        assert error is None, f"[{key!r}]: {error!r}"
        np.testing.assert_array_equal(ours, np.asarray(expected), strict=True, err_msg=repr(key))


def test_named_indices_of_an_expression() -> None:
    data = np.arange(40 * 3, dtype=np.float64).reshape(40, 3)
    expression = oc.from_numpy(data, chunks=(7, 2)) * 2 + 1
    expected = data * 2 + 1
    for key in (np.s_[3:17], np.s_[-1], np.s_[::-2, 1], np.s_[..., 0], np.s_[5, -2], np.s_[40:]):
        np.testing.assert_array_equal(expression[key], expected[key], strict=True)


@examples(0.2)
@given(
    case=cases(dtypes=("int8", "float32", "complex64"), nan_patterns=("none", "some")),
    data=st.data(),
)
def test_compute_asarray_and_to_zarr_give_the_values(
    case: Case, data: st.DataObject, tmp_path_factory: pytest.TempPathFactory
) -> None:
    x = case.chunked()
    expression = x + x
    expected = case.data + case.data
    computed = expression.compute(progress=False)
    assert isinstance(computed, np.ndarray)
    np.testing.assert_array_equal(computed, expected, strict=True)
    np.testing.assert_array_equal(np.asarray(expression), expected, strict=True)
    path = tmp_path_factory.mktemp("out") / "out.zarr"
    chunks = data.draw(chunkings(case.data.shape))
    written = expression.to_zarr(path, chunks=chunks, progress=False)
    assert written.chunks == chunks
    np.testing.assert_array_equal(oc.open(path)[...], expected, strict=True)


# -- what is not supported --------------------------------------------------------------------


@pytest.fixture
def x() -> oc.ChunkedArray:
    return oc.from_numpy(np.arange(16.0).reshape(4, 4) - 5, chunks=(3, 3))


@pytest.mark.parametrize(
    "attempt",
    [
        pytest.param(lambda x: np.linalg.inv(x), id="linalg.inv"),
        pytest.param(lambda x: np.add(x, 1, out=np.empty((4, 4))), id="ufunc out="),
        pytest.param(lambda x: np.add(x, 1, where=np.ones((4, 4), bool)), id="ufunc where="),
        pytest.param(lambda x: np.where(x > 0), id="where with one argument"),
        pytest.param(lambda x: (x * 2)[[0, 2]], id="fancy index of an expression"),
        pytest.param(lambda x: (x * 2)[np.ones(4, bool)], id="mask index of an expression"),
        pytest.param(lambda x: bool(x > 0), id="bool of an expression"),
        pytest.param(lambda x: list(x * 2), id="iterating an expression"),
        pytest.param(lambda x: np.add.accumulate(x), id="ufunc accumulate"),
        pytest.param(lambda x: np.linalg.svd(x), id="np.linalg.svd"),
        pytest.param(lambda x: np.concatenate([x, np.ones((4, 4))]), id="concatenate an ndarray"),
    ],
)
def test_unsupported_operations_raise_type_error(
    x: oc.ChunkedArray, attempt: Callable[[Any], Any]
) -> None:
    with pytest.raises(TypeError):
        attempt(x)


def test_shapes_that_do_not_match_raise(x: oc.ChunkedArray) -> None:
    with pytest.raises(ValueError, match="shape"):
        x + oc.from_numpy(np.ones((4, 3)), chunks=2)
    with pytest.raises(ValueError, match="broadcast"):
        x + np.ones((5,))
    with pytest.raises(ValueError, match="broadcast"):
        x + np.ones((2, 4, 4))  # would grow the chunked shape
    with pytest.raises(np.exceptions.AxisError):
        np.concatenate([x, x], axis=2)


# -- within a budget -----------------------------------------------------------------------


def test_compute_over_the_budget_returns_a_chunked_array_and_stays_within_it() -> None:
    """An expression over data six times the budget: compute() gives a temporary chunked array
    with the right values, reductions are right, and the peak stays under the budget while
    many times the budget flows through the manager."""
    budget = 4 << 20
    rows = (24 << 20) // (8 * 64)
    data = np.random.default_rng(3).normal(size=(rows, 64))
    x = oc.from_numpy(data, chunks=(512, 64))
    with oc.Manager("small", max_bytes=budget) as manager:
        result = (x * 2 + 1).compute(progress=False)
        column_means = x.mean(axis=0)
        spread = np.std(x * 2 + 1)
        stats = manager.stats()
    assert isinstance(result, oc.ChunkedArray)
    assert result.shape == data.shape
    assert result.dtype == data.dtype
    for rows_slice in (slice(0, 5000), slice(rows - 3000, rows)):
        np.testing.assert_array_equal(result[rows_slice], data[rows_slice] * 2 + 1)
    np.testing.assert_allclose(column_means, data.mean(axis=0), rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(spread, np.std(data * 2 + 1), rtol=1e-12)
    assert stats.total_bytes > 4 * budget, "the data did not flow through the manager"
    assert stats.peak_bytes <= budget + (256 << 10), f"peak {stats.peak_bytes} over {budget}"


def test_compute_within_the_budget_returns_an_ndarray() -> None:
    data = np.arange(1000, dtype=np.int16).reshape(100, 10)
    x = oc.from_numpy(data, chunks=(30, 4))
    with oc.Manager("roomy", max_bytes="64M"):
        result = (x - 7).compute(progress=False)
    assert isinstance(result, np.ndarray)
    np.testing.assert_array_equal(result, data - 7, strict=True)


@pytest.mark.parametrize("dtype", [*INTEGERS, *FLOATS])
def test_expressions_of_two_differently_chunked_arrays(dtype: str) -> None:
    rng = np.random.default_rng(11)
    a = rng.integers(0, 50, size=(23, 9)).astype(dtype)
    b = rng.integers(1, 50, size=(23, 9)).astype(dtype)
    x = oc.from_numpy(a, chunks=(5, 4))
    y = oc.from_numpy(b, chunks=(7, 9))
    with oc.Manager("one chunk per block", max_bytes=4096):
        np.testing.assert_array_equal(np.asarray(x * y - x // y), a * b - a // b, strict=True)
        np.testing.assert_array_equal((x * y - x).sum(axis=0), (a * b - a).sum(axis=0))
