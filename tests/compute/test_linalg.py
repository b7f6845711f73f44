"""Products of chunked arrays equal NumPy's on the same data: ``@``/``np.matmul`` (1-d, 2-d and
broadcast stacks), ``np.dot``, ``np.tensordot``, ``np.inner``, ``np.outer``, ``np.vdot``,
``np.vecdot``, ``np.matvec``, ``np.vecmat`` and two-operand ``np.einsum``.  Exactly for integers
(sums wrap as NumPy's do, in any order) and booleans; within a bound of rounding error for
floats.  Over chunkings that split every axis, the summed one included, NumPy and chunked
operands mixed, expressions (``x.T``, ``x - m``) as operands, and budgets under which results
are lazy or temporary and ``X.T @ X`` streams through an ``X`` larger than the budget."""

from __future__ import annotations

import math
import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from unittest import mock

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import oocarray as oc
from oocarray._compute import _contract, _contraction
from oocarray._compute._contraction import accumulator_dtype
from oocarray.errors import MemoryBudgetError
from tests.compute.strategies import ALL_DTYPES, assert_close, chunkings, examples

MiB = 1 << 20


def _values(seed: int, shape: tuple[int, ...], dtype: Any, wide: bool = False) -> np.ndarray:
    """Finite values (products of infinities are NaN in an order-dependent way for complex
    numbers); integers over their whole range with ``wide`` (sums wrap), else small."""
    dtype = np.dtype(dtype)
    rng = np.random.default_rng(seed)
    if dtype.kind == "b":
        return rng.random(shape) < 0.4
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        low, high = (int(info.min), int(info.max)) if wide else (max(int(info.min), -4), 4)
        return rng.integers(low, high, size=shape, dtype=dtype, endpoint=True)
    data = rng.uniform(-1.0, 1.0, size=shape)
    if dtype.kind == "c":
        data = data + 1j * rng.uniform(-1.0, 1.0, size=shape)
    return data.astype(dtype)


def _loaded(result: Any) -> Any:
    """A result as NumPy values: lazy and temporary results read whole."""
    if isinstance(result, oc.Expr | oc.ChunkedArray):
        return result[...] if result.ndim else np.asarray(result[()])
    return result


def _assert_product(ours: Any, expected: Any, magnitude: Any, terms: int, what: str) -> None:
    """Same dtype and shape; equal for integers and booleans, else within (terms + 2)
    rounding errors of the sum of magnitudes (each side adds the same products, in its own
    order)."""
    got = _loaded(ours)
    expected_array = np.asarray(expected)
    assert np.asarray(got).dtype == expected_array.dtype, f"{what}: dtype"
    assert np.shape(got) == expected_array.shape, f"{what}: shape"
    if expected_array.dtype.kind in "biu":
        np.testing.assert_array_equal(got, expected_array, err_msg=what)
        return
    eps = float(np.finfo(expected_array.dtype).eps)
    bound = (terms + 2) * eps * np.asarray(magnitude) + np.finfo(expected_array.dtype).tiny
    assert_close(got, expected_array, bound, what)


def _magnitude(function: Any, a: np.ndarray, b: np.ndarray, **kwargs: Any) -> Any:
    """``function`` of the operands' absolute values, in float64: the scale of its errors."""
    return function(_wide_abs(a), _wide_abs(b), **kwargs)


def _wide_abs(values: np.ndarray) -> np.ndarray:
    """|values| in float64 (an int8's -128 keeps its size)."""
    wide = values.astype(np.complex128 if values.dtype.kind == "c" else np.float64)
    return np.abs(wide)


# -- matmul over shapes, dtypes, chunkings, operand kinds ---------------------------------

FORMS = ("chunked @ chunked", "ndarray @ chunked", "chunked @ ndarray", "transposed")


