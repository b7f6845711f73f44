"""Scans out of core equal NumPy's on the same data: cumsum, cumprod, cumulative_sum,
cumulative_prod, nancumsum and nancumprod exactly for integers (overflow wrapping as NumPy's)
and booleans, within a bound of rounding error for floats; np.diff exactly.  Over every dtype,
shape (0-d to 3-d, size-0 axes), chunking, axis (None flattens), dtype=, include_initial, and
under a budget several times smaller than the data."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

import oocarray as oc
from tests.compute.strategies import (
    ALL_DTYPES,
    Case,
    assert_close,
    assert_same_failure,
    cases,
    examples,
    numpy_outcome,
    outcome,
)


def _values(result: Any) -> np.ndarray:
    """A lazy result's values (a 0-d input's scan is NumPy's ndarray already)."""
    if isinstance(result, np.ndarray):
        return result
    computed = result.compute()
    return computed if isinstance(computed, np.ndarray) else computed[...]


def _scan_dtypes(dtype: np.dtype[Any]) -> st.SearchStrategy[Any]:
    if dtype.kind in "biu":
        return st.sampled_from([None, "int8", "uint64", "int64", "float32"])
    if dtype.kind == "f":
        return st.sampled_from([None, "float64", "float32", "complex128", "int8"])
    return st.sampled_from([None, "complex128", "complex64"])


def _axis(ndim: int) -> st.SearchStrategy[Any]:
    options = [st.none(), st.sampled_from([ndim, -ndim - 1] if ndim else [0, 1])]
    if ndim:
        options.append(st.integers(-ndim, ndim - 1))
    return st.one_of(*options)


def _bound(name: str, data: np.ndarray, expected: np.ndarray, kwargs: dict[str, Any]) -> Any:
    """Each scanned value is n roundings from the exact one (n: the terms before it), scaled by
    the running sum of magnitudes (sums) or by the value itself (products)."""
    axis = kwargs.get("axis")
    flat = data.reshape(-1) if axis is None or data.ndim == 0 else data
    along = 0 if axis is None or data.ndim == 0 else axis
    eps = float(np.finfo(expected.dtype).eps)
    n = flat.shape[along] + 2
    own = 2 * eps * np.abs(expected)
    if "prod" in name:
        return n * eps * np.abs(expected) + own
    with np.errstate(all="ignore"):
        wide = np.abs(flat.astype(np.complex128 if flat.dtype.kind == "c" else np.float64))
        magnitude = np.cumulative_sum(
            np.where(np.isnan(wide), 0, wide),
            axis=along,
            include_initial=bool(kwargs.get("include_initial")),
        )
    return n * eps * magnitude + own


def check_scan(case: Case, name: str, **kwargs: Any) -> None:
    what = f"np.{name}({kwargs}) on {case!r}"
    function = getattr(np, name)
    expected, expected_error, _ = numpy_outcome(function, case.data, **kwargs)
    x = case.chunked()
    with case.blocks(), np.errstate(all="ignore"):
        ours, error, _ = outcome(lambda: _values(function(x, **kwargs)))
    if isinstance(error, oc.MemoryBudgetError) and case.one_chunk_per_block:
        # the tiny budget that makes blocks single chunks may not hold a total per chunk:
        # refused before any work, as it should be; the scan is then checked without it
        assert "longer chunks" in str(error), what
        with np.errstate(all="ignore"):
            ours, error, _ = outcome(lambda: _values(function(x, **kwargs)))
    if expected_error is not None:
        assert_same_failure(error, expected_error, what)
        return
    if error is not None:
        raise AssertionError(f"{what}: NumPy returned {expected!r}") from error
    assert isinstance(ours, np.ndarray), what
    assert ours.shape == expected.shape and ours.dtype == expected.dtype, (
        f"{what}: {ours.dtype}{ours.shape} != {expected.dtype}{expected.shape}"
    )
    if expected.dtype.kind in "biu":
        np.testing.assert_array_equal(ours, expected, err_msg=what)
    else:
        assert_close(ours, expected, _bound(name, case.data, expected, kwargs), what)


