"""``oc.batches``: an epoch of batches of aligned rows from one or several sources.

See :mod:`._plan` for the order of an epoch and its splits, :mod:`._iterate` for the
prefetching ring of buffers, and :mod:`._torch` for the torch dataset.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from oocarray._feed._iterate import BatchIterator
from oocarray._feed._plan import (
    Plan,
    batch_count,
    consumed_per_worker,
    worker_batches,
)
from oocarray._feed._sources import Source, as_source, chunk_groups, virtual_chunk_rows

__all__ = ["Batches", "batches"]

_SHUFFLES = {False: "none", None: "none", "none": "none", True: "chunks", "chunks": "chunks"}
_SHUFFLES_FULL = {"full": "full"}


def _positive(name: str, value: object, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}, got {value!r}")
    return int(value)


def batches(
    sources: Any,
    batch_size: int,
    shuffle: bool | str = False,
    seed: int | None = None,
    prefetch: int = 2,
    drop_last: bool = False,
    rank: int = 0,
    world_size: int = 1,
    *,
    window: int = 8,
    on_escape: str = "pin",
) -> Batches:
    """Batches of rows of one source, or of aligned rows of several, for training and ETL.

    Background prefetching fills a ring of ``prefetch + 2`` batch buffers while you work on
    the current batch.  **Nothing you can still reach is ever refilled**: batches are views of
    the ring's buffers, and a buffer is refilled only when nothing refers to it any more (no
    batch, view, tensor or DataFrame built on it, in a loop variable, a list, a dict or
    anywhere else), checked when it comes up for refilling, one batch after the next is asked
    for.  A plain loop that keeps nothing reuses the ring; a batch you keep is left to you and
    the ring takes a new buffer, so kept batches cost memory (counted in the active manager,
    like any array) and nothing else.  ``on_escape="raise"`` makes keeping one an error
    instead (``WorkspaceLeakError``), for loops meant to run in constant memory; a batch kept
    with ``oc.detach(batch)`` or copied is fine then.

    Every row comes exactly once per epoch.  The order depends only on ``seed``, the epoch
    and the chunk grid, so it is the same in every process and on every rerun.

    Parameters
    ----------
    sources
        A ``ChunkedArray``, ``np.ndarray`` or ``np.memmap`` (batches are arrays), or a tuple
        or list of them with the same number of rows (batches are tuples of arrays, row ``i``
        of each from row ``i`` of each source).
    batch_size
        Rows per batch; the last batch of an epoch (of a rank) may have fewer.
    shuffle
        ``False``: rows in order.  ``True`` or ``"chunks"``: the chunks of the first chunked
        source are permuted and rows are shuffled within windows of ``window`` chunks, so whole
        chunks are read, each once per epoch (sources without chunks use chunks of about
        1 MiB; of a sharded zarr array, the shards are permuted and the inner chunks within
        each, so that a shard is read in few requests).  ``"full"``: an exact permutation of
        all rows; every batch gathers its rows wherever they are, which costs a chunk read
        per row touched for compressed chunks (use it with arrays in memory, memory maps, or
        sharded zarr with small chunks).
    seed
        The shuffle's seed; with None one is drawn now (and kept: see
        :meth:`Batches.state_dict`).
        Required when shuffling over several ranks, so that they agree on the order.
    prefetch
        Batches made ahead by a background thread; 0 makes each batch when asked for.
    drop_last
        Leave out the last batch (of each rank) when it is not full.
    rank, world_size
        Distributed training: rank ``rank`` of ``world_size`` gets a contiguous share of the
        epoch's positions (shares differ by at most one row; together they are every row).
    window
        Chunks per shuffle window (``shuffle="chunks"``): more shuffles better and takes more
        memory (one window of every chunked source is held).
    on_escape
        ``"pin"`` (default): a batch still referenced when its buffer comes up for refilling
        is left to you (the iterator's ``escapes`` counts them).  ``"raise"``: that raises
        ``WorkspaceLeakError`` (batches kept through ``oc.detach`` excepted).  Either way no
        batch anyone can reach is overwritten.

    Returns
    -------
    Batches
        Iterable, once per epoch (the epoch advances with each iteration; see
        :meth:`Batches.set_epoch`); ``len()`` is the number of batches per epoch.

    Examples
    --------
    >>> import numpy as np, oocarray as oc
    >>> x = np.arange(10.0).reshape(5, 2)
    >>> y = np.arange(5)
    >>> for xb, yb in oc.batches((x, y), batch_size=2):
    ...     print(xb[:, 0], yb)
    [0. 2.] [0 1]
    [4. 6.] [2 3]
    [8.] [4]
    >>> b = oc.batches(y, batch_size=2, shuffle="full", seed=0)
    >>> len(b), sorted(int(v) for batch in b for v in batch)
    (3, [0, 1, 2, 3, 4])
    """
    return Batches(
        sources,
        batch_size,
        shuffle=shuffle,
        seed=seed,
        prefetch=prefetch,
        drop_last=drop_last,
        rank=rank,
        world_size=world_size,
        window=window,
        on_escape=on_escape,
    )


class Batches:
    """The batches of :func:`batches`: iterate once per epoch.

    Picklable: chunked arrays and memory maps travel by path and are reopened read-only,
    arrays in memory by value.

    Parameters
    ----------
    sources, batch_size, shuffle, seed, prefetch, drop_last, rank, world_size, window, on_escape
        As for :func:`batches`, which makes these objects.

    Raises
    ------
    ValueError
        Sources of different lengths, or a setting out of its range.

    Examples
    --------
    >>> import numpy as np, oocarray as oc
    >>> b = oc.Batches(np.arange(5), batch_size=2)
    >>> (len(b), [batch.tolist() for batch in b])
    (3, [[0, 1], [2, 3], [4]])
    """

    def __init__(
        self,
        sources: Any,
        batch_size: int,
        *,
        shuffle: bool | str = False,
        seed: int | None = None,
        prefetch: int = 2,
        drop_last: bool = False,
        rank: int = 0,
        world_size: int = 1,
        window: int = 8,
        on_escape: str = "pin",
    ) -> None:
        self._single = not isinstance(sources, (tuple, list))
        given: Sequence[Any] = [sources] if self._single else list(sources)
        if not given:
            raise ValueError("batches needs at least one source, got an empty sequence")
        self._sources: list[Source] = [as_source(s) for s in given]
        lengths = {s.n_rows for s in self._sources}
        if len(lengths) > 1:
            raise ValueError(
                "the sources of batches must have the same number of rows (row i of each "
                f"goes into one batch), got {[s.n_rows for s in self._sources]}"
            )
        self._n_rows = self._sources[0].n_rows
        self._batch_size = _positive("batch_size", batch_size)
        if isinstance(shuffle, str) and shuffle in _SHUFFLES_FULL:
            self._mode = "full"
        elif isinstance(shuffle, (bool, str)) and shuffle in _SHUFFLES:
            self._mode = _SHUFFLES[shuffle]
        else:
            raise ValueError(f"shuffle must be False, True, 'chunks' or 'full', got {shuffle!r}")
        self._world_size = _positive("world_size", world_size)
        self._rank = _positive("rank", rank, 0)
        if self._rank >= self._world_size:
            raise ValueError(f"rank must be in [0, world_size={world_size}), got {rank}")
        if seed is None:
            if self._mode != "none" and self._world_size > 1:
                raise ValueError(
                    "shuffling over several ranks needs seed=: every rank must draw the same "
                    "order, or rows would be missed and repeated"
                )
            seed = int(np.random.SeedSequence().entropy) % 2**63  # type: ignore[arg-type]
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
            raise ValueError(f"seed must be a non-negative int or None, got {seed!r}")
        self._seed = int(seed)
        self._prefetch = _positive("prefetch", prefetch, 0)
        self._drop_last = bool(drop_last)
        self._window = _positive("window", window)
        if on_escape not in ("pin", "raise"):
            raise ValueError(f"on_escape must be 'pin' or 'raise', got {on_escape!r}")
        self._on_escape = on_escape
        self._chunk_rows = virtual_chunk_rows(self._sources)
        self._group_chunks = chunk_groups(self._sources)
        self._next_epoch = 0
        self._skip = 0  # batches of the next epoch already consumed (load_state_dict)
        self._running: list[int] | None = None  # [epoch, batches handed out] of a pass

    # ---- description ----

    @property
    def batch_size(self) -> int:
        """Rows per batch (the last batch of an epoch may have fewer).

        Examples
        --------
        >>> import numpy as np, oocarray as oc
        >>> oc.batches(np.arange(5), batch_size=2).batch_size
        2
        """
        return self._batch_size

    @property
    def shuffle(self) -> str:
        """How rows are shuffled: ``"none"``, ``"chunks"`` or ``"full"``.

        Examples
        --------
        >>> import numpy as np, oocarray as oc
        >>> (oc.batches(np.arange(5), 2).shuffle, oc.batches(np.arange(5), 2, True).shuffle)
        ('none', 'chunks')
        """
        return self._mode

    @property
    def seed(self) -> int:
        """The shuffle's seed: the one given, or the one drawn when none was.

        Examples
        --------
        >>> import numpy as np, oocarray as oc
        >>> oc.batches(np.arange(5), batch_size=2, shuffle=True, seed=7).seed
        7
        """
        return self._seed

    @property
    def epoch(self) -> int:
        """The epoch the next iteration makes.

        Examples
        --------
        >>> import numpy as np, oocarray as oc
        >>> b = oc.batches(np.arange(5), batch_size=2)
        >>> _ = list(b)
        >>> b.epoch
        1
        """
        return self._next_epoch

    def set_epoch(self, epoch: int) -> None:
        """Make the next iteration epoch ``epoch`` (each iteration otherwise advances by one).
        Call it every epoch when a torch DataLoader's workers iterate copies of this object.

        Parameters
        ----------
        epoch
            The epoch number, from 0; with shuffling it decides the order.

        Raises
        ------
        ValueError
            ``epoch`` is negative.

        Examples
        --------
        >>> import numpy as np, oocarray as oc
        >>> b = oc.batches(np.arange(6), batch_size=3, shuffle="full", seed=0)
        >>> first = [batch.tolist() for batch in b]
        >>> b.set_epoch(0)
        >>> [batch.tolist() for batch in b] == first
        True
        """
        self._next_epoch = _positive("epoch", epoch, 0)
        self._skip = 0

    def _rank_rows(self) -> int:
        lo, hi = self._plan(0).rank_range(self._rank, self._world_size)
        return hi - lo

    def __len__(self) -> int:
        """Batches per epoch (of this rank)."""
        return batch_count(self._rank_rows(), self._batch_size, self._drop_last)

    def __repr__(self) -> str:
        return (
            f"<oocarray.Batches {len(self)} batches of {self._batch_size} of {self._n_rows} rows, "
            f"shuffle={self._mode!r}, seed={self._seed}, epoch={self._next_epoch}, "
            f"rank {self._rank} of {self._world_size}>"
        )

    # ---- iteration ----

    def _plan(self, epoch: int) -> Plan:
        return Plan(
            self._n_rows,
            self._chunk_rows,
            self._mode,
            self._window,
            self._seed,
            epoch,
            self._group_chunks,
        )

    def _spans(
        self, plan: Plan, worker: int = 0, workers: int = 1, skip: int = 0
    ) -> list[tuple[int, int]]:
        """The position ranges of this rank's batches that ``worker`` makes, after ``skip``."""
        lo, hi = plan.rank_range(self._rank, self._world_size)
        count = batch_count(hi - lo, self._batch_size, self._drop_last)
        first, stop = worker_batches(count, worker, workers)
        bs = self._batch_size
        return [(lo + k * bs, min(lo + (k + 1) * bs, hi)) for k in range(first + skip, stop)]

    def _start(self) -> tuple[int, int]:
        """The epoch of a new pass and the batches to skip; advances the epoch."""
        epoch, skip = self._next_epoch, self._skip
        self._next_epoch, self._skip = epoch + 1, 0
        return epoch, skip

    def __iter__(self) -> BatchIterator:
        return self._iterate(None)

    def _iterate(self, convert: Any) -> BatchIterator:
        """A pass in this process, through the ring; ``convert`` wraps each array handed out
        (the escape check then watches what it returns)."""
        epoch, skip = self._start()
        running = [epoch, skip]
        self._running = running

        def handed() -> None:
            running[1] += 1

        plan = self._plan(epoch)
        return BatchIterator(
            self._sources,
            plan,
            self._spans(plan, skip=skip),
            batch_size=self._batch_size,
            prefetch=self._prefetch,
            fresh=False,
            single=self._single,
            on_escape=self._on_escape,
            convert=convert,
            on_batch=handed,
        )

    def _worker_iterator(
        self,
        epoch: int,
        skip: int,
        worker: int,
        workers: int,
        convert: Any,
    ) -> BatchIterator:
        """Worker ``worker`` of ``workers``'s batches of an epoch whose first ``skip`` batches
        (in a torch DataLoader's order) were consumed; each batch in new buffers."""
        plan = self._plan(epoch)
        lo, hi = plan.rank_range(self._rank, self._world_size)
        count = batch_count(hi - lo, self._batch_size, self._drop_last)
        done, turn = consumed_per_worker(count, workers, skip)
        # A resumed DataLoader asks its worker 0 first; the batch due next is the one of the
        # worker whose turn it was: worker i plays the part of worker turn + i.
        role = (worker + turn) % workers
        return BatchIterator(
            self._sources,
            plan,
            self._spans(plan, role, workers, done[role]),
            batch_size=self._batch_size,
            prefetch=self._prefetch,
            fresh=True,
            single=self._single,
            on_escape=self._on_escape,
            convert=convert,
        )

    # ---- resuming ----

    def state_dict(self) -> dict[str, Any]:
        """Where the iteration is: the epoch and the batches of it handed out so far (an
        epoch run to its end counts as the next epoch, none handed out), with the seed and
        what the order depends on.  :meth:`load_state_dict` on an object made with the same
        sources and settings resumes there.

        Returns
        -------
        dict
            ``"epoch"``, ``"batches"`` and ``"seed"``, with the settings the order depends on
            (``"shuffle"``, ``"batch_size"``, ``"n_rows"``, ``"rank"``, ``"world_size"``,
            ``"drop_last"``, ``"window"``): plain values, to save with a checkpoint.

        Examples
        --------
        >>> import numpy as np, oocarray as oc
        >>> b = oc.batches(np.arange(10), batch_size=3, shuffle=True, seed=1)
        >>> it = iter(b)
        >>> first = [next(it).tolist() for _ in range(2)]
        >>> state = b.state_dict()
        >>> state["epoch"], state["batches"]
        (0, 2)
        >>> again = oc.batches(np.arange(10), batch_size=3, shuffle=True, seed=1)
        >>> again.load_state_dict(state)
        >>> rest = [batch.tolist() for batch in again]
        >>> sorted(sum(first + rest, []))
        [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]
        """
        if self._running is not None and self._running[0] == self._next_epoch - 1:
            epoch, done = self._running
            if done == len(self):
                epoch, done = epoch + 1, 0
        else:
            epoch, done = self._next_epoch, self._skip
        return {
            "epoch": epoch,
            "batches": done,
            "seed": self._seed,
            "shuffle": self._mode,
            "batch_size": self._batch_size,
            "n_rows": self._n_rows,
            "rank": self._rank,
            "world_size": self._world_size,
            "drop_last": self._drop_last,
            "window": self._window,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from :meth:`state_dict`: the next iteration makes the rest of its epoch.
        A torch DataLoader's workers each skip their share of the ``"batches"`` consumed.

        Parameters
        ----------
        state : dict
            What :meth:`state_dict` returned.

        Raises
        ------
        ValueError
            The state comes from batches with other sources or settings (the order would not
            be the same).

        Examples
        --------
        >>> import numpy as np, oocarray as oc
        >>> b = oc.batches(np.arange(6), batch_size=2)
        >>> b.load_state_dict({"epoch": 3, "batches": 2})
        >>> (b.epoch, [batch.tolist() for batch in b])
        (3, [[4, 5]])
        """
        mine = self.state_dict()
        for key in ("shuffle", "batch_size", "n_rows", "rank", "world_size", "drop_last", "window"):
            if key in state and state[key] != mine[key]:
                raise ValueError(
                    f"the state was saved with {key}={state[key]!r} but these batches have "
                    f"{key}={mine[key]!r}; resume with the settings the state was saved with"
                )
        done = _positive("batches", state.get("batches", 0), 0)
        if done > len(self):
            raise ValueError(f"the state says {done} batches were done of an epoch of {len(self)}")
        self._seed = int(state.get("seed", self._seed))
        self._next_epoch = _positive("epoch", state.get("epoch", 0), 0)
        self._skip = done
        self._running = None

    # ---- torch ----

    def torch(self) -> Any:
        """A ``torch.utils.data.IterableDataset`` of these batches as tensors (no copies).

        Use it with ``DataLoader(ds, batch_size=None, num_workers=...)``: the batches are
        made here, and each worker makes its share of this rank's batches, each row once per
        epoch, with ``fork``, ``forkserver`` or ``spawn`` workers (chunked arrays are reopened
        by path in each worker).  See :class:`oocarray._feed._torch.TorchBatches`.

        Returns
        -------
        TorchBatches
            The dataset, iterating these batches (and advancing their epoch).

        Raises
        ------
        ImportError
            torch is not installed.

        Examples
        --------
        >>> import numpy as np, oocarray as oc
        >>> ds = oc.batches(np.arange(4.0), batch_size=2).torch()
        >>> [t.tolist() for t in ds]
        [[0.0, 1.0], [2.0, 3.0]]
        """
        try:
            from oocarray._feed._torch import TorchBatches
        except ImportError as error:
            raise ImportError(
                "Batches.torch() needs PyTorch: pip install torch (or use the batches as "
                "NumPy arrays directly)"
            ) from error
        return TorchBatches(self)
