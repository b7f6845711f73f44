"""Streaming reductions equal NumPy's on the same data: exactly for integers, booleans, extremes,
arg-extremes and histogram counts; within a bound of rounding error for float sums, means and
variances.  Over every dtype, shape (0-d to 3-d, size-0 axes), chunking, axis, keepdims, dtype=,
ddof and NaN pattern, through methods, NumPy functions and ``compute=False`` + ``oc.compute``."""

from __future__ import annotations

import re
import warnings
from typing import Any

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

import oocarray as oc
from oocarray._compute import histogram as lazy_histogram  # (np.histogram takes no compute=)
from tests.compute.strategies import (
    ALL_DTYPES,
    FLOATS,
    INTEGERS,
    Case,
    assert_close,
    assert_like_numpy_result,
    assert_same_failure,
    axes,
    cases,
    examples,
    numpy_outcome,
    outcome,
    reduced_count,
)

# Warnings NumPy gives about what a result means; oocarray must give them too.
MEANINGFUL_WARNINGS = ("Mean of empty slice", "All-NaN slice", "Degrees of freedom <= 0")
FORMS = ("method", "function", "lazy")
EXACT = frozenset(
    {"min", "max", "nanmin", "nanmax", "argmin", "argmax", "nanargmin", "nanargmax"}
    | {"any", "all", "count_nonzero"}
)


def _ours(x: Any, name: str, form: str, kwargs: dict[str, Any]) -> Any:
    """``name`` of ``x`` as a method, a NumPy function, or lazily through ``oc.compute``."""
    if form == "function" or not hasattr(x, name):
        return getattr(np, name)(x, **kwargs)
    if form == "method":
        return getattr(x, name)(**kwargs)
    lazy = getattr(x, name)(compute=False, **kwargs)
    assert isinstance(lazy, oc.LazyResult)
    (result,) = oc.compute(lazy)
    return result


def _normal(message: str) -> str:
    """A warning's message without the step that gave it: "invalid value encountered in add"
    when oocarray merges partials is NumPy's "... in reduce" on the whole array."""
    return re.sub(r" encountered in [\w ]+$", " encountered", message.rstrip("."))


def _eps(dtype: np.dtype[Any]) -> float:
    return float(np.finfo(dtype).eps) if dtype.kind in "fc" else 0.0


def _magnitude(data: np.ndarray, axis: Any, keepdims: bool, power: int = 1) -> Any:
    """The sum of |x|**power along ``axis`` (NaNs left out), in float64: the scale of rounding
    errors in a sum."""
    with np.errstate(all="ignore"):
        wide = np.abs(data.astype(np.complex128 if data.dtype.kind == "c" else np.float64))
        return np.nansum(wide**power, axis=axis, keepdims=keepdims)


def _bound(name: str, case: Case, expected: Any, kwargs: dict[str, Any]) -> Any:
    """How far a float result may be from NumPy's: both sum the same terms in different orders,
    so each is within (n + 2) rounding errors of the sum of magnitudes (n terms per result)."""
    data = case.data
    axis, keepdims = kwargs.get("axis"), kwargs.get("keepdims", False)
    n = reduced_count(data.shape, axis)
    result = np.asarray(expected).dtype
    # float16 means and variances are worked out in float32, as NumPy does.
    work = (
        np.dtype(np.float32) if result == np.float16 and name not in ("sum", "nansum") else result
    )
    rounding = _eps(work) * (n + 2)
    if name in ("nanvar", "nanstd") and data.dtype.kind in "fc":
        # NumPy's nanvar stores the deviations in the input's dtype, whatever dtype= says
        rounding = max(_eps(work), _eps(data.dtype)) * (n + 2)
    own = 2 * _eps(result) * np.abs(expected)
    kind = name.removeprefix("nan")
    if kind == "sum":
        return rounding * _magnitude(data, axis, keepdims) + own
    if kind == "prod":  # each product is n roundings away from the exact one
        return rounding * np.abs(expected) + own
    if kind == "mean":
        return rounding * _magnitude(data, axis, keepdims) / max(1, n) + own
    # var and std: rounding of the mean and of the squared deviations, scaled by n / (n - ddof)
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # empty and all-NaN slices: their results are NaN
        wide = data.astype(np.complex128 if data.dtype.kind == "c" else np.float64)
        spread = np.nanvar(wide, axis=axis, keepdims=keepdims)
        centre = np.abs(np.nanmean(wide, axis=axis, keepdims=keepdims))
    scale = n / max(1, n - kwargs.get("ddof", 0))
    # (the last term: a mean rounded to the work dtype leaves every deviation that far off)
    variance_bound = (
        4 * scale * (rounding * (spread + centre * np.sqrt(spread)) + (rounding * centre) ** 2)
    )
    if kind == "var":
        return variance_bound + own
    # |a - b| = |a**2 - b**2| / (a + b): a bound on variances bounds standard deviations
    with np.errstate(all="ignore"):
        below = np.maximum(np.abs(expected), np.sqrt(variance_bound))
        return np.where(below > 0, variance_bound / below, 0.0) + own


