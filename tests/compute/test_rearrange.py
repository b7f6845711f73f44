"""Shape and indexing functions on chunked arrays and expressions equal NumPy's on the same data:
values (exactly), dtypes, shapes and the kind of error, over every dtype, shape (0-d, size-0
axes), chunking and argument, through NumPy's functions and the methods, and mixed with
elementwise operations and reductions."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import oocarray as oc
from tests.compute.strategies import (
    Case,
    assert_same_failure,
    axes,
    cases,
    examples,
    outcome,
)


def _values(result: Any) -> Any:
    """A result as NumPy values: expressions and chunked arrays loaded, tuples item by item."""
    if isinstance(result, tuple):
        return tuple(_values(r) for r in result)
    return np.asarray(result)


def _assert_same(ours: Any, expected: Any, what: str) -> None:
    if isinstance(expected, tuple | list):
        assert isinstance(ours, tuple), f"{what}: expected a tuple, got {type(ours)}"
        assert len(ours) == len(expected), what
        for mine, theirs in zip(ours, expected, strict=True):
            _assert_same(mine, theirs, what)
        return
    expected = np.asarray(expected)
    assert ours.shape == expected.shape, f"{what}: shape {ours.shape} != {expected.shape}"
    assert ours.dtype == expected.dtype, f"{what}: dtype {ours.dtype} != {expected.dtype}"
    np.testing.assert_array_equal(ours, expected, err_msg=what)


def check(function: Callable[[Any], Any], case: Case, what: str = "") -> None:
    """``function`` of the chunked array equals ``function`` of the ndarray, or fails alike."""
    expected, failure, _ = outcome(function, case.data)
    x = case.chunked()
    with case.blocks():
        ours, our_failure, _ = outcome(lambda: _values(function(x)))
    label = f"{what} of {case!r}"
    if failure is not None:
        assert_same_failure(our_failure, failure, label)
        return
    if our_failure is not None:
        raise AssertionError(f"{label}: NumPy gave a value, oocarray raised") from our_failure
    _assert_same(ours, expected, label)


# -- axes moved ------------------------------------------------------------------------------


@examples(0.3)
@given(case=cases(), data=st.data())
def test_moveaxis_swapaxes_and_matrix_transpose(case: Case, data: st.DataObject) -> None:
    ndim = case.data.ndim
    spread = st.integers(-ndim - 1, ndim)
    source, destination = data.draw(spread), data.draw(spread)
    first, second = data.draw(spread), data.draw(spread)
    check(lambda a: np.moveaxis(a, source, destination), case, "moveaxis")
    check(lambda a: np.swapaxes(a, first, second), case, "swapaxes")
    check(np.matrix_transpose, case, "matrix_transpose")
    if ndim >= 2:
        check(lambda a: np.moveaxis(a, (0, -1), (-1, 0)), case, "moveaxis of two")


def test_methods_move_axes_as_numpy() -> None:
    data = np.arange(60).reshape(3, 4, 5)
    x = oc.from_numpy(data, chunks=(2, 3, 2))
    np.testing.assert_array_equal(x.swapaxes(0, 2)[...], data.swapaxes(0, 2))
    np.testing.assert_array_equal(x.T.swapaxes(0, 1)[...], data.T.swapaxes(0, 1))
    np.testing.assert_array_equal(np.linalg.matrix_transpose(x)[...], data.mT)


# -- axes added and removed ------------------------------------------------------------------


@examples(0.3)
@given(case=cases(), data=st.data())
def test_squeeze_and_expand_dims(case: Case, data: st.DataObject) -> None:
    ndim = case.data.ndim
    axis = data.draw(axes(ndim), label="squeeze")
    check(lambda a: np.squeeze(a, axis), case, "squeeze")
    check(np.squeeze, case, "squeeze all")
    spread = st.integers(-ndim - 3, ndim + 2)
    new = data.draw(st.one_of(spread, st.lists(spread, max_size=3).map(tuple)), label="expand")
    check(lambda a: np.expand_dims(a, new), case, "expand_dims")


@examples(0.3)
@given(case=cases(max_dims=2), data=st.data())
def test_broadcast_to_and_broadcast_arrays(case: Case, data: st.DataObject) -> None:
    shape = case.data.shape
    lead = data.draw(st.lists(st.integers(0, 3), max_size=2), label="lead")
    target = (*lead, *(data.draw(st.sampled_from([n, 2, 3])) if n == 1 else n for n in shape))
    check(lambda a: np.broadcast_to(a, target), case, "broadcast_to")
    other = np.ones(target[-1:] if target else (), np.int8)
    check(lambda a: np.broadcast_arrays(a, other), case, "broadcast_arrays")


def test_broadcast_of_a_column_reads_each_chunk_once_per_block() -> None:
    column = np.arange(7.0).reshape(7, 1)
    x = oc.from_numpy(column, chunks=(3, 1))
    wide = np.broadcast_to(x, (2, 7, 1000))
    assert wide.shape == (2, 7, 1000)
    np.testing.assert_array_equal(wide.sum(axis=2), np.broadcast_to(column, (2, 7, 1000)).sum(2))
    with pytest.raises(ValueError, match="broadcast"):
        np.broadcast_to(x, (6, 1))


# -- reshape -------------------------------------------------------------------------------


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0] if n else [0, 1, 2]


@st.composite
def new_shapes(draw: st.DrawFn, size: int) -> tuple[int, ...]:
    """Shapes of ``size`` elements (a -1 now and then), or now and then one that does not fit."""
    if draw(st.integers(0, 9)) == 0:
        return (size + 1,)
    ndim = draw(st.integers(0 if size == 1 else 1, 4))
    shape: list[int] = []
    left = size
    for _ in range(max(0, ndim - 1)):
        d = draw(st.sampled_from(_divisors(left)))
        shape.append(d)
        left = left // d if d else left
    if ndim:
        shape.append(left if size else draw(st.sampled_from([0, 1, 3])))
        if size and 0 not in shape and draw(st.booleans()):
            shape[draw(st.integers(0, len(shape) - 1))] = -1
        if not size and 0 not in shape:
            shape[0] = 0
    return tuple(shape)


@examples(0.5, ci=30)
@given(case=cases(), data=st.data())
def test_reshape_and_ravel(case: Case, data: st.DataObject) -> None:
    shape = data.draw(new_shapes(case.data.size), label="shape")
    check(lambda a: np.reshape(a, shape), case, "reshape")
    check(lambda a: a.reshape(shape), case, "reshape method")
    check(np.ravel, case, "ravel")
    check(lambda a: a.T.reshape(-1) if a.ndim else a.reshape(-1), case, "x.T.reshape(-1)")


@examples(0.3)
@given(shape=st.lists(st.integers(1, 5), max_size=4).map(tuple), data=st.data())
def test_flat_rectangles_cover_a_flat_range_in_order(shape: tuple[int, ...], data: Any) -> None:
    from oocarray._compute._reshape import flat_rectangles

    size = int(np.prod(shape))
    start = data.draw(st.integers(0, size))
    stop = data.draw(st.integers(start, size))
    grid = np.arange(size).reshape(shape)
    pieces = [grid[r].ravel() for r in flat_rectangles(shape, start, stop)]
    joined = np.concatenate(pieces) if pieces else np.empty(0, int)
    np.testing.assert_array_equal(joined, np.arange(start, stop))
    assert len(pieces) <= max(1, 2 * len(shape) - 1)


@examples(0.3)
@given(case=cases(min_dims=1, dtypes=("int16", "float64")), data=st.data())
def test_streamed_reshapes_and_any_region_of_them(case: Case, data: st.DataObject) -> None:
    from oocarray._compute import _reshape

    shape = data.draw(new_shapes(case.data.size).filter(lambda s: s != (case.data.size + 1,)))
    expected = case.data.reshape(shape)
    key = tuple(
        slice(data.draw(st.integers(0, n)), data.draw(st.integers(0, n))) for n in expected.shape
    )
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_reshape, "LAZY_BLOCK_BYTES", data.draw(st.sampled_from([1, 64, 1 << 20])))
        y = case.chunked().reshape(shape)
        np.testing.assert_array_equal(np.asarray(y), expected, strict=True)
        if expected.ndim:
            np.testing.assert_array_equal(y[key], expected[key], strict=True)


def test_reshape_lines_up_with_chunks_lazily() -> None:
    data = np.arange(600.0).reshape(100, 2, 3)
    x = oc.from_numpy(data, chunks=(10, 2, 3))
    merged = x.reshape(100, 6)  # trailing axes merged: lazy, blocks of 10 rows
    assert isinstance(merged, oc.Expr)
    assert merged._node.chunks() == (10, 6)
    split = x.reshape(10, 10, 6)  # the first axis split at chunk boundaries
    assert split._node.chunks() == (1, 10, 6)
    np.testing.assert_array_equal(split[3], data.reshape(10, 10, 6)[3])
    np.testing.assert_array_equal(merged.sum(axis=0), data.reshape(100, 6).sum(axis=0))
    np.testing.assert_array_equal(x.ravel()[17:400], data.ravel()[17:400])
    np.testing.assert_array_equal(x.flatten()[...], data.flatten())
    with pytest.raises(TypeError, match="order"):
        x.reshape(600, order="F")
    with pytest.raises(ValueError, match="cannot reshape"):
        x.reshape(7, -1)


def test_reshape_that_does_not_line_up_is_streamed_into_a_temporary(monkeypatch: Any) -> None:
    from oocarray._compute import _reshape

    monkeypatch.setattr(_reshape, "LAZY_BLOCK_BYTES", 256)
    data = np.random.default_rng(1).normal(size=(60, 50))
    x = oc.from_numpy(data, chunks=(7, 9))
    y = x.reshape(25, 120)
    assert isinstance(y._node, oc._compute._nodes.Source)  # written once, then read lazily
    np.testing.assert_array_equal(y[...], data.reshape(25, 120))
    np.testing.assert_array_equal(np.asarray(np.reshape(x * 2, (3000,))), data.ravel() * 2)


def test_reshape_under_a_budget_smaller_than_the_data() -> None:
    data = np.random.default_rng(2).integers(0, 1000, size=(1024, 96)).astype(np.float64)
    x = oc.from_numpy(data, chunks=(100, 40))  # 768 KiB, chunks that split the rows
    with oc.Manager("small", max_bytes="256K"):
        y = x.reshape(96, 1024)
        total = y.sum(axis=0)
        part = y[50:60]
    np.testing.assert_array_equal(part, data.reshape(96, 1024)[50:60])
    np.testing.assert_array_equal(total, data.reshape(96, 1024).sum(axis=0))


# -- flip, roll, tile, repeat, pad ---------------------------------------------------------


@examples(0.4, ci=25)
@given(case=cases(), data=st.data())
def test_flip_and_roll(case: Case, data: st.DataObject) -> None:
    ndim = case.data.ndim
    axis = data.draw(axes(ndim), label="flip axis")
    check(lambda a: np.flip(a, axis), case, "flip")
    shift = data.draw(st.integers(-30, 30), label="shift")
    roll_axis = data.draw(axes(ndim, tuples=False), label="roll axis")
    check(lambda a: np.roll(a, shift, roll_axis), case, "roll")
    check(lambda a: np.flip(a.T, axis) * 2, case, "flip of x.T, times 2")
    if ndim >= 1:
        check(lambda a: np.max(np.roll(a, shift, roll_axis), axis=-1), case, "max of a roll")
    if ndim >= 2:
        check(lambda a: np.roll(a, (shift, 1), (0, -1)), case, "roll of two axes")
        check(lambda a: np.roll(a, (2, shift), (1, 1)), case, "roll twice along one axis")
        check(np.flipud, case, "flipud")
        check(np.fliplr, case, "fliplr")


@examples(0.3)
@given(case=cases(max_dims=2), data=st.data())
def test_tile_and_repeat(case: Case, data: st.DataObject) -> None:
    ndim = case.data.ndim
    reps = data.draw(st.one_of(st.integers(0, 3), st.lists(st.integers(0, 3), max_size=3)))
    check(lambda a: np.tile(a, reps), case, "tile")
    axis = data.draw(st.one_of(st.none(), st.integers(-ndim, ndim - 1) if ndim else st.none()))
    times = data.draw(st.integers(0, 3), label="repeats")
    check(lambda a: np.repeat(a, times, axis=axis), case, "repeat")
    length = case.data.size if axis is None else case.data.shape[axis]
    counts = np.random.default_rng(length).integers(0, 3, size=length)
    check(lambda a: np.repeat(a, counts, axis=axis), case, "repeat by element")
    check(lambda a: np.repeat(a, [1, 2, 3, 4, 5, 6, 7], axis=axis), case, "repeat, bad counts")
    check(lambda a: np.repeat(a, -1, axis=axis), case, "repeat a negative count")


@examples(0.4)
@given(case=cases(max_dims=3), data=st.data())
def test_pad(case: Case, data: st.DataObject) -> None:
    ndim = case.data.ndim
    mode = data.draw(st.sampled_from(["constant", "edge", "reflect", "symmetric", "wrap"]))
    width = data.draw(
        st.one_of(
            st.integers(0, 5),
            st.lists(st.tuples(st.integers(0, 5), st.integers(0, 5)), min_size=ndim, max_size=ndim),
        ),
        label="pad_width",
    )
    check(lambda a: np.pad(a, width, mode=mode), case, f"pad {mode}")
    if mode == "constant" and case.data.dtype.kind in "iu":
        check(lambda a: np.pad(a, width, constant_values=((1, 2),) * ndim), case, "pad values")


def test_pad_refuses_the_modes_it_lacks_clearly() -> None:
    x = oc.from_numpy(np.arange(10.0), chunks=4)
    with pytest.raises(TypeError, match="linear_ramp"):
        np.pad(x, 2, mode="linear_ramp")
    with pytest.raises(ValueError, match="not supported"):
        np.pad(x, 2, mode="nothing")
    with pytest.raises(TypeError, match="integral"):
        np.pad(x, 1.5)
    with pytest.raises(ValueError, match="negative"):
        np.pad(x, -1)
    with pytest.raises(ValueError, match="empty axis"):
        np.pad(oc.from_numpy(np.zeros((0, 3)), chunks=(2, 2)), 1, mode="edge")
    np.testing.assert_array_equal(np.pad(x, 2, mode="empty")[2:-2], np.arange(10.0))


# -- take and take_along_axis --------------------------------------------------------------


@examples(0.4)
@given(case=cases(), data=st.data())
def test_take(case: Case, data: st.DataObject) -> None:
    ndim = case.data.ndim
    axis = data.draw(st.one_of(st.none(), st.integers(-ndim - 1, ndim)), label="axis")
    length = case.data.size if axis is None or ndim == 0 else case.data.shape[axis % ndim]
    index = st.integers(-length - 1, length)
    indices = data.draw(
        st.one_of(
            index,
            st.lists(index, max_size=8),
            st.lists(st.lists(index, min_size=2, max_size=2), max_size=3),
        ),
        label="indices",
    )
    check(lambda a: np.take(a, indices, axis=axis), case, "take")
    if length:
        for mode in ("wrap", "clip"):
            check(
                lambda a, mode=mode: np.take(
                    a, [length + 3, -2 * length - 1, 0], axis=axis, mode=mode
                ),
                case,
                mode,
            )


@examples(0.4)
@given(case=cases(min_dims=1), data=st.data())
def test_take_along_axis(case: Case, data: st.DataObject) -> None:
    ndim = case.data.ndim
    axis = data.draw(st.integers(-ndim, ndim - 1), label="axis")
    n = case.data.shape[axis]
    shape = list(case.data.shape)
    shape[axis] = data.draw(st.integers(0, 5), label="taken")
    if data.draw(st.booleans()):  # broadcast on another axis
        other = data.draw(st.integers(0, ndim - 1))
        if other != axis % ndim:
            shape[other] = 1
    rng = np.random.default_rng(n)
    indices = rng.integers(-n, max(n, 1), size=shape) if n else np.zeros(shape, np.int64)
    check(lambda a: np.take_along_axis(a, indices, axis=axis), case, "take_along_axis")
    chunked = oc.from_numpy(indices, chunks=tuple(max(1, s // 2) for s in indices.shape))
    check(
        lambda a: np.take_along_axis(
            a, chunked if isinstance(a, oc.ChunkedArray) else indices, axis=axis
        ),
        case,
        "by chunked indices",
    )


def test_take_along_axis_of_an_argsort_and_errors() -> None:
    data = np.random.default_rng(5).normal(size=(30, 20))
    x = oc.from_numpy(data, chunks=(7, 6))
    order = np.argsort(data, axis=1)
    np.testing.assert_array_equal(np.take_along_axis(x, order, axis=1)[...], np.sort(data, axis=1))
    np.testing.assert_array_equal(
        np.take_along_axis(x, order.ravel(), axis=None)[...],
        np.take_along_axis(data, order.ravel(), axis=None),
    )
    with pytest.raises(IndexError):
        np.take_along_axis(x, order + 20, axis=1)
    with pytest.raises(IndexError):
        np.take_along_axis(x, order.astype(float), axis=1)
    with pytest.raises(ValueError, match="number of dimensions"):
        np.take_along_axis(x, order[0], axis=1)
    with pytest.raises(TypeError, match="out="):
        np.take(x, [1], axis=0, out=np.empty((1, 20)))


# -- data-dependent selections ---------------------------------------------------------------


@examples(0.5, ci=30)
@given(case=cases(), data=st.data())
def test_nonzero_argwhere_flatnonzero(case: Case, data: st.DataObject) -> None:
    check(np.nonzero, case, "nonzero")
    check(np.argwhere, case, "argwhere")
    check(np.flatnonzero, case, "flatnonzero")


@examples(0.5, ci=30)
@given(case=cases(min_dims=1), data=st.data())
def test_boolean_masks_extract_and_compress(case: Case, data: st.DataObject) -> None:
    rng = np.random.default_rng(case.data.size)
    keep = rng.random(case.data.shape) < data.draw(st.sampled_from([0.0, 0.4, 1.0]))
    chunked_keep = oc.from_numpy(keep, chunks=case.chunks)

    def masked(a: Any) -> Any:
        if isinstance(a, np.ndarray):
            return (a * 1)[keep]
        return (a * 1)[chunked_keep]

    check(masked, case, "expr[chunked mask]")
    check(lambda a: a[chunked_keep if isinstance(a, oc.ChunkedArray) else keep], case, "x[mask]")
    if case.data.ndim > 1:
        check(lambda a: a[keep], case, "x[ndarray mask]")
    check(lambda a: (a * 1)[keep], case, "expr[ndarray mask]")
    check(lambda a: np.extract(keep, a), case, "extract")
    if case.data.dtype.kind != "b":
        check(lambda a: (a + 0)[a > 0], case, "expr[expr > 0]")
    condition = rng.random(data.draw(st.integers(0, case.data.shape[0] + 2))) < 0.5
    check(lambda a: np.compress(condition, a, axis=0), case, "compress along 0")
    check(lambda a: np.compress(condition, a), case, "compress flattened")


def test_selections_larger_than_the_budget_come_back_as_chunked_arrays() -> None:
    data = np.random.default_rng(7).random((2048, 128)) < 0.6  # 256 KiB of bools, 1.2 MiB kept
    x = oc.from_numpy(data, chunks=(100, 50))
    values = np.arange(data.size, dtype=np.float32).reshape(data.shape)
    v = oc.from_numpy(values, chunks=(300, 128))
    with oc.Manager("small", max_bytes="1M"):
        rows, columns = np.nonzero(x)
        flat = np.flatnonzero(x)
        kept = (v * 1)[x]
        where = np.argwhere(x)
    assert isinstance(flat, oc.ChunkedArray)
    assert isinstance(kept, oc.ChunkedArray)
    expected = np.nonzero(data)
    np.testing.assert_array_equal(np.asarray(rows), expected[0])
    np.testing.assert_array_equal(np.asarray(columns), expected[1])
    np.testing.assert_array_equal(flat[...], np.flatnonzero(data))
    np.testing.assert_array_equal(kept[...], values[data])
    np.testing.assert_array_equal(np.asarray(where), np.argwhere(data))


def test_nonzero_of_0d_raises_like_numpy() -> None:
    x = oc.from_numpy(np.array(3.0), chunks=())
    with pytest.raises(ValueError, match="0d"):
        np.nonzero(x)
    np.testing.assert_array_equal(np.argwhere(x), np.argwhere(np.array(3.0)))
    np.testing.assert_array_equal(np.flatnonzero(x), [0])


# -- mixed with expressions, reductions, materialising and budgets ---------------------------


def test_mixed_with_elementwise_operations_and_reductions() -> None:
    data = np.random.default_rng(9).normal(size=(37, 23))
    x = oc.from_numpy(data, chunks=(8, 5))
    np.testing.assert_allclose(np.flip(x, 0).sum(axis=1), np.flip(data, 0).sum(axis=1))
    np.testing.assert_allclose(
        (np.roll(x, 5, 1) * 2 + x.T.T).max(axis=0), (np.roll(data, 5, 1) * 2 + data).max(axis=0)
    )
    np.testing.assert_allclose(
        np.pad(x, 3, mode="reflect").mean(), np.pad(data, 3, mode="reflect").mean()
    )
    np.testing.assert_allclose(np.tile(x.T, 2)[...], np.tile(data.T, 2))
    np.testing.assert_allclose(
        np.repeat(x[...] * 0 + x, 2, axis=1).sum(axis=0), np.repeat(data, 2, axis=1).sum(axis=0)
    )
    np.testing.assert_allclose(
        np.take(np.abs(x), [3, 0, -1], axis=0).sum(),
        np.take(np.abs(data), [3, 0, -1], axis=0).sum(),
    )
    np.testing.assert_array_equal(np.count_nonzero(np.flip(x > 0)), np.count_nonzero(data > 0))


def test_compute_asarray_oc_compute_and_to_zarr(tmp_path: Any) -> None:
    data = np.arange(600, dtype=np.int32).reshape(20, 30)
    x = oc.from_numpy(data, chunks=(6, 7))
    results = [
        np.flip(x, 1),
        np.roll(x, 4),
        x.reshape(30, 20),
        np.pad(x, 2, mode="wrap"),
        np.moveaxis(x, 0, 1),
    ]
    expected = [
        np.flip(data, 1),
        np.roll(data, 4),
        data.reshape(30, 20),
        np.pad(data, 2, mode="wrap"),
        np.moveaxis(data, 0, 1),
    ]
    computed = oc.compute(*results, progress=False)
    for lazy, value, want in zip(results, computed, expected, strict=True):
        np.testing.assert_array_equal(value, want, strict=True)
        np.testing.assert_array_equal(lazy.compute(progress=False), want, strict=True)
        np.testing.assert_array_equal(np.asarray(lazy), want, strict=True)
    written = np.tile(x, (1, 2)).to_zarr(
        str(tmp_path / "tiled.zarr"), chunks=(4, 11), progress=False
    )
    np.testing.assert_array_equal(oc.open(str(tmp_path / "tiled.zarr"))[...], np.tile(data, (1, 2)))
    assert written.shape == (20, 60)


@pytest.mark.parametrize("dtype", ["int8", "uint64", "float16", "complex64", "bool"])
def test_under_a_budget_smaller_than_the_data(dtype: str) -> None:
    rng = np.random.default_rng(4)
    data = (rng.integers(0, 3, size=(1500, 200)) * (1 + 1j if dtype == "complex64" else 1)).astype(
        dtype
    )
    x = oc.from_numpy(data, chunks=(128, 64))
    with oc.Manager("small", max_bytes=max(data.nbytes // 4, 128 << 10)):
        flipped = np.flip(x, (0, 1)).compute(progress=False)
        rolled = np.roll(x, (700, -30), (0, 1))[1000:1200]
        padded = np.pad(x, ((3, 0), (0, 5)), mode="edge")[...][:10]
        counted = np.count_nonzero(np.swapaxes(x, 0, 1), axis=0)
    np.testing.assert_array_equal(np.asarray(flipped), np.flip(data, (0, 1)), strict=True)
    np.testing.assert_array_equal(rolled, np.roll(data, (700, -30), (0, 1))[1000:1200], strict=True)
    np.testing.assert_array_equal(
        padded, np.pad(data, ((3, 0), (0, 5)), mode="edge")[:10], strict=True
    )
    np.testing.assert_array_equal(counted, np.count_nonzero(data.T, axis=0))


def test_block_grids_follow_the_input() -> None:
    x = oc.from_numpy(np.zeros((40, 30)), chunks=(8, 10))
    assert np.flip(x, 0)._node.chunks() == (8, 10)
    assert np.moveaxis(x, 0, 1)._node.chunks() == (10, 8)
    assert np.expand_dims(x, (0, 2))._node.chunks() == (1, 8, 1, 10)
    assert np.squeeze(np.expand_dims(x, 0))._node.chunks() == (8, 10)
    assert np.pad(x, 2)._node.chunks() == (8, 10)


def test_peak_memory_stays_within_a_budget_four_times_smaller_than_the_data() -> None:
    """8 MiB through each function under a 2 MiB budget: the manager's peak stays inside it
    (reads, blocks, a streamed reshape's temporary and a selection's result included)."""
    budget = 2 << 20
    data = np.random.default_rng(3).normal(size=((8 << 20) // (8 * 64), 64))
    x = oc.from_numpy(data, chunks=(512, 64))
    runs: dict[str, tuple[Callable[[], Any], Any]] = {
        "flip": (lambda: np.flip(x, (0, 1)).max(), np.flip(data, (0, 1)).max()),
        "roll": (
            lambda: np.roll(x, (5000, 7), (0, 1))[9000],
            np.roll(data, (5000, 7), (0, 1))[9000],
        ),
        "pad": (
            lambda: np.pad(x, 5, mode="reflect").min(axis=0),
            np.pad(data, 5, mode="reflect").min(axis=0),
        ),
        "reshape": (lambda: x.T.reshape(-1, 128).max(axis=0), data.T.reshape(-1, 128).max(axis=0)),
        "take": (lambda: np.take(x, np.arange(0, 16384, 3), axis=0).max(), data[::3].max()),
        "flatnonzero": (lambda: np.flatnonzero(x > 0), np.flatnonzero(data > 0)),
        "mask": (lambda: (x * 1)[x > 0], data[data > 0]),
    }
    for name, (run, expected) in runs.items():
        with oc.Manager("small", max_bytes=budget) as manager:
            result = run()
            peak = manager.stats().peak_bytes
        np.testing.assert_array_equal(np.asarray(result), expected, err_msg=name)
        assert peak <= budget, f"{name}: peak {peak} over the budget {budget}"


@pytest.mark.parametrize(
    ("shape", "indices", "axis"),
    [
        ((0, 0), 0, 1),  # no index used: nothing to check
        ((0, 3), 5, 1),
        ((2, 0), 0, 1),  # a non-empty take from an empty axis
        ((2, 3, 0), 7, 1),  # an index checked though each taken element is empty
        ((2, 0, 0), 7, 1),
        ((2, 0, 0), [], 1),
    ],
)
def test_take_checks_indices_as_numpy_does_with_empty_axes(
    shape: tuple[int, ...], indices: Any, axis: int
) -> None:
    a = np.zeros(shape, np.float32)
    x = oc.from_numpy(a, chunks=tuple(max(1, n) for n in shape))
    check_same(lambda v: np.take(v, indices, axis=axis), a, x)


@pytest.mark.parametrize("shape", [(0, 1, 0), (0, 1, 2), (3, 1, 0), (3, 1, 2)])
def test_take_along_axis_checks_only_the_indices_it_uses(shape: tuple[int, ...]) -> None:
    a = np.zeros(shape, bool)
    x = oc.from_numpy(a, chunks=tuple(max(1, n) for n in shape))
    check_same(lambda v: np.take_along_axis(v, np.array([[[5]]]), axis=0), a, x)


def check_same(function: Callable[[Any], Any], a: np.ndarray, x: oc.ChunkedArray) -> None:
    """``function`` of the chunked array gives NumPy's values, or NumPy's error."""
    try:
        expected = function(a)
    except IndexError as error:
        with pytest.raises(IndexError, match=re.escape(str(error))):
            np.asarray(function(x)[...])
        return
    got = np.asarray(function(x)[...])
    assert got.shape == expected.shape
    np.testing.assert_array_equal(got, expected)