@st.composite
def matmul_cases(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray, tuple[int, ...], Any, str]:
    """Two operands of matmul: 1-d, 2-d or stacks (batch axes of length 1 broadcast), their
    chunks, and how they are given."""
    kind = draw(st.sampled_from(["2d", "1d@2d", "2d@1d", "1d@1d", "stack", "stack@2d"]))
    n, k, m = (draw(st.integers(0, 12)) for _ in range(3))
    batch = draw(st.integers(0, 3))
    shape_a = {"2d": (n, k), "1d@2d": (k,), "2d@1d": (n, k), "1d@1d": (k,)}.get(kind)
    shape_b = {"2d": (k, m), "1d@2d": (k, m), "2d@1d": (k,), "1d@1d": (k,)}.get(kind)
    if kind == "stack":
        shape_a = (draw(st.sampled_from([1, batch])), n, k)
        shape_b = (draw(st.sampled_from([1, batch])), k, m)
    elif kind == "stack@2d":
        shape_a, shape_b = (batch, n, k), (k, m)
    assert shape_a is not None and shape_b is not None
    dtype_a = draw(st.sampled_from(ALL_DTYPES))
    dtype_b = draw(st.sampled_from([dtype_a, *ALL_DTYPES]))
    seed = draw(st.integers(0, 2**32 - 1))
    wide = draw(st.booleans())
    a = _values(seed, shape_a, dtype_a, wide)
    b = _values(seed + 1, shape_b, dtype_b, wide)
    form = draw(st.sampled_from(FORMS if kind == "2d" else FORMS[:3]))
    chunks = (draw(chunkings(shape_a)), draw(chunkings(shape_b)))
    return a, b, chunks, draw(st.sampled_from([None, "large"])), form


@contextmanager
def _results_large() -> Iterator[None]:
    """Plan as if the budget were a few bytes: every result is large (lazy with a NumPy
    operand, else a temporary) and every step reads one chunk of the summed axis."""
    with mock.patch.object(_contract, "working_bytes", return_value=64):
        yield


@examples(0.8)
@given(matmul_cases())
def test_matmul_like_numpy(case: tuple[np.ndarray, np.ndarray, Any, Any, str]) -> None:
    a, b, (chunks_a, chunks_b), plan, form = case
    expected = np.matmul(a, b)
    x, y = oc.from_numpy(a, chunks=chunks_a), oc.from_numpy(b, chunks=chunks_b)
    if form == "transposed":  # a's transpose stored, taken lazily back
        x = oc.from_numpy(np.ascontiguousarray(a.T), chunks=chunks_a[::-1]).T
    left = a if form == "ndarray @ chunked" else x
    right = b if form == "chunked @ ndarray" else y
    if plan is None:
        ours = left @ right
        assert isinstance(ours, type(expected)), "small results are ndarrays (scalars for 0-d)"
    else:
        with _results_large():
            ours = left @ right
        if np.size(expected) * accumulator_dtype(np.dtype(expected.dtype)).itemsize > 64 // 4:
            assert isinstance(ours, oc.Expr | oc.ChunkedArray), "large results are not loaded"
            if isinstance(left, np.ndarray) or isinstance(right, np.ndarray):
                assert isinstance(ours, oc.Expr), "a product with a NumPy operand stays lazy"
    magnitude = _magnitude(np.matmul, a, b)
    _assert_product(ours, expected, magnitude, a.shape[-1], f"{form} {a.shape} @ {b.shape}")


@pytest.mark.parametrize("dtype", ["float32", "float16", "int8", "uint64", "bool", "complex64"])
@pytest.mark.parametrize("plan", [None, "large"])
@pytest.mark.parametrize("form", FORMS)
def test_matmul_over_chunks_splitting_every_axis(dtype: str, plan: Any, form: str) -> None:
    a, b = _values(21, (13, 7), dtype, wide=True), _values(22, (7, 10), dtype, wide=True)
    x = oc.from_numpy(a, chunks=(4, 3))
    if form == "transposed":
        x = oc.from_numpy(np.ascontiguousarray(a.T), chunks=(3, 4)).T
    y = oc.from_numpy(b, chunks=(2, 4))
    left = a if form == "ndarray @ chunked" else x
    right = b if form == "chunked @ ndarray" else y
    if plan is None:
        ours = left @ right
    else:
        with _results_large():
            ours = left @ right
        assert isinstance(ours, oc.Expr | oc.ChunkedArray)
    _assert_product(ours, a @ b, _magnitude(np.matmul, a, b), 7, f"{form} {dtype}")