def check_reduction(case: Case, x: oc.ChunkedArray, name: str, form: str, **kwargs: Any) -> None:
    """``name(x, **kwargs)`` equals NumPy's ``name(case.data, **kwargs)``: same errors, same
    kind of result, dtype and shape, same values (exactly, or within rounding for floats), and
    the warnings that carry meaning."""
    what = f"{form} {name}(axis={kwargs.get('axis')!r}, {kwargs}) on {case!r}"
    expected, expected_error, expected_warnings = numpy_outcome(
        getattr(np, name), case.data, **kwargs
    )
    with case.blocks():
        ours, error, our_warnings = outcome(_ours, x, name, form, kwargs)
    if expected_error is not None:
        assert_same_failure(error, expected_error, what)
        return
    if error is not None:
        raise AssertionError(f"{what}: NumPy returned {expected!r}") from error
    assert_like_numpy_result(ours, expected, what)
    ours_set = {_normal(w) for w in our_warnings}
    numpy_set = {_normal(w) for w in expected_warnings}
    assert ours_set <= numpy_set, f"{what}: warned {ours_set - numpy_set}, NumPy did not"
    for meaning in MEANINGFUL_WARNINGS:
        if any(w.startswith(meaning) for w in numpy_set):
            assert any(w.startswith(meaning) for w in ours_set), f"{what}: no {meaning!r} warning"
    exact = name in EXACT or np.asarray(expected).dtype.kind in "biu"
    if exact:
        np.testing.assert_array_equal(ours, expected, err_msg=what, strict=False)
    else:
        assert_close(ours, expected, _bound(name, case, expected, kwargs), what)


def _sum_dtypes(dtype: np.dtype[Any]) -> st.SearchStrategy[Any]:
    if dtype.kind in "biu":
        return st.sampled_from([None, "int64", "uint64", "int8", "float64", "float32"])
    if dtype.kind == "f":
        return st.sampled_from([None, "float64", "float32", "complex128"])
    return st.sampled_from([None, "complex128", "complex64"])


def _mean_dtypes(dtype: np.dtype[Any]) -> st.SearchStrategy[Any]:
    if dtype.kind == "c":
        return st.sampled_from([None, "complex128"])
    if dtype.kind in "iu" or dtype == np.float64:
        # (a float32 mean of wider data leaves NumPy's own deviations off by its rounding:
        # a one-element var with ddof=1 is then inf, not NaN)
        return st.sampled_from([None, "float64"])
    return st.sampled_from([None, "float64", "float32"])


@examples(0.4)
@given(case=cases(), data=st.data())
def test_sums_and_logic_match_numpy(case: Case, data: st.DataObject) -> None:
    x = case.chunked()
    for name in ("sum", "nansum", "any", "all", "count_nonzero"):
        kwargs: dict[str, Any] = {
            "axis": data.draw(axes(case.data.ndim), label=f"{name} axis"),
            "keepdims": data.draw(st.booleans(), label=f"{name} keepdims"),
        }
        if name in ("sum", "nansum"):
            kwargs["dtype"] = data.draw(_sum_dtypes(case.data.dtype), label=f"{name} dtype")
        form = data.draw(st.sampled_from(FORMS), label=f"{name} form")
        check_reduction(case, x, name, form, **kwargs)


