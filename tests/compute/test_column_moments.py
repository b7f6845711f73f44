"""The native column moments (``native/moments.c``) that mean, var and std of float32 and
float64 blocks reduced over their leading axes use: each column's mean and sum of squared
deviations equal NumPy's in double precision, over many slabs of rows and a shorter last one,
with NumPy's infinities and NaN; bad buffers are refused, not read."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import oocarray as oc
from oocarray import _native

# float64 rows per slab of one column (native/moments.c: 128 KiB slabs)
SLAB_ROWS_F64 = (128 << 10) // 8


def moments(matrix: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    columns = matrix.shape[1]
    out = np.full(4 * columns, -1.0)
    _native.column_moments(matrix, out)
    return out[:columns], out[columns : 2 * columns]


def reference(matrix: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    wide = matrix.astype(np.float64)
    mean = wide.mean(axis=0)
    return mean, ((wide - mean) ** 2).sum(axis=0)


@given(
    rows=st.integers(0, 3 * SLAB_ROWS_F64 // 64 + 5),
    columns=st.integers(1, 70),
    dtype=st.sampled_from([np.float32, np.float64]),
    scale=st.sampled_from([1e-3, 1.0, 1e6]),
    seed=st.integers(0, 2**32 - 1),
)
def test_equal_numpy_in_double_precision(
    rows: int, columns: int, dtype: type, scale: float, seed: int
) -> None:
    rng = np.random.default_rng(seed)
    matrix = (rng.standard_normal((rows, columns)) * scale + 3 * scale).astype(dtype)
    mean, m2 = moments(matrix)
    if rows == 0:
        assert (mean == 0).all() and (m2 == 0).all()
        return
    want_mean, want_m2 = reference(matrix)
    np.testing.assert_allclose(mean, want_mean, rtol=1e-12, atol=1e-12 * scale)
    np.testing.assert_allclose(m2, want_m2, rtol=1e-9, atol=1e-9 * scale * scale)


def test_many_slabs_and_a_short_last_one() -> None:
    rows = 3 * SLAB_ROWS_F64 + 123
    matrix = np.arange(rows, dtype=np.float64).reshape(rows, 1) % 1000
    mean, m2 = moments(matrix)
    want_mean, want_m2 = reference(matrix)
    np.testing.assert_allclose(mean, want_mean, rtol=1e-14)
    np.testing.assert_allclose(m2, want_m2, rtol=1e-12)


def test_infinities_and_nan_as_in_numpy() -> None:
    rows = 2 * SLAB_ROWS_F64 + 7  # the infinity in the first slab, finite slabs after it
    matrix = np.ones((rows, 4))
    matrix[0, 0] = np.inf
    matrix[-1, 1] = -np.inf
    matrix[5, 2] = np.nan
    mean, m2 = moments(matrix)
    with np.errstate(invalid="ignore"):
        np.testing.assert_array_equal(mean, matrix.mean(axis=0))
        np.testing.assert_array_equal(m2 / rows, matrix.var(axis=0))
    assert mean[0] == np.inf and mean[1] == -np.inf and np.isnan(mean[2]) and mean[3] == 1.0
    assert np.isnan(m2[:3]).all() and m2[3] == 0.0


def test_float32_squares_past_float32_range_stay_finite() -> None:
    matrix = np.array([[3e30], [-3e30]], dtype=np.float32)
    mean, m2 = moments(matrix)
    assert mean[0] == 0.0 and m2[0] == pytest.approx(1.8e61, rel=1e-6)


@pytest.mark.parametrize(
    ("matrix", "out"),
    [
        (np.zeros((4, 3), np.int32), np.empty(12)),  # not a float type
        (np.zeros(12, np.float32), np.empty(48)),  # not 2-D
        (np.zeros((4, 3), np.float32), np.empty(11)),  # out of the wrong size
        (np.zeros((4, 3), np.float32), np.empty(12, np.float32)),  # out not float64
    ],
)
def test_bad_buffers_are_refused(matrix: np.ndarray, out: np.ndarray) -> None:
    with pytest.raises(ValueError, match="column_moments"):
        _native.column_moments(matrix, out)


def test_non_contiguous_matrix_is_refused() -> None:
    with pytest.raises((ValueError, BufferError)):
        _native.column_moments(np.zeros((4, 6), np.float32)[:, ::2], np.empty(12))


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.dtype(">f8")])
def test_var_and_std_of_a_stored_array_use_them_and_equal_numpy(
    tmp_path: object, dtype: object
) -> None:
    """A chunked var/std equals NumPy's on the whole array: every block goes through the
    kernel, a big-endian one converted to the native work dtype first."""
    rng = np.random.default_rng(7)
    data = (rng.standard_normal((20_000, 9)) * 50 + 1000).astype(dtype)
    x = oc.from_numpy(data, chunks=(3_000, 9))
    mean, var, std = oc.compute(
        x.mean(axis=0, compute=False),
        x.var(axis=0, compute=False),
        x.std(axis=0, ddof=1, compute=False),
    )
    wide = data.astype(np.float64)
    tol = 1e-5 if np.dtype(dtype).itemsize == 4 else 1e-12
    np.testing.assert_allclose(mean, wide.mean(axis=0), rtol=tol)
    np.testing.assert_allclose(var, wide.var(axis=0), rtol=tol * 10)
    np.testing.assert_allclose(std, wide.std(axis=0, ddof=1), rtol=tol * 10)
    assert np.asarray(var).dtype == np.dtype(dtype).newbyteorder("=")
