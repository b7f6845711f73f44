"""oc.batches: every row once per epoch in every mode and split, determinism, resume, the
ring's escape checks, bounded memory."""

from __future__ import annotations

import gc
import threading
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import oocarray as oc
from oocarray._feed._plan import Plan, batch_count, consumed_per_worker, worker_batches

N = 1003  # rows: not a multiple of the chunks or of any batch size used


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> tuple[oc.ChunkedArray, np.ndarray]:
    """A zarr array whose column 0 is the row number, chunks of 64 rows, and labels."""
    root = tmp_path_factory.mktemp("batches")
    values = np.random.default_rng(0).standard_normal((N, 5)).astype(np.float32)
    values[:, 0] = np.arange(N)
    x = oc.from_batches([values[:500], values[500:]], str(root / "x.zarr"), chunks=(64, 5))
    return x, np.arange(N) * 10


def _ids(batch: np.ndarray) -> np.ndarray:
    return batch[:, 0].astype(np.int64)


def _epoch(b: oc.Batches) -> list[np.ndarray]:
    return [_ids(batch).copy() for batch in b]


@pytest.mark.parametrize("shuffle", [False, "chunks", True, "full"])
@pytest.mark.parametrize(
    ("batch_size", "drop_last"), [(1, False), (100, False), (100, True), (2000, False)]
)
@pytest.mark.parametrize("prefetch", [0, 3])
def test_every_row_once_per_epoch(
    data: tuple[oc.ChunkedArray, np.ndarray],
    shuffle: bool | str,
    batch_size: int,
    drop_last: bool,
    prefetch: int,
) -> None:
    x, labels = data
    b = oc.batches(
        (x, labels), batch_size, shuffle=shuffle, seed=5, prefetch=prefetch, drop_last=drop_last
    )
    seen = []
    sizes = []
    for xb, yb in b:
        assert xb.dtype == np.float32 and xb.shape[1:] == (5,)
        np.testing.assert_array_equal(_ids(xb) * 10, yb)  # aligned rows of both sources
        seen.append(_ids(xb).copy())
        sizes.append(len(xb))
    rows = np.concatenate(seen)
    assert len(sizes) == len(b)
    if drop_last:
        assert all(s == batch_size for s in sizes)
        assert len(rows) == N // batch_size * batch_size
        assert len(np.unique(rows)) == len(rows)
    else:
        assert all(s == batch_size for s in sizes[:-1])
        np.testing.assert_array_equal(np.sort(rows), np.arange(N))
    if shuffle is False:
        np.testing.assert_array_equal(rows, np.arange(len(rows)))