@examples(0.25)
@given(case=cases(dtypes=ALL_DTYPES, for_products=True), data=st.data())
def test_products_match_numpy(case: Case, data: st.DataObject) -> None:
    # Complex products of infinities are NaN or not by the order of the factors
    assume(case.data.dtype.kind != "c" or np.isfinite(case.data).all())
    x = case.chunked()
    for name in ("prod", "nanprod"):
        kwargs: dict[str, Any] = {
            "axis": data.draw(axes(case.data.ndim), label=f"{name} axis"),
            "keepdims": data.draw(st.booleans(), label=f"{name} keepdims"),
            "dtype": data.draw(_sum_dtypes(case.data.dtype), label=f"{name} dtype"),
        }
        if kwargs["dtype"] in ("complex64", "complex128") and not np.isfinite(case.data).all():
            kwargs["dtype"] = None  # (the same order-dependence, once the values are complex)
        if _factors_overflow(case.data, kwargs["dtype"]):
            # So are float products whose factors overflow: NumPy multiplies element by element
            # and oocarray each block's product into the one before, so a zero reached before
            # the overflow gives 0 in one order and inf * 0 = NaN in the other.
            continue
        check_reduction(case, x, name, data.draw(st.sampled_from(FORMS)), **kwargs)


def _factors_overflow(values: np.ndarray, dtype: Any) -> bool:
    """Whether the product of the finite, nonzero magnitudes of ``values``, in some order,
    overflows (or underflows to zero) the float or complex type ``np.prod`` computes in with
    ``dtype``."""
    result = np.prod(values.ravel()[:1], dtype=dtype).dtype
    if result.kind not in "fc":
        return False
    with np.errstate(all="ignore"):
        magnitudes = np.abs(values.astype(np.complex128 if values.dtype.kind == "c" else float))
    exponents = np.log2(magnitudes[np.isfinite(magnitudes) & (magnitudes > 0)])
    # In some order the factors above 1 come first (an overflow), or those below 1 (to zero).
    info = np.finfo(result)
    return bool(
        exponents[exponents > 0].sum() > np.log2(info.max)
        or exponents[exponents < 0].sum() < np.log2(info.smallest_subnormal)
    )


@examples(0.5)
@given(case=cases(), data=st.data())
def test_means_and_variances_match_numpy(case: Case, data: st.DataObject) -> None:
    x = case.chunked()
    for name in ("mean", "var", "std", "nanmean", "nanvar", "nanstd"):
        kwargs: dict[str, Any] = {
            "axis": data.draw(axes(case.data.ndim), label=f"{name} axis"),
            "keepdims": data.draw(st.booleans(), label=f"{name} keepdims"),
            "dtype": data.draw(_mean_dtypes(case.data.dtype), label=f"{name} dtype"),
        }
        if not name.endswith("mean"):
            kwargs["ddof"] = data.draw(st.sampled_from([0, 1, 2, 5]), label=f"{name} ddof")
        check_reduction(case, x, name, data.draw(st.sampled_from(FORMS)), **kwargs)


@examples(0.4)
@given(case=cases(), data=st.data())
def test_extremes_match_numpy_exactly(case: Case, data: st.DataObject) -> None:
    x = case.chunked()
    for name in ("min", "max", "nanmin", "nanmax"):
        kwargs = {
            "axis": data.draw(axes(case.data.ndim), label=f"{name} axis"),
            "keepdims": data.draw(st.booleans(), label=f"{name} keepdims"),
        }
        check_reduction(case, x, name, data.draw(st.sampled_from(FORMS)), **kwargs)


@examples(0.4)
@given(case=cases(), data=st.data())
def test_arg_extremes_match_numpy_exactly(case: Case, data: st.DataObject) -> None:
    """The first index of the extreme, with NaN the extreme unless skipped; one axis or None
    (a tuple raises as in NumPy)."""
    x = case.chunked()
    for name in ("argmin", "argmax", "nanargmin", "nanargmax"):
        kwargs = {
            "axis": data.draw(
                st.one_of(axes(case.data.ndim, tuples=False), axes(case.data.ndim)),
                label=f"{name} axis",
            ),
            "keepdims": data.draw(st.booleans(), label=f"{name} keepdims"),
        }
        if isinstance(kwargs["axis"], tuple):  # (NumPy's nanarg* may judge NaNs first)
            with pytest.raises(TypeError):
                _ours(x, name, data.draw(st.sampled_from(FORMS)), kwargs)
            continue
        check_reduction(case, x, name, data.draw(st.sampled_from(FORMS)), **kwargs)


