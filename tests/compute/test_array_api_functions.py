"""oocarray.array_api's statistics, searching, manipulation, sorting, set and linear algebra
functions against array_api_strict on the same inputs (values, dtypes, shapes, error types),
across chunkings that split every axis, and in a budget smaller than the data.

Many go through NumPy's functions to the compute layer's out-of-core algorithms (sorting,
sets, scans, products, rearrangements), so these tests also hold those to the standard."""

from __future__ import annotations

from typing import Any

import array_api_strict as strict
import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

import oocarray as oc
import oocarray.array_api as xp
from tests.compute.array_api_cases import (
    arrays,
    chunked,
    differential,
    few,
    shapes,
    xps,
)


@st.composite
def axis_arguments(draw: st.DrawFn, ndim: int, tuples: bool = True) -> Any:
    """None, an axis (negative too) or a tuple of distinct axes."""
    choices = [st.none()]
    if ndim:
        choices.append(st.integers(-ndim, ndim - 1))
        if tuples:
            choices.append(xps.valid_tuple_axes(ndim))
    return draw(st.one_of(*choices))


SMALL_REALS = st.sampled_from([-4.0, -2.5, -1.0, -0.0, 0.0, 0.5, 1.0, 3.0, np.nan, np.inf, -np.inf])


@st.composite
def summable_arrays(draw: st.DrawFn) -> Any:
    """Arrays whose floating values are small multiples of 1/2 (and NaNs, infinities), so
    sums in any order (the chunks' order) agree to the last bits."""
    dtype = draw(xps.scalar_dtypes())
    elements: Any = None
    if strict.isdtype(dtype, "real floating"):
        elements = SMALL_REALS
    elif strict.isdtype(dtype, "complex floating"):
        # (finite parts: a complex product with infinite parts is inf or nan depending on
        # the grouping of its factors, and chunks group them differently from NumPy's loop)
        finite = SMALL_REALS.filter(lambda v: not np.isinf(v))
        elements = st.builds(complex, finite, finite)
    return draw(arrays(dtype, elements=elements))


# -- statistics -------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["max", "min", "mean", "sum", "prod", "std", "var", "all", "any"])
@few(15)
@given(data=st.data())
def test_reductions(name: str, data: st.DataObject) -> None:
    a = data.draw(summable_arrays(), label="x")
    x = data.draw(chunked(a))
    kwargs: dict[str, Any] = {
        "axis": data.draw(axis_arguments(a.ndim), label="axis"),
        "keepdims": data.draw(st.booleans(), label="keepdims"),
    }
    if name in ("std", "var"):
        kwargs["correction"] = data.draw(st.sampled_from([0, 1, 0.5]), label="correction")
    if name in ("sum", "prod") and data.draw(st.booleans(), label="with dtype"):
        for kind in ("bool", "signed integer", "unsigned integer", "real floating",
                     "complex floating"):  # fmt: skip
            if strict.isdtype(a.dtype, kind) and kind != "bool":
                candidates = {
                    "signed integer": "int64",
                    "unsigned integer": "uint64",
                    "real floating": "float64",
                    "complex floating": "complex128",
                }
                dtype_name = candidates[kind]
                kwargs["dtype"] = dtype_name
    strict_kwargs = dict(kwargs)
    if "dtype" in kwargs:
        strict_kwargs["dtype"] = getattr(strict, kwargs["dtype"])
        kwargs["dtype"] = getattr(xp, kwargs["dtype"])
    differential(
        lambda: getattr(xp, name)(x, **kwargs),
        lambda: getattr(strict, name)(a, **strict_kwargs),
        f"{name}({x.dtype}{x.shape}, {kwargs})",
    )


@few(15)
@given(data=st.data(), include_initial=st.booleans(), product=st.booleans())
def test_cumulative_sum_and_prod(data: st.DataObject, include_initial: bool, product: bool) -> None:
    a = data.draw(arrays(xps.numeric_dtypes(), shapes(min_dims=1)), label="x")
    if product and strict.isdtype(a.dtype, "complex floating"):
        # A complex product with infinite or NaN parts depends on how its factors are grouped
        # (array-api-strict's include_initial multiplies by the 1 first, NumPy's does not).
        assume(bool(np.isfinite(np.asarray(a)).all()))
    x = data.draw(chunked(a))
    axis = data.draw(st.integers(-a.ndim, a.ndim - 1) | st.none(), label="axis")
    name = "cumulative_prod" if product else "cumulative_sum"
    differential(
        lambda: getattr(xp, name)(x, axis=axis, include_initial=include_initial),
        lambda: getattr(strict, name)(a, axis=axis, include_initial=include_initial),
        f"{name}(axis={axis})",
    )


