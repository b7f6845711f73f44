"""The native counting kernel of exact quantiles (``_native.bin_counts``) against NumPy's
binning of the same values (``_order_keys``, ``_selection._binning``): the counts must be the
same to the value, or a pass would narrow the interval to the wrong bin."""

from __future__ import annotations

import numpy as np
import pytest

from oocarray import _native
from oocarray._compute._order_keys import order_keys, value_bins
from oocarray._compute._selection import _binning

BINS = 64


def _matrix(dtype: type) -> np.ndarray:
    rng = np.random.default_rng(5)
    scales = 10.0 ** rng.integers(-3, 4, 8)
    m = (rng.standard_normal((1500, 8)) * scales).astype(dtype)
    m[rng.random(m.shape) < 0.05] = np.nan
    m[3], m[4], m[5], m[6] = np.inf, -np.inf, -0.0, 0.0
    m[:, 7] = 2.5  # a column of one value (and its infinities): a scale of 0
    m[3:5, 7] = np.inf, -np.inf
    return m


def _column_keys(m: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each column's smallest and largest key of the values that are not NaN."""
    keys, finite = order_keys(m)
    assert finite is not None
    big = np.iinfo(keys.dtype).max
    low = np.where(finite, keys, big).min(axis=0).astype(np.uint64)
    high = np.where(finite, keys, 0).max(axis=0).astype(np.uint64)
    return low, high


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_counts_by_value_are_numpys(dtype: type) -> None:
    m = _matrix(dtype)
    own = np.array([1, 1, 0, 1, 1, 1, 1, 1], np.uint8)
    low, high = _column_keys(m)
    high[7] = low[7] = order_keys(np.array([2.5], dtype))[0][0]  # the finite values' range
    binning = _binning(m.dtype, low, high, BINS, by_value=True)
    assert binning.start is not None and binning.scale is not None
    assert binning.scale[7] == 0
    counts = np.zeros((m.shape[1], BINS), np.int64)
    _native.bin_counts(m, counts, own, binning.start, binning.scale, None, None, None)
    for j in range(m.shape[1]):
        if not own[j]:
            assert not counts[j].any()
            continue
        values = m[:, j][~np.isnan(m[:, j])]
        with np.errstate(invalid="ignore"):
            where = value_bins(values, binning.start[j : j + 1], binning.scale[j : j + 1], BINS)
        expected = np.bincount(where.astype(np.intp), minlength=BINS)
        np.testing.assert_array_equal(counts[j], expected, err_msg=f"column {j}")
    assert counts.sum() == np.count_nonzero(~np.isnan(m[:, own.astype(bool)]))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_counts_by_key_are_numpys_and_leave_out_what_is_outside(dtype: type) -> None:
    m = _matrix(dtype)
    own = np.array([1, 0, 1, 1, 1, 1, 1, 1], np.uint8)
    low, high = _column_keys(m)
    # the middle half of each column's key range (infinities and zeros fall on either side)
    quarter = (high - low) // np.uint64(4)
    low, high = low + quarter, high - quarter
    binning = _binning(m.dtype, low, high, BINS, by_value=False)
    shift = binning.shift
    assert shift is not None
    counts = np.zeros((m.shape[1], BINS), np.int64)
    _native.bin_counts(m, counts, own, None, None, low, high, shift)
    keys, finite = order_keys(m)
    assert finite is not None
    for j in range(m.shape[1]):
        if not own[j]:
            assert not counts[j].any()
            continue
        k = keys[:, j].astype(np.uint64)
        inside = finite[:, j] & (k >= low[j]) & (k <= high[j])
        expected = np.bincount(((k[inside] - low[j]) >> shift[j]).astype(np.intp), minlength=BINS)
        np.testing.assert_array_equal(counts[j], expected, err_msg=f"column {j}")


def test_counts_add_to_what_is_there_and_bad_buffers_are_refused() -> None:
    m = np.ones((10, 2), np.float32)
    counts = np.ones((2, 4), np.int64)
    own = np.ones(2, np.uint8)
    low, high = _column_keys(m)
    shift = np.zeros(2, np.uint64)
    _native.bin_counts(m, counts, own, None, None, low, high, shift)
    assert counts[:, 0].tolist() == [11, 11] and counts[:, 1:].sum() == 6
    with pytest.raises(ValueError, match="float32 or float64"):
        _native.bin_counts(m.astype(np.int32), counts, own, None, None, low, high, shift)
    with pytest.raises(ValueError, match="start and scale"):
        _native.bin_counts(m, counts, own, None, None, low, None, shift)
    with pytest.raises(ValueError, match="own must hold 2"):
        _native.bin_counts(m, counts, np.ones(3, np.uint8), None, None, low, high, shift)
    with pytest.raises(ValueError, match="int64"):
        _native.bin_counts(m, np.ones((2, 3), np.int32), own, None, None, low, high, shift)
    with pytest.raises(ValueError, match="int64"):  # as many bytes as (2, 2) int64 counts
        _native.bin_counts(m, np.ones((2, 4), np.int32), own, None, None, low, high, shift)


@pytest.mark.parametrize("shape", [(1001, 1), (37, 700), (3, 5), (240_000, 9)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_counts_of_any_width_and_a_last_part_of_rows(dtype: type, shape: tuple[int, int]) -> None:
    """The kernel bins whole units of rows (a unit of narrow rows holds many) in tiles, and
    counts a tile of more rows than bins a few columns at a time: the rows left over, rows
    wider than a unit, the last tile, a last group of fewer columns and a group of columns none
    of which is counted are all counted as the others are."""
    rng = np.random.default_rng(shape[1])
    m = rng.standard_normal(shape).astype(dtype)
    m[rng.random(shape) < 0.05] = np.nan
    own = np.ones(shape[1], np.uint8)
    if shape[1] >= 8:
        own[4:8] = 0  # (a whole group)
    low, high = _column_keys(m)
    binning = _binning(m.dtype, low, high, BINS, by_value=True)
    assert binning.start is not None and binning.scale is not None
    counts = np.zeros((shape[1], BINS), np.int64)
    _native.bin_counts(m, counts, own, binning.start, binning.scale, None, None, None)
    for j in range(shape[1]):
        if not own[j]:
            assert not counts[j].any()
            continue
        values = m[:, j][~np.isnan(m[:, j])]
        where = value_bins(values, binning.start[j : j + 1], binning.scale[j : j + 1], BINS)
        expected = np.bincount(where.astype(np.intp), minlength=BINS)
        np.testing.assert_array_equal(counts[j], expected, err_msg=f"column {j}")


def test_more_bins_than_sixteen_bits_hold_are_refused() -> None:
    m = np.ones((4, 1), np.float32)
    start, scale = np.zeros(1), np.ones(1)
    with pytest.raises(ValueError, match="fewer than 65535 bins"):
        _native.bin_counts(
            m, np.zeros((1, 65535), np.int64), np.ones(1, np.uint8), start, scale, None, None, None
        )