@st.composite
def _bins(draw: st.DrawFn, data: np.ndarray) -> dict[str, Any]:
    """A number of bins with or without a range, or explicit (sorted, maybe uneven) edges."""
    choice = draw(st.sampled_from(["count", "count and range", "edges"]))
    density = draw(st.sampled_from([None, False, True]))
    finite = data[np.isfinite(data)] if data.dtype.kind == "f" else data
    low = float(finite.min()) if finite.size else 0.0
    high = float(finite.max()) if finite.size else 1.0
    if choice == "count":
        return {"bins": draw(st.integers(1, 20)), "density": density}
    lo = low - draw(st.sampled_from([0.0, 0.5, -0.25 * (high - low)]))
    hi = high + draw(st.sampled_from([0.0, 1.0, -0.25 * (high - low)]))
    lo, hi = min(lo, hi), max(lo, hi)
    if choice == "count and range":
        return {"bins": draw(st.integers(1, 20)), "range": (lo, hi), "density": density}
    inner = sorted(draw(st.lists(st.floats(lo, hi), min_size=0, max_size=8)))
    edges = np.unique(np.array([lo, *inner, hi if hi > lo else lo + 1.0]))
    return {"bins": edges, "density": density}


@examples(0.4)
@given(case=cases(dtypes=(*INTEGERS, *FLOATS), nan_patterns=("none",)), data=st.data())
def test_histogram_matches_numpy(case: Case, data: st.DataObject) -> None:
    """Counts and edges exactly; densities to rounding."""
    kwargs = data.draw(_bins(case.data))
    form = data.draw(st.sampled_from(["function", "lazy"]))
    x = case.chunked()
    expected, expected_error, _ = numpy_outcome(np.histogram, case.data, **kwargs)
    with case.blocks():
        if form == "function":
            ours, error, _ = outcome(np.histogram, x, **kwargs)
        else:
            ours, error, _ = outcome(
                lambda: oc.compute(lazy_histogram(x, compute=False, **kwargs))[0]
            )
    what = f"{form} histogram({kwargs}) on {case!r}"
    if expected_error is not None:
        assert_same_failure(error, expected_error, what)
        return
    if error is not None:
        raise AssertionError(what) from error
    counts, edges = ours
    expected_counts, expected_edges = expected
    np.testing.assert_array_equal(edges, expected_edges, err_msg=what, strict=True)
    if kwargs["density"]:
        assert counts.dtype == expected_counts.dtype, what
        np.testing.assert_allclose(counts, expected_counts, rtol=1e-12, err_msg=what)
    else:
        np.testing.assert_array_equal(counts, expected_counts, err_msg=what, strict=True)