@few(15)
@given(data=st.data(), n=st.integers(0, 3))
def test_diff(data: st.DataObject, n: int) -> None:
    a = data.draw(arrays(xps.real_dtypes(), shapes(min_dims=1)), label="x")
    x = data.draw(chunked(a))
    axis = data.draw(st.integers(-a.ndim, a.ndim - 1), label="axis")
    differential(
        lambda: xp.diff(x, axis=axis, n=n),
        lambda: strict.diff(a, axis=axis, n=n),
        f"diff(axis={axis}, n={n})",
    )


# -- searching --------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["argmax", "argmin"])
@few(20)
@given(data=st.data())
def test_argmax_argmin(name: str, data: st.DataObject) -> None:
    a = data.draw(arrays(), label="x")
    x = data.draw(chunked(a))
    axis = data.draw(axis_arguments(a.ndim, tuples=False), label="axis")
    keepdims = data.draw(st.booleans(), label="keepdims")
    differential(
        lambda: getattr(xp, name)(x, axis=axis, keepdims=keepdims),
        lambda: getattr(strict, name)(a, axis=axis, keepdims=keepdims),
        f"{name}({x.dtype}{x.shape}, axis={axis}, keepdims={keepdims})",
    )


@few(20)
@given(data=st.data())
def test_count_nonzero(data: st.DataObject) -> None:
    a = data.draw(arrays(), label="x")
    x = data.draw(chunked(a))
    axis = data.draw(axis_arguments(a.ndim), label="axis")
    keepdims = data.draw(st.booleans(), label="keepdims")
    differential(
        lambda: xp.count_nonzero(x, axis=axis, keepdims=keepdims),
        lambda: strict.count_nonzero(a, axis=axis, keepdims=keepdims),
        f"count_nonzero(axis={axis})",
    )


@few(15)
@given(data=st.data())
def test_nonzero(data: st.DataObject) -> None:
    a = data.draw(arrays(shape=shapes(min_dims=1)), label="x")
    x = data.draw(chunked(a))
    differential(lambda: xp.nonzero(x), lambda: strict.nonzero(a), "nonzero")


@few(15)
@given(data=st.data(), side=st.sampled_from(["left", "right"]))
def test_searchsorted(data: st.DataObject, side: str) -> None:
    dtype = data.draw(xps.real_dtypes())
    a = strict.sort(data.draw(arrays(dtype, shapes(1, 1)), label="sorted x1"))
    b = data.draw(arrays(dtype), label="x2")
    x1, x2 = data.draw(chunked(a)), data.draw(chunked(b))
    differential(
        lambda: xp.searchsorted(x1, x2, side=side),
        lambda: strict.searchsorted(a, b, side=side),
        f"searchsorted({side})",
    )


# -- manipulation -----------------------------------------------------------------------------


@few(20)
@given(data=st.data())
def test_broadcast_to_and_broadcast_arrays(data: st.DataObject) -> None:
    shapes2 = data.draw(xps.mutually_broadcastable_shapes(2, max_dims=3, max_side=4))
    a = data.draw(arrays(shape=shapes2.input_shapes[0]), label="x1")
    b = data.draw(arrays(shape=shapes2.input_shapes[1]), label="x2")
    x1, x2 = data.draw(chunked(a)), data.draw(chunked(b))
    differential(
        lambda: xp.broadcast_to(x1, shapes2.result_shape),
        lambda: strict.broadcast_to(a, shapes2.result_shape),
        "broadcast_to",
    )
    differential(
        lambda: xp.broadcast_arrays(x1, x2), lambda: strict.broadcast_arrays(a, b), "broadcast"
    )
    wrong = data.draw(shapes(), label="another shape")
    differential(
        lambda: xp.broadcast_to(x1, wrong), lambda: strict.broadcast_to(a, wrong), "to another"
    )


@few(25)
@given(data=st.data(), stacking=st.booleans())
def test_concat_and_stack(data: st.DataObject, stacking: bool) -> None:
    shape = list(data.draw(shapes(min_dims=0 if stacking else 1), label="shape"))
    count = data.draw(st.integers(1, 3), label="count")
    axis = data.draw(st.integers(-len(shape) - 1, len(shape)), label="axis")
    same_kind = data.draw(xps.scalar_dtypes())
    strict_arrays, ours = [], []
    for _ in range(count):
        own = list(shape)
        if not stacking and -len(shape) <= axis < len(shape):
            own[axis] = data.draw(st.integers(0, 3))
        dtype = data.draw(st.just(same_kind) | xps.scalar_dtypes())
        a = data.draw(arrays(dtype, tuple(own)))
        strict_arrays.append(a)
        ours.append(data.draw(chunked(a)))
    name = "stack" if stacking else "concat"
    differential(
        lambda: getattr(xp, name)(ours, axis=axis),
        lambda: getattr(strict, name)(strict_arrays, axis=axis),
        f"{name}(axis={axis})",
    )


