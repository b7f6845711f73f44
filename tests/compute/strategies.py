"""Hypothesis strategies for the compute tests: small arrays of every dtype, shape, chunking and
NaN pattern, and the NumPy-side helpers that compare oocarray's answers with NumPy's.

Values come from a seeded NumPy generator (drawing thousands of elements one by one would be
slow); hypothesis chooses and shrinks everything that shapes a case: dtype, shape, chunks, the
distribution of values, where NaNs and infinities go.
"""

from __future__ import annotations

import math
import os
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

import oocarray as oc

MAX_ELEMENTS = 2048
# Each chunk is a file of the temporary zarr store: more would make examples slow, not better.
MAX_CHUNKS = 40
# Under this budget the engine plans one block per chunk, so partials merge across every chunk
# boundary (with the default budget it joins chunks along the first axis into one block).
ONE_CHUNK_PER_BLOCK_BYTES = 4096

BOOL = ("bool",)
INTEGERS = ("int8", "int16", "int32", "int64", "uint8", "uint32", "uint64")
FLOATS = ("float16", "float32", "float64")
COMPLEXES = ("complex64", "complex128")
ALL_DTYPES = (*BOOL, *INTEGERS, *FLOATS, *COMPLEXES)
NAN_PATTERNS = ("none", "some", "plane", "all")


def examples(fraction: float, *, ci: int | None = None) -> settings:
    """The active profile's settings with a fraction of its examples (the compute tests build a
    zarr store per example); the "long" profile still gets many more than "ci".

    ``ci``, where given, is the count in the default "ci" profile instead (for the slowest
    tests, whose branches fewer examples already reach); other profiles keep the fraction.
    """
    count = max(5, int(settings.default.max_examples * fraction))
    if ci is not None and os.environ.get("HYPOTHESIS_PROFILE", "ci") in ("", "ci"):
        count = ci
    return settings(
        max_examples=count,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )


@dataclass(frozen=True)
class Case:
    """An array, the chunks to store it with, and whether blocks must follow single chunks."""

    data: np.ndarray
    chunks: tuple[int, ...]
    one_chunk_per_block: bool

    def chunked(self) -> oc.ChunkedArray:
        return oc.from_numpy(self.data, chunks=self.chunks)

    @contextmanager
    def blocks(self) -> Iterator[None]:
        """Where to run the computation: under a tiny budget, blocks are single chunks."""
        if not self.one_chunk_per_block:
            yield
            return
        with oc.Manager("one chunk per block", max_bytes=ONE_CHUNK_PER_BLOCK_BYTES):
            yield

    def __repr__(self) -> str:
        return (
            f"Case(dtype={self.data.dtype}, shape={self.data.shape}, chunks={self.chunks}, "
            f"one_chunk_per_block={self.one_chunk_per_block},\n  data={self.data!r})"
        )


@st.composite
def shapes(draw: st.DrawFn, min_dims: int = 0, max_dims: int = 3) -> tuple[int, ...]:
    """0-d to 3-d, with size-0 and length-1 axes, at most MAX_ELEMENTS elements."""
    ndim = draw(st.integers(min_dims, max_dims))
    longest = {0: 0, 1: 300, 2: 48, 3: 14}[ndim]
    shape: list[int] = []
    room = MAX_ELEMENTS
    for _ in range(ndim):
        side = draw(st.integers(0, max(0, min(longest, room))))
        shape.append(side)
        room //= max(1, side)
    return tuple(shape)


