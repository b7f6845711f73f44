"""A Dask cluster for tests: two worker processes on loopback, closed by its context."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


@contextmanager
def loopback_client(n_workers: int = 2) -> Iterator[Any]:
    """A ``distributed.Client`` of a ``LocalCluster`` on 127.0.0.1, one thread per worker.

    No dashboard, and the scheduler's HTTP server (which runs anyway) on a free loopback
    port: its default, 8787, may be held by another cluster on the machine.  The client is
    not the default scheduler, so other tests' dask computations stay local.
    """
    import distributed

    cluster = distributed.LocalCluster(  # type: ignore[no-untyped-call]
        n_workers=n_workers,
        threads_per_worker=1,
        processes=True,
        host="127.0.0.1",
        dashboard_address=None,
        scheduler_kwargs={"dashboard_address": "127.0.0.1:0"},
    )
    try:
        with distributed.Client(cluster, set_as_default=False) as client:  # type: ignore[no-untyped-call]
            yield client
    finally:
        cluster.close()