@few(20)
@given(data=st.data())
def test_new_and_dropped_axes(data: st.DataObject) -> None:
    a = data.draw(arrays(), label="x")
    x = data.draw(chunked(a))
    axis = data.draw(st.integers(-a.ndim - 2, a.ndim + 1), label="axis")
    differential(
        lambda: xp.expand_dims(x, axis=axis), lambda: strict.expand_dims(a, axis=axis), "expand"
    )
    ones = tuple(i for i, n in enumerate(a.shape) if n == 1)
    squeezed = data.draw(
        st.sampled_from([ones, *((i,) for i in range(a.ndim))]) if a.ndim else st.just(())
    )
    differential(
        lambda: xp.squeeze(x, axis=squeezed), lambda: strict.squeeze(a, axis=squeezed), "squeeze"
    )
    if a.ndim:
        along = data.draw(st.integers(-a.ndim, a.ndim - 1), label="unstack axis")
        differential(
            lambda: xp.unstack(x, axis=along), lambda: strict.unstack(a, axis=along), "unstack"
        )


@few(20)
@given(data=st.data())
def test_axis_permutations(data: st.DataObject) -> None:
    a = data.draw(arrays(), label="x")
    x = data.draw(chunked(a))
    order = data.draw(st.permutations(range(a.ndim)), label="order")
    differential(
        lambda: xp.permute_dims(x, tuple(order)),
        lambda: strict.permute_dims(a, tuple(order)),
        "permute_dims",
    )
    if a.ndim:
        source = data.draw(st.integers(-a.ndim, a.ndim - 1))
        target = data.draw(st.integers(-a.ndim, a.ndim - 1))
        differential(
            lambda: xp.moveaxis(x, source, target),
            lambda: strict.moveaxis(a, source, target),
            "moveaxis",
        )
    differential(lambda: xp.matrix_transpose(x), lambda: strict.matrix_transpose(a), "mT")


REARRANGEMENTS = {
    "flip": lambda m, x, axis: m.flip(x, axis=axis),
    "roll": lambda m, x, axis: m.roll(x, 2, axis=axis),
    "reshape": lambda m, x, axis: m.reshape(x, (-1,)),
    "repeat": lambda m, x, axis: m.repeat(x, 2, axis=axis),
    "tile": lambda m, x, axis: m.tile(x, (2,) * x.ndim),
}


@pytest.mark.parametrize("name", list(REARRANGEMENTS))
@few(12)
@given(data=st.data())
def test_rearrangements(name: str, data: st.DataObject) -> None:
    a = data.draw(arrays(shape=shapes(min_dims=1)), label="x")
    x = data.draw(chunked(a))
    axis = data.draw(st.integers(-a.ndim, a.ndim - 1) | st.none(), label="axis")
    call = REARRANGEMENTS[name]
    differential(lambda: call(xp, x, axis), lambda: call(strict, a, axis), f"{name}({axis})")


@few(15)
@given(data=st.data())
def test_take_and_take_along_axis(data: st.DataObject) -> None:
    a = data.draw(arrays(shape=shapes(min_dims=1, min_side=1)), label="x")
    x = data.draw(chunked(a))
    axis = data.draw(st.integers(-a.ndim, a.ndim - 1), label="axis")
    n = a.shape[axis]
    picks = data.draw(st.lists(st.integers(0, n - 1), max_size=6), label="indices")
    indices = strict.asarray(picks, dtype=strict.int64)
    differential(
        lambda: xp.take(x, xp.asarray(picks, dtype=xp.int64), axis=axis),
        lambda: strict.take(a, indices, axis=axis),
        "take",
    )
    along = data.draw(arrays(strict.int64, a.shape, elements=st.integers(0, n - 1)), label="along")
    differential(
        lambda: xp.take_along_axis(x, data.draw(chunked(along)), axis=axis),
        lambda: strict.take_along_axis(a, along, axis=axis),
        "take_along_axis",
    )


# -- sorting and sets -------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["sort", "argsort"])
@few(15)
@given(data=st.data(), descending=st.booleans())
def test_sort_and_argsort(name: str, data: st.DataObject, descending: bool) -> None:
    a = data.draw(arrays(xps.real_dtypes(), shapes(min_dims=1)), label="x")
    x = data.draw(chunked(a))
    axis = data.draw(st.integers(-a.ndim, a.ndim - 1), label="axis")
    differential(
        lambda: getattr(xp, name)(x, axis=axis, descending=descending, stable=True),
        lambda: getattr(strict, name)(a, axis=axis, descending=descending, stable=True),
        f"{name}(axis={axis}, descending={descending})",
    )


