"""The chunk loop: bounded memory, Ctrl-C, output chunks whole, fusing (progress reports:
test_progress.py)."""

from __future__ import annotations

import signal
import textwrap
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np
import pytest

import oocarray as oc
from oocarray._compute import _engine, _fuse
from oocarray._compute._engine import Pass, StoreTarget, plan_blocks
from oocarray._compute._nodes import Node
from testkit.children import run_python


def test_blocks_cover_the_array_once_in_order(tmp_path: Path) -> None:
    x = oc.create(tmp_path / "x.zarr", (1000, 30), np.float32, chunks=(64, 16), codec="none")
    work = Pass(x.shape, [], [])
    work.stores.append(_store_of((x * 2)._tree()))
    blocks, workers = plan_blocks(work, None)
    covered = np.zeros(x.shape, np.int8)
    for region in blocks:
        covered[region] += 1
    assert (covered == 1).all()
    assert workers >= 1
    assert all(r[1].start % 16 == 0 for r in blocks)  # blocks are whole chunks across


def test_a_budget_limits_the_workers_and_block_size(tmp_path: Path) -> None:
    x = oc.create(tmp_path / "x.zarr", (1 << 16, 64), np.float64, chunks=(1024, 64), codec="none")
    work = Pass(x.shape, [], [])
    work.stores.append(_store_of((x + 1)._tree()))
    _, unlimited = plan_blocks(work, None)
    blocks, limited = plan_blocks(work, 2 * 1024 * 64 * 8 * 4)
    assert limited <= unlimited and limited == 1
    assert max(r[0].stop - r[0].start for r in blocks) == 1024


def test_reductions_of_one_array_plan_its_blocks_once(tmp_path: Path) -> None:
    """The mean and std of x read one block of x (through two leaves of it): their blocks are
    as large as the mean's alone."""
    x = oc.create(tmp_path / "x.zarr", (1 << 16, 64), np.float32, chunks=(1024, 64), codec="none")
    mean = x.mean(axis=0, compute=False).reduction()
    std = x.std(axis=0, compute=False).reduction()
    alone, _ = plan_blocks(Pass(x.shape, [mean], []), None)
    together, _ = plan_blocks(Pass(x.shape, [mean, std], []), None)
    assert together == alone
    assert len(alone) < (1 << 16) // 1024  # (blocks of several chunks: a real test of size)


def test_workers_that_fill_the_cores_read_on_their_own_threads(tmp_path: Path) -> None:
    """Blocks reduced on as many workers as the reads have cores read on the worker's own
    thread (a read spread over the pool too would put two threads on each core); a pass of
    one block, run on the caller's thread, spreads its reads."""
    from oocarray._compute import _moments
    from oocarray._storage import _pool

    x = oc.from_numpy(np.arange(1 << 16, dtype=np.float64).reshape(-1, 8), chunks=(256, 8))
    seen: list[int] = []
    partial = _moments.Moments.partial

    def recording(self: Any, block: np.ndarray, region: Any) -> Any:
        seen.append(_pool.workers())
        return partial(self, block, region)

    with mock.patch.object(_moments.Moments, "partial", recording):
        with mock.patch.object(_engine, "TARGET_BLOCK_BYTES", 64 << 10):
            many = x.mean(axis=0)
        blocks, seen[:] = list(seen), []
        oc.from_numpy(np.ones((256, 8)), chunks=(256, 8)).mean(axis=0)
    np.testing.assert_array_equal(many, np.arange(1 << 16).reshape(-1, 8).mean(axis=0))
    alone = 1 if _engine._workers() >= _pool.workers() else _pool.workers()
    assert len(blocks) > 2 and set(blocks) == {alone}
    assert seen == [_pool.workers()]


def test_streaming_work_stays_within_the_budget(tmp_path: Path) -> None:
    data = np.random.default_rng(0).random((1 << 15, 64))  # 16 MiB
    x = oc.from_numpy(data, chunks=(512, 64), codec="none")
    with oc.Manager("small", max_bytes="4M") as m:
        mean, std = oc.compute(x.mean(axis=0, compute=False), x.std(axis=0, compute=False))
        normalised = ((x - mean) / std).compute(progress=False)
        assert isinstance(normalised, oc.ChunkedArray)  # 16 MiB does not fit 4 MiB
        peak = m.stats().peak_bytes
    np.testing.assert_allclose(mean, data.mean(axis=0), rtol=1e-12)
    np.testing.assert_allclose(std, data.std(axis=0), rtol=1e-12)
    np.testing.assert_allclose(normalised[...], (data - data.mean(axis=0)) / data.std(axis=0))
    assert peak <= 4 << 20


