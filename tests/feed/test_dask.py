"""map_chunks on a Dask cluster (two worker processes on loopback), worker budgets through
oc.dask.MemoryBudgetPlugin, and the laziness of to_dask / from_dask."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import dask
import dask.array as da
import numpy as np
import pytest

import oocarray as oc
from testkit.clusters import loopback_client

distributed = pytest.importorskip("distributed")

BUDGET = 2 << 20


@pytest.fixture(scope="module")
def client() -> Iterator[distributed.Client]:
    with loopback_client() as c:
        yield c


@pytest.fixture
def x(tmp_path: Path) -> oc.ChunkedArray:
    rng = np.random.default_rng(1)
    array = oc.create(tmp_path / "x.zarr", (2000, 8), "float32", chunks=(250, 8))
    array[...] = rng.standard_normal((2000, 8)).astype(np.float32)
    return array


def features(a: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    centred = a - a.mean(axis=1, keepdims=True)
    return centred * labels[:, None], (labels % 5).astype(np.uint8)


def _chunk_files(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and ".oocarray-map-chunks" not in p.parts
    }


def test_cluster_output_is_byte_identical_to_threads(
    client: distributed.Client, x: oc.ChunkedArray, tmp_path: Path
) -> None:
    labels = np.arange(2000, dtype=np.float32)
    by_threads = oc.map_chunks(
        features, x, labels, out=(tmp_path / "t0.zarr", tmp_path / "t1.zarr"), progress=False
    )
    by_dask = oc.map_chunks(
        features,
        x,
        labels,
        out=(tmp_path / "d0.zarr", tmp_path / "d1.zarr"),
        engine="dask",
        client=client,
        progress=False,
    )
    for t, d in zip(by_threads, by_dask, strict=True):
        assert (t.shape, t.dtype, t.chunks) == (d.shape, d.dtype, d.chunks)
        np.testing.assert_array_equal(t[...], d[...])
        assert _chunk_files(Path(t.path)) == _chunk_files(Path(d.path))
    np.testing.assert_array_equal(by_dask[1][...], np.arange(2000) % 5)


def allocate_past_budget(a: np.ndarray) -> np.ndarray:
    """Holds six block-sized temporaries at once (3 MiB for a 512 KiB block), more than the
    worker's 2 MiB budget, so the worker's manager must move some to disk."""
    parts = [a * k for k in range(1, 7)]
    total = parts[0].copy()
    for part in parts[1:]:
        total += part
    return total[:, :4]


def test_a_worker_under_a_budget_smaller_than_its_share_completes(
    client: distributed.Client, tmp_path: Path
) -> None:
    data = np.arange(16384 * 64, dtype=np.float64).reshape(16384, 64) % 97  # 8 MiB: 4 per worker
    x = oc.create(tmp_path / "big.zarr", data.shape, data.dtype, chunks=(1024, 64))
    x[...] = data
    client.register_plugin(oc.dask.MemoryBudgetPlugin(max_bytes=BUDGET, spill="evict"))
    try:
        y = oc.map_chunks(
            allocate_past_budget, x, out=tmp_path / "y.zarr", engine="dask", client=client
        )
        stats = oc.dask.budget_stats(client)
    finally:
        client.unregister_worker_plugin("oocarray-memory-budget")
    np.testing.assert_array_equal(y[...], data[:, :4] * 21)
    assert len(stats) == 2
    for s in stats.values():
        assert s is not None and s.max_bytes == BUDGET
        assert s.spills > 0 and s.spill_moved_bytes > 0  # arrays went to disk, not over budget
        assert s.peak_bytes <= BUDGET < s.total_bytes
    assert set(oc.dask.budget_stats(client).values()) == {None}  # plugin gone, manager closed


def record_and_fail_once(a: np.ndarray, calls: np.ndarray) -> np.ndarray:
    """Records its block in a file per call (workers are other processes) and fails on the
    block starting at row 500 the first time."""
    root = Path(str(calls[0]))
    block = int(a[0, 0])
    (root / f"{block}-{uuid.uuid4().hex}").touch()
    flag = root / "failed"
    if block == 500 and not flag.exists():
        flag.touch()
        raise RuntimeError("interrupted")
    return a * 2


def test_an_interrupted_cluster_run_resumes(client: distributed.Client, tmp_path: Path) -> None:
    data = np.repeat(np.arange(1000.0)[:, None], 3, axis=1)  # row i holds i
    x = oc.from_numpy(data, chunks=(100, 3))
    calls_dir = tmp_path / "calls"
    calls_dir.mkdir()
    where = np.full(1000, str(calls_dir))
    out = tmp_path / "y.zarr"
    kwargs = {"out": out, "engine": "dask", "client": client, "progress": False}
    with pytest.raises(RuntimeError, match="interrupted"):
        oc.map_chunks(record_and_fail_once, x, where, dtype=np.float64, row_shape=(3,), **kwargs)
    # The tasks out when block 5 failed have finished: what is marked is settled.
    done = {int(n) for n in os.listdir(out / ".oocarray-map-chunks" / "done")}
    assert 5 not in done
    for name in os.listdir(calls_dir):
        if name != "failed":
            os.unlink(calls_dir / name)
    y = oc.map_chunks(record_and_fail_once, x, where, **kwargs)
    again = sorted(int(n.split("-")[0]) // 100 for n in os.listdir(calls_dir) if n != "failed")
    assert again == sorted(set(range(10)) - done)
    np.testing.assert_array_equal(y[...], data * 2)


def test_without_a_client_a_local_cluster_is_started_and_closed(tmp_path: Path) -> None:
    a = np.arange(3000.0).reshape(1000, 3)
    y = oc.map_chunks(
        np.negative,
        a,
        out=tmp_path / "y.zarr",
        block_rows=250,
        engine="dask",
        workers=1,
        worker_max_bytes="64M",
        progress=False,
    )
    np.testing.assert_array_equal(y[...], -a)


def test_the_dask_module_and_argument_errors(client: distributed.Client, tmp_path: Path) -> None:
    import oocarray.dask

    assert oc.dask is oocarray.dask
    np.testing.assert_array_equal(oc.dask.budgeted(np.ones)(2), [1.0, 1.0])
    assert oc.dask.worker_manager() is None  # not in a worker
    with pytest.raises(ValueError, match="size"):
        oc.dask.MemoryBudgetPlugin(max_bytes="lots")
    with pytest.raises(ValueError, match="spill"):
        oc.dask.MemoryBudgetPlugin(max_bytes="1G", spill="swap")
    a = np.ones((10, 2))
    with pytest.raises(ValueError, match="register oocarray"):
        oc.map_chunks(np.negative, a, out=tmp_path / "y.zarr", engine="dask", client=client,
                      worker_max_bytes="1G")  # fmt: skip
    with pytest.raises(ValueError, match="workers="):
        oc.map_chunks(np.negative, a, out=tmp_path / "y.zarr", engine="dask", client=client,
                      workers=2)  # fmt: skip


def test_to_dask_is_lazy_and_from_dask_computes_each_chunk_once(x: oc.ChunkedArray) -> None:
    expected = x[...].sum(axis=0) * 2
    x.chunk_reads = 0
    d = (x.to_dask() * 2).sum(axis=0)
    assert x.chunk_reads == 0  # building the graph reads nothing
    np.testing.assert_allclose(d.compute(), expected, rtol=1e-5)
    assert x.chunk_reads == 8  # then each chunk once

    calls: list[int] = []

    def count(block: np.ndarray) -> np.ndarray:
        calls.append(len(block))
        return block + 1

    source = da.ones((1000, 4), chunks=(100, 4)).map_blocks(count, dtype=np.float64)
    made = len(calls)  # dask may call it on an empty block for its metadata
    t = oc.from_dask(source)
    assert calls[made:].count(100) == 10 and len(calls) - made == 10
    np.testing.assert_array_equal(t[...], 2.0)


def test_to_dask_and_from_dask_run_on_the_cluster(
    client: distributed.Client, x: oc.ChunkedArray
) -> None:
    # Chunked arrays in a graph pickle by path: each worker reopens the store and reads (or,
    # for from_dask's temporary target, writes) the chunks itself.
    expected = x[...]
    with distributed.get_task_stream(client) as tasks:
        total = x.to_dask().sum().compute(scheduler=client)
    assert tasks.data  # the graph ran on the workers
    np.testing.assert_allclose(total, expected.sum(), rtol=1e-4)
    t = oc.from_numpy(expected, chunks=(500, 8))  # a temporary: same machine, so by path too
    np.testing.assert_array_equal(t.to_dask().max(axis=0).compute(scheduler=client),
                                  expected.max(axis=0))  # fmt: skip

    d = (x.to_dask() - 1) * 2
    with dask.config.set(scheduler=client), distributed.get_task_stream(client) as tasks:
        y = oc.from_dask(d)
    assert tasks.data
    np.testing.assert_array_equal(y[...], (expected - 1) * 2)
    assert y.chunks == x.chunks