@pytest.mark.parametrize("name", ["unique_values", "unique_counts", "unique_inverse", "unique_all"])
@few(12)
@given(data=st.data())
def test_unique(name: str, data: st.DataObject) -> None:
    a = data.draw(arrays(xps.real_dtypes()), label="x")
    x = data.draw(chunked(a))
    with np.errstate(invalid="ignore"):
        assume(not np.isnan(np.asarray(a)).any())  # NaNs are distinct: their order varies
    differential(lambda: getattr(xp, name)(x), lambda: getattr(strict, name)(a), name)


# -- linear algebra ---------------------------------------------------------------------------


@few(15)
@given(data=st.data())
def test_matmul_tensordot_vecdot(data: st.DataObject) -> None:
    dtype = data.draw(xps.numeric_dtypes())
    n, k, m = (data.draw(st.integers(1, 4)) for _ in range(3))
    # small values: sums of products in any order agree closely
    bounds: dict[str, Any] = {
        "min_value": 0 if strict.isdtype(dtype, "unsigned integer") else -8,
        "max_value": 8,
    }
    if strict.isdtype(dtype, "real floating"):
        bounds |= {"allow_nan": False, "allow_infinity": False}
    elements: Any = bounds
    if strict.isdtype(dtype, "complex floating"):
        # Bounds by value do not apply to complex numbers: parts of 1e154 came, whose products
        # overflow or not depending on the order of the sums.
        part = st.floats(-8, 8, width=32 if dtype == strict.complex64 else 64)
        elements = st.builds(complex, part, part)
    a = data.draw(arrays(dtype, (n, k), elements=elements), label="a")
    b = data.draw(arrays(dtype, (k, m), elements=elements), label="b")
    x1, x2 = data.draw(chunked(a)), data.draw(chunked(b))
    differential(lambda: xp.matmul(x1, x2), lambda: strict.matmul(a, b), "matmul")
    differential(
        lambda: xp.tensordot(x1, x2, axes=1), lambda: strict.tensordot(a, b, axes=1), "tensordot"
    )
    differential(lambda: xp.vecdot(x1, x1), lambda: strict.vecdot(a, a), "vecdot")
    v1, v2 = a[:, 0], b[0, ...]
    y1, y2 = data.draw(chunked(np.asarray(v1))), data.draw(chunked(np.asarray(v2)))
    differential(
        lambda: xp.linalg.outer(y1, y2), lambda: strict.linalg.outer(v1, v2), "linalg.outer"
    )


@few(15)
@given(data=st.data(), ord=st.sampled_from([1, 2, 3, np.inf, -np.inf, 0]))
def test_vector_norm(data: st.DataObject, ord: Any) -> None:
    a = data.draw(arrays(xps.floating_dtypes()), label="x")
    x = data.draw(chunked(a))
    axis = data.draw(axis_arguments(a.ndim), label="axis")
    keepdims = data.draw(st.booleans())
    assume(a.size > 0 or ord not in (np.inf, -np.inf))
    differential(
        lambda: xp.linalg.vector_norm(x, axis=axis, keepdims=keepdims, ord=ord),
        lambda: strict.linalg.vector_norm(a, axis=axis, keepdims=keepdims, ord=ord),
        f"vector_norm(ord={ord}, axis={axis})",
    )


# -- memory -----------------------------------------------------------------------------------


def test_namespace_code_runs_in_a_budget_smaller_than_its_data() -> None:
    """Standard code (through x.__array_namespace__()) on 8 MiB under a 1.5 MiB budget."""
    rng = np.random.default_rng(0)
    data = rng.normal(size=(4096, 256))
    x = oc.from_numpy(data, chunks=(128, 64))
    with oc.Manager("array api", max_bytes="1536K"):
        xp_ = x.__array_namespace__()
        centred = xp_.subtract(x, xp_.mean(x, axis=0))
        spread = xp_.std(xp_.where(xp_.abs(centred) < 2.0, centred, 0.0), axis=0, correction=1)
        peak = xp_.max(xp_.clip(xp_.sin(x) * 3.0, -1.0, 1.0), axis=1)
        result = np.asarray(spread), np.asarray(peak)
    centred_numpy = data - data.mean(axis=0)
    expected = np.where(np.abs(centred_numpy) < 2.0, centred_numpy, 0.0).std(axis=0, ddof=1)
    np.testing.assert_allclose(result[0], expected, rtol=1e-10)
    np.testing.assert_allclose(result[1], np.clip(np.sin(data) * 3.0, -1, 1).max(axis=1))
