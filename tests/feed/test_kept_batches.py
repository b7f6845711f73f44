"""Kept batches are never overwritten (issue 21, item 2): whatever holds a batch (a list, a
tuple in a list, a dict, a view, a tensor, a DataFrame, a traceback), the ring never refills
its buffer while it is reachable, for one source and several, every ``prefetch``, ``.torch()``
with and without DataLoader workers, and across ``state_dict()`` resumes.  A state machine
drives keep/drop/break/raise/save/load/new-epoch against a model of every held batch."""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from itertools import islice
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

import oocarray as oc

try:
    import torch
    from torch.utils.data import DataLoader
except ImportError:  # optional: the test extras install it on x86_64 only
    torch = None  # type: ignore[assignment]

needs_torch = pytest.mark.skipif(torch is None, reason="needs torch")


def _numpy(value: Any) -> np.ndarray:
    """A tensor's values as an array (the same memory), or the array."""
    if torch is not None and isinstance(value, torch.Tensor):
        return value.numpy()  # type: ignore[no-any-return]
    return np.asarray(value)


def _chunked(path: Path, n: int, chunk: int) -> oc.ChunkedArray:
    """A zarr array of ``n`` rows whose column 0 is the row number."""
    values = np.zeros((n, 3), np.float32)
    values[:, 0] = np.arange(n)
    values[:, 1] = -np.arange(n)
    return oc.from_batches([values], path, chunks=(chunk, 3))


@pytest.fixture(scope="module")
def x10k(tmp_path_factory: pytest.TempPathFactory) -> oc.ChunkedArray:
    return _chunked(tmp_path_factory.mktemp("kept") / "x.zarr", 10_000, 1000)


def _ids(batch: Any) -> np.ndarray:
    """The row numbers in a batch (an array or tensor whose column 0 is the row number)."""
    return _numpy(batch)[:, 0].astype(np.int64)


# ---- the reproductions of the issue


@pytest.mark.parametrize("prefetch", [0, 1, 2, 5])
def test_a_list_of_every_batch_is_exact(x10k: oc.ChunkedArray, prefetch: int) -> None:
    kept = list(oc.batches(x10k, batch_size=1000, prefetch=prefetch))
    assert [int(b[0, 0]) for b in kept] == list(range(0, 10_000, 1000))
    np.testing.assert_array_equal(np.concatenate([_ids(b) for b in kept]), np.arange(10_000))


@pytest.mark.parametrize("shuffle", [True, "full"])
@pytest.mark.parametrize("prefetch", [0, 2])
def test_a_shuffled_list_holds_every_row_once(shuffle: bool | str, prefetch: int) -> None:
    rows = np.arange(50_003)
    b = oc.batches(rows, 1000, shuffle=shuffle, seed=0, prefetch=prefetch)
    kept = list(b)
    copies = [batch.copy() for batch in oc.batches(rows, 1000, shuffle=shuffle, seed=0)]
    for got, want in zip(kept, copies, strict=True):
        np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(np.sort(np.concatenate(kept)), rows)


def test_islice_and_map_asarray(x10k: oc.ChunkedArray) -> None:
    first = list(islice(oc.batches(x10k, 1000, prefetch=3), 6))
    arrays = list(map(np.asarray, oc.batches(x10k, 1000, prefetch=3)))
    assert [int(b[0, 0]) for b in first] == list(range(0, 6000, 1000))
    np.testing.assert_array_equal(np.concatenate([_ids(b) for b in arrays]), np.arange(10_000))


@pytest.mark.parametrize("prefetch", [0, 2])
def test_tuples_of_sources_in_a_list_a_dict_and_zip(x10k: oc.ChunkedArray, prefetch: int) -> None:
    labels = np.arange(10_000) * 10
    pairs = list(oc.batches((x10k, labels), 500, shuffle=True, seed=3, prefetch=prefetch))
    by_step = dict(enumerate(oc.batches((x10k, labels), 500, prefetch=prefetch)))
    zipped = list(zip(range(20), oc.batches((labels, x10k), 500, prefetch=prefetch), strict=True))
    for xb, yb in pairs:
        np.testing.assert_array_equal(_ids(xb) * 10, yb)
    np.testing.assert_array_equal(np.sort(np.concatenate([yb for _, yb in pairs])), labels)
    for step, (xb, yb) in by_step.items():
        np.testing.assert_array_equal(_ids(xb), np.arange(step * 500, (step + 1) * 500))
        np.testing.assert_array_equal(yb, _ids(xb) * 10)
    for step, (yb, xb) in zipped:
        np.testing.assert_array_equal(yb, np.arange(step * 500, (step + 1) * 500) * 10)
        np.testing.assert_array_equal(_ids(xb) * 10, yb)