@examples(0.5)
@given(case=cases(dtypes=ALL_DTYPES, nan_patterns=("none", "some")), data=st.data())
def test_cumulative_sums_match_numpy(case: Case, data: st.DataObject) -> None:
    for name in ("cumsum", "cumulative_sum", "nancumsum"):
        kwargs: dict[str, Any] = {
            "axis": data.draw(_axis(case.data.ndim), label=f"{name} axis"),
            "dtype": data.draw(_scan_dtypes(case.data.dtype), label=f"{name} dtype"),
        }
        if name == "cumulative_sum":
            kwargs["include_initial"] = data.draw(st.booleans(), label="include_initial")
        check_scan(case, name, **kwargs)


@examples(0.4)
@given(case=cases(dtypes=ALL_DTYPES, for_products=True), data=st.data())
def test_cumulative_products_match_numpy(case: Case, data: st.DataObject) -> None:
    # Complex products of infinities, and those overflowing (|z| is about 1.4 here), are NaN
    # or not by the order of the factors
    assume(case.data.dtype.kind != "c" or (np.isfinite(case.data).all() and case.data.size < 200))
    for name in ("cumprod", "cumulative_prod", "nancumprod"):
        kwargs: dict[str, Any] = {
            "axis": data.draw(_axis(case.data.ndim), label=f"{name} axis"),
            "dtype": data.draw(_scan_dtypes(case.data.dtype), label=f"{name} dtype"),
        }
        if name == "cumulative_prod":
            kwargs["include_initial"] = data.draw(st.booleans(), label="include_initial")
        if kwargs["dtype"] in ("complex64", "complex128") and not np.isfinite(case.data).all():
            kwargs["dtype"] = None
        check_scan(case, name, **kwargs)


def test_int8_sums_wrap_like_numpy() -> None:
    data = np.full(1000, 100, dtype=np.int8)
    x = oc.from_numpy(data, chunks=(7,))
    ours = np.cumsum(x, dtype=np.int8).compute()
    np.testing.assert_array_equal(ours, np.cumsum(data, dtype=np.int8))
    products = np.cumprod(x, dtype=np.uint64).compute()
    np.testing.assert_array_equal(products, np.cumprod(data, dtype=np.uint64))


@pytest.mark.parametrize("chunks", [(2,), (4,)])
def test_the_first_segment_is_numpys_own_scan(chunks: tuple[int, ...]) -> None:
    # Combined with the identity, the first segment's -0.0 became 0.0 and a complex
    # 0+infj became nan+infj (found by the long hypothesis profile).
    signed = np.array([-0.0, -0.0, 1.0, -0.0])
    got = _values(np.cumsum(oc.from_numpy(signed, chunks=chunks)))
    np.testing.assert_array_equal(np.signbit(got), np.signbit(np.cumsum(signed)))
    infinite = np.array([complex(0, np.inf), 1, 2, 3], dtype=np.complex64)
    with np.errstate(invalid="ignore"):
        want = np.cumulative_prod(infinite)
        got = _values(np.cumulative_prod(oc.from_numpy(infinite, chunks=chunks)))
    np.testing.assert_array_equal(got, want)  # the same NaNs too
    assert got[0] == complex(0, np.inf)


def test_a_part_of_a_scan_reads_only_what_it_needs() -> None:
    data = np.arange(1.0, 101.0)
    x = oc.from_numpy(data, chunks=(10,))
    scanned = np.cumsum(x)
    np.testing.assert_array_equal(scanned[55:73], np.cumsum(data)[55:73])
    np.testing.assert_array_equal(np.cumulative_sum(x, include_initial=True)[0:3], [0.0, 1.0, 3.0])


def test_scans_under_a_budget_smaller_than_the_data() -> None:
    rng = np.random.default_rng(1)
    data = rng.integers(-1000, 1000, size=(1000, 500))  # 4 MB of int64
    x = oc.from_numpy(data, chunks=(64, 128))
    with oc.Manager(max_bytes="1M"):
        rows = np.cumsum(x, axis=1).compute()
        columns = np.cumsum(x, axis=0).compute()
        flat = np.cumulative_sum(x.T, axis=0).compute()
    np.testing.assert_array_equal(rows[...], np.cumsum(data, axis=1))
    np.testing.assert_array_equal(columns[...], np.cumsum(data, axis=0))
    np.testing.assert_array_equal(flat[...], np.cumulative_sum(data.T, axis=0))