@st.composite
def chunkings(draw: st.DrawFn, shape: tuple[int, ...]) -> tuple[int, ...]:
    """Any positive chunk per axis (1, ragged, whole, larger than the axis), at most MAX_CHUNKS
    chunks in all."""
    chunks: list[int] = []
    room = MAX_CHUNKS
    for n in shape:
        smallest = max(1, math.ceil(n / room))
        chunk = draw(st.integers(smallest, max(smallest, n + 3)))
        chunks.append(chunk)
        room = max(1, room // max(1, math.ceil(n / chunk)))
    return tuple(chunks)


def _float_values(
    rng: np.random.Generator, shape: tuple[int, ...], distribution: str, dtype: np.dtype[Any]
) -> np.ndarray:
    half = dtype == np.float16
    if distribution == "integers":
        return rng.integers(-8, 9, size=shape).astype(np.float64)
    if distribution == "uniform":
        return rng.uniform(-1.0, 1.0, size=shape)
    if distribution == "offset":  # a large mean and a small spread: variances must not cancel
        return (10.0 if half else 1000.0) + rng.normal(0.0, 1.0, size=shape)
    if distribution == "wide":  # many exponents (kept below float16's overflow)
        exponents = rng.uniform(-3.0, 1.0 if half else 4.0, size=shape)
        return rng.choice([-1.0, 1.0], size=shape) * 10.0**exponents
    if distribution == "near_one":  # products stay finite in every float dtype
        return rng.choice([-1.0, 1.0], size=shape) * rng.uniform(0.9, 1.1, size=shape)
    raise AssertionError(distribution)


@st.composite
def values(
    draw: st.DrawFn,
    shape: tuple[int, ...],
    dtype: Any,
    nan_patterns: tuple[str, ...] = NAN_PATTERNS,
    for_products: bool = False,
) -> np.ndarray:
    """Values of ``dtype``; floats and complexes get NaNs (none, some, a whole plane across one
    axis: all-NaN rows or columns, or everything) and sometimes infinities."""
    dtype = np.dtype(dtype)
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    if dtype.kind == "b":
        return np.asarray(rng.random(shape) < draw(st.sampled_from([0.0, 0.3, 1.0])))
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        if draw(st.booleans()):
            low, high = max(int(info.min), -5), min(int(info.max), 5)
        else:
            low, high = int(info.min), int(info.max)
        return rng.integers(low, high, size=shape, dtype=dtype, endpoint=True)
    distributions = ["near_one"] if for_products else ["integers", "uniform", "offset", "wide"]
    distribution = draw(st.sampled_from(distributions))
    real_dtype = np.empty(0, dtype).real.dtype
    data = np.asarray(_float_values(rng, shape, distribution, real_dtype), dtype=dtype)
    if dtype.kind == "c":
        data += 1j * _float_values(rng, shape, distribution, real_dtype).astype(real_dtype)
    if data.size == 0:
        return data
    pattern = draw(st.sampled_from(nan_patterns))
    nan = _nan_for(dtype, draw(st.booleans()))
    if pattern == "some":
        data[rng.random(shape) < 0.2] = nan
    elif pattern == "plane" and data.ndim:
        axis = draw(st.integers(0, data.ndim - 1))
        index = draw(st.integers(0, data.shape[axis] - 1))
        data[(slice(None),) * axis + (index,)] = nan
    elif pattern == "all":
        data[...] = nan
    if draw(st.integers(0, 4)) == 0:  # now and then, infinities of either sign
        where = rng.random(shape) < 0.1
        data[where] = rng.choice([-np.inf, np.inf], size=int(where.sum()))
    return data


def _nan_for(dtype: np.dtype[Any], in_real_part: bool) -> Any:
    if dtype.kind != "c":
        return np.nan
    return complex(np.nan, 0.0) if in_real_part else complex(0.0, np.nan)


@st.composite
def cases(
    draw: st.DrawFn,
    dtypes: tuple[str, ...] = ALL_DTYPES,
    min_dims: int = 0,
    max_dims: int = 3,
    nan_patterns: tuple[str, ...] = NAN_PATTERNS,
    for_products: bool = False,
) -> Case:
    dtype = np.dtype(draw(st.sampled_from(dtypes)))
    shape = draw(shapes(min_dims, max_dims))
    chunks = draw(chunkings(shape))
    data = np.asarray(draw(values(shape, dtype, nan_patterns, for_products)))  # 0-d: an array
    return Case(data, chunks, draw(st.booleans()))


@st.composite
def axes(draw: st.DrawFn, ndim: int, tuples: bool = True, invalid: bool = True) -> Any:
    """None, an int (negative too), a tuple of distinct axes in any order, or now and then an
    axis out of range (NumPy raises AxisError)."""
    options = [st.none()]
    if ndim:
        options.append(st.integers(-ndim, ndim - 1))
    if tuples:
        options.append(
            st.lists(st.integers(0, max(0, ndim - 1)), unique=True, max_size=ndim).flatmap(
                lambda chosen: st.tuples(*(st.sampled_from([a, a - ndim]) for a in chosen)).flatmap(
                    lambda axes: st.permutations(axes).map(tuple)
                )
            )
            if ndim
            else st.just(())
        )
    if invalid:
        # (NumPy's ufunc reductions take axis 0 and -1 of a 0-d array, its mean and var do not;
        # oocarray refuses both, so 0-d arrays are asked for axes past those.)
        options.append(st.sampled_from([ndim, -ndim - 1] if ndim else [1, -2]))
    return draw(st.one_of(*options))


def reduced_count(shape: tuple[int, ...], axis: Any) -> int:
    """How many elements each result of a reduction over ``axis`` combines."""
    if axis is None:
        return math.prod(shape)
    chosen = axis if isinstance(axis, tuple) else (axis,)
    return math.prod(shape[a] for a in chosen)


def outcome(function: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[Any, Any, list[str]]:
    """``(result, exception, warning messages)`` of a call; NumPy's arithmetic warnings are
    recorded, not raised."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            result = function(*args, **kwargs)
        except Exception as error:  # the test compares it with NumPy's
            return None, error, [str(w.message) for w in caught]
    return result, None, [str(w.message) for w in caught]


def numpy_outcome(
    function: Callable[..., Any], *args: Any, **kwargs: Any
) -> tuple[Any, Any, list[str]]:
    with np.errstate(all="warn"):
        return outcome(function, *args, **kwargs)


def assert_same_failure(ours: Any, expected: Any, what: str) -> None:
    """NumPy raised ``expected``: oocarray must raise the same kind of error."""
    assert ours is not None, f"{what}: NumPy raised {expected!r}, oocarray returned a value"
    assert isinstance(ours, type(expected)), (
        f"{what}: NumPy raised {type(expected).__name__}: {expected}; oocarray raised "
        f"{type(ours).__name__}: {ours}"
    )


def assert_like_numpy_result(ours: Any, expected: Any, what: str) -> None:
    """The same kind of value (NumPy scalar or ndarray), dtype and shape."""
    if isinstance(expected, np.ndarray):
        assert isinstance(ours, np.ndarray), f"{what}: expected an ndarray, got {type(ours)}"
        assert ours.shape == expected.shape, f"{what}: shape {ours.shape} != {expected.shape}"
    elif isinstance(expected, np.generic):
        assert isinstance(ours, np.generic), f"{what}: expected a NumPy scalar, got {type(ours)}"
    else:  # NumPy's Python int (count_nonzero over everything)
        assert isinstance(ours, int | np.integer), f"{what}: expected an int, got {type(ours)}"
        return
    assert ours.dtype == expected.dtype, f"{what}: dtype {ours.dtype} != {expected.dtype}"


def assert_close(ours: Any, expected: Any, bound: Any, what: str) -> None:
    """Equal NaN positions and infinities; elsewhere within ``bound`` (absolute, per cell).
    Complex values: their real and imaginary parts, each (NaNs where either part is NaN)."""
    ours_array = np.asarray(ours)
    expected_array = np.asarray(expected)
    if expected_array.dtype.kind == "c":
        assert ours_array.dtype.kind == "c", f"{what}: {ours_array.dtype} is not complex"
        either_nan = np.isnan(expected_array)
        bound = np.where(either_nan, 0.0, bound)
        np.testing.assert_array_equal(np.isnan(ours_array), either_nan, err_msg=f"{what}: NaNs")
        for part in (np.real, np.imag):
            assert_close(
                np.where(either_nan, 0, part(ours_array)),
                np.where(either_nan, 0, part(expected_array)),
                bound,
                what,
            )
        return
    np.testing.assert_array_equal(
        np.isnan(ours_array), np.isnan(expected_array), err_msg=f"{what}: NaN positions"
    )
    infinite = np.isinf(expected_array)
    np.testing.assert_array_equal(
        ours_array[infinite], expected_array[infinite], err_msg=f"{what}: infinities"
    )
    finite = np.isfinite(expected_array)
    error = np.abs(
        ours_array[finite].astype(np.complex128) - expected_array[finite].astype(np.complex128)
    )
    allowed = np.broadcast_to(np.asarray(bound, dtype=np.float64), expected_array.shape)[finite]
    bad = ~(error <= allowed)
    assert not bad.any(), (
        f"{what}: {ours_array[finite][bad]} != {expected_array[finite][bad]} "
        f"(error {error[bad]}, allowed {allowed[bad]})"
    )