@pytest.mark.parametrize("shuffle", [False, "chunks", "full"])
def test_sources_of_every_kind(tmp_path: Path, shuffle: bool | str) -> None:
    values = np.arange(300 * 3, dtype=np.float64).reshape(300, 3)
    np.save(tmp_path / "a.npy", values)
    mm = np.lib.format.open_memmap(tmp_path / "b.npy", mode="w+", dtype=np.int32, shape=(300,))
    mm[:] = np.arange(300)
    sources = (values, oc.open(tmp_path / "a.npy"), mm, oc.from_numpy(values, chunks=(32, 3)))
    for a, npy, m, chunked in oc.batches(sources, 64, shuffle=shuffle, seed=1):
        np.testing.assert_array_equal(a, npy)
        np.testing.assert_array_equal(a[:, 0] // 3, m)
        np.testing.assert_array_equal(a, chunked)


def test_single_source_yields_arrays_and_rows_may_be_nd(tmp_path: Path) -> None:
    images = np.arange(40 * 2 * 3).reshape(40, 2, 3)
    out = [b.copy() for b in oc.batches(images, 16)]
    assert isinstance(out[0], np.ndarray)
    assert [b.shape for b in out] == [(16, 2, 3), (16, 2, 3), (8, 2, 3)]
    np.testing.assert_array_equal(np.concatenate(out), images)


@pytest.mark.parametrize("shuffle", [False, "chunks", "full"])
@pytest.mark.parametrize("world_size", [2, 3])
def test_ranks_share_every_row_once(
    data: tuple[oc.ChunkedArray, np.ndarray], shuffle: bool | str, world_size: int
) -> None:
    x, _ = data
    shares = []
    for rank in range(world_size):
        b = oc.batches(x, 64, shuffle=shuffle, seed=9, rank=rank, world_size=world_size)
        shares.append(np.concatenate(_epoch(b)))
    sizes = [len(s) for s in shares]
    assert max(sizes) - min(sizes) <= 1
    np.testing.assert_array_equal(np.sort(np.concatenate(shares)), np.arange(N))


def test_order_is_deterministic_per_seed_and_epoch(
    data: tuple[oc.ChunkedArray, np.ndarray],
) -> None:
    x, _ = data
    b = oc.batches(x, 100, shuffle=True, seed=3)
    epoch0, epoch1 = np.concatenate(_epoch(b)), np.concatenate(_epoch(b))
    assert b.epoch == 2
    assert not np.array_equal(epoch0, epoch1)
    again = oc.batches(x, 100, shuffle=True, seed=3, prefetch=0)
    np.testing.assert_array_equal(np.concatenate(_epoch(again)), epoch0)
    again.set_epoch(1)
    np.testing.assert_array_equal(np.concatenate(_epoch(again)), epoch1)
    other = oc.batches(x, 100, shuffle=True, seed=4)
    assert not np.array_equal(np.concatenate(_epoch(other)), epoch0)


def test_chunks_mode_reads_whole_chunks_and_shuffles_within_windows(
    data: tuple[oc.ChunkedArray, np.ndarray],
) -> None:
    x, _ = data
    rows = np.concatenate(_epoch(oc.batches(x, 50, shuffle="chunks", seed=0, window=1)))
    chunk_of = rows // 64
    # With windows of one chunk, each chunk's rows come together, in a shuffled order.
    runs = np.flatnonzero(np.diff(chunk_of)) + 1
    assert len(runs) + 1 == -(-N // 64)
    assert not np.array_equal(chunk_of, np.sort(chunk_of))
    first = rows[: runs[0]]
    assert not np.array_equal(first, np.sort(first))
    wide = np.concatenate(_epoch(oc.batches(x, 50, shuffle="chunks", seed=0, window=4)))
    # Windows of 4 chunks: the first 256 positions hold 4 whole chunks, mixed.
    assert len(np.unique(wide[:256] // 64)) == 4
    assert len(np.unique(wide[:64] // 64)) > 1


@pytest.mark.parametrize("shuffle", [False, "chunks", "full"])
@pytest.mark.parametrize("stop_after", [0, 3, 10])
def test_resume_mid_epoch(
    data: tuple[oc.ChunkedArray, np.ndarray], shuffle: bool | str, stop_after: int
) -> None:
    x, _ = data
    whole = _epoch(oc.batches(x, 100, shuffle=shuffle, seed=2))
    b = oc.batches(x, 100, shuffle=shuffle, seed=2)
    it = iter(b)
    for _ in range(stop_after):
        next(it)
    state = b.state_dict()
    assert (state["epoch"], state["batches"]) == (0, stop_after)
    del it
    fresh = oc.batches(x, 100, shuffle=shuffle, seed=2)
    fresh.load_state_dict(state)
    rest = _epoch(fresh)
    assert len(rest) == len(whole) - stop_after
    for got, want in zip(rest, whole[stop_after:], strict=True):
        np.testing.assert_array_equal(got, want)
    assert fresh.state_dict()["epoch"] == 1 and fresh.state_dict()["batches"] == 0


def test_state_with_a_drawn_seed_resumes_the_same_order(
    data: tuple[oc.ChunkedArray, np.ndarray],
) -> None:
    x, _ = data
    b = oc.batches(x, 100, shuffle=True)
    whole = _epoch(b)
    b.set_epoch(0)
    state = b.state_dict()
    other = oc.batches(x, 100, shuffle=True)
    other.load_state_dict(state)
    for got, want in zip(_epoch(other), whole, strict=True):
        np.testing.assert_array_equal(got, want)


def test_state_from_other_settings_is_refused(data: tuple[oc.ChunkedArray, np.ndarray]) -> None:
    x, _ = data
    state = oc.batches(x, 100, shuffle=True, seed=1).state_dict()
    with pytest.raises(ValueError, match="batch_size=100"):
        oc.batches(x, 50, shuffle=True, seed=1).load_state_dict(state)


def test_a_kept_batch_is_never_overwritten(data: tuple[oc.ChunkedArray, np.ndarray]) -> None:
    x, _ = data
    kept = []
    copies = []
    it = iter(oc.batches(x, 64, shuffle=True, seed=0, prefetch=2))
    for batch in it:
        kept.append(batch)  # a second reference: the ring must not reuse this buffer
        copies.append(batch.copy())
    # Each retired when its slot came up for refilling; the last two were never due.
    assert it.escapes == len(kept) - 1
    for k, c in zip(kept, copies, strict=True):
        np.testing.assert_array_equal(k, c)


def test_a_kept_view_is_detected(data: tuple[oc.ChunkedArray, np.ndarray]) -> None:
    x, _ = data
    views, copies = [], []
    for batch in oc.batches(x, 64, prefetch=1):
        views.append(batch[:3])
        copies.append(batch[:3].copy())
    for v, c in zip(views, copies, strict=True):
        np.testing.assert_array_equal(v, c)


def test_the_plain_loop_reuses_the_ring(data: tuple[oc.ChunkedArray, np.ndarray]) -> None:
    x, labels = data
    it = iter(oc.batches((x, labels), 64, shuffle=True, seed=0))
    addresses = set()
    for xb, _yb in it:
        addresses.add(xb.__array_interface__["data"][0])
    assert it.escapes == 0
    assert len(addresses) <= 4  # prefetch + 2 buffers


def test_on_escape_raise(data: tuple[oc.ChunkedArray, np.ndarray]) -> None:
    x, _ = data
    kept = []
    it = iter(oc.batches(x, 64, on_escape="raise"))
    kept.append(next(it))
    next(it)  # the first batch's slot is checked only when the third is asked for
    with pytest.raises(oc.WorkspaceLeakError, match="still referenced"):
        next(it)
    np.testing.assert_array_equal(_ids(kept[0]), np.arange(64))  # and it was left alone


def test_detach_keeps_a_batch_even_with_raise(data: tuple[oc.ChunkedArray, np.ndarray]) -> None:
    x, _ = data
    kept = []
    for batch in oc.batches(x, 64, on_escape="raise", shuffle=True, seed=1):
        kept.append(oc.detach(batch))
    rows = np.concatenate([_ids(k) for k in kept])
    np.testing.assert_array_equal(np.sort(rows), np.arange(N))


def test_breaking_out_stops_the_prefetch_thread(data: tuple[oc.ChunkedArray, np.ndarray]) -> None:
    x, _ = data

    def prefetching() -> int:
        return sum(t.name == "oocarray-batches" for t in threading.enumerate())

    for i, _batch in enumerate(oc.batches(x, 16, prefetch=4)):
        assert prefetching() == 1
        if i == 2:
            break
    gc.collect()
    assert prefetching() == 0


@pytest.mark.parametrize("prefetch", [0, 2])
def test_errors_of_a_fill_reach_the_loop_and_end_the_pass(tmp_path: Path, prefetch: int) -> None:
    x = oc.create(tmp_path / "x.zarr", (256, 4), "float32", chunks=(64, 4))
    x[:] = 1.0
    (tmp_path / "x.zarr" / "c" / "2" / "0").write_bytes(b"not zstd")
    it = iter(oc.batches(oc.open(tmp_path / "x.zarr"), 32, prefetch=prefetch))
    with pytest.raises(oc.CorruptChunkError):
        list(it)
    assert next(it, None) is None  # over, not waiting for a buffer the failed fill held


def test_memory_is_bounded(tmp_path: Path) -> None:
    """A 32 MiB array through batches of 64 KiB under a 12 MiB budget: the ring, two windows
    of 8 chunks of 64 KiB and the read scratch."""
    x = oc.create(tmp_path / "x.zarr", (8 * 4096, 256), "float32", chunks=(64, 256))
    for i in range(8):
        x[i * 4096 : (i + 1) * 4096] = i
    with oc.Manager("train", max_bytes="12M", spill="fail") as m:
        total = 0.0
        for batch in oc.batches(x, 64, shuffle=True, seed=0, prefetch=4):
            total += float(batch[:, 0].sum())
        peak = m.stats().peak_bytes
    assert total == sum(i * 4096 for i in range(8))
    assert peak < 4 << 20, peak


def test_empty_sources(tmp_path: Path) -> None:
    b = oc.batches(np.zeros((0, 3)), 4, shuffle=True, seed=0)
    assert len(b) == 0
    assert list(b) == []


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"sources": (np.zeros(3), np.zeros(4))}, ValueError, "same number of rows"),
        ({"sources": ()}, ValueError, "at least one source"),
        ({"sources": [[1, 2]]}, TypeError, "np.ndarray"),
        ({"sources": np.float64(1.0)}, TypeError, "np.ndarray"),
        ({"sources": np.array(1.0)}, ValueError, "0-d"),
        ({"batch_size": 0}, ValueError, "batch_size"),
        ({"shuffle": "rows"}, ValueError, "shuffle"),
        ({"rank": 2, "world_size": 2}, ValueError, "rank"),
        ({"shuffle": True, "world_size": 2}, ValueError, "seed="),
        ({"prefetch": -1}, ValueError, "prefetch"),
        ({"on_escape": "ignore"}, ValueError, "on_escape"),
    ],
)
def test_errors(kwargs: dict[str, object], error: type[Exception], match: str) -> None:
    args: dict[str, object] = {"sources": np.zeros(8), "batch_size": 2} | kwargs
    with pytest.raises(error, match=match):
        oc.batches(**args)  # type: ignore[arg-type]


def test_batches_pickle_by_path(data: tuple[oc.ChunkedArray, np.ndarray]) -> None:
    import pickle

    x, labels = data
    b = oc.batches((x, labels), 100, shuffle=True, seed=8)
    blob = pickle.dumps(b)
    assert len(blob) < 20_000  # the chunked array travels by path, not by value
    copy = pickle.loads(blob)
    for (a, la), (c, lc) in zip(b, copy, strict=True):
        np.testing.assert_array_equal(a, c)
        np.testing.assert_array_equal(la, lc)


@settings(max_examples=60, deadline=None)
@given(
    n_rows=st.integers(0, 300),
    chunk_rows=st.integers(1, 40),
    window=st.integers(1, 4),
    batch_size=st.integers(1, 50),
    world_size=st.integers(1, 3),
    workers=st.integers(1, 3),
    drop_last=st.booleans(),
    mode=st.sampled_from(["none", "chunks", "full"]),
    group=st.integers(1, 5),
)
def test_plan_splits_cover_every_position_once(
    n_rows: int,
    chunk_rows: int,
    window: int,
    batch_size: int,
    world_size: int,
    workers: int,
    drop_last: bool,
    mode: str,
    group: int,
) -> None:
    plan = Plan(n_rows, chunk_rows, mode, window, 7, 1, group)
    seen: list[int] = []
    for rank in range(world_size):
        lo, hi = plan.rank_range(rank, world_size)
        count = batch_count(hi - lo, batch_size, drop_last)
        covered = 0
        for w in range(workers):
            first, stop = worker_batches(count, w, workers)
            covered += stop - first
            for k in range(first, stop):
                seen.extend(range(lo + k * batch_size, min(lo + (k + 1) * batch_size, hi)))
        assert covered == count
    if not drop_last:
        assert sorted(seen) == list(range(n_rows))
    assert len(set(seen)) == len(seen)
    # Windows tile the positions, and each holds its chunks' rows once.
    if mode != "full" and n_rows:
        rows: list[int] = []
        for number in range(plan.n_windows):
            w = plan.window(number)
            assert w.start == len(rows)
            assert plan.window_at(w.start) == plan.window_at(w.start + w.size - 1) == number
            order = np.arange(w.size) if w.order is None else w.order
            rows.extend(w.rows()[order].tolist())
        assert sorted(rows) == list(range(n_rows))
    consumed, turn = consumed_per_worker(batch_count(n_rows, batch_size, drop_last), workers, 5)
    assert sum(consumed) == min(5, batch_count(n_rows, batch_size, drop_last))
    assert 0 <= turn < workers


def test_a_sharded_array_is_shuffled_shard_by_shard(tmp_path: Path) -> None:
    """Shards in random order, their inner chunks in random order within them: consecutive
    windows read one shard (few requests to an object store), every row once."""
    values = np.arange(4000, dtype=np.float32).reshape(-1, 1) * np.ones(3, np.float32)
    x = oc.create(
        str(tmp_path / "s.zarr"), values.shape, "float32", chunks=(50, 3), shards=(500, 3)
    )
    x[...] = values
    rows = np.concatenate(_epoch(oc.batches(x, 100, shuffle="chunks", seed=3, window=5)))
    np.testing.assert_array_equal(np.sort(rows), np.arange(4000))
    shard_of = rows // 500
    # Each shard's 500 rows come together (two windows of 5 chunks each), shards shuffled.
    assert [len(np.unique(shard_of[i : i + 500])) for i in range(0, 4000, 500)] == [1] * 8
    assert not np.array_equal(shard_of, np.sort(shard_of))
    # Within a shard, chunks are drawn at random: a window is not 5 neighbouring chunks.
    windows = [np.unique(rows[i : i + 250] // 50) for i in range(0, 4000, 250)]
    assert any(np.any(np.diff(w) > 1) for w in windows)
    # Unsharded arrays keep the plain chunk permutation (windows from any shard-sized span).
    y = oc.from_numpy(values, chunks=(50, 3))
    plain = np.concatenate(_epoch(oc.batches(y, 100, shuffle="chunks", seed=3, window=5)))
    assert any(len(np.unique(plain[i : i + 500] // 500)) > 1 for i in range(0, 4000, 500))
