"""The feed holds one shuffle window per chunked source: batches spanning two windows still get
every row exactly once, a position behind the loaded window is read again, and the memory a
pass takes is one window and the ring, not two windows."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import oocarray as oc
from oocarray._feed._fill import Filler
from oocarray._feed._plan import Plan
from oocarray._feed._sources import as_source
from oocarray._memory import Manager, Workspace

ROWS = 999  # not a multiple of the chunks, windows or batches below
CHUNK = 32


@pytest.fixture(scope="module")
def stored(tmp_path_factory: pytest.TempPathFactory) -> tuple[oc.ChunkedArray, np.ndarray]:
    """A zstd zarr array whose column 0 is the row number, and the same rows in memory."""
    root = tmp_path_factory.mktemp("window")
    values = np.random.default_rng(3).standard_normal((ROWS, 4)).astype(np.float32)
    values[:, 0] = np.arange(ROWS)
    x = oc.from_batches([values[:400], values[400:]], str(root / "x.zarr"), chunks=(CHUNK, 4))
    return x, values


@settings(max_examples=25, deadline=None)
@given(
    batch_size=st.integers(1, 150),
    window=st.integers(1, 5),
    prefetch=st.integers(0, 3),
    seed=st.integers(0, 2**16),
)
def test_every_row_once_with_batches_across_windows(
    stored: tuple[oc.ChunkedArray, np.ndarray],
    batch_size: int,
    window: int,
    prefetch: int,
    seed: int,
) -> None:
    """Rows equal NumPy's, each once, with labels in memory aligned to the stored rows."""
    x, values = stored
    labels = np.arange(ROWS) * 7
    b = oc.batches(
        (x, labels), batch_size, shuffle="chunks", seed=seed, prefetch=prefetch, window=window
    )
    got = [(xb.copy(), yb.copy()) for xb, yb in b]
    rows = np.concatenate([xb for xb, _ in got])
    ids = rows[:, 0].astype(np.int64)
    np.testing.assert_array_equal(np.sort(ids), np.arange(ROWS))
    np.testing.assert_array_equal(rows, values[ids])
    np.testing.assert_array_equal(np.concatenate([yb for _, yb in got]), ids * 7)


@pytest.mark.parametrize(("world_size", "skip"), [(1, 5), (3, 0), (3, 2)])
def test_ranks_and_resumed_passes_see_each_row_once(
    stored: tuple[oc.ChunkedArray, np.ndarray], world_size: int, skip: int
) -> None:
    """Ranks start mid-window and a resumed pass starts mid-window; together every row once."""
    x, values = stored
    seen = []
    for rank in range(world_size):
        b = oc.batches(x, 37, shuffle="chunks", seed=11, rank=rank, world_size=world_size, window=3)
        first = [batch.copy() for _, batch in zip(range(skip), b, strict=False)]
        again = oc.batches(
            x, 37, shuffle="chunks", seed=11, rank=rank, world_size=world_size, window=3
        )
        again.load_state_dict(b.state_dict())
        seen += first + [batch.copy() for batch in again]
    rows = np.concatenate(seen)
    ids = rows[:, 0].astype(np.int64)
    np.testing.assert_array_equal(np.sort(ids), np.arange(ROWS))
    np.testing.assert_array_equal(rows, values[ids])


def test_a_position_behind_the_loaded_window_is_read_again(
    stored: tuple[oc.ChunkedArray, np.ndarray],
) -> None:
    """Positions asked for out of order still get their rows (the window is read again)."""
    x, values = stored
    plan = Plan(ROWS, CHUNK, "chunks", 2, 5, 0)
    with Manager("fill") as manager:
        workspace = Workspace("fill-read", parent=manager)  # entered by each fill
        try:
            filler = Filler([as_source(x)], plan, manager, workspace)
            expected = np.empty((ROWS, 4), np.float32)
            filler.fill(0, ROWS, [expected])
            out = np.empty((50, 4), np.float32)
            for q0 in (900, 10, 500, 60, 949):  # forwards, back to the first window, forwards
                filler.fill(q0, q0 + 50, [out])
                np.testing.assert_array_equal(out, expected[q0 : q0 + 50])
        finally:
            workspace.close()
    np.testing.assert_array_equal(np.sort(expected[:, 0]), np.arange(ROWS))
    np.testing.assert_array_equal(expected, values[expected[:, 0].astype(np.int64)])


def test_a_pass_holds_one_window_and_the_ring(tmp_path: Path) -> None:
    """Data several times the budget; the pass's peak is one window (8 chunks of 256 KiB) and
    the ring (6 batches of 64 KiB) with some read scratch: well under two windows."""
    x = oc.create(tmp_path / "x.zarr", (16 * 4096, 64), "float32", chunks=(1024, 64))
    for i in range(16):
        x[i * 4096 : (i + 1) * 4096] = i
    window_bytes = 8 * 1024 * 64 * 4  # 2 MiB
    ring_bytes = 6 * 256 * 64 * 4  # 384 KiB
    with oc.Manager("train", max_bytes="4M", spill="fail") as m:
        total = 0.0
        for batch in oc.batches(x, 256, shuffle=True, seed=0, prefetch=4):
            total += float(batch[:, 0].sum())
        peak = m.stats().peak_bytes
    assert total == sum(i * 4096 for i in range(16))
    assert window_bytes + ring_bytes <= peak < 2 * window_bytes, peak


def test_over_budget_raises(tmp_path: Path) -> None:
    """A budget smaller than one window is an error, not a silent overrun."""
    x = oc.create(tmp_path / "x.zarr", (8192, 64), "float32", chunks=(1024, 64))
    x[:] = 1.0
    with (
        oc.Manager("small", max_bytes="1M", spill="fail"),
        pytest.raises(oc.MemoryBudgetError),
    ):
        for _ in oc.batches(x, 256, shuffle=True, seed=0):
            pass