def test_keeping_one_source_of_a_tuple(x10k: oc.ChunkedArray) -> None:
    """Only the kept source's buffer is retired; the other is refilled as usual."""
    labels = np.arange(10_000)
    kept = [yb for _, yb in oc.batches((x10k, labels), 1000, prefetch=1)]
    np.testing.assert_array_equal(np.concatenate(kept), labels)


@needs_torch
@pytest.mark.parametrize("prefetch", [0, 2])
def test_list_of_torch_batches(x10k: oc.ChunkedArray, prefetch: int) -> None:
    tensors = list(oc.batches(x10k, 1000, prefetch=prefetch).torch())
    np.testing.assert_array_equal(np.concatenate([_ids(t) for t in tensors]), np.arange(10_000))
    loaded = list(DataLoader(oc.batches(x10k, 1000, prefetch=prefetch).torch(), batch_size=None))
    np.testing.assert_array_equal(np.concatenate([_ids(t) for t in loaded]), np.arange(10_000))


@needs_torch
@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_dataloader_workers_collecting_every_batch(x10k: oc.ChunkedArray, context: str) -> None:
    ds = oc.batches((x10k, np.arange(10_000)), 1000, shuffle=True, seed=5).torch()
    loader = DataLoader(ds, batch_size=None, num_workers=2, multiprocessing_context=context)
    kept = list(loader)
    for xb, yb in kept:
        np.testing.assert_array_equal(_ids(xb), yb.numpy())
    np.testing.assert_array_equal(
        np.sort(np.concatenate([yb.numpy() for _, yb in kept])), np.arange(10_000)
    )


_MAKERS = [
    lambda batch: batch[::3, :1],  # a strided view
    lambda batch: torch.from_numpy(batch)[10:] if torch else batch[10:],  # a view of a tensor
    lambda batch: pd.DataFrame(batch, copy=False),
    lambda batch: np.frombuffer(memoryview(batch), np.float32).reshape(-1, 3),
    lambda batch: batch.T.T,
]
_ROWS = [
    lambda rows: rows[::3],
    lambda rows: rows[10:],
    lambda rows: rows,
    lambda rows: rows,
    lambda rows: rows,
]


@pytest.mark.parametrize("prefetch", [0, 3])
def test_views_tensors_and_frames_of_batches(x10k: oc.ChunkedArray, prefetch: int) -> None:
    """What is built on a batch keeps its rows, with nothing else referring to the batch."""
    steps = iter(range(100))

    def make(batch: np.ndarray) -> Any:  # through map(): no loop variable refers to the batch
        return _MAKERS[next(steps) % 5](batch)

    held = list(map(make, oc.batches(x10k, 1000, prefetch=prefetch)))
    gc.collect()
    for step, obj in enumerate(held):
        values = obj.to_numpy() if isinstance(obj, pd.DataFrame) else obj
        rows = np.arange(step * 1000, (step + 1) * 1000)
        np.testing.assert_array_equal(_ids(values), _ROWS[step % 5](rows))


def test_the_loop_variable_alone_reuses_the_ring(x10k: oc.ChunkedArray) -> None:
    """The fast path: nothing kept, nothing retired, prefetch + 2 buffers in all."""
    for prefetch in (0, 2):
        it = iter(
            oc.batches((x10k, np.arange(10_000)), 500, shuffle=True, seed=0, prefetch=prefetch)
        )
        addresses = set()
        for xb, _yb in it:
            addresses.add(xb.__array_interface__["data"][0])
            _ = xb[:, 0].sum()  # a temporary view, gone by the next batch
        assert it.escapes == 0
        assert len(addresses) <= prefetch + 2