def test_matmul_function_and_operator_agree() -> None:
    a, b = _values(1, (7, 5), "float64"), _values(2, (5, 3), "float64")
    x, y = oc.from_numpy(a, chunks=(3, 2)), oc.from_numpy(b, chunks=(2, 2))
    np.testing.assert_allclose(np.matmul(x, y), a @ b, rtol=1e-12)
    np.testing.assert_allclose(x @ y, a @ b, rtol=1e-12)
    np.testing.assert_allclose(a @ y, a @ b, rtol=1e-12)
    np.testing.assert_allclose(x.__rmatmul__(a[:, :5].T[:5, :7]), a[:, :5].T[:5, :7] @ a)


# -- the tall-skinny products: one pass, inside a budget smaller than X -------------------


def test_gram_streams_through_x_larger_than_the_budget() -> None:
    data = _values(3, (32768, 16), "float64")  # 4 MiB
    x = oc.from_numpy(data, chunks=(1024, 16))
    read: list[int] = []
    original = oc.ChunkedArray.__getitem__

    def counted(self: oc.ChunkedArray, key: Any) -> np.ndarray:
        values: np.ndarray = original(self, key)
        if self is x:
            read.append(values.size)
        return values

    with (
        oc.Manager("gram", max_bytes=MiB, spill="fail") as manager,
        mock.patch.object(oc.ChunkedArray, "__getitem__", counted),
    ):
        gram = x.T @ x
        peak = manager.stats().peak_bytes
    assert isinstance(gram, np.ndarray) and gram.shape == (16, 16)
    assert peak <= MiB
    assert sum(read) == data.size, "one pass over X, each block read once for both sides"
    _assert_product(gram, data.T @ data, np.abs(data).T @ np.abs(data), len(data), "X.T @ X")
    np.testing.assert_array_equal(gram, gram.T)  # block.T @ block: symmetric by construction


def test_cross_product_of_two_tall_arrays_and_expressions() -> None:
    a = _values(4, (20000, 6), "float32")
    b = _values(5, (20000, 3), "float64")
    x, y = oc.from_numpy(a, chunks=(900, 4)), oc.from_numpy(b, chunks=(700, 2))
    mean = a.mean(axis=0)
    with oc.Manager("cross", max_bytes=MiB, spill="fail"):
        cross = x.T @ y
        centred = x - mean
        covariance = centred.T @ centred
        einsum = np.einsum("ni,nj->ij", x, y)
    wide_a = a.astype(np.float64)
    _assert_product(cross, a.T @ b, np.abs(wide_a).T @ np.abs(b), len(a), "X.T @ Y")
    _assert_product(einsum, a.T @ b, np.abs(wide_a).T @ np.abs(b), len(a), "einsum")
    c = a - mean
    magnitude = np.abs(c.astype(np.float64)).T @ np.abs(c.astype(np.float64))
    _assert_product(covariance, c.T @ c, magnitude, len(a), "(X - m).T @ (X - m)")


def test_wide_times_vector_is_made_by_rows_of_output() -> None:
    """A (40000, 8) @ (8,) sums over a short axis: streaming along it would read all of A's
    rows at once, so the result is made a block of rows at a time, inside the budget."""
    a, v = _values(23, (40000, 8), "float64"), _values(24, (8,), "float64")  # A: 2.5 MiB
    x = oc.from_numpy(a, chunks=(1000, 8))
    with oc.Manager("wide", max_bytes=2 * MiB, spill="fail"):
        product = x @ v
    assert isinstance(product, np.ndarray)
    _assert_product(product, a @ v, np.abs(a) @ np.abs(v), 8, "A @ v")


def test_float32_gram_is_float32() -> None:
    """Partials are float32 products (BLAS, as NumPy's), added in float64 across blocks."""
    data = _values(20, (50000, 3), "float32")
    x = oc.from_numpy(data, chunks=(4096, 3))
    with oc.Manager("blocks", max_bytes=MiB):
        gram = x.T @ x
    assert gram.dtype == np.float32
    wide = data.astype(np.float64)
    _assert_product(gram, data.T @ data, np.abs(wide).T @ np.abs(wide), len(data), "float32")


# -- large results: lazy with a small operand, temporary otherwise -------------------------


