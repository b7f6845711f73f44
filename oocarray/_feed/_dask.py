"""The Dask integration: an oocarray budget per worker process, and map_chunks on a cluster.

Managers are activated per thread, and a dask worker runs tasks on threads of its own, so a
worker's budget is a manager the plugin opens in the worker process and that tasks activate
while they run (:func:`budgeted`).  map_chunks' tasks are budgeted this way; each reads its
inputs and writes its output chunks by path in the worker, so only small task descriptions
(and, for ndarray inputs, their blocks, scattered straight to workers) leave the client.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from oocarray._memory import Manager, MemoryStats, configure, parse_size, system

try:
    import distributed
except ImportError as error:  # pragma: no cover - exercised where distributed is missing
    raise ImportError(
        "oocarray.dask and map_chunks(engine='dask') need dask's distributed scheduler: "
        "pip install 'oocarray[dask]' (or pip install distributed)"
    ) from error

__all__ = [
    "MemoryBudgetPlugin",
    "budget_stats",
    "budgeted",
    "cluster_client",
    "run_blocks",
    "run_one",
    "worker_manager",
]

PLUGIN_NAME = "oocarray-memory-budget"


class MemoryBudgetPlugin(distributed.WorkerPlugin):
    """A ``distributed`` worker plugin that gives each worker process an oocarray budget.

    On setup it opens a manager with ``max_bytes`` in the worker process (a child of the
    System manager); tasks wrapped with :func:`budgeted` (map_chunks' are) run with it active,
    so their NumPy allocations count against it and spill to disk past it instead of the
    worker being killed.  Teardown closes it.

    Parameters
    ----------
    max_bytes
        The RAM budget of each worker's tasks, an int or a string such as ``"2G"``.
    spill
        The manager's spill policy (``"mmap"``, ``"evict"`` or ``"fail"``); default:
        inherited (``"mmap"``).
    spill_dir, max_physical_bytes
        When given, :func:`oocarray.configure` them in the worker process.

    Raises
    ------
    ValueError
        ``max_bytes`` is not a size, or ``spill`` not a policy.

    Examples
    --------
    >>> from distributed import Client, LocalCluster
    >>> import oocarray as oc
    >>> client = Client(LocalCluster(n_workers=2, processes=True))  # doctest: +SKIP
    >>> client.register_plugin(oc.dask.MemoryBudgetPlugin(max_bytes="2G"))  # doctest: +SKIP
    >>> oc.dask.budget_stats(client)  # doctest: +SKIP
    {'tcp://127.0.0.1:40613': MemoryStats(name='dask-worker ...', ...), ...}
    """

    name = PLUGIN_NAME

    def __init__(
        self,
        max_bytes: int | str,
        *,
        spill: str | None = None,
        spill_dir: str | None = None,
        max_physical_bytes: int | str | None = None,
    ) -> None:
        self.max_bytes = parse_size(max_bytes)  # refuse a bad size here, not in each worker
        if spill not in (None, "mmap", "evict", "fail"):
            raise ValueError(f"spill must be 'mmap', 'evict', 'fail' or None, got {spill!r}")
        self.spill = spill
        self.spill_dir = spill_dir
        self.max_physical_bytes = max_physical_bytes
        self.manager: Manager | None = None

    def __getstate__(self) -> dict[str, Any]:
        # The plugin travels to workers before setup; a manager never leaves its process.
        return {**self.__dict__, "manager": None}

    def setup(self, worker: Any) -> None:
        """Open the worker's budget manager (``distributed`` calls this in each worker).

        Parameters
        ----------
        worker : distributed.Worker
            The worker; its ``name`` names the manager ``"dask-worker <name>"``.

        Examples
        --------
        >>> from types import SimpleNamespace
        >>> import oocarray as oc
        >>> plugin = oc.dask.MemoryBudgetPlugin(max_bytes="1M")
        >>> plugin.setup(SimpleNamespace(name="w1"))
        >>> (plugin.manager.name, plugin.manager.max_bytes)
        ('dask-worker w1', 1048576)
        >>> plugin.teardown(None)
        """
        settings: dict[str, Any] = {}
        if self.spill_dir is not None:
            settings["spill_dir"] = self.spill_dir
        if self.max_physical_bytes is not None:
            settings["max_physical_bytes"] = self.max_physical_bytes
        if settings:
            configure(**settings)
        self.manager = Manager(
            f"dask-worker {worker.name}",
            parent=system(),
            max_bytes=self.max_bytes,
            spill=self.spill,  # type: ignore[arg-type]
        )

    def teardown(self, worker: Any) -> None:
        """Close the worker's budget manager (``distributed`` calls this when the plugin is
        removed or the worker stops).

        Parameters
        ----------
        worker : distributed.Worker
            The worker.

        Examples
        --------
        >>> from types import SimpleNamespace
        >>> import oocarray as oc
        >>> plugin = oc.dask.MemoryBudgetPlugin(max_bytes="1M")
        >>> plugin.setup(SimpleNamespace(name="w1"))
        >>> manager = plugin.manager
        >>> plugin.teardown(None)
        >>> (manager.closed, plugin.manager)
        (True, None)
        """
        if self.manager is not None:
            self.manager.close()
            self.manager = None


def worker_manager() -> Manager | None:
    """The budget manager of the dask worker this runs in, or None (no plugin, no worker).

    Returns
    -------
    Manager or None
        The manager :class:`~oocarray.dask.MemoryBudgetPlugin` opened in this worker, while
        open.

    Examples
    --------
    >>> import oocarray as oc
    >>> oc.dask.worker_manager() is None  # not in a dask worker
    True
    """
    try:
        worker = distributed.get_worker()
    except ValueError:
        return None
    plugin = worker.plugins.get(PLUGIN_NAME)
    manager = getattr(plugin, "manager", None)
    return manager if isinstance(manager, Manager) and not manager.closed else None


class budgeted:  # lowercase: used like a function decorator
    """Wrap a task function so it runs with its worker's
    :class:`~oocarray.dask.MemoryBudgetPlugin` budget active (plain, where the worker has
    none).  Picklable when the function is.

    Parameters
    ----------
    fn : callable
        The task function; the wrapper calls it with the same arguments.

    Examples
    --------
    >>> import numpy as np, oocarray as oc
    >>> task = oc.dask.budgeted(np.ones)
    >>> task(3)  # outside a worker it is the function itself
    array([1., 1., 1.])
    """

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = fn

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        manager = worker_manager()
        if manager is None:
            return self.fn(*args, **kwargs)
        with manager.activate():
            return self.fn(*args, **kwargs)


def _stats_of(dask_worker: Any) -> MemoryStats | None:
    manager = getattr(dask_worker.plugins.get(PLUGIN_NAME), "manager", None)
    return manager.stats() if isinstance(manager, Manager) else None


def budget_stats(client: Any) -> dict[str, MemoryStats | None]:
    """Each worker's budget manager's :class:`~oocarray.MemoryStats`, by worker address.

    Parameters
    ----------
    client : distributed.Client
        A client of the cluster.

    Returns
    -------
    dict
        Worker address to :class:`~oocarray.MemoryStats`, or to ``None`` where a worker has
        no :class:`~oocarray.dask.MemoryBudgetPlugin`.

    Examples
    --------
    >>> import oocarray as oc
    >>> from distributed import Client, LocalCluster
    >>> cluster = LocalCluster(n_workers=1, processes=False, dashboard_address=None,
    ...     scheduler_kwargs={"dashboard_address": "127.0.0.1:0"})
    >>> client = Client(cluster)
    >>> client.register_plugin(oc.dask.MemoryBudgetPlugin(max_bytes="1G"))  # doctest: +ELLIPSIS
    {...}
    >>> [stats.max_bytes for stats in oc.dask.budget_stats(client).values()]
    [1073741824]
    >>> client.close(); cluster.close()
    """
    return client.run(_stats_of)  # type: ignore[no-any-return]


@contextlib.contextmanager
def cluster_client(
    client: Any, workers: int | None, worker_max_bytes: int | str | None
) -> Iterator[Any]:
    """``client``, or a client of a ``LocalCluster`` started here and closed on exit (with
    ``workers`` processes and a budget of ``worker_max_bytes`` each, when given)."""
    if client is not None:
        if workers is not None:
            raise ValueError("workers= sizes the LocalCluster map_chunks starts; not with client=")
        yield client
        return
    plugin = None if worker_max_bytes is None else MemoryBudgetPlugin(worker_max_bytes)
    cluster = distributed.LocalCluster(  # type: ignore[no-untyped-call]
        n_workers=workers,
        threads_per_worker=None if workers is None else 1,
        processes=True,
        host="127.0.0.1",  # a cluster of this machine: no port open to the network
        dashboard_address=None,
        # No dashboard, and the scheduler's HTTP server (which runs anyway) on a free port:
        # its default, 8787, warns when another cluster holds it.
        scheduler_kwargs={"dashboard_address": "127.0.0.1:0"},
    )
    try:
        with distributed.Client(cluster, set_as_default=False) as own:  # type: ignore[no-untyped-call]
            if plugin is not None:
                own.register_plugin(plugin)
            yield own
    finally:
        cluster.close()


def run_one(client: Any, task: Callable[..., Any], job: Any, blocks: Sequence[np.ndarray]) -> Any:
    """``task(job, *blocks)`` on a worker, under its budget; its (small) result."""
    args = [client.scatter(b, hash=False) for b in blocks]
    return client.submit(budgeted(task), job, *args, pure=False).result()


def run_blocks(
    client: Any,
    task: Callable[..., Any],
    job: Any,
    todo: Sequence[int],
    blocks: Callable[[int], Sequence[np.ndarray]],
    bar: Any,
) -> None:
    """``task(job, index, *blocks(index))`` for every index, as tasks of the cluster.

    A few tasks per worker thread are in flight at a time, so ndarray blocks reach workers as
    they are needed, not all at once.  After an error no task is submitted, the tasks already
    out finish (so every block is written and marked, or not touched, once this returns), and
    the first error is raised here.  Ctrl-C cancels the tasks out and returns at once (a task
    running still finishes its block in the worker)."""
    window = 2 * max(1, sum(client.nthreads().values()))
    token = uuid.uuid4().hex[:12]
    queue = iter(todo)
    in_flight: dict[Any, int] = {}

    def submit(count: int) -> list[Any]:
        futures = []
        for index in [i for _, i in zip(range(count), queue, strict=False)]:
            args = [client.scatter(b, hash=False) for b in blocks(index)]
            future = client.submit(
                budgeted(task), job, index, *args, key=f"oocarray-map-chunks-{token}-{index}"
            )
            in_flight[future] = index
            futures.append(future)
        return futures

    pending = distributed.as_completed(submit(window), loop=client.loop)  # type: ignore[no-untyped-call]
    failure: Exception | None = None
    try:
        for future in pending:
            in_flight.pop(future)
            try:
                future.result()
            except Exception as error:
                failure = failure or error
                continue
            bar.update(1)
            if failure is None:
                pending.update(submit(1))  # type: ignore[no-untyped-call]
    except BaseException:
        client.cancel(list(in_flight))
        raise
    if failure is not None:
        raise failure
