"""oc.map_chunks with the threads engine: results, several outputs, chunk alignment, resuming
an interrupted run, bounded memory and argument errors."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr

import oocarray as oc

SIDECAR = ".oocarray-map-chunks"


@pytest.fixture
def x(tmp_path: Path) -> oc.ChunkedArray:
    rng = np.random.default_rng(0)
    array = oc.create(tmp_path / "x.zarr", (1000, 6), "float32", chunks=(100, 6))
    array[...] = rng.standard_normal((1000, 6)).astype(np.float32)
    return array


def test_one_output_from_chunked_and_ndarray_inputs(x: oc.ChunkedArray, tmp_path: Path) -> None:
    weights = np.arange(1000, dtype=np.float32)
    y = oc.map_chunks(lambda a, w: a.sum(axis=1) * w, x, weights, out=tmp_path / "y.zarr")
    expected = x[...].sum(axis=1) * weights
    np.testing.assert_array_equal(y[...], expected)
    assert y.shape == (1000,) and y.dtype == np.float32 and y.chunks == (100,)
    # plain zarr: zarr-python reads it, and the finished job left only its record
    np.testing.assert_array_equal(zarr.open_array(str(tmp_path / "y.zarr"))[...], expected)
    assert sorted(os.listdir(tmp_path / "y.zarr" / SIDECAR)) == ["job.json"]
    assert json.loads((tmp_path / "y.zarr" / SIDECAR / "job.json").read_text())["complete"]


def test_tuple_and_dict_outputs_with_given_and_inferred_specs(
    x: oc.ChunkedArray, tmp_path: Path
) -> None:
    def stats(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return a.mean(axis=1), np.stack([a.min(axis=1), a.max(axis=1)], axis=1)

    mean, extremes = oc.map_chunks(
        stats, x, out=(tmp_path / "mean.zarr", tmp_path / "ext.zarr"), dtype=(np.float64, None)
    )
    data = x[...]
    assert mean.dtype == np.float64 and extremes.shape == (1000, 2)
    np.testing.assert_allclose(mean[...], data.mean(axis=1), rtol=1e-6)
    np.testing.assert_array_equal(extremes[...], np.stack([data.min(1), data.max(1)], axis=1))

    both = oc.map_chunks(
        lambda a, b: {"sum": a + b[:, None], "label": (b % 3).astype(np.int8)},
        x,
        np.arange(1000),
        out={"sum": tmp_path / "s.zarr", "label": tmp_path / "l.zarr"},
        row_shape={"sum": 6, "label": ()},
    )
    assert set(both) == {"sum", "label"}
    assert both["label"].dtype == np.int8
    np.testing.assert_array_equal(both["label"][...], np.arange(1000) % 3)
    np.testing.assert_array_equal(both["sum"][...], data + np.arange(1000)[:, None])


def test_existing_chunked_output_and_inputs_chunked_differently(tmp_path: Path) -> None:
    a = oc.from_numpy(np.arange(600.0), chunks=100)
    b = oc.from_numpy(np.arange(600.0) * 2, chunks=200)
    out = oc.create(tmp_path / "o.zarr", (600,), "float64", chunks=(200,))
    calls: list[int] = []

    def add(p: np.ndarray, q: np.ndarray) -> np.ndarray:
        calls.append(len(p))
        return p + q

    result = oc.map_chunks(add, a, b, out=out)
    assert result is out
    np.testing.assert_array_equal(out[...], np.arange(600.0) * 3)
    assert calls == [200, 200, 200]  # blocks of whole chunks of every array

    c = oc.from_numpy(np.arange(600.0), chunks=128)  # lcm(100, 128) is far past both
    with pytest.raises(ValueError, match="chunked differently along axis 0"):
        oc.map_chunks(add, a, c, out=tmp_path / "bad.zarr")
    done = oc.map_chunks(add, a, c, out=tmp_path / "ok.zarr", block_rows=300)
    np.testing.assert_array_equal(done[...], np.arange(600.0) * 2)
    with pytest.raises(ValueError, match="multiple of the outputs' chunk rows"):
        oc.map_chunks(add, a, b, out=out, block_rows=300)


def test_ndarray_inputs_only_and_empty_inputs(tmp_path: Path) -> None:
    a = np.arange(50_000, dtype=np.int64).reshape(10_000, 5)
    y = oc.map_chunks(lambda b: b * 2, a, out=tmp_path / "y.zarr")
    np.testing.assert_array_equal(y[...], a * 2)
    empty = oc.map_chunks(lambda b: b[:, 0], np.empty((0, 3)), out=tmp_path / "e.zarr")
    assert empty.shape == (0,)


def _interrupting(fail_at: int, calls: list[int]) -> Any:
    """fn that records which block it gets and fails once, on block ``fail_at``."""
    failed: list[bool] = []

    def fn(a: np.ndarray) -> np.ndarray:
        calls.append(int(a[0, 0]) // 600)  # block k starts with 600 * k
        if calls[-1] == fail_at and not failed:
            failed.append(True)
            raise RuntimeError("interrupted")
        return a[:, :2] * 2

    return fn


def test_an_interrupted_run_resumes_where_it_stopped(tmp_path: Path) -> None:
    data = np.arange(6000.0).reshape(1000, 6)
    x = oc.from_numpy(data, chunks=(100, 6))
    out = tmp_path / "y.zarr"
    calls: list[int] = []
    fn = _interrupting(4, calls)
    with pytest.raises(RuntimeError, match="interrupted"):
        oc.map_chunks(fn, x, out=out, workers=1)
    # Blocks before the failing one are written and marked; one queued behind it may have
    # run too.  Every mark has its chunk, and blocks without a mark are left as they were.
    done = {int(n) for n in os.listdir(out / SIDECAR / "done")}
    assert {0, 1, 2, 3} <= done <= {0, 1, 2, 3, 5}
    assert calls[:5] == [0, 1, 2, 3, 4]
    partial = oc.open(out)
    for block in range(10):
        rows = slice(block * 100, block * 100 + 100)
        expected = data[rows, :2] * 2 if block in done else 0
        np.testing.assert_array_equal(partial[rows], expected)

    calls.clear()
    y = oc.map_chunks(fn, x, out=out, workers=1)
    assert calls == sorted(set(range(10)) - done)  # only the blocks not done
    np.testing.assert_array_equal(y[...], data[:, :2] * 2)
    assert not (out / SIDECAR / "done").exists()

    calls.clear()
    oc.map_chunks(fn, x, out=out)  # complete: nothing to do
    assert calls == []
    oc.map_chunks(fn, x, out=out, resume=False)
    assert sorted(calls) == list(range(10))


def test_a_different_job_starts_over(tmp_path: Path) -> None:
    x = oc.from_numpy(np.ones((400, 2)), chunks=(100, 2))
    out = tmp_path / "y.zarr"
    oc.map_chunks(lambda a: a[:, 0], x, out=out)
    calls: list[int] = []

    def other(a: np.ndarray) -> np.ndarray:
        calls.append(1)
        return a[:, 1] * 3

    y = oc.map_chunks(other, x, out=out)  # another function: its own job
    assert len(calls) == 4
    np.testing.assert_array_equal(y[...], 3.0)
    z = oc.map_chunks(other, x[...], out=out)  # an ndarray input now: one block of 400 rows
    assert len(calls) == 5
    np.testing.assert_array_equal(z[...], 3.0)


def test_bounded_memory_under_a_budget(tmp_path: Path) -> None:
    x = oc.from_numpy(np.ones((4096, 256)), chunks=(256, 256))  # 8 MiB, 512 KiB blocks
    locations: set[str | None] = set()

    def fn(a: np.ndarray) -> np.ndarray:
        b = np.sqrt(a * 4.0)  # temporaries in the worker's workspace, under the budget
        locations.add(oc.location(b))
        return b.sum(axis=1)

    with oc.Manager("etl", max_bytes="2M") as m:
        y = oc.map_chunks(fn, x, out=tmp_path / "y.zarr")
        stats = m.stats()
    np.testing.assert_array_equal(y[...], 512.0)
    assert stats.peak_bytes <= 2 << 20 < stats.total_bytes  # 8 MiB went through 2 MiB
    assert None not in locations  # every block's arrays were the manager's


def test_errors(x: oc.ChunkedArray, tmp_path: Path) -> None:
    out = tmp_path / "y.zarr"
    with pytest.raises(TypeError, match="at least one input"):
        oc.map_chunks(lambda: None, out=out)
    with pytest.raises(TypeError, match="callable"):
        oc.map_chunks("f", x, out=out)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="same length along axis 0"):
        oc.map_chunks(lambda a, b: a, x, np.ones(5), out=out)
    with pytest.raises(TypeError, match="lazy expression"):
        oc.map_chunks(lambda a: a, x * 2, out=out)
    with pytest.raises(TypeError, match="ChunkedArray or an np"):
        oc.map_chunks(lambda a: a, [1, 2, 3], out=out)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="0-d"):
        oc.map_chunks(lambda a: a, np.array(1.0), out=out)
    with pytest.raises(ValueError, match="engine"):
        oc.map_chunks(lambda a: a, x, out=out, engine="spark")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="engine='dask'"):
        oc.map_chunks(lambda a: a, x, out=out, client=object())
    with pytest.raises(ValueError, match="must have 100 rows"):
        oc.map_chunks(lambda a: a[:5], x, out=out)
    with pytest.raises(TypeError, match="tuple of 2 arrays"):
        oc.map_chunks(lambda a: a, x, out=(tmp_path / "a.zarr", tmp_path / "b.zarr"))
    with pytest.raises(TypeError, match="keys of out"):
        oc.map_chunks(lambda a: {"p": a}, x, out={"q": tmp_path / "q.zarr"})
    with pytest.raises(TypeError, match="a path, an object-store URL or a zarr ChunkedArray"):
        oc.map_chunks(lambda a: a, x, out=3)
    with pytest.raises(oc.ReadOnlyError):
        oc.map_chunks(lambda a: a, x, out=oc.open(x.path))
    np.save(tmp_path / "n.npy", np.zeros((1000, 6), np.float32))
    with pytest.raises(ValueError, match="writes zarr arrays"):
        oc.map_chunks(lambda a: a, x, out=oc.open(tmp_path / "n.npy", mode="r+"))
    wrong = oc.create(tmp_path / "w.zarr", (999, 6), "float32")
    with pytest.raises(ValueError, match="needs 1000 rows"):
        oc.map_chunks(lambda a: a, x, out=wrong)
    rows = oc.create(tmp_path / "r.zarr", (1000, 3), "float32", chunks=(100, 3))
    with pytest.raises(ValueError, match="rows of shape"):
        oc.map_chunks(lambda a: a, x, out=rows)