def test_tall_times_small_is_lazy_and_row_blockwise() -> None:
    a = _values(6, (5000, 40), "float32")
    b = _values(7, (40, 30), "float32")
    x = oc.from_numpy(a, chunks=(512, 16))  # the summed axis split too
    with oc.Manager("tall", max_bytes=MiB):
        product = x @ b
        assert isinstance(product, oc.Expr) and product.shape == (5000, 30)
        part = product[1000:1100]
        sums = product.sum(axis=0)
    expected = a @ b
    magnitude = np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64))
    _assert_product(part, expected[1000:1100], magnitude[1000:1100], 40, "rows of x @ b")
    np.testing.assert_allclose(sums, expected.sum(axis=0), rtol=1e-4, atol=1e-3)


def test_large_product_of_chunked_arrays_is_a_temporary() -> None:
    a = _values(8, (600, 90), "float64")
    b = _values(9, (90, 500), "float64")
    x, y = oc.from_numpy(a, chunks=(128, 32)), oc.from_numpy(b, chunks=(32, 128))
    with oc.Manager("large", max_bytes=MiB):  # the result is 2.3 MiB; each operand 0.4 MiB
        product = x @ y
    assert isinstance(product, oc.ChunkedArray) and product.shape == (600, 500)
    _assert_product(product, a @ b, np.abs(a) @ np.abs(b), 90, "x @ y into a temporary")


def test_a_plan_that_cannot_fit_is_refused_before_reading() -> None:
    a = _values(10, (400, 300), "float64")
    x = oc.from_numpy(a, chunks=(400, 300))  # one chunk: blocks cannot be smaller
    with oc.Manager("tiny", max_bytes=256 << 10), pytest.raises(MemoryBudgetError, match="matmul"):
        x @ x.T


# -- the other products ---------------------------------------------------------------------


@examples(0.3)
@given(
    st.sampled_from(
        [
            ("ij,jk->ik", (5, 4), (4, 3)),
            ("ij,kj->ik", (5, 4), (3, 4)),
            ("ij,jk->ki", (5, 4), (4, 3)),
            ("ij,jk", (5, 4), (4, 3)),
            ("ij,ij->i", (5, 4), (5, 4)),
            ("ij,ij->", (5, 4), (5, 4)),
            ("ij,ij->ji", (5, 4), (1, 4)),
            ("i,j->ij", (5,), (4,)),
            ("i,i", (7,), (7,)),
            ("bij,bjk->bik", (3, 4, 5), (3, 5, 2)),
            ("bij,bjk->kib", (3, 4, 5), (1, 5, 2)),
            ("ijk,jkl->il", (3, 4, 5), (4, 5, 2)),
            ("nk,n->k", (30, 4), (30,)),
            ("ki,kj->ij", (30, 4), (30, 3)),
        ]
    ),
    st.sampled_from(["float64", "int16", "complex64", "bool"]),
    st.integers(0, 2**32 - 1),
    st.data(),
)
def test_einsum_like_numpy(case: Any, dtype: str, seed: int, data: st.DataObject) -> None:
    subscripts, shape_a, shape_b = case
    a, b = _values(seed, shape_a, dtype), _values(seed + 1, shape_b, dtype)
    x = oc.from_numpy(a, chunks=data.draw(chunkings(shape_a)))
    y = oc.from_numpy(b, chunks=data.draw(chunkings(shape_b)))
    expected = np.einsum(subscripts, a, b)
    terms = math.prod(a.shape) * math.prod(b.shape) // max(1, np.size(expected))
    ours = np.einsum(subscripts, x, y)
    magnitude = _magnitude(lambda p, q: np.einsum(subscripts, p, q), a, b)
    _assert_product(ours, expected, magnitude, terms, subscripts)


@pytest.mark.parametrize(
    ("shape_a", "shape_b", "axes"),
    [
        ((4, 5), (5, 3), 1),
        ((4, 5, 6), (5, 6, 2), 2),
        ((4, 5), (3, 2), 0),
        ((4, 5, 6), (6, 4), ([0, 2], [1, 0])),
        ((4, 5), (5, 4), ([1], [0])),
        ((3, 0), (0, 2), 1),
    ],
)
def test_tensordot_like_numpy(shape_a: Any, shape_b: Any, axes: Any) -> None:
    a, b = _values(11, shape_a, "float64"), _values(12, shape_b, "float64")
    x, y = oc.from_numpy(a, chunks=2), oc.from_numpy(b, chunks=3)
    expected = np.tensordot(a, b, axes)
    magnitude = np.tensordot(np.abs(a), np.abs(b), axes)
    _assert_product(np.tensordot(x, y, axes), expected, magnitude, 30, f"tensordot {axes}")
    _assert_product(np.tensordot(a, y, axes=axes), expected, magnitude, 30, "ndarray, chunked")


