"""The chunk manager's block functions (``map_blocks``, ``blockwise``, ``apply_gufunc`` with core
dimensions, ``reduction``, ``scan``) against dask.array and xarray+dask on the same data."""

from __future__ import annotations

import dask.array as da
import numpy as np
import pandas as pd
import pytest
import xarray as xr
from dask.array.reductions import cumreduction
from dask.array.reductions import reduction as dask_reduction

import oocarray as oc
from oocarray._xarray._chunkmanager import OOCArrayChunkManager
from oocarray._xarray._lazy import OOCLazyArray

MANAGER = OOCArrayChunkManager()
VALUES = np.random.default_rng(5).normal(size=(37, 12))
VALUES[np.random.default_rng(6).random(VALUES.shape) < 0.3] = np.nan
CHUNKS = (8, 5)


def _both() -> tuple[OOCLazyArray, da.Array]:
    return MANAGER.from_array(VALUES, CHUNKS), da.from_array(VALUES, chunks=CHUNKS)


def _values(x: object) -> np.ndarray:
    assert isinstance(x, OOCLazyArray)
    return np.asarray(x.compute())


@pytest.mark.parametrize(
    "call",
    [
        lambda m, x: m.map_blocks(np.negative, x, dtype=float),
        lambda m, x: m.map_blocks(lambda b, k: b * k, x, 3.0, dtype=float),
        lambda m, x: m.map_blocks(lambda b: np.nansum(b, axis=1), x, dtype=float, drop_axis=1),
        lambda m, x: m.map_blocks(lambda b: b[None] * 2, x, dtype=float, new_axis=0),
        lambda m, x: m.map_blocks(
            lambda b: np.stack([b, -b]),
            x,
            dtype=float,
            new_axis=0,
            chunks=((2,), (8, 8, 8, 8, 5), (5, 5, 2)),
        ),
        lambda m, x: m.map_blocks(  # every output block one row
            lambda b: b[:1], x, dtype=float, chunks=((1,) * 5, (5, 5, 2))
        ),
        lambda m, x: m.map_blocks(lambda b: (b > 0).astype("i1"), x),  # dtype inferred
    ],
)
def test_map_blocks_equals_dask(call: object) -> None:
    assert callable(call)
    ooc, dask = _both()
    ours = call(MANAGER, ooc)
    theirs = call(da, dask)
    assert ours.shape == theirs.shape
    assert ours.chunks == theirs.chunks
    assert ours.dtype == theirs.dtype
    np.testing.assert_array_equal(_values(ours), theirs.compute())


def test_blockwise_contracts_adjusts_and_broadcasts_like_dask() -> None:
    ooc, dask = _both()
    row = np.arange(12.0)
    ours = MANAGER.blockwise(np.add, "ij", ooc, "ij", row, "j", dtype=float)
    theirs = da.blockwise(np.add, "ij", dask, "ij", row, "j", dtype=float)
    np.testing.assert_array_equal(_values(ours), theirs.compute())

    def column_sums(b: np.ndarray) -> np.ndarray:
        return np.nansum(b, axis=0, keepdims=True)

    ours = MANAGER.blockwise(column_sums, "ij", ooc, "ij", dtype=float, adjust_chunks={"i": 1})
    theirs = da.blockwise(column_sums, "ij", dask, "ij", dtype=float, adjust_chunks={"i": 1})
    assert ours.chunks == theirs.chunks
    np.testing.assert_array_equal(_values(ours), theirs.compute())

    def row_sums(b: np.ndarray) -> np.ndarray:
        return np.nansum(b, axis=1)

    ours = MANAGER.blockwise(row_sums, "i", ooc, "ij", dtype=float)
    theirs = da.blockwise(row_sums, "i", dask, "ij", dtype=float, concatenate=True)
    np.testing.assert_allclose(_values(ours), theirs.compute())


