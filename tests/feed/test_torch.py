"""Batches.torch(): tensors without copies, every row once per epoch over DataLoader workers
(fork, forkserver, spawn) and ranks, resume, escapes."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import oocarray as oc

torch = pytest.importorskip("torch")
from torch.utils.data import DataLoader  # noqa: E402

N = 203


@pytest.fixture(scope="module")
def x(tmp_path_factory: pytest.TempPathFactory) -> oc.ChunkedArray:
    values = np.zeros((N, 3), np.float32)
    values[:, 0] = np.arange(N)
    values[:, 1] = np.arange(N) * 2
    return oc.from_batches([values], tmp_path_factory.mktemp("torch") / "x.zarr", chunks=(16, 3))


def _fork(workers: int) -> dict[str, str]:
    return {"multiprocessing_context": "fork"} if workers else {}


def _rows(loader: DataLoader) -> list[np.ndarray]:  # type: ignore[type-arg]
    out = []
    for batch in loader:
        xb, yb = batch
        assert isinstance(xb, torch.Tensor) and isinstance(yb, torch.Tensor)
        np.testing.assert_array_equal(xb[:, 0].numpy().astype(np.int64), yb.numpy())
        out.append(yb.numpy().copy())
    return out


def test_tensors_without_copies_in_the_main_process(x: oc.ChunkedArray) -> None:
    ds = oc.batches(x, 50, prefetch=0).torch()
    assert len(ds) == 5
    seen, addresses = [], set()
    for t in DataLoader(ds, batch_size=None):
        assert isinstance(t, torch.Tensor) and t.dtype == torch.float32
        addresses.add(t.data_ptr())
        seen.append(t[:, 0].numpy().copy())
    np.testing.assert_array_equal(np.concatenate(seen), np.arange(N))
    assert len(addresses) == 2  # prefetch=0: two ring buffers, every batch a view of one


@pytest.mark.parametrize("shuffle", [False, "chunks", "full"])
@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("world_size", [1, 2])
def test_every_row_once_over_workers_and_ranks(
    x: oc.ChunkedArray, shuffle: bool | str, workers: int, world_size: int
) -> None:
    labels = np.arange(N)
    shares = []
    for rank in range(world_size):
        b = oc.batches((x, labels), 20, shuffle=shuffle, seed=4, rank=rank, world_size=world_size)
        loader = DataLoader(b.torch(), batch_size=None, num_workers=workers, **_fork(workers))
        got = _rows(loader)
        assert len(got) == len(b)
        shares.append(np.concatenate(got))
    np.testing.assert_array_equal(np.sort(np.concatenate(shares)), labels)


@pytest.mark.parametrize("context", ["fork", "forkserver", "spawn"])
def test_worker_start_methods(x: oc.ChunkedArray, context: str, tmp_path: Path) -> None:
    """Chunked arrays and memory maps reopen by path in the workers; arrays travel by value."""
    np.save(tmp_path / "labels.npy", np.arange(N))
    labels = np.load(tmp_path / "labels.npy", mmap_mode="r")
    weights = np.arange(N) * 0.5
    ds = oc.batches((x, labels, weights), 32, shuffle=True, seed=1).torch()
    loader = DataLoader(ds, batch_size=None, num_workers=2, multiprocessing_context=context)
    seen = []
    for xb, yb, wb in loader:
        np.testing.assert_array_equal(xb[:, 0].numpy(), yb.numpy())
        np.testing.assert_array_equal(yb.numpy() * 0.5, wb.numpy())
        seen.append(yb.numpy().copy())
    np.testing.assert_array_equal(np.sort(np.concatenate(seen)), np.arange(N))


def test_the_loader_order_is_the_same_for_a_seed(x: oc.ChunkedArray) -> None:
    def epoch(epoch: int) -> np.ndarray:
        ds = oc.batches((x, np.arange(N)), 16, shuffle=True, seed=3).torch()
        ds.set_epoch(epoch)
        loader = DataLoader(ds, batch_size=None, num_workers=2, multiprocessing_context="fork")
        return np.concatenate(_rows(loader))

    first = epoch(0)
    np.testing.assert_array_equal(epoch(0), first)
    assert not np.array_equal(epoch(1), first)


@pytest.mark.filterwarnings("ignore:This DataLoader will create 3 worker processes")
@pytest.mark.parametrize("workers", [0, 2, 3])  # 13 batches: 3 workers get 5, 4 and 4
@pytest.mark.parametrize("skip", [1, 5, 12])
def test_resume_mid_epoch_in_the_loader_order(x: oc.ChunkedArray, workers: int, skip: int) -> None:
    def loader(state: dict[str, object] | None) -> DataLoader:  # type: ignore[type-arg]
        ds = oc.batches((x, np.arange(N)), 16, shuffle="chunks", seed=7).torch()
        if state is not None:
            ds.load_state_dict(state)
        return DataLoader(ds, batch_size=None, num_workers=workers, **_fork(workers))

    whole = _rows(loader(None))
    rest = _rows(loader({"epoch": 0, "batches": skip}))
    assert len(rest) == len(whole) - skip
    for got, want in zip(rest, whole[skip:], strict=True):
        np.testing.assert_array_equal(got, want)


def test_kept_tensors_are_never_overwritten(x: oc.ChunkedArray) -> None:
    kept, copies = [], []
    for t in DataLoader(oc.batches(x, 16, prefetch=2).torch(), batch_size=None):
        kept.append(t[:, 0])  # a view of the tensor keeps it referenced
        copies.append(t[:, 0].clone())
    for k, c in zip(kept, copies, strict=True):
        assert torch.equal(k, c)


def test_without_torch(x: oc.ChunkedArray, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(sys.modules, "oocarray._feed._torch", raising=False)
    monkeypatch.setitem(sys.modules, "torch", None)
    with pytest.raises(ImportError, match="needs PyTorch"):
        oc.batches(x, 16).torch()
