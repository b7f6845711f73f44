"""``oc.serve_metrics()``: memory figures for Prometheus, for long jobs.

prometheus_client is imported only here, when the server starts.  Each scrape reads the
figures then (no background sampling): resident memory, managed and spilled bytes, every open
manager's current, RAM and peak bytes and budget, workspaces' arenas and cycles, spill counts
and the disk used.  The server has a registry of its own, so it does not mix with (or show)
the process's other metrics.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from types import TracebackType
from typing import Any, Self

from oocarray._diagnostics._usage import manager_usage, spill_usage
from oocarray._memory import config
from oocarray._memory._physical import resident_memory

__all__ = ["MetricsServer", "serve_metrics"]


def _prometheus() -> Any:
    try:
        import prometheus_client
        from prometheus_client import core
    except ImportError as error:
        raise ImportError(
            "oc.serve_metrics() needs prometheus_client: pip install prometheus_client "
            "(or pip install 'oocarray[metrics]')"
        ) from error
    return prometheus_client, core


class _Collector:
    """Builds the metric families at each scrape."""

    def __init__(self, core: Any) -> None:
        self._core = core

    def describe(self) -> list[Any]:
        return []  # collected per scrape: nothing to check at registration

    def collect(self) -> Iterator[Any]:
        core = self._core
        gauge, counter = core.GaugeMetricFamily, core.CounterMetricFamily
        rss = resident_memory()
        resident = gauge(
            "oocarray_resident_bytes",
            "Resident memory of the process by kind (/proc/self/status RssAnon, RssShmem, RssFile)",
            labels=["kind"],
        )
        resident.add_metric(["anon"], rss.anon_bytes)
        resident.add_metric(["shmem"], rss.shmem_bytes)
        resident.add_metric(["file"], rss.file_bytes)
        yield resident
        yield gauge(
            "oocarray_resident_peak_bytes", "Highest resident memory so far (VmHWM)", rss.peak_bytes
        )
        tree = manager_usage()
        yield gauge(
            "oocarray_managed_bytes",
            "Live bytes of managed arrays, in RAM or on disk",
            tree.current_bytes,
        )
        where = gauge(
            "oocarray_managed_location_bytes",
            "Live bytes of managed arrays by place: ram, mmap (placed on disk), spilled",
            labels=["location"],
        )
        where.add_metric(["ram"], tree.ram_bytes)
        where.add_metric(["mmap"], tree.mmap_bytes)
        where.add_metric(["spilled"], tree.spilled_bytes)
        yield where
        yield gauge(
            "oocarray_spilled_bytes", "Live bytes moved to disk by spills", tree.spilled_bytes
        )
        disk = spill_usage()
        yield gauge("oocarray_spill_file_bytes", "Disk reserved by spill files", disk.file_bytes)
        yield gauge(
            "oocarray_temporary_bytes",
            "Disk used by temporary chunked arrays",
            disk.temporary_bytes,
        )
        settings = config()
        limits = gauge(
            "oocarray_limit_bytes",
            "Process-wide settings: max_bytes, max_physical_bytes, max_spill_bytes (absent "
            "when unset)",
            labels=["setting"],
        )
        for name in ("max_bytes", "max_physical_bytes", "max_spill_bytes"):
            value = getattr(settings, name)
            if value is not None:
                limits.add_metric([name], value)
        yield limits
        spills = counter("oocarray_spills", "Arrays moved to disk, over the process's life")
        spills.add_metric([], tree.spills)
        yield spills
        spill_moved = counter(
            "oocarray_spill_moved_bytes", "Bytes moved to disk by spills, over the process's life"
        )
        spill_moved.add_metric([], tree.spill_moved_bytes)
        yield spill_moved
        yield from self._managers(tree, gauge, counter)

    def _managers(self, tree: Any, gauge: Any, counter: Any) -> Iterator[Any]:
        labels = ["manager", "kind"]
        current = gauge(
            "oocarray_manager_bytes",
            "Live bytes of a manager's subtree (RAM + disk)",
            labels=labels,
        )
        ram = gauge("oocarray_manager_ram_bytes", "RAM bytes of a manager's subtree", labels=labels)
        peak = gauge(
            "oocarray_manager_peak_bytes", "Highest RAM bytes of a manager's subtree", labels=labels
        )
        budget = gauge(
            "oocarray_manager_budget_bytes", "A manager's budget (max_bytes)", labels=labels
        )
        arrays = gauge(
            "oocarray_manager_arrays", "Live arrays of a manager's subtree", labels=labels
        )
        spills = counter(
            "oocarray_manager_spills", "Arrays of a subtree moved to disk", labels=labels
        )
        arena = gauge("oocarray_workspace_arena_bytes", "A workspace's arena", labels=labels)
        cycles = counter("oocarray_workspace_cycles", "Cycles a workspace ran", labels=labels)
        for _, u in tree.walk():
            if not u.open:
                continue
            key = [u.path, u.kind]
            current.add_metric(key, u.current_bytes)
            ram.add_metric(key, u.ram_bytes)
            peak.add_metric(key, u.peak_bytes)
            arrays.add_metric(key, u.count)
            spills.add_metric(key, u.spills)
            if u.max_bytes is not None:
                budget.add_metric(key, u.max_bytes)
            if u.kind == "workspace":
                arena.add_metric(key, u.arena_bytes or 0)
                cycles.add_metric(key, u.cycles or 0)
        yield from (current, ram, peak, budget, arrays, spills, arena, cycles)


class MetricsServer:
    """A running metrics endpoint (see :func:`serve_metrics`): ``.port``, ``.url``,
    ``.close()``; a context manager.

    Parameters
    ----------
    server
        The HTTP server prometheus_client started (made by :func:`serve_metrics`).
    thread : threading.Thread
        The thread serving it.
    addr
        The address it listens on.

    Examples
    --------
    >>> import oocarray as oc
    >>> with oc.serve_metrics() as server:
    ...     (server.port > 0, server.closed)
    (True, False)
    >>> server.closed
    True
    """

    def __init__(self, server: Any, thread: threading.Thread, addr: str) -> None:
        self._server = server
        self._thread = thread
        self.addr = addr
        self.port: int = int(server.server_port)
        self._closed = False

    @property
    def url(self) -> str:
        """Where to scrape: ``http://addr:port/metrics``.

        Examples
        --------
        >>> import oocarray as oc
        >>> with oc.serve_metrics(addr="127.0.0.1") as server:
        ...     server.url == f"http://127.0.0.1:{server.port}/metrics"
        True
        """
        host = f"[{self.addr}]" if ":" in self.addr else self.addr
        return f"http://{host}:{self.port}/metrics"

    def close(self) -> None:
        """Stop serving and release the port.  Closing twice does nothing.

        Examples
        --------
        >>> import oocarray as oc
        >>> server = oc.serve_metrics()
        >>> server.close()
        >>> server.closed
        True
        """
        if self._closed:
            return
        self._closed = True
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called.

        Examples
        --------
        >>> import oocarray as oc
        >>> with oc.serve_metrics() as server:
        ...     server.closed
        False
        """
        return self._closed

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else "serving"
        return f"<oocarray.MetricsServer {state} {self.url}>"


