"""The native summary and gathering kernels of exact quantiles (``_native.key_summary``,
``_native.key_gather``) against NumPy's order keys of the same values (``_order_keys``): a
wrong count or range would narrow a column to the wrong values."""

from __future__ import annotations

import numpy as np
import pytest

from oocarray import _native
from oocarray._compute._order_keys import order_keys


def _matrix(dtype: type, cols: int, seed: int = 7) -> np.ndarray:
    rng = np.random.default_rng(seed)
    m = (rng.standard_normal((301, cols)) * 10.0 ** rng.integers(-3, 4, cols)).astype(dtype)
    m[rng.random(m.shape) < 0.05] = np.nan
    m[3], m[4], m[5], m[6] = np.inf, -np.inf, -0.0, 0.0
    m[7] = -np.nan  # a NaN with its sign bit set: its key would fall below every number's
    m[:, -1] = np.nan  # a column of NaN only
    return m


def _keys(m: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    keys, finite = order_keys(m)
    assert finite is not None
    return keys.astype(np.uint64), finite


@pytest.mark.parametrize("cols", [1, 8, 700])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_summary_counts_and_key_range_of_each_column(dtype: type, cols: int) -> None:
    m = _matrix(dtype, cols)
    keys, finite = _keys(m)
    valid = np.full(cols, -1, np.int64)
    low, high = np.zeros(cols, np.uint64), np.ones(cols, np.uint64)
    _native.key_summary(m, valid, low, high)
    largest = np.uint64(np.iinfo(f"u{m.itemsize}").max)
    np.testing.assert_array_equal(valid, finite.sum(axis=0))
    np.testing.assert_array_equal(low, np.where(finite, keys, largest).min(axis=0))
    np.testing.assert_array_equal(high, np.where(finite, keys, 0).max(axis=0))
    assert (valid[-1], low[-1], high[-1]) == (0, largest, 0)


@pytest.mark.parametrize("slots", [1, 3, 10])
@pytest.mark.parametrize("cols", [1, 8, 700])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_gather_finds_each_owned_interval_s_keys(dtype: type, cols: int, slots: int) -> None:
    m = _matrix(dtype, cols)
    keys, finite = _keys(m)
    rng = np.random.default_rng(cols * slots)
    # intervals between two of the column's keys, some owned; one beyond the keys' width
    ends = np.sort(rng.choice(keys.reshape(-1), size=(2, slots, cols)), axis=0)
    low, high = ends[0].copy(), ends[1].copy()
    own = (rng.random((slots, cols)) < 0.8).astype(np.uint8)
    if m.itemsize == 4:
        low[0, 0], high[0, 0], own[0, 0] = 1 << 40, 1 << 41, 1
    group = rng.integers(0, 1 << 40, (slots, cols))
    count = _native.key_gather(m, own, low, high, group, None, None)
    found_groups, found_keys = np.empty(count, np.int64), np.empty(count, np.uint64)
    assert _native.key_gather(m, own, low, high, group, found_groups, found_keys) == count
    expected = []
    for s in range(slots):
        inside = finite & own[s].astype(bool) & (keys >= low[s]) & (keys <= high[s])
        rows, columns = np.nonzero(inside)
        expected += zip(group[s, columns].tolist(), keys[rows, columns].tolist(), strict=True)
    ours = sorted(zip(found_groups.tolist(), found_keys.tolist(), strict=True))
    assert ours == sorted(expected) and count == len(expected)


def test_bad_buffers_are_refused() -> None:
    m = np.ones((10, 2), np.float32)
    cells = np.zeros(2, np.uint64)
    with pytest.raises(ValueError, match="float32 or float64"):
        _native.key_summary(m.astype(np.int32), np.zeros(2, np.int64), cells, cells.copy())
    with pytest.raises(ValueError, match="valid must hold 2"):
        _native.key_summary(m, np.zeros(3, np.int64), cells, cells.copy())
    own, group = np.ones((1, 2), np.uint8), np.zeros((1, 2), np.int64)
    high = np.full((1, 2), 1 << 32, np.uint64)
    with pytest.raises(ValueError, match="high must hold 2"):
        _native.key_gather(m, own, cells, high.reshape(-1)[:1], group, None, None)
    with pytest.raises(ValueError, match="both found buffers"):
        _native.key_gather(m, own, cells, high, group, np.zeros(20, np.int64), None)
    assert _native.key_gather(m, own, cells, high, group, None, None) == 20


def test_gather_fills_the_room_it_has_and_counts_the_rest() -> None:
    m = np.arange(20, dtype=np.float32).reshape(10, 2)
    keys = _keys(m)[0]
    own, group = np.ones((1, 2), np.uint8), np.array([[5, 6]], np.int64)
    low, high = keys.min(axis=0)[None], keys.max(axis=0)[None]
    found_groups, found_keys = np.full(3, -1, np.int64), np.zeros(3, np.uint64)
    assert _native.key_gather(m, own, low, high, group, found_groups, found_keys) == 20
    assert found_groups.tolist() == [5, 6, 5]  # the first three, in the values' order
    assert found_keys.tolist() == keys.reshape(-1)[:3].tolist()