def test_on_escape_raise_refuses_instead_of_overwriting(x10k: oc.ChunkedArray) -> None:
    with pytest.raises(oc.WorkspaceLeakError, match="still referenced"):
        list(oc.batches(x10k, 1000, on_escape="raise"))
    seen = [oc.detach(b) for b in oc.batches(x10k, 1000, on_escape="raise", prefetch=1)]
    np.testing.assert_array_equal(np.concatenate([_ids(b) for b in seen]), np.arange(10_000))


def test_kept_batches_count_under_the_active_manager(x10k: oc.ChunkedArray) -> None:
    with oc.Manager("train") as m:
        kept = list(oc.batches(x10k, 1000, prefetch=1))
        kept_bytes = sum(b.nbytes for b in kept)
        assert m.stats().current_bytes >= kept_bytes
    del kept


@pytest.mark.parametrize("prefetch", [0, 2])
def test_kept_batches_over_the_budget_end_the_pass_with_an_error(
    tmp_path: Path, prefetch: int
) -> None:
    """Keeping every batch of 1.1 MiB under a 512 KiB budget: MemoryBudgetError when a kept
    buffer cannot be replaced; the pass is over (no hang waiting for the lost buffer, no
    prefetch thread left) and every batch kept so far is exact."""
    x = _chunked(tmp_path / "x.zarr", 100_000, 1000)
    kept: list[np.ndarray] = []
    with oc.Manager("train", max_bytes="512K", spill="fail"):
        it = iter(oc.batches(x, 1000, prefetch=prefetch))
        with pytest.raises(oc.MemoryBudgetError):
            kept.extend(it)  # what it took before the error stays in the list
        assert next(it, None) is None
        assert not any(t.name == "oocarray-batches" for t in threading.enumerate())
        assert len(kept) > 10
        for step, batch in enumerate(kept):
            np.testing.assert_array_equal(_ids(batch), np.arange(step * 1000, (step + 1) * 1000))
        del kept, batch, it


@pytest.mark.parametrize("prefetch", [0, 2])
def test_resume_while_holding_batches(x10k: oc.ChunkedArray, prefetch: int) -> None:
    whole = [_ids(b).copy() for b in oc.batches(x10k, 700, shuffle=True, seed=9)]
    b = oc.batches(x10k, 700, shuffle=True, seed=9, prefetch=prefetch)
    it = iter(b)
    held = [next(it) for _ in range(6)]
    state = b.state_dict()
    again = oc.batches(x10k, 700, shuffle=True, seed=9, prefetch=prefetch)
    again.load_state_dict(state)
    held += list(again)
    held += list(it)  # the first pass goes on too: two rings, neither overwrites the other
    got = [_ids(h) for h in held]
    for g, w in zip(got, whole + whole[6:], strict=True):
        np.testing.assert_array_equal(g, w)


# ---- the state machine


