"""The order of one epoch: which rows, in which order, go to which rank, worker and batch.

An epoch is a sequence of *positions* ``0 .. n_rows - 1``; position ``p`` holds one row of
the sources.  The order is a pure function of ``(mode, seed, epoch)`` and the chunk grid, so
every rank and worker computes the same order without talking to the others:

- ``"none"``: position ``p`` is row ``p``.
- ``"chunks"``: the chunks are permuted; consecutive permuted chunks form *windows* of
  ``window`` chunks; the rows of a window are permuted within it.  A window is read whole
  (its chunks in file order) and its batches are gathered from memory.  Where chunks lie
  in groups stored together (the inner chunks of a shard), the groups are permuted and each
  group's chunks are permuted within it, so consecutive windows read one group: a shard is
  fetched in a few requests, not one per inner chunk.
- ``"full"``: an exact permutation of all rows.

Ranks take contiguous ranges of positions (sizes differ by one row at most), so each reads
about its share of the windows.  Within a rank, positions are cut into batches and workers
take contiguous runs of batches (the first ``batches % workers`` workers one more), so each
worker also reads about its share.  Every position belongs to exactly one rank, worker and
batch: every row is seen exactly once per epoch.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cached_property

import numpy as np

__all__ = ["Plan", "Window", "consumed_per_worker", "worker_batches"]


@dataclass(frozen=True, slots=True)
class Window:
    """Consecutive positions ``start .. start + size`` of an epoch, all from one window.

    ``runs`` are the row ranges ``(a, b)`` of the sources that the window holds, in file
    order: a window buffer holds them one after the other.  ``order`` maps the window's
    positions to indices in that buffer (None: in buffer order).
    """

    start: int
    runs: tuple[tuple[int, int], ...]
    order: np.ndarray | None

    @property
    def size(self) -> int:
        return sum(b - a for a, b in self.runs)

    def rows(self) -> np.ndarray:
        """The source row of each buffer index."""
        return np.concatenate([np.arange(a, b, dtype=np.int64) for a, b in self.runs])


@dataclass(frozen=True)
class Plan:
    """The order of one epoch of ``n_rows`` rows read in chunks of ``chunk_rows`` rows.

    A pure function of its fields: every rank and DataLoader worker makes the same plan.

    Parameters
    ----------
    n_rows
        Rows of the sources.
    chunk_rows
        Rows per chunk of the first chunked source.
    mode
        ``"none"``, ``"chunks"`` or ``"full"`` (the shuffle).
    window_chunks
        Chunks per shuffle window.
    seed, epoch
        What the order is drawn from.
    group_chunks
        Chunks per group stored together along axis 0 (a shard's inner chunks); 1: none.

    Examples
    --------
    >>> from oocarray._feed._plan import Plan
    >>> plan = Plan(n_rows=10, chunk_rows=4, mode="none", window_chunks=2, seed=0, epoch=0)
    >>> (plan.n_chunks, plan.n_windows, plan.rank_range(1, 2))
    (3, 2, (5, 10))
    """

    n_rows: int
    chunk_rows: int
    mode: str  # "none", "chunks" or "full"
    window_chunks: int
    seed: int
    epoch: int
    group_chunks: int = 1

    @property
    def n_chunks(self) -> int:
        """The number of chunks (the last may be short).

        Examples
        --------
        >>> from oocarray._feed._plan import Plan
        >>> Plan(n_rows=10, chunk_rows=4, mode="none", window_chunks=2, seed=0, epoch=0).n_chunks
        3
        """
        return -(-self.n_rows // self.chunk_rows)

    @property
    def n_windows(self) -> int:
        """The number of shuffle windows of ``window_chunks`` chunks (the last may be short).

        Examples
        --------
        >>> from oocarray._feed._plan import Plan
        >>> Plan(n_rows=10, chunk_rows=4, mode="none", window_chunks=2, seed=0, epoch=0).n_windows
        2
        """
        return -(-self.n_chunks // self.window_chunks)

    @cached_property
    def _chunk_order(self) -> np.ndarray:
        """The chunks in epoch order.

        Examples
        --------
        >>> from oocarray._feed._plan import Plan
        >>> plan = Plan(12, 1, "chunks", window_chunks=2, seed=0, epoch=0, group_chunks=4)
        >>> order = plan._chunk_order
        >>> [len(set(order[i : i + 4] // 4)) for i in (0, 4, 8)]  # each 4 chunks from 1 group
        [1, 1, 1]
        >>> sorted(order.tolist()) == list(range(12))
        True
        """
        if self.mode != "chunks":
            return np.arange(self.n_chunks)
        rng = np.random.default_rng([self.seed, self.epoch, 0])
        if self.group_chunks <= 1:
            return rng.permutation(self.n_chunks)
        chunks = np.arange(self.n_chunks)
        group_rank = np.argsort(rng.permutation(-(-self.n_chunks // self.group_chunks)))
        # groups in permuted order, the chunks of each in random order (ties broken at random)
        group_of = group_rank[chunks // self.group_chunks]
        return chunks[np.lexsort((rng.random(self.n_chunks), group_of))]

    @cached_property
    def _window_starts(self) -> list[int]:
        """The first position of every window, and ``n_rows`` last."""
        sizes = np.minimum(self.chunk_rows, self.n_rows - self._chunk_order * self.chunk_rows)
        per_window = np.add.reduceat(sizes, np.arange(0, self.n_chunks, self.window_chunks))
        return [0, *np.cumsum(per_window).tolist()] if self.n_chunks else [0]

    @cached_property
    def permutation(self) -> np.ndarray:
        """``"full"``: the source row of every position.

        Examples
        --------
        >>> from oocarray._feed._plan import Plan
        >>> plan = Plan(n_rows=5, chunk_rows=5, mode="full", window_chunks=1, seed=0, epoch=0)
        >>> sorted(plan.permutation.tolist())
        [0, 1, 2, 3, 4]
        """
        rng = np.random.default_rng([self.seed, self.epoch, 1])
        dtype = np.int32 if self.n_rows < 2**31 else np.int64
        return rng.permutation(np.arange(self.n_rows, dtype=dtype))

    def window_at(self, position: int) -> int:
        """The number of the window holding ``position`` (modes "none" and "chunks").

        Parameters
        ----------
        position
            A position of the epoch, from 0.

        Returns
        -------
        int
            The window's number, from 0.

        Examples
        --------
        >>> from oocarray._feed._plan import Plan
        >>> plan = Plan(n_rows=10, chunk_rows=2, mode="none", window_chunks=2, seed=0, epoch=0)
        >>> [plan.window_at(p) for p in (0, 3, 4, 9)]
        [0, 0, 1, 2]
        """
        return bisect.bisect_right(self._window_starts, position) - 1

    def window(self, number: int) -> Window:
        """Window ``number``: its chunks' row runs in file order and its row order.

        Parameters
        ----------
        number
            The window's number, from 0.

        Returns
        -------
        Window
            Its first position, the row runs ``(a, b)`` it reads, and the order of its rows
            (``None``: in reading order).

        Examples
        --------
        >>> from oocarray._feed._plan import Plan
        >>> plan = Plan(n_rows=10, chunk_rows=2, mode="none", window_chunks=2, seed=0, epoch=0)
        >>> w = plan.window(1)
        >>> (w.start, w.runs, w.order)
        (4, ((4, 8),), None)
        """
        chunks = np.sort(
            self._chunk_order[number * self.window_chunks : (number + 1) * self.window_chunks]
        )
        runs: list[tuple[int, int]] = []
        for c in chunks.tolist():
            a, b = c * self.chunk_rows, min((c + 1) * self.chunk_rows, self.n_rows)
            if runs and runs[-1][1] == a:  # adjacent chunks: one read
                runs[-1] = (runs[-1][0], b)
            else:
                runs.append((a, b))
        start = self._window_starts[number]
        size = self._window_starts[number + 1] - start
        order = None
        if self.mode == "chunks":
            rng = np.random.default_rng([self.seed, self.epoch, 2, number])
            order = rng.permutation(size)
        return Window(start, tuple(runs), order)

    def runs_between(self, q0: int, q1: int) -> Iterator[tuple[int, int]]:
        """The row runs the windows of positions ``[q0, q1)`` read, in reading order (modes
        "none" and "chunks"; "full" reads rows one by one).

        Parameters
        ----------
        q0, q1
            The first position and the position after the last.

        Yields
        ------
        tuple of (int, int)
            Row ranges ``(a, b)`` of the sources.

        Examples
        --------
        >>> from oocarray._feed._plan import Plan
        >>> plan = Plan(n_rows=10, chunk_rows=2, mode="none", window_chunks=2, seed=0, epoch=0)
        >>> list(plan.runs_between(3, 6))
        [(0, 4), (4, 8)]
        """
        if self.mode == "full" or q1 <= q0:
            return
        for number in range(self.window_at(q0), self.window_at(q1 - 1) + 1):
            yield from self.window(number).runs

    # ---- splits ----

    def rank_range(self, rank: int, world_size: int) -> tuple[int, int]:
        """The positions of ``rank``: contiguous, sizes within one row of each other.

        Parameters
        ----------
        rank, world_size
            This rank, of ``world_size`` ranks.

        Returns
        -------
        tuple of (int, int)
            The first position and the position after the last.

        Examples
        --------
        >>> from oocarray._feed._plan import Plan
        >>> plan = Plan(n_rows=10, chunk_rows=2, mode="none", window_chunks=2, seed=0, epoch=0)
        >>> [plan.rank_range(r, 3) for r in range(3)]
        [(0, 3), (3, 6), (6, 10)]
        """
        return rank * self.n_rows // world_size, (rank + 1) * self.n_rows // world_size


def batch_count(rows: int, batch_size: int, drop_last: bool) -> int:
    return rows // batch_size if drop_last else -(-rows // batch_size)


def worker_batches(batches: int, worker: int, workers: int) -> tuple[int, int]:
    """The run ``[first, stop)`` of a rank's batches that ``worker`` of ``workers`` makes: runs
    in worker order, the first ``batches % workers`` workers one batch more."""
    base, extra = divmod(batches, workers)
    first = worker * base + min(worker, extra)
    return first, first + base + (worker < extra)


def consumed_per_worker(batches: int, workers: int, consumed: int) -> tuple[list[int], int]:
    """How many of each worker's batches are among the first ``consumed`` a torch DataLoader
    yields, and whose turn is next: the DataLoader takes one batch from each worker in turn,
    skipping workers that are done."""
    counts = [b - a for a, b in (worker_batches(batches, w, workers) for w in range(workers))]
    done = [0] * workers
    turn = 0
    for _ in range(min(consumed, batches)):
        while done[turn] == counts[turn]:
            turn = (turn + 1) % workers
        done[turn] += 1
        turn = (turn + 1) % workers
    return done, turn
