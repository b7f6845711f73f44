"""Bad arguments (issue 15, item 5): the public functions' arguments drawn from anything
(sizes, dtypes, shapes, chunks, codecs, axes, batch sizes, policies, index keys) give a
result or one of the documented exceptions, never another exception, a crash or a hang.

Manager and configure arguments are covered by tests/memory/test_bad_input.py; damaged stores
by test_damaged_stores.py.  Example counts: the settings below under the derandomized ``ci``
profile, 2000 each with ``HYPOTHESIS_PROFILE=long``."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import oocarray as oc

ALLOWED = (oc.OOCArrayError, ValueError, TypeError, IndexError, OSError)
LONG = os.environ.get("HYPOTHESIS_PROFILE") == "long"


def _examples(ci: int) -> Any:
    return settings(
        max_examples=2000 if LONG else ci,
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )


ANY = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**65), 2**65),
    st.sampled_from([0, 1, -1, 2, 3, 7, 64, 2**31, 2**63 - 1, 2**64]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=6),
    st.sampled_from(["zstd", "lz4", "blosc", "gzip", "none", "Zstd", "pickle", "", "auto"]),
    st.sampled_from(["f4", "<f8", ">i2", "u1", "?", "c16", "M8[s]", "O", "V3", "U4", "S0"]),
    st.just(np.float32),
    st.just(object),
    st.lists(st.integers(-2, 40), max_size=4).map(tuple),
    st.lists(st.integers(-2, 40), max_size=3),
    st.just(np.int64(3)),
    st.just(3.0),
)
SMALL_SHAPE = st.lists(st.integers(0, 12), min_size=0, max_size=3).map(tuple)


def _call(function: Any, *args: Any, **kwargs: Any) -> Any:
    try:
        with oc.Manager("fuzz", max_bytes="32M", spill="fail"):
            return function(*args, **kwargs)
    except ALLOWED:
        return None


@_examples(100)
@given(shape=st.one_of(SMALL_SHAPE, ANY), dtype=ANY, chunks=ANY, codec=ANY, shards=ANY)
def test_create_and_temp(shape: Any, dtype: Any, chunks: Any, codec: Any, shards: Any) -> None:
    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch) / "a.zarr"
        x = _call(oc.create, path, shape, dtype, chunks=chunks, codec=codec, shards=shards)
        if x is not None and x.size <= 4096:
            _call(x.__setitem__, Ellipsis, 1)
            _call(x.__getitem__, Ellipsis)
        t = _call(oc.temp, shape, dtype, chunks=chunks)
        if t is not None:
            t.close()


ARRAYS = st.sampled_from(
    [
        np.arange(24.0).reshape(4, 6),
        np.arange(24, dtype=np.int16).reshape(2, 3, 4),
        np.zeros((0, 3)),
        np.array(5.0),
        np.ones(7, bool),
    ]
)


@_examples(100)
@given(
    array=ARRAYS,
    chunks=ANY,
    axis=ANY,
    ddof=ANY,
    keepdims=ANY,
    method=st.sampled_from(
        ["sum", "mean", "std", "var", "min", "max", "argmax", "any", "prod", "count_nonzero"]
    ),
)
def test_from_numpy_and_reductions(
    array: np.ndarray, chunks: Any, axis: Any, ddof: Any, keepdims: Any, method: str
) -> None:
    x = _call(oc.from_numpy, array, chunks=chunks)
    if x is None:
        x = oc.from_numpy(array)
    kwargs: dict[str, Any] = {"axis": axis, "progress": False}
    if method in ("std", "var"):
        kwargs["ddof"] = ddof
    if method not in ("argmax", "count_nonzero"):
        kwargs["keepdims"] = keepdims
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # empty slices, ddof >= n: as NumPy
        got = _call(getattr(x, method), **kwargs)
    if got is not None and method == "sum" and axis is None and keepdims is False:
        assert np.array_equal(np.asarray(got), array.sum())
    x.close()


KEYS = st.recursive(
    st.one_of(
        st.integers(-30, 30),
        st.builds(
            slice,
            st.none() | st.integers(-30, 30),
            st.none() | st.integers(-30, 30),
            st.none() | st.integers(-5, 5),
        ),
        st.just(Ellipsis),
        st.none(),
        st.lists(st.integers(-30, 30), max_size=4).map(np.array),
        st.lists(st.booleans(), min_size=0, max_size=24).map(np.array),
        st.floats(),
        st.text(max_size=2),
    ),
    lambda inner: st.lists(inner, max_size=4).map(tuple),
    max_leaves=5,
)


@_examples(150)
@given(key=KEYS, value=st.one_of(st.floats(), st.integers(-5, 5), st.just(np.ones(3)), ANY))
def test_indexing_reads_and_writes(key: Any, value: Any) -> None:
    data = np.arange(24.0).reshape(4, 6)
    x = oc.from_numpy(data, chunks=(3, 4))
    try:
        want = data[key]
    except (IndexError, TypeError, ValueError):
        want = None
    got = _call(x.__getitem__, key)
    if got is not None and want is not None and want.ndim <= 1:
        assert np.array_equal(got, want), key
    _call(x.__setitem__, key, value)
    x.close()


@_examples(150)
@given(
    batch_size=ANY,
    shuffle=st.one_of(ANY, st.sampled_from([True, False, "chunks", "rows", "window"])),
    seed=ANY,
    prefetch=ANY,
    drop_last=ANY,
    rank=ANY,
    world_size=ANY,
    window=ANY,
)
def test_batches_arguments(
    batch_size: Any,
    shuffle: Any,
    seed: Any,
    prefetch: Any,
    drop_last: Any,
    rank: Any,
    world_size: Any,
    window: Any,
) -> None:
    data = np.arange(40.0).reshape(20, 2)

    def epoch() -> int:
        b = oc.batches(
            data, batch_size, shuffle, seed, prefetch, drop_last, rank, world_size, window=window
        )
        rows = 0
        for i, xb in enumerate(b):
            rows += len(xb)
            assert i < 1000, "an epoch of 20 rows that does not end"
        return rows

    rows = _call(epoch)
    if rows is not None:
        assert rows <= 20


@_examples(100)
@given(
    initial_size=ANY,
    max_size=ANY,
    allocation=ANY,
    overallocation=ANY,
    learning=ANY,
    spill=ANY,
    location=ANY,
    on_escape=ANY,
)
def test_workspace_policies(**policies: Any) -> None:
    ws = _call(oc.Workspace, "fuzz", **policies)
    if ws is None:
        return
    try:
        for _ in range(2):
            with ws:
                a = np.ones(1000)
                assert a.sum() == 1000
                del a
    except ALLOWED:
        pass
    finally:
        ws.close()


@_examples(40)
@given(rows=st.one_of(ANY, st.just(np.ones((2, 3))), st.just(np.ones((2, 4))), st.just(np.ones(3))))
def test_append_and_from_batches(tmp_path_factory: pytest.TempPathFactory, rows: Any) -> None:
    with tempfile.TemporaryDirectory() as scratch:
        y = oc.create(Path(scratch) / "y.zarr", (0, 3), "f8", chunks=(4, 3))
        _call(y.append, rows)
        assert oc.open(Path(scratch) / "y.zarr").shape[1:] == (3,)
        _call(oc.from_batches, [rows, rows], Path(scratch) / "b.zarr")
        _call(oc.from_batches, rows, Path(scratch) / "c.zarr")