class FeedMachine(RuleBasedStateMachine):
    """Keeps and drops batches (and views, tensors, frames of them) of a feed while it breaks
    out of passes, raises inside them, saves and loads its state and starts new epochs;
    every held batch must always hold the rows the model says."""

    def __init__(self, source: oc.ChunkedArray) -> None:
        super().__init__()
        self.source = source
        self.labels = np.arange(len(source)) * 10
        self.expected: dict[int, list[np.ndarray]] = {}
        self.held: list[tuple[Any, np.ndarray]] = []
        self.it: Iterator[Any] | None = None
        self.current: Any = None  # the loop variable
        self.current_rows: np.ndarray | None = None
        self.errors: list[tuple[BaseException, np.ndarray]] = []
        self.saved: dict[str, Any] | None = None

    @initialize(
        batch_size=st.sampled_from([7, 16, 33, 64]),
        shuffle=st.sampled_from([False, "chunks", "full"]),
        prefetch=st.integers(0, 3),
        pair=st.booleans(),
    )
    def setup(self, batch_size: int, shuffle: bool | str, prefetch: int, pair: bool) -> None:
        self.settings = {"batch_size": batch_size, "shuffle": shuffle, "seed": 1}
        self.prefetch = prefetch
        self.pair = pair
        self.b = self._make(prefetch)
        # The model of the position: the next pass's epoch and batches to skip, and the
        # [epoch, batches handed out] of the last pass started since the last load.
        self.next_epoch, self.skip = 0, 0
        self.running: list[int] | None = None

    def _make(self, prefetch: int) -> oc.Batches:
        sources: Any = (self.source, self.labels) if self.pair else self.source
        return oc.batches(sources, prefetch=prefetch, **self.settings)

    def _rows(self, epoch: int, index: int) -> np.ndarray:
        if epoch not in self.expected:
            reference = oc.batches(self.source, prefetch=0, **self.settings)
            reference.set_epoch(epoch)
            self.expected[epoch] = [_ids(batch).copy() for batch in reference]
        return self.expected[epoch][index]

    # -- passes

    @rule(torch_tensors=st.booleans())
    def start_pass(self, torch_tensors: bool) -> None:
        """A new pass (dropping the one running, as a loop left with break does)."""
        self.it = iter(self.b.torch()) if torch_tensors and torch else iter(self.b)
        self.running = [self.next_epoch, self.skip]
        self.next_epoch, self.skip = self.next_epoch + 1, 0

    @precondition(lambda self: self.it is not None)
    @rule()
    def next_batch(self) -> None:
        assert self.it is not None and self.running is not None
        batch = next(self.it, None)
        if batch is None:
            assert self.running[1] == len(self.b)
            self.it = None
            return
        self.current = batch
        self.current_rows = self._rows(*self.running)
        self.running[1] += 1

    @precondition(lambda self: self.it is not None)
    @rule()
    def next_batch_into_a_list(self) -> None:
        """``held.append(next(it))``: no loop variable, the list holds the only reference."""
        assert self.it is not None and self.running is not None
        if self.running[1] == len(self.b):
            return
        self.held.append((next(self.it), self._rows(*self.running)))
        self.running[1] += 1

    @precondition(lambda self: self.current is not None)
    @rule()
    def forget_the_loop_variable(self) -> None:
        self.current = self.current_rows = None

    @precondition(lambda self: self.it is not None)
    @rule()
    def break_out(self) -> None:
        self.it = None  # the loop variable stays bound

    @precondition(
        lambda self: (
            self.it is not None and self.running is not None and self.running[1] < len(self.b)
        )
    )
    @rule(keep_error=st.booleans())
    def raise_inside_the_loop(self, keep_error: bool) -> None:
        """``for batch in it: raise``; the traceback's frame holds the batch."""
        assert self.it is not None and self.running is not None
        rows = self._rows(*self.running)
        try:
            _loop_and_raise(self.it)
        except _Boom as error:
            if keep_error:
                self.errors.append((error, rows))
        self.running[1] += 1
        self.it = None

    # -- holding

    @precondition(lambda self: self.current is not None)
    @rule(kind=st.sampled_from(["batch", "view", "tensor", "frame", "dict", "asarray"]))
    def keep(self, kind: str) -> None:
        assert self.current_rows is not None
        batch, rows = self.current, self.current_rows
        first = batch[0] if isinstance(batch, tuple) else batch
        if kind == "batch":
            self.held.append((batch, rows))
        elif kind == "view":
            self.held.append((first[1::2], rows[1::2]))
        elif kind == "tensor":
            if torch is None:
                self.held.append((first[:, :1], rows))
            else:
                tensor = torch.from_numpy(_numpy(first))
                self.held.append((tensor[:, :1], rows))
        elif kind == "frame":
            self.held.append((pd.DataFrame(_numpy(first), copy=False), rows))
        elif kind == "dict":
            self.held.append(({"step": batch}, rows))
        else:
            self.held.append((np.asarray(first), rows))

    @precondition(lambda self: bool(self.held))
    @rule(data=st.data())
    def drop(self, data: st.DataObject) -> None:
        self.held.pop(data.draw(st.integers(0, len(self.held) - 1)))

    @precondition(lambda self: bool(self.errors))
    @rule()
    def drop_errors(self) -> None:
        self.errors.clear()

    # -- resuming

    @rule()
    def save(self) -> None:
        self.saved = self.b.state_dict()
        if self.running is not None and self.running[0] == self.next_epoch - 1:
            epoch, done = self.running
            position = (epoch + 1, 0) if done == len(self.b) else (epoch, done)
        else:
            position = (self.next_epoch, self.skip)
        assert (self.saved["epoch"], self.saved["batches"]) == position

    @precondition(lambda self: self.saved is not None)
    @rule(prefetch=st.integers(0, 3))
    def load(self, prefetch: int) -> None:
        """Resume in new batches (the old pass, if any, is dropped)."""
        assert self.saved is not None
        self.b = self._make(prefetch)
        self.b.load_state_dict(self.saved)
        self.it = None
        self.next_epoch, self.skip = self.saved["epoch"], self.saved["batches"]
        self.running = None

    @rule(epoch=st.integers(0, 2))
    def set_epoch(self, epoch: int) -> None:
        self.b.set_epoch(epoch)
        self.next_epoch, self.skip = epoch, 0

    # -- the model

    @invariant()
    def every_held_batch_has_its_rows(self) -> None:
        if self.current is not None:
            self._check(self.current, self.current_rows)
        for obj, rows in self.held:
            self._check(obj, rows)
        for error, rows in self.errors:
            tb = error.__traceback__
            assert tb is not None and tb.tb_next is not None
            self._check(tb.tb_next.tb_frame.f_locals["batch"], rows)

    def _check(self, obj: Any, rows: Any) -> None:
        if isinstance(obj, dict):
            obj = obj["step"]
        if isinstance(obj, tuple):
            xb, yb = obj
            np.testing.assert_array_equal(_numpy(yb), rows * 10)
            obj = xb
        if isinstance(obj, pd.DataFrame):
            obj = obj.to_numpy()
        np.testing.assert_array_equal(_ids(obj), rows)

    def teardown(self) -> None:
        self.it = None
        self.held.clear()
        self.errors.clear()
        self.current = None