def test_fused_and_numpy_evaluation_agree(monkeypatch: pytest.MonkeyPatch) -> None:
    data = np.random.default_rng(1).random(100_000).astype(np.float32)
    x = oc.from_numpy(data, chunks=(4096,))
    expressions = [
        lambda v: (v - 1.5) * 2,
        lambda v: np.sqrt(v) + v * v,
        lambda v: np.where(v > 0.5, v, 0),
    ]
    # Fuse whatever numexpr can compute, not only what it computes faster.
    monkeypatch.setattr(_fuse, "_worth_fusing", lambda expr, min_operations: True)
    for make in expressions:
        _fuse.ENABLED = True
        fused = make(x)
        assert _fuse.kernel_for(fused._tree()) is not None
        got = fused.compute(progress=False)
        _fuse.ENABLED = False
        plain = make(x).compute(progress=False)
        _fuse.ENABLED = True
        expected = make(data)
        assert got.dtype == plain.dtype == expected.dtype
        np.testing.assert_allclose(got, expected, rtol=1e-6)
        np.testing.assert_array_equal(plain, expected)


def test_numexpr_runs_where_it_measured_faster() -> None:
    doubles = oc.from_numpy(np.linspace(-2, 2, 10_000), chunks=(1000,))
    singles = oc.from_numpy(np.linspace(-2, 2, 10_000, dtype=np.float32), chunks=(1000,))
    polynomial = ((doubles * 1.5 + 0.5) * doubles - 2) * doubles
    assert _fuse.kernel_for(polynomial._tree()) is not None
    assert _fuse.kernel_for((abs(doubles - 1) * 2 + 1)._tree()) is not None
    assert (
        _fuse.kernel_for((((singles * 1.5 + 0.5) * singles - 2) * singles)._tree()) is None
    )  # 32-bit
    assert _fuse.kernel_for((np.tanh(doubles) * 2 + 1)._tree()) is None  # a transcendental function
    assert _fuse.kernel_for((doubles * 2)._tree()) is None  # one operation
    np.testing.assert_allclose(
        polynomial.compute(progress=False),
        ((np.linspace(-2, 2, 10_000) * 1.5 + 0.5) * np.linspace(-2, 2, 10_000) - 2)
        * np.linspace(-2, 2, 10_000),
    )


def test_types_numexpr_lacks_are_left_to_numpy() -> None:
    x = oc.from_numpy(np.arange(1000, dtype=np.uint8), chunks=(100,))
    expr = (x * 2 + 1) // 3
    assert _fuse.kernel_for(expr._tree()) is None
    np.testing.assert_array_equal(
        expr.compute(progress=False), (np.arange(1000, dtype=np.uint8) * 2 + 1) // 3
    )


# Ctrl-C is synchronised on events, never on time: the signal is sent once a block has
# started, and every block waits until the interrupt has reached the calling thread, so the
# pass can neither finish before it nor depend on how fast this machine is.  The child sets
# Python's default SIGINT handler first: a shell starts a background job (``pytest &``, CI
# runners, nohup) with SIGINT ignored, and the child would inherit that.
CTRL_C = """
import signal, threading
import numpy as np
import oocarray as oc
from oocarray._compute import _engine

_engine.TARGET_BLOCK_BYTES = 1  # a block per chunk: many small blocks
x = oc.from_numpy(np.ones((4096, 256), np.float32), chunks=(16, 256), codec="none")
started, interrupted = threading.Event(), threading.Event()
calls = []

def on_sigint(signum, frame):
    interrupted.set()
    signal.default_int_handler(signum, frame)  # raises KeyboardInterrupt

signal.signal(signal.SIGINT, on_sigint)

def held(block):
    calls.append(1)
    started.set()
    # Held until Ctrl-C reached the caller; 60 s is only a guard against a lost signal.
    if not interrupted.wait(60):
        raise RuntimeError("no Ctrl-C reached the caller")
    return block * 3

def ctrl_c():
    started.wait(60)
    signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)

threading.Thread(target=ctrl_c, daemon=True).start()
try:
    x.map_blocks(held, dtype=np.float32).to_zarr({out!r}, chunks=(16, 256), progress=False)
    print("not interrupted")
except KeyboardInterrupt:
    print("interrupted after", len(calls), "of", len(x) // 16, "blocks")
"""


