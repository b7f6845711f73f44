"""The torch dataset of :meth:`Batches.torch`: batches as tensors, sharded over DataLoader
workers and ranks.

Imported only when ``.torch()`` is called: torch is optional.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
from torch.utils.data import IterableDataset, get_worker_info

__all__ = ["TorchBatches"]


class TorchBatches(IterableDataset[Any]):
    """A ``torch.utils.data.IterableDataset`` of the batches of :func:`oocarray.batches`.

    Yields tensors (``torch.from_numpy``, no copy), or tuples of them for several sources.
    Load it with ``DataLoader(ds, batch_size=None, ...)``: the batches are already made.

    - **In the main process** (``num_workers=0``) batches come from the prefetching ring,
      with the same rule as :func:`oocarray.batches`: a ring buffer is refilled only when no
      tensor made from it (nor a view of one, nor anything else built on it) is alive; a
      tensor you keep is left to you and the ring takes a new buffer.  Each iteration
      advances the epoch.
    - **In DataLoader workers** each worker makes a contiguous share of this rank's batches
      (each row once per epoch over all workers), in new buffers (the DataLoader copies them
      into shared memory after they are handed over).  Works with ``fork``, ``forkserver`` and
      ``spawn`` workers: chunked arrays and memory maps are reopened by path in each worker,
      arrays in memory are pickled.  The workers iterate copies of this dataset, so call
      :meth:`set_epoch` before every epoch (as with ``DistributedSampler``).
    - **Ranks**: give ``rank=`` and ``world_size=`` (and ``seed=``) to :func:`oocarray.batches`.

    Parameters
    ----------
    batches : Batches
        The batches to yield (:meth:`oocarray.Batches.torch` makes this dataset).

    Examples
    --------
    >>> import numpy as np, oocarray as oc
    >>> from torch.utils.data import DataLoader
    >>> ds = oc.batches(np.arange(10.0), batch_size=4).torch()
    >>> [t.tolist() for t in DataLoader(ds, batch_size=None)]
    [[0.0, 1.0, 2.0, 3.0], [4.0, 5.0, 6.0, 7.0], [8.0, 9.0]]
    """

    def __init__(self, batches: Any) -> None:
        # An oocarray.Batches (not imported: _batches imports this module when asked).
        super().__init__()
        self.batches = batches

    def __len__(self) -> int:
        """Batches per epoch of this rank (all workers together)."""
        return len(self.batches)

    def set_epoch(self, epoch: int) -> None:
        """Make the next epoch ``epoch``, in this process and in workers started after.

        Parameters
        ----------
        epoch
            The epoch number, from 0.

        Examples
        --------
        >>> import numpy as np, oocarray as oc
        >>> ds = oc.batches(np.arange(4.0), batch_size=2).torch()
        >>> ds.set_epoch(5)
        >>> ds.batches.epoch
        5
        """
        self.batches.set_epoch(epoch)

    def state_dict(self) -> dict[str, Any]:
        """Where the iteration is, as :meth:`oocarray.Batches.state_dict` says.

        With workers, this process does not see the batches: save ``{"epoch": epoch,
        "batches": steps}`` from the training loop instead (steps: batches taken from the
        DataLoader this epoch).

        Returns
        -------
        dict
            The epoch, the batches handed out, the seed and the settings.

        Examples
        --------
        >>> import numpy as np, oocarray as oc
        >>> ds = oc.batches(np.arange(4.0), batch_size=2).torch()
        >>> (ds.state_dict()["epoch"], ds.state_dict()["batches"])
        (0, 0)
        """
        state: dict[str, Any] = self.batches.state_dict()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume: the next epoch skips ``state["batches"]`` batches of the DataLoader's
        order, each worker its own share of them.

        Parameters
        ----------
        state : dict
            What :meth:`state_dict` returned, or ``{"epoch": ..., "batches": ...}``.

        Raises
        ------
        ValueError
            The state comes from batches with other sources or settings.

        Examples
        --------
        >>> import numpy as np, oocarray as oc
        >>> ds = oc.batches(np.arange(4.0), batch_size=2).torch()
        >>> ds.load_state_dict({"epoch": 0, "batches": 1})
        >>> [t.tolist() for t in ds]
        [[2.0, 3.0]]
        """
        self.batches.load_state_dict(state)

    def __iter__(self) -> Iterator[Any]:
        info = get_worker_info()
        batches: Iterator[Any]
        if info is None:
            batches = self.batches._iterate(torch.from_numpy)
        else:
            epoch, skip = self.batches._start()
            batches = self.batches._worker_iterator(
                epoch, skip, info.id, info.num_workers, torch.from_numpy
            )
        return batches