class _Boom(Exception):
    pass


def _loop_and_raise(it: Iterator[Any]) -> None:
    for batch in it:  # noqa: B007 (the frame's local is what the test looks at)
        raise _Boom


def test_feed_state_machine(tmp_path: Path) -> None:
    source = _chunked(tmp_path / "x.zarr", 150, 16)
    run_state_machine_as_test(
        lambda: FeedMachine(source),
        settings=settings(
            max_examples=max(40, settings.default.max_examples // 5),
            stateful_step_count=40,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow],
        ),
    )


# ---- the other places that reuse memory handed to user code: compute and map_chunks workers


def test_blocks_kept_by_map_chunks_functions_stay_exact(tmp_path: Path) -> None:
    """A cyclic workspace reuses a block's memory only once the allocator has freed it: the
    inputs and results ``fn`` keeps (in a list, the only reference) are never overwritten."""
    x = _chunked(tmp_path / "x.zarr", 1000, 100)
    kept: list[tuple[np.ndarray, np.ndarray]] = []

    def fn(block: np.ndarray) -> np.ndarray:
        result = block[:, :1] * 2
        kept.append((block[:, 0], result[:, 0]))  # views: their bases stay alive
        return result

    oc.map_chunks(fn, x, out=tmp_path / "y.zarr", workers=2, progress=False)
    assert len(kept) == 10
    for rows, doubled in kept:
        first = int(rows[0])
        np.testing.assert_array_equal(rows, np.arange(first, first + 100))
        np.testing.assert_array_equal(doubled, rows * 2)


def test_blocks_kept_by_compute_functions_stay_exact(tmp_path: Path) -> None:
    x = _chunked(tmp_path / "x.zarr", 4000, 100)
    kept: list[tuple[np.ndarray, np.ndarray]] = []

    def fn(block: np.ndarray) -> np.ndarray:
        result = block + 1
        kept.append((block, result))
        return result

    with oc.Manager("small blocks", max_bytes="256K"):  # a budget splits the pass in blocks
        total = x.map_blocks(fn, dtype=np.float32).sum()
    assert total == x[...].sum() + x.size
    assert len(kept) >= 4  # more blocks than workers: the arenas were used again
    for block, result in kept:
        np.testing.assert_array_equal(result, block + 1)
        rows = block[:, 0].astype(np.int64)
        np.testing.assert_array_equal(rows, np.arange(rows[0], rows[0] + len(rows)))
        np.testing.assert_array_equal(block[:, 1], -block[:, 0])