def serve_metrics(port: int = 0, addr: str = "127.0.0.1") -> MetricsServer:
    """Serve memory metrics in the Prometheus text format at ``http://addr:port/metrics``.

    Parameters
    ----------
    port
        TCP port; 0 (default) takes a free one (read it from ``.port``).
    addr
        Address to listen on; the default serves this machine only.  ``"0.0.0.0"`` serves
        every interface (mind who can reach it).

    Returns
    -------
    MetricsServer
        Call ``.close()`` (or use ``with``) to stop it; it also stops with the process.

    Raises
    ------
    ImportError
        prometheus_client is not installed (``pip install 'oocarray[metrics]'``).
    OSError
        The port is taken or the address is not this machine's.

    Notes
    -----
    Gauges: ``oocarray_resident_bytes{kind=anon|shmem|file}``,
    ``oocarray_resident_peak_bytes``, ``oocarray_managed_bytes``,
    ``oocarray_managed_location_bytes{location=ram|mmap|spilled}``,
    ``oocarray_spilled_bytes``, ``oocarray_spill_file_bytes``, ``oocarray_temporary_bytes``,
    ``oocarray_limit_bytes{setting}``, and per open manager (label ``manager``, its path in
    the tree, and ``kind``): ``oocarray_manager_bytes``, ``oocarray_manager_ram_bytes``,
    ``oocarray_manager_peak_bytes``, ``oocarray_manager_budget_bytes``,
    ``oocarray_manager_arrays``, ``oocarray_workspace_arena_bytes``.  Counters:
    ``oocarray_spills_total``, ``oocarray_spill_moved_bytes_total``,
    ``oocarray_manager_spills_total``, ``oocarray_workspace_cycles_total``.

    Examples
    --------
    >>> import urllib.request, oocarray as oc
    >>> with oc.serve_metrics() as server:
    ...     text = urllib.request.urlopen(server.url).read().decode()
    >>> 'oocarray_manager_bytes{kind="system",manager="System"}' in text
    True
    """
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
        raise ValueError(f"port must be an int from 0 to 65535, got {port!r}")
    if not isinstance(addr, str) or not addr:
        raise TypeError(f"addr must be an address string such as '127.0.0.1', got {addr!r}")
    prometheus_client, core = _prometheus()
    registry = core.CollectorRegistry(auto_describe=False)
    registry.register(_Collector(core))
    server, thread = prometheus_client.start_http_server(port, addr=addr, registry=registry)
    return MetricsServer(server, thread, addr)
