"""The scatter pass's groups of source chunks, and the threads that run a pass's blocks."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import zarr
from hypothesis import given, settings
from hypothesis import strategies as st

import oocarray as oc
from oocarray._compute._rechunk._resume import MARKER
from oocarray._compute._rechunk._threads import Outcome, run_blocks


def _source(path, values, chunks):
    x = oc.create(path, values.shape, values.dtype, chunks=chunks)
    x[...] = values
    return x


@settings(max_examples=20, deadline=None)
@given(
    shape=st.tuples(st.integers(5, 40), st.integers(1, 9), st.integers(1, 9)),
    source_rows=st.integers(1, 3),
    target=st.tuples(st.sampled_from([-1, 7, 16]), st.integers(1, 4), st.integers(1, 4)),
    dtype=st.sampled_from(["f4", "i2", "f8"]),
    budget=st.sampled_from(["64K", "256K", "1M"]),
)
def test_grouped_scatter_equals_input(tmp_path_factory, shape, source_rows, target, dtype, budget):
    tmp = tmp_path_factory.mktemp("g")
    values = (np.arange(int(np.prod(shape))) % 251).astype(dtype).reshape(shape)
    x = _source(tmp / "src.zarr", values, (source_rows, *shape[1:]))
    plan = oc.rechunk(x, target, max_mem=budget, strategy="scatter", dry_run=True)
    group = plan.passes[0].block
    # whole source chunks, never past the array
    assert all(g % c == 0 or g == n for g, c, n in zip(group, x.chunks, shape, strict=True))
    y = oc.rechunk(x, target, tmp / "out.zarr", max_mem=budget, strategy="scatter", progress=False)
    np.testing.assert_array_equal(y[...], values)
    assert MARKER not in zarr.open_array(tmp / "out.zarr", mode="r").attrs


def test_small_source_chunks_are_read_in_groups_within_the_budget(tmp_path):
    values = np.random.default_rng(1).random((256, 32, 32)).astype("f4")  # 1 MiB
    x = _source(tmp_path / "src.zarr", values, (1, 32, 32))
    plan = oc.rechunk(x, (-1, 8, 8), max_mem="512K", strategy="scatter", dry_run=True)
    assert plan.passes[0].block[0] > 1 and plan.passes[0].block[1:] == (32, 32)
    assert plan.peak_bytes <= 512 << 10
    with oc.Manager(max_bytes="512K") as m:
        y = oc.rechunk(x, (-1, 8, 8), tmp_path / "out.zarr", strategy="scatter", progress=False)
        assert m.stats().peak_bytes <= 512 << 10
    np.testing.assert_array_equal(y[...], values)


def test_a_scatter_resumes_under_another_budget(tmp_path):
    values = np.arange(64 * 16, dtype="i4").reshape(64, 16)
    x = _source(tmp_path / "src.zarr", values, (1, 16))
    out = tmp_path / "out.zarr"
    oc.rechunk(x, (64, 4), out, max_mem="1M", strategy="scatter", progress=False)
    # As a run killed after its first target block leaves it (marked here by a sentinel).
    z = zarr.open_array(out, mode="r+")
    z[:, :4] = -1
    identity = {"source": str(x.path), "chunks": [64, 4], "strategy": "scatter", "block": [1, 16]}
    z.attrs[MARKER] = {**identity, "done": [[0, 1]]}
    # The rerun's budget makes other groups of source chunks: the target blocks are the same.
    y = oc.rechunk(x, (64, 4), out, max_mem="8K", strategy="scatter", progress=False)
    result = y[...]
    assert (result[:, :4] == -1).all()
    np.testing.assert_array_equal(result[:, 4:], values[:, 4:])


def test_run_blocks_runs_every_item_and_follow_up_once():
    seen: list[tuple[str, int]] = []
    lock = threading.Lock()

    def work(item: tuple[str, int]) -> Outcome[tuple[str, int]]:
        with lock:
            seen.append(item)
        kind, number = item
        return ([("after", number)] if kind == "item" else []), 1

    items = [("item", i) for i in range(50)]
    run_blocks(items, work, 3, total=100, initial=0, desc="t", progress=False)
    assert sorted(seen) == sorted(items + [("after", i) for i in range(50)])


def test_run_blocks_raises_a_workers_error_after_the_running_blocks_finish():
    started = threading.Event()
    release = threading.Event()
    finished: list[int] = []

    def work(item: int) -> Outcome[int]:
        if item == 0:
            started.set()
            release.wait()  # still running while the other thread fails
            finished.append(item)
            return [], 1
        started.wait()
        release.set()
        raise RuntimeError("block failed")

    with pytest.raises(RuntimeError, match="block failed"):
        run_blocks(iter(range(100)), work, 2, total=100, initial=0, desc="t", progress=False)
    assert finished == [0]  # the running block finished; no more were started after 1


def test_a_scatter_into_many_small_blocks_copies_in_steps(tmp_path):
    # A source chunk (64 KiB) cut into 4096 target blocks of 16 bytes: its copy into the
    # scatter buffer is made a few rows of blocks at a time.
    values = np.arange(4 * 64 * 64, dtype="f4").reshape(4, 64, 64)
    x = _source(tmp_path / "src.zarr", values, (4, 64, 64))
    out = tmp_path / "out.zarr"
    y = oc.rechunk(x, (4, 1, 1), out, max_mem="1M", strategy="scatter", progress=False)
    np.testing.assert_array_equal(y[...], values)


def test_a_group_of_whole_chunks_is_decoded_into_a_stack_then_placed(tmp_path, monkeypatch):
    from oocarray._storage._zarr._store import ZarrStore

    # series -> time: a group is several (16, 4, 4) chunks side by side, each strided in it.
    values = np.random.default_rng(3).random((16, 32, 32)).astype("f4")
    x = _source(tmp_path / "src.zarr", values, (16, 4, 4))
    plan = oc.rechunk(x, (1, 32, 32), max_mem="1M", strategy="scatter", dry_run=True)
    group = plan.passes[0].block
    assert not plan.passes[0].stream_reads and group[1:] != (4, 4)
    outs: list[tuple[int, ...]] = []
    read_into = ZarrStore.read_into

    def recording(self, pieces, out):
        outs.append(out.shape)
        return read_into(self, pieces, out)

    monkeypatch.setattr(ZarrStore, "read_into", recording)
    with oc.Manager(max_bytes="1M") as m:
        y = oc.rechunk(x, (1, 32, 32), tmp_path / "out.zarr", strategy="scatter", progress=False)
        assert m.stats().peak_bytes <= 1 << 20
    np.testing.assert_array_equal(y[...], values)
    per_group = (group[1] // 4) * (group[2] // 4)
    assert (16 * per_group, 4, 4) in outs  # the chunks stacked, each one contiguous