def test_ctrl_c_stops_promptly_and_leaves_whole_chunks(tmp_path: Path) -> None:
    out = tmp_path / "out.zarr"
    result = run_python(CTRL_C.format(out=str(out)), timeout=300, keep_settings=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("interrupted after"), result.stdout + result.stderr
    # Promptly: no block is started after Ctrl-C; those already handed to the workers (at
    # most two per worker) finish, the rest are dropped.
    started = int(result.stdout.split()[2])
    assert 1 <= started <= 2 * _engine.MAX_WORKERS
    y = oc.open(out)
    rows = y[...]
    written = [bool((rows[i : i + 16] == 3).all()) for i in range(0, 4096, 16)]
    empty = [bool((rows[i : i + 16] == 0).all()) for i in range(0, 4096, 16)]
    assert all(w or e for w, e in zip(written, empty, strict=True)), "a chunk was written in part"
    # The blocks being computed when Ctrl-C came were written whole, and only they.
    assert 1 <= sum(written) <= started


def test_an_interrupted_pass_leaves_no_worker_behind(monkeypatch: pytest.MonkeyPatch) -> None:
    import threading

    monkeypatch.setattr(_engine, "TARGET_BLOCK_BYTES", 1)
    x = oc.from_numpy(np.ones((256, 8)), chunks=(1, 8))
    started, interrupted, over = threading.Event(), threading.Event(), threading.Event()

    def held(block: np.ndarray) -> np.ndarray:
        started.set()
        assert interrupted.wait(60), "no interrupt reached the caller"  # a hang guard only
        return block

    def interrupt(signum: int, frame: object) -> None:
        interrupted.set()
        raise KeyboardInterrupt

    def send() -> None:  # once a block runs, so the pass can neither finish first nor not start
        started.wait(60)
        if not over.is_set():
            signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGINT)

    # Our handler, also where SIGINT is ignored (a background job): Ctrl-C raises as usual.
    previous = signal.signal(signal.SIGINT, interrupt)
    sender = threading.Thread(target=send)
    try:
        sender.start()
        with pytest.raises(KeyboardInterrupt):
            x.map_blocks(held, dtype=np.float64).sum(progress=False)
    finally:
        over.set()
        started.set()  # the pass failed before a block ran: the sender sends nothing
        sender.join()
        signal.signal(signal.SIGINT, previous)
    assert not [t for t in threading.enumerate() if t.name.startswith("oocarray-compute")]


def _store_of(expr: Node) -> StoreTarget:
    return StoreTarget(expr, lambda region, block: None)


def test_a_damaged_chunk_stops_the_pass_with_corrupt_chunk_error(tmp_path: Path) -> None:
    x = oc.create(tmp_path / "x.zarr", (4096, 16), np.float32, chunks=(256, 16), codec="zstd")
    x[...] = np.arange(4096 * 16, dtype=np.float32).reshape(4096, 16)
    chunk = tmp_path / "x.zarr" / "c" / "7" / "0"
    chunk.write_bytes(chunk.read_bytes()[: chunk.stat().st_size // 2])
    with pytest.raises(oc.CorruptChunkError):
        oc.open(tmp_path / "x.zarr").mean(axis=0, progress=False)
    import threading

    assert not [t for t in threading.enumerate() if t.name.startswith("oocarray-compute")]


def test_passes_from_several_threads_at_once() -> None:
    import threading

    data = np.random.default_rng(2).random((20_000, 8))
    x = oc.from_numpy(data, chunks=(500, 8))
    results: list[np.ndarray] = []

    def run() -> None:
        results.append(((x - 0.5) * 2).sum(axis=0, progress=False))

    threads = [threading.Thread(target=run) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(results) == 4
    for got in results:
        np.testing.assert_allclose(got, ((data - 0.5) * 2).sum(axis=0))


def test_first_sharded_write_of_a_process(tmp_path: Path) -> None:
    # zarr-python caches arrays it makes for a shard layout (its Morton order) the first time
    # it writes one: made inside a worker's workspace cycle, they outlive it and must be left
    # alone, not reported as a leak.  A fresh process, so that the cache is empty.
    code = textwrap.dedent(
        f"""
        import numpy as np, oocarray as oc
        data = np.arange(40 * 12, dtype=np.float32).reshape(40, 12)
        out = oc.from_numpy(data, chunks=(10, 12)).to_zarr(
            {str(tmp_path / "s.zarr")!r}, chunks=(10, 12), shards=(20, 12), progress=False
        )
        assert np.array_equal(oc.open({str(tmp_path / "s.zarr")!r})[:], data)
        print("ok")
        """
    )
    result = run_python(code, keep_settings=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"