def test_a_block_of_the_wrong_shape_is_a_clear_error() -> None:
    ooc, _ = _both()
    wrong = MANAGER.map_blocks(lambda b: b[:2], ooc, dtype=float)
    with pytest.raises(ValueError, match="returned a block of shape"):
        wrong.compute()


def test_reduction_equals_dask_reduction() -> None:
    ooc, dask = _both()

    def first(x: np.ndarray, axis: object, keepdims: bool) -> np.ndarray:
        from xarray.core.nputils import nanfirst

        return nanfirst(x, axis, keepdims=keepdims)  # type: ignore[no-any-return]

    def top(x: np.ndarray, axis: object, keepdims: bool) -> np.ndarray:
        return np.nanmax(x, axis=axis, keepdims=keepdims)  # type: ignore[call-overload, no-any-return]

    cases = ((first, 0, False), (first, 1, True), (top, (0, 1), False), (top, (0, 1), True))
    for function, axis, keepdims in cases:
        ours = MANAGER.reduction(ooc, function, aggregate_func=function, axis=axis,
                                 dtype=float, keepdims=keepdims)  # fmt: skip
        theirs = dask_reduction(dask, function, function, axis=axis, dtype=float,
                                keepdims=keepdims)  # fmt: skip
        assert ours.shape == theirs.shape
        np.testing.assert_array_equal(_values(ours), theirs.compute())


def _push(x: np.ndarray, axis: int, dtype: object = None) -> np.ndarray:
    """Forward fill along ``axis`` (what bottleneck.push does), in NumPy."""
    moved = np.moveaxis(x, axis, -1)
    index = np.where(np.isnan(moved), 0, np.arange(moved.shape[-1]))
    np.maximum.accumulate(index, axis=-1, out=index)
    filled = np.take_along_axis(moved, index, axis=-1)
    return np.moveaxis(filled, -1, axis)


