"""Helpers of the Array API conformance tests: arrays drawn by the standard's own hypothesis
strategies (``hypothesis.extra.array_api`` over ``array_api_strict``), stored in chunks that
split every axis, and a differential check of oocarray's namespace against array_api_strict
(values, dtypes, shapes, and the type of any error)."""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import array_api_strict
import numpy as np
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.extra.array_api import make_strategies_namespace

import oocarray as oc
import oocarray.array_api as xp

API_VERSION = "2024.12"
xps = make_strategies_namespace(array_api_strict, api_version=API_VERSION)
# What the other parts of the compute layer answer raises this until they are built.


def few(examples: int) -> settings:
    """A modest number of examples (each stores arrays in chunks), no deadline: ``examples``
    under the "ci" profile (100 by default), proportionally more under "long"."""
    return settings(
        max_examples=max(examples, settings.default.max_examples * examples // 100),
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )


@contextmanager
def strict_2024() -> Iterator[None]:
    """array_api_strict behaving as the 2024.12 standard (it defaults to a newer one)."""
    with array_api_strict.ArrayAPIStrictFlags(api_version=API_VERSION):
        yield


def shapes(min_dims: int = 0, max_dims: int = 3, min_side: int = 0) -> st.SearchStrategy[Any]:
    return xps.array_shapes(min_dims=min_dims, max_dims=max_dims, min_side=min_side, max_side=5)


def arrays(dtype: Any = None, shape: Any = None, **kwargs: Any) -> st.SearchStrategy[Any]:
    """array_api_strict arrays of any standard dtype, small shapes, with NaNs and infinities."""
    return xps.arrays(
        dtype=xps.scalar_dtypes() if dtype is None else dtype,
        shape=shapes() if shape is None else shape,
        **kwargs,
    )


@st.composite
def chunked(draw: st.DrawFn, strict_array: Any) -> oc.ChunkedArray | oc.Expr:
    """``strict_array``'s values in a chunked array whose chunks split every axis longer than
    one (ragged last chunks included), or in a lazy expression over one (expressions are
    arrays of the namespace too)."""
    data = np.asarray(strict_array)
    chunks = tuple(
        draw(st.integers(max(1, math.ceil(n / 4)), max(1, n - 1))) if n > 1 else 1
        for n in data.shape
    )
    stored = oc.from_numpy(data, chunks=chunks)
    return stored.astype(data.dtype) if draw(st.booleans()) else stored


def outcome(function: Callable[[], Any]) -> tuple[Any, BaseException | None]:
    """``(result, error)`` of a call, NumPy's arithmetic warnings silenced (in every thread:
    the engine evaluates blocks on workers)."""
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        try:
            return function(), None
        except (TypeError, ValueError, IndexError, OverflowError, ZeroDivisionError) as error:
            return None, error


def values(result: Any) -> Any:
    """An answer as NumPy values (tuples and lists kept), silencing arithmetic warnings."""
    if isinstance(result, tuple | list):
        return type(result)(values(r) for r in result)
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        return np.asarray(result)


def assert_namespace_array(result: Any, what: str) -> None:
    if isinstance(result, tuple | list):
        for r in result:
            assert_namespace_array(r, what)
        return
    assert isinstance(result, oc.ChunkedArray | oc.Expr), f"{what}: got {type(result)}"
    assert result.__array_namespace__() is xp


def assert_same_values(ours: Any, expected: Any, what: str) -> None:
    if isinstance(expected, tuple | list):
        assert len(ours) == len(expected), f"{what}: {len(ours)} results, expected {len(expected)}"
        for o, e in zip(ours, expected, strict=True):
            assert_same_values(o, e, what)
        return
    assert ours.shape == expected.shape, f"{what}: shape {ours.shape} != {expected.shape}"
    assert ours.dtype == expected.dtype, f"{what}: dtype {ours.dtype} != {expected.dtype}"
    if expected.dtype.kind in "fc":
        tolerance = 1e-5 if expected.dtype in (np.float32, np.complex64) else 1e-12
        np.testing.assert_allclose(
            ours, expected, rtol=tolerance, atol=tolerance, equal_nan=True, err_msg=what
        )
    else:
        np.testing.assert_array_equal(ours, expected, err_msg=what)


def differential(ours: Callable[[], Any], theirs: Callable[[], Any], what: str) -> None:
    """oocarray's answer matches array_api_strict's: the same values, dtype and shape, or an
    error of the same type."""
    with strict_2024():
        expected, their_error = outcome(lambda: values(theirs()))
    result, our_error = outcome(ours)
    got = None
    if our_error is None:
        # Lazy results meet data-dependent errors (an integer to a negative power) only
        # when evaluated, where NumPy (and so array_api_strict) meets them.
        assert_namespace_array(result, what)
        got, our_error = outcome(lambda: values(result))
    if their_error is not None:
        assert our_error is not None, f"{what}: strict raised {their_error!r}, we returned"
        assert isinstance(our_error, type(their_error)), (
            f"{what}: strict raised {type(their_error).__name__}: {their_error}; oocarray "
            f"raised {type(our_error).__name__}: {our_error}"
        )
        return
    assert our_error is None, f"{what}: strict returned, oocarray raised {our_error!r}"
    assert_same_values(got, expected, what)