@pytest.mark.parametrize(
    ("shape_a", "shape_b"),
    [((6,), (6,)), ((4, 6), (6,)), ((6,), (6, 3)), ((4, 6), (6, 3)), ((2, 3, 6), (5, 6, 4))],
)
def test_dot_and_inner_like_numpy(shape_a: Any, shape_b: Any) -> None:
    a, b = _values(13, shape_a, "float64"), _values(14, shape_b, "float64")
    x, y = oc.from_numpy(a, chunks=4), oc.from_numpy(b, chunks=5)
    _assert_product(np.dot(x, y), np.dot(a, b), _magnitude(np.dot, a, b), 6, "dot")
    _assert_product(np.dot(a, y), np.dot(a, b), _magnitude(np.dot, a, b), 6, "dot, ndarray")
    c = _values(15, (*shape_b[:-2], *shape_b[-1:], shape_a[-1])[-len(shape_b) :], "float64")
    if c.shape[-1] == a.shape[-1]:
        z = oc.from_numpy(c, chunks=3)
        _assert_product(np.inner(x, z), np.inner(a, c), _magnitude(np.inner, a, c), 6, "inner")


def test_products_with_a_scalar_are_elementwise() -> None:
    a = _values(16, (5, 3), "float64")
    x = oc.from_numpy(a, chunks=2)
    np.testing.assert_allclose(np.dot(x, 2.0)[...], a * 2.0)
    np.testing.assert_allclose(np.inner(np.float64(3.0), x)[...], a * 3.0)


@pytest.mark.parametrize("dtype", ["float64", "complex128", "int32"])
def test_vector_products_like_numpy(dtype: str) -> None:
    a, b = _values(17, (6, 5), dtype), _values(18, (6, 5), dtype)
    v = _values(19, (5,), dtype)
    x, y = oc.from_numpy(a, chunks=(4, 2)), oc.from_numpy(b, chunks=(3, 3))
    vx = oc.from_numpy(v, chunks=2)
    checks = [
        (np.vecdot(x, y), np.vecdot(a, b), np.vecdot(np.abs(a), np.abs(b)), "vecdot"),
        (np.vecdot(x, y, axis=0), np.vecdot(a, b, axis=0), None, "vecdot axis=0"),
        (np.vecdot(x, v), np.vecdot(a, v), None, "vecdot, broadcast vector"),
        (np.matvec(x, vx), np.matvec(a, v), None, "matvec"),
        (np.vecmat(vx, y.T), np.vecmat(v, b.T), None, "vecmat"),
        (np.outer(vx, v), np.outer(v, v), None, "outer"),
        (np.vdot(vx, vx), np.vdot(v, v), None, "vdot"),
    ]
    for ours, expected, _, what in checks:
        magnitude = np.abs(np.asarray(expected)) + 10.0
        _assert_product(ours, expected, magnitude, 6, what)


# -- errors like NumPy's --------------------------------------------------------------------


CORE = "mismatch in its core dimension"