def _fill_with_last(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.where(np.isnan(b), a, b)


@pytest.mark.parametrize("axis", [0, 1])
def test_scan_equals_dask_cumreduction(axis: int) -> None:
    from xarray.core.nputils import nanlast

    ooc, dask = _both()
    ours = MANAGER.scan(_push, _fill_with_last, np.nan, ooc, axis=axis, dtype=float,
                        method="blelloch", preop=nanlast)  # fmt: skip
    theirs = cumreduction(_push, _fill_with_last, np.nan, dask, axis=axis, dtype=float,
                          method="blelloch", preop=nanlast)  # fmt: skip
    np.testing.assert_array_equal(_values(ours), theirs.compute())
    filled = np.nan_to_num(VALUES)
    ours = MANAGER.scan(np.cumsum, np.add, 0, MANAGER.from_array(filled, CHUNKS), axis=axis)
    np.testing.assert_allclose(_values(ours), np.cumsum(filled, axis=axis))


def _cube() -> tuple[xr.Dataset, xr.Dataset]:
    time = pd.date_range("2001-01-01", periods=365, freq="D")
    t2m = np.random.default_rng(0).normal(280, 10, (365, 6, 8)).astype("float32")
    t2m[::17, 2, 3] = np.nan
    ds = xr.Dataset(
        {"t2m": (("time", "lat", "lon"), t2m)},
        coords={"time": time, "lat": np.linspace(-50, 50, 6), "lon": np.arange(8.0)},
    )
    chunks = {"time": 73, "lat": 3, "lon": 8}
    return ds.chunk(chunks, chunked_array_type="oocarray"), ds.chunk(chunks)


def _norm(a: np.ndarray) -> np.ndarray:
    return np.sqrt(np.nansum(a * a, axis=-1))


def _extremes(a: np.ndarray) -> np.ndarray:
    return np.stack([np.nanmin(a, axis=-1), np.nanmax(a, axis=-1)], axis=-1)


def _scale(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return np.nanmean(a, axis=-1), np.nanstd(a, axis=-1)


@pytest.mark.parametrize(
    "operation",
    [
        lambda ds: xr.apply_ufunc(
            _norm, ds.t2m, input_core_dims=[["lon"]], dask="parallelized", output_dtypes=["f4"]
        ),
        lambda ds: xr.apply_ufunc(  # a core dimension in several chunks, read whole
            _norm,
            ds.t2m,
            input_core_dims=[["time"]],
            dask="parallelized",
            output_dtypes=["f4"],
            dask_gufunc_kwargs={"allow_rechunk": True},
        ),
        lambda ds: xr.apply_ufunc(
            _extremes,
            ds.t2m,
            input_core_dims=[["lon"]],
            output_core_dims=[["stat"]],
            dask="parallelized",
            output_dtypes=["f4"],
            dask_gufunc_kwargs={"output_sizes": {"stat": 2}},
        ),
        lambda ds: xr.apply_ufunc(
            _scale,
            ds.t2m,
            input_core_dims=[["lon"]],
            output_core_dims=[[], []],
            dask="parallelized",
            output_dtypes=["f4", "f4"],
        )[1],
        lambda ds: xr.apply_ufunc(
            lambda a, w: np.nansum(a * w, axis=-1),
            ds.t2m,
            xr.DataArray(np.linspace(0, 1, 8), dims="lon"),
            input_core_dims=[["lon"], ["lon"]],
            dask="parallelized",
            output_dtypes=["f8"],
        ),
        lambda ds: xr.apply_ufunc(
            np.sort,
            ds.t2m,
            input_core_dims=[["lon"]],
            output_core_dims=[["lon"]],
            dask="parallelized",
        ),
        lambda ds: xr.apply_ufunc(
            lambda v: float(np.nanmax(v) - np.nanmin(v)),
            ds.t2m,
            input_core_dims=[["lon"]],
            vectorize=True,
            dask="parallelized",
            output_dtypes=["f8"],
        ),
        lambda ds: ds.t2m.groupby("time.month").first(),
        lambda ds: ds.t2m.resample(time="1MS").last(),
        lambda ds: ds.t2m.cumsum("time"),
    ],
)
def test_xarray_calls_equal_dask(operation: object) -> None:
    assert callable(operation)
    ooc, dask = _cube()
    ours = operation(ooc)
    xr.testing.assert_allclose(ours.compute(), operation(dask).compute(), rtol=1e-5)


def test_apply_ufunc_with_core_dimensions_stays_lazy_and_within_budget() -> None:
    ooc, dask = _cube()  # t2m is 70 kB; the budget is a fraction of it
    with oc.Manager(max_bytes="24k"):
        norm = xr.apply_ufunc(
            _norm, ooc.t2m, input_core_dims=[["lon"]], dask="parallelized", output_dtypes=["f4"]
        )
        assert isinstance(norm.data, OOCLazyArray)
        ours = norm.mean("lat").compute()
    theirs = xr.apply_ufunc(
        _norm, dask.t2m, input_core_dims=[["lon"]], dask="parallelized", output_dtypes=["f4"]
    ).mean("lat")
    xr.testing.assert_allclose(ours, theirs.compute(), rtol=1e-5)


def test_a_core_dimension_block_that_cannot_fit_raises_memory_budget_error() -> None:
    ooc, _ = _cube()
    with oc.Manager(max_bytes="16k"), pytest.raises(oc.MemoryBudgetError, match="apply_gufunc"):
        xr.apply_ufunc(
            _norm,
            ooc.t2m.chunk(lat=6, lon=8, chunked_array_type="oocarray"),
            input_core_dims=[["time"]],
            dask="parallelized",
            output_dtypes=["f4"],
            dask_gufunc_kwargs={"allow_rechunk": True},
        )


def test_what_stays_unsupported_names_the_operation() -> None:
    ooc, _ = _both()
    with pytest.raises(NotImplementedError, match="apply_gufunc with axes"):
        MANAGER.apply_gufunc(_norm, "(i)->()", ooc, axes=[(1,), ()])
    with pytest.raises(TypeError, match="give dtype="):
        MANAGER.map_blocks(lambda b: b.no_such_method(), ooc)