def test_flattened_scan_of_a_matrix() -> None:
    data = np.arange(35, dtype=np.float32).reshape(5, 7)
    x = oc.from_numpy(data, chunks=(2, 3))
    np.testing.assert_allclose(np.cumsum(x).compute(), np.cumsum(data))
    np.testing.assert_array_equal(
        np.cumprod(x.T.astype(np.int64)).compute(), np.cumprod(data.T.astype(np.int64))
    )


def test_out_is_refused() -> None:
    x = oc.from_numpy(np.arange(4), chunks=(2,))
    with pytest.raises(TypeError, match="cumsum"):
        np.cumsum(x, out=np.empty(4, np.int64))


# -- diff ---------------------------------------------------------------------------------


def _edge_value(
    data: st.DataObject, shape: tuple[int, ...], axis: int, dtype: np.dtype[Any], label: str
) -> Any:
    kind = data.draw(st.sampled_from(["none", "scalar", "array", "chunked"]), label=label)
    if kind == "none":
        return None
    if kind == "scalar":
        return np.asarray(3, dtype=dtype)[()]
    edge = list(shape)
    edge[axis] = data.draw(st.integers(0, 3), label=f"{label} length")
    value = np.arange(int(np.prod(edge)), dtype=np.float64).reshape(edge).astype(dtype)
    if kind == "array":
        return value
    return oc.from_numpy(value, chunks=tuple(max(1, n // 2) for n in edge))


@examples(0.5)
@given(case=cases(dtypes=ALL_DTYPES), data=st.data())
def test_diff_matches_numpy(case: Case, data: st.DataObject) -> None:
    ndim = case.data.ndim
    n = data.draw(st.integers(-1, 4), label="n")
    axis = data.draw(st.integers(-ndim, ndim - 1) if ndim else st.just(-1), label="axis")
    kwargs: dict[str, Any] = {"n": n, "axis": axis}
    if ndim and n > 0:
        for side in ("prepend", "append"):
            value = _edge_value(data, case.data.shape, axis % ndim, case.data.dtype, side)
            if value is not None:
                kwargs[side] = value
    numpy_kwargs = {k: (v[...] if isinstance(v, oc.ChunkedArray) else v) for k, v in kwargs.items()}
    what = f"np.diff({numpy_kwargs}) on {case!r}"
    expected, expected_error, _ = numpy_outcome(np.diff, case.data, **numpy_kwargs)
    x = case.chunked()
    with case.blocks(), warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        ours, error, _ = outcome(lambda: _values(np.diff(x, **kwargs)))
    if expected_error is not None:
        assert_same_failure(error, expected_error, what)
        return
    if error is not None:
        raise AssertionError(f"{what}: NumPy returned {expected!r}") from error
    assert ours.dtype == expected.dtype and ours.shape == expected.shape, what
    np.testing.assert_array_equal(ours, expected, err_msg=what)


def test_flattened_scan_of_long_rows_reads_parts_of_rows() -> None:
    data = np.arange(3 * 40_000, dtype=np.float64).reshape(3, 40_000)  # rows of 40 chunks
    x = oc.from_numpy(data, chunks=(1, 1000))
    with oc.Manager(max_bytes="256K"):
        scanned = np.cumsum(x)
        middle = scanned[39_500:40_700]  # the end of a row and the start of the next
        whole = scanned.compute()
    np.testing.assert_allclose(middle, np.cumsum(data)[39_500:40_700])
    np.testing.assert_allclose(whole[...], np.cumsum(data))


def test_a_scan_whose_totals_do_not_fit_the_budget_is_refused() -> None:
    data = np.zeros((400, 1000))
    x = oc.from_numpy(data, chunks=(1, 1000))  # a total per row: as large as the data
    with oc.Manager(max_bytes="1M"), pytest.raises(oc.MemoryBudgetError, match="longer chunks"):
        np.cumsum(x, axis=0)