@pytest.mark.parametrize(
    ("function", "shape_a", "shape_b", "message"),
    [
        (np.matmul, (2, 3), (4, 5), CORE),
        (np.matmul, (3,), (4,), CORE),
        (np.matmul, (2, 2, 3), (3, 3, 4), "could not be broadcast"),
        (np.matmul, (), (3, 4), "does not have enough dimensions"),
        (np.dot, (2, 3), (4, 4), "not aligned"),
        (np.inner, (2, 3), (4,), "not aligned"),
        (lambda a, b: np.tensordot(a, b, 1), (2, 3), (4, 4), "shape-mismatch for sum"),
        (lambda a, b: np.tensordot(a, b, ([0, 1], [0])), (2, 3), (2, 4), "shape-mismatch"),
        (np.vecdot, (2, 3), (4,), CORE),
        (lambda a, b: np.einsum("ij,jk", a, b), (2, 3), (4, 4), "could not be broadcast"),
        (lambda a, b: np.einsum("ij,jk->iz", a, b), (2, 3), (3, 4), "never appeared"),
        (lambda a, b: np.einsum("ijk,jk", a, b), (2, 3), (3, 4), "subscripts"),
    ],
)
def test_shape_errors_like_numpy(function: Any, shape_a: Any, shape_b: Any, message: str) -> None:
    a, b = np.ones(shape_a), np.ones(shape_b)
    with pytest.raises(ValueError, match=message):
        function(a, b)
    x = oc.from_numpy(a, chunks=2) if a.ndim else a
    with pytest.raises(ValueError, match=message):
        function(x, oc.from_numpy(b, chunks=2))


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda x: np.einsum("...j,jk", x, x), r"'\.\.\.'"),
        (lambda x: np.einsum("ij,jk,kl", x, x, x), "3 operands"),
        (lambda x: np.einsum("ij->ji", x), "1 operand"),
        (lambda x: np.einsum("ii,ij", x, x), "diagonal"),
        (lambda x: np.einsum("ij,jk->k", x, x), r"x\.sum"),
        (lambda x: np.einsum(x, [0, 1], x, [1, 2]), "subscripts as a string"),
        (lambda x: np.matmul(x, x, dtype=np.float32), "astype"),
        (lambda x: np.dot(x, x, out=np.empty((4, 4))), "np.dot"),
        (lambda x: np.outer(x, x), "tensordot"),
        (lambda x: np.vdot(x, x), "vecdot"),
    ],
)
def test_unsupported_forms_name_the_alternative(call: Any, message: str) -> None:
    x = oc.from_numpy(np.ones((4, 4)), chunks=2)
    with pytest.raises(TypeError, match=message):
        call(x)


# -- BLAS threads --------------------------------------------------------------------------


def _blas_threads() -> list[int]:
    """Each BLAS library's thread count; the test skips where there is nothing to limit."""
    threadpoolctl = pytest.importorskip("threadpoolctl")
    info = threadpoolctl.threadpool_info()
    return [lib["num_threads"] for lib in info if lib["user_api"] == "blas"]


def _blas_threads_to_limit() -> list[int]:
    before = _blas_threads()
    if len(os.sched_getaffinity(0)) < 2 or not before or max(before) < 2:
        pytest.skip("one CPU or one BLAS thread: nothing to limit")
    return before


def test_workers_run_blas_on_one_thread_and_give_the_threads_back() -> None:
    before = _blas_threads_to_limit()
    seen: list[list[int]] = []
    original = _contract.StreamedProduct.partial

    def recorded(self: Any, block: np.ndarray, region: Any) -> Any:
        seen.append(_blas_threads())
        return original(self, block, region)

    data = _values(25, (40000, 8), "float64")
    x = oc.from_numpy(data, chunks=(1000, 8))
    with (
        mock.patch.object(_contract.StreamedProduct, "partial", recorded),
        oc.Manager("workers", max_bytes=2 * MiB),  # room for two workers, blocks of 2000 rows
    ):
        gram = x.T @ x
    assert len(seen) > 1 and all(threads == [1] * len(before) for threads in seen)
    assert _blas_threads() == before
    _assert_product(gram, data.T @ data, np.abs(data).T @ np.abs(data), len(data), "X.T @ X")


def test_a_lazy_product_read_by_another_pass_runs_blas_on_one_thread() -> None:
    before = _blas_threads_to_limit()
    seen: list[list[int]] = []
    original = _contraction.Product.evaluate

    def recorded(self: Any, region: Any, reads: Any) -> Any:
        seen.append(_blas_threads())
        return original(self, region, reads)

    data = _values(26, (40000, 8), "float64")
    weights = _values(27, (8, 8), "float64")
    x = oc.from_numpy(data, chunks=(1000, 8))
    with (
        mock.patch.object(_contraction.Product, "evaluate", recorded),
        oc.Manager("workers", max_bytes=2 * MiB),
    ):
        product = x @ weights  # larger than the budget's share: a lazy product
        assert not isinstance(product, np.ndarray)
        total = np.asarray(product.sum(axis=0))
    assert len(seen) > 1 and all(threads == [1] * len(before) for threads in seen)
    assert _blas_threads() == before
    np.testing.assert_allclose(total, (data @ weights).sum(axis=0), rtol=1e-10)