@examples(0.25)
@given(case=cases(dtypes=("int16", "float32", "float64", "complex128")), data=st.data())
def test_several_lazy_results_share_one_pass(case: Case, data: st.DataObject) -> None:
    """``oc.compute`` of many lazy reductions and an expression equals each computed alone."""
    x = case.chunked()
    axis = data.draw(axes(case.data.ndim, invalid=False))
    names = ("sum", "mean", "var", "std", "min", "max", "any", "count_nonzero")
    lazy = []
    for name in names:
        try:
            lazy.append(getattr(x, name)(axis=axis, compute=False))
        except ValueError:  # min/max of an empty slice: NumPy raises too, checked elsewhere
            lazy.append(None)
    wanted = [item for item in lazy if item is not None]
    with case.blocks(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (warnings are compared in the tests above)
        results = oc.compute(*wanted, x * 2, progress=False)
    *reductions, doubled = results
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(np.asarray(doubled), case.data * 2)
    computed = iter(reductions)
    for name, item in zip(names, lazy, strict=True):
        if item is None:
            continue
        ours = next(computed)
        expected, _, _ = numpy_outcome(getattr(np, name), case.data, axis=axis)
        assert_like_numpy_result(ours, expected, name)
        if name in EXACT:
            np.testing.assert_array_equal(ours, expected, err_msg=name)
        else:
            assert_close(ours, expected, _bound(name, case, expected, {"axis": axis}), name)


@examples(0.25)
@given(
    case=cases(dtypes=("int32", "float32", "float64"), nan_patterns=("none", "some")),
    data=st.data(),
)
def test_reductions_of_expressions_match_numpy(case: Case, data: st.DataObject) -> None:
    """A reduction of ``x * 2 + 1`` (or ``np.sqrt(abs(x))``, ``x - x.mean()``...) equals
    NumPy's on the same expression of the data."""
    x = case.chunked()
    expression = data.draw(
        st.sampled_from(["x * 2 + 1", "np.sqrt(abs(x))", "(x > 0) * x", "x - 3.5"])
    )
    lazy = eval(expression, {"np": np}, {"x": x})
    with np.errstate(all="ignore"):
        reference = eval(expression, {"np": np}, {"x": case.data})
    shadow = Case(reference, case.chunks, case.one_chunk_per_block)
    for name in ("sum", "mean", "std", "max", "argmin", "nanmax"):
        axis = data.draw(axes(case.data.ndim, tuples=name != "argmin", invalid=False))
        check_reduction_on(shadow, lazy, name, axis=axis)


def check_reduction_on(shadow: Case, lazy: Any, name: str, **kwargs: Any) -> None:
    what = f"{name}({kwargs}) of an expression on {shadow!r}"
    expected, expected_error, _ = numpy_outcome(getattr(np, name), shadow.data, **kwargs)
    with shadow.blocks():
        ours, error, _ = outcome(lambda: getattr(np, name)(lazy, **kwargs))
    if expected_error is not None:
        assert_same_failure(error, expected_error, what)
        return
    if error is not None:
        raise AssertionError(what) from error
    assert_like_numpy_result(ours, expected, what)
    if name in EXACT:
        np.testing.assert_array_equal(ours, expected, err_msg=what)
    else:
        assert_close(ours, expected, _bound(name, shadow, expected, kwargs), what)


# -- errors and warnings NumPy gives --------------------------------------------------------


@pytest.fixture
def empty_rows() -> oc.ChunkedArray:
    return oc.from_numpy(np.zeros((0, 3)), chunks=(2, 2))


def test_min_of_nothing_raises_value_error(empty_rows: oc.ChunkedArray) -> None:
    with pytest.raises(ValueError, match="zero-size array"):
        empty_rows.min()
    with pytest.raises(ValueError, match="zero-size array"):
        np.max(empty_rows, axis=0)
    assert empty_rows.max(axis=1).shape == (0,)


def test_bad_axis_raises_axis_error() -> None:
    x = oc.from_numpy(np.ones((4, 3)), chunks=(2, 2))
    for reduction in (x.sum, x.mean, x.min, x.argmax):
        with pytest.raises(np.exceptions.AxisError):
            reduction(axis=2)
        with pytest.raises(np.exceptions.AxisError):
            reduction(axis=-3)
    with pytest.raises(ValueError, match="duplicate"):
        x.sum(axis=(0, -2))


def test_nanargmin_of_an_all_nan_slice_raises_value_error() -> None:
    data = np.array([[1.0, np.nan], [np.nan, np.nan], [3.0, 2.0]])
    x = oc.from_numpy(data, chunks=(1, 1))
    with pytest.raises(ValueError, match="All-NaN slice"):
        np.nanargmin(x, axis=1)
    with pytest.raises(ValueError, match="All-NaN slice"):
        np.nanargmax(oc.from_numpy(np.full(5, np.nan), chunks=2))
    assert np.nanargmin(x, axis=0).tolist() == [0, 2]


def test_mean_of_an_empty_slice_warns_and_is_nan(empty_rows: oc.ChunkedArray) -> None:
    with pytest.warns(RuntimeWarning, match="Mean of empty slice"):
        mean = empty_rows.mean(axis=0)
    assert np.isnan(mean).all()
    assert mean.shape == (3,)
    with pytest.warns(RuntimeWarning, match="Degrees of freedom"):
        assert np.isnan(empty_rows.var())


def test_nanmax_of_an_all_nan_slice_warns_and_is_nan() -> None:
    x = oc.from_numpy(np.array([[np.nan, 1.0], [np.nan, np.nan]]), chunks=(1, 1))
    with pytest.warns(RuntimeWarning, match="All-NaN slice"):
        result = np.nanmax(x, axis=0)
    np.testing.assert_array_equal(result, [np.nan, 1.0])


def test_nanmin_over_blocks_of_nan_warns_nothing_and_leaves_the_filters_as_they_were() -> None:
    """Blocks all NaN in a column that is not: no warning, and the workers never touch the
    process's warning filters (threads swapping them restore each other's)."""
    data = np.full((64, 4), np.nan)
    data[-1] = np.arange(4.0)
    x = oc.from_numpy(data, chunks=(4, 2))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        filters = list(warnings.filters)
        result = np.nanmin(x, axis=0)
        assert list(warnings.filters) == filters
    assert caught == []
    np.testing.assert_array_equal(result, np.arange(4.0))


def test_full_reductions_are_numpy_scalars() -> None:
    data = np.arange(12, dtype=np.int32).reshape(3, 4)
    x = oc.from_numpy(data, chunks=(2, 3))
    for name in ("sum", "prod", "mean", "std", "var", "min", "max", "argmin", "argmax", "any"):
        ours = getattr(x, name)()
        expected = getattr(np, name)(data)
        assert type(ours) is type(expected), name
        assert ours == expected, name


def test_unsupported_reduction_arguments_raise() -> None:
    x = oc.from_numpy(np.ones((4, 3)), chunks=(2, 2))
    with pytest.raises(TypeError):
        np.sum(x, out=np.empty(3))
    with pytest.raises(TypeError):
        np.sum(x, where=np.ones((4, 3), bool))
    with pytest.raises(TypeError):
        np.histogram(x, bins=3, weights=np.ones((4, 3)))
    with pytest.raises(TypeError):
        np.median(x, axis=0, out=np.empty(3))
    with pytest.raises(TypeError):
        np.average(x)


@pytest.mark.parametrize("dtype", INTEGERS)
def test_integer_sums_and_products_over_many_chunks_are_exact(dtype: str) -> None:
    """Integer sums and products wrap the same way in any order."""
    rng = np.random.default_rng(7)
    info = np.iinfo(dtype)
    data = rng.integers(info.min, info.max, size=(37, 5), dtype=dtype, endpoint=True)
    x = oc.from_numpy(data, chunks=(3, 2))
    with oc.Manager("one chunk per block", max_bytes=4096):
        assert x.sum() == data.sum()
        np.testing.assert_array_equal(x.sum(axis=0, dtype=dtype), data.sum(axis=0, dtype=dtype))
        np.testing.assert_array_equal(x.prod(axis=1), data.prod(axis=1))


def test_a_ddof_beyond_64_bits_is_a_value_error() -> None:
    x = oc.from_numpy(np.arange(24.0).reshape(4, 6))
    for ddof in (1 << 63, -(1 << 63) - 1):
        with pytest.raises(ValueError, match="ddof must fit in a 64-bit integer"):
            x.std(ddof=ddof)
    with pytest.warns(RuntimeWarning):  # as NumPy: degrees of freedom <= 0
        assert np.isinf(x.var(ddof=(1 << 63) - 1))


@pytest.mark.parametrize("name", ["var", "std"])
def test_a_complex_variance_with_no_degrees_of_freedom_is_numpys(name: str) -> None:
    # In the complex dtype asked for, NumPy divides by 0 as complex: inf+nanj, not inf+0j.
    a = np.array([[6 + 0j, 2 - 4j]], np.complex64)
    x = oc.from_numpy(a, chunks=(1, 1))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        expected = getattr(np, name)(a, dtype="complex128", ddof=2)
        got = getattr(x, name)(dtype="complex128", ddof=2, progress=False)
    assert np.isinf(got.real) and np.isnan(got.imag)
    assert np.isinf(expected.real) and np.isnan(expected.imag)


def test_float_products_whose_factors_overflow_are_not_compared() -> None:
    # The order-dependent case the property test leaves out (a zero before the overflow).
    values = np.full(300, 100, np.int8)
    values[10] = 0
    assert _factors_overflow(values, "float64")
    assert not _factors_overflow(values, None)  # (an integer product wraps in any order)
    assert not _factors_overflow(np.full(10, 100, np.int8), "float64")
