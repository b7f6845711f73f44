"""``oc.MemoryMonitor``: a timeline of memory, sampled by a background thread.

What it records is in :mod:`._samples`, the timeline's rows and CSV file in
:mod:`._timeline_csv`, its plot in :mod:`._plot`.
"""

from __future__ import annotations

import importlib
import os
import threading
import time
from types import MappingProxyType, TracebackType
from typing import Any, Self

from oocarray import _native
from oocarray._diagnostics._samples import MemoryPeak, MemorySample
from oocarray._diagnostics._timeline_csv import (
    FIXED_COLUMNS,
    read_samples,
    timeline_rows,
    write_rows,
)
from oocarray._diagnostics._usage import manager_usage
from oocarray._memory import config
from oocarray._memory._physical import resident_memory

__all__ = ["MemoryMonitor"]


class MemoryMonitor:
    """Record memory over time in a background thread.

    Each sample holds the process's resident memory (anonymous, shared, file-backed), the
    bytes managed by oocarray (in RAM, on disk), spill-file bytes and the RAM of every named
    manager.  Use it as a context manager, or call :meth:`start` and :meth:`stop`; a sample is
    taken at both ends too.

    Parameters
    ----------
    interval
        Seconds between samples (at least 0.001).  A sample costs a read of
        ``/proc/self/status`` and a walk of the manager tree: tens of microseconds.
    max_samples
        Keep at most this many (the oldest are dropped), or ``None``.

    Examples
    --------
    >>> import numpy as np, oocarray as oc
    >>> with oc.MemoryMonitor(interval=0.01) as mon:
    ...     with oc.Manager("etl"):
    ...         a = np.ones(2**20)   # 8 MiB
    ...         _ = mon.sample()     # one now, besides the thread's
    ...         del a
    >>> mon.peak.managers["etl"] >= 8388608
    True
    >>> len(mon.samples) >= 3
    True
    """

    def __init__(self, interval: float = 0.1, *, max_samples: int | None = None) -> None:
        if isinstance(interval, bool) or not isinstance(interval, (int, float)):
            raise TypeError(f"interval must be a number of seconds, got {interval!r}")
        if not interval >= 0.001:
            raise ValueError(f"interval must be at least 0.001 seconds, got {interval!r}")
        if max_samples is not None and (not isinstance(max_samples, int) or max_samples < 2):
            raise ValueError(
                f"max_samples must be an int of at least 2 or None, got {max_samples!r}"
            )
        self.interval = float(interval)
        self.max_samples = max_samples
        self._samples: list[MemorySample] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._t0 = 0.0
        self._stopped_at: float | None = None
        self.budgets: dict[str, int] = {}
        """Budgets seen: ``"max_bytes"`` and ``"max_physical_bytes"`` of the settings, and
        the ``max_bytes`` of each named manager (by name).

        Examples
        --------
        >>> import oocarray as oc
        >>> with oc.MemoryMonitor() as mon, oc.Manager("etl", max_bytes="1M"):
        ...     _ = mon.sample()
        >>> mon.budgets["etl"]
        1048576
        """

    # ---- running ----

    def start(self) -> Self:
        """Start sampling (a new timeline: earlier samples are dropped).

        Returns
        -------
        MemoryMonitor
            The monitor itself, running.

        Raises
        ------
        RuntimeError
            The monitor is already running.

        Examples
        --------
        >>> import oocarray as oc
        >>> mon = oc.MemoryMonitor(interval=0.01).start()
        >>> mon.running
        True
        >>> mon.stop()
        """
        if self.running:
            raise RuntimeError("the monitor is already running; stop() it first")
        with self._lock:
            self._samples = []
        self.budgets = {}
        self._stop.clear()
        self._t0 = time.monotonic()
        self._stopped_at = None
        self.sample()
        self._thread = threading.Thread(target=self._run, name="oocarray-monitor", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop sampling, after one last sample.  Stopping twice does nothing.

        Examples
        --------
        >>> import oocarray as oc
        >>> mon = oc.MemoryMonitor(interval=0.01).start()
        >>> mon.stop()
        >>> (mon.running, len(mon.samples) >= 2)
        (False, True)
        """
        thread = self._thread
        if thread is None:
            return
        self._stop.set()
        thread.join()
        self._thread = None
        self.sample()
        self._stopped_at = time.monotonic()

    @property
    def running(self) -> bool:
        """Whether the sampling thread runs.

        Examples
        --------
        >>> import oocarray as oc
        >>> with oc.MemoryMonitor() as mon:
        ...     mon.running
        True
        >>> mon.running
        False
        """
        return self._thread is not None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()

    def sample(self) -> MemorySample:
        """Take one sample now (any thread may), add it to the timeline and return it.

        Returns
        -------
        MemorySample
            Resident memory, managed bytes (in RAM, on disk), spill-file bytes and the RAM
            bytes of each named manager, at ``time_s`` seconds since the start.

        Examples
        --------
        >>> import numpy as np, oocarray as oc
        >>> mon = oc.MemoryMonitor()
        >>> with oc.Manager("sampled"):
        ...     a = np.ones(1000)
        ...     mon.sample().managers["sampled"]
        8000
        """
        rss = resident_memory()
        tree = manager_usage()
        settings = config()
        managers: dict[str, int] = {}
        budgets: dict[str, int] = {}
        for _, usage in tree.walk():
            if usage.kind != "system" and usage.open and usage.named:
                managers[usage.name] = managers.get(usage.name, 0) + usage.ram_bytes
                if usage.max_bytes is not None:
                    budgets[usage.name] = usage.max_bytes
        if settings.max_bytes is not None:
            budgets["max_bytes"] = settings.max_bytes
        if settings.max_physical_bytes is not None:
            budgets["max_physical_bytes"] = settings.max_physical_bytes
        point = MemorySample(
            time_s=time.monotonic() - self._t0,
            rss_anon_bytes=rss.anon_bytes,
            rss_shmem_bytes=rss.shmem_bytes,
            rss_file_bytes=rss.file_bytes,
            managed_bytes=tree.current_bytes,
            ram_bytes=tree.ram_bytes,
            mmap_bytes=tree.mmap_bytes,
            spilled_bytes=tree.spilled_bytes,
            spill_file_bytes=int(_native.spill_used()),
            managers=MappingProxyType(managers),
        )
        with self._lock:
            self._samples.append(point)
            if self.max_samples is not None and len(self._samples) > self.max_samples:
                del self._samples[0]
            self.budgets.update(budgets)
        return point

    # ---- results ----

    @property
    def samples(self) -> list[MemorySample]:
        """The timeline so far (a copy), oldest sample first.

        Examples
        --------
        >>> import oocarray as oc
        >>> mon = oc.MemoryMonitor()
        >>> _ = mon.sample()
        >>> len(mon.samples)
        1
        """
        with self._lock:
            return list(self._samples)

    @property
    def peak(self) -> MemoryPeak:
        """The highest values seen, as a
        :class:`~oocarray._diagnostics._samples.MemoryPeak`.

        Raises
        ------
        ValueError
            The monitor has no samples yet.

        Examples
        --------
        >>> import numpy as np, oocarray as oc
        >>> with oc.MemoryMonitor(interval=0.01) as mon, oc.Manager("peaked"):
        ...     a = np.ones(1000)
        ...     _ = mon.sample()
        >>> mon.peak.managers["peaked"]
        8000
        """
        samples = self.samples
        if not samples:
            raise ValueError("the monitor has no samples yet; start() it first")
        top = max(samples, key=lambda s: s.rss_bytes)
        managers: dict[str, int] = {}
        for s in samples:
            for name, value in s.managers.items():
                managers[name] = max(managers.get(name, 0), value)
        end = self._stopped_at if self._stopped_at is not None else time.monotonic()
        return MemoryPeak(
            rss_bytes=top.rss_bytes,
            rss_time_s=top.time_s,
            rss_anon_bytes=max(s.rss_anon_bytes + s.rss_shmem_bytes for s in samples),
            managed_bytes=max(s.managed_bytes for s in samples),
            ram_bytes=max(s.ram_bytes for s in samples),
            spilled_bytes=max(s.spilled_bytes for s in samples),
            managers=MappingProxyType(managers),
            duration_s=(end - self._t0) if self._t0 else samples[-1].time_s,
            samples=len(samples),
        )

    def manager_names(self) -> list[str]:
        """Names of the managers seen, in the order they first appeared.

        Returns
        -------
        list of str
            The names of the named managers and workspaces of the samples.

        Examples
        --------
        >>> import oocarray as oc
        >>> mon = oc.MemoryMonitor()
        >>> with oc.Manager("load"), oc.Manager("train"):
        ...     _ = mon.sample()
        >>> mon.manager_names()
        ['load', 'train']
        """
        names: dict[str, None] = {}
        for s in self.samples:
            names.update(dict.fromkeys(s.managers))
        return list(names)

    def rows(self) -> list[dict[str, float | int | None]]:
        """The samples as flat rows (the columns of :meth:`to_csv`); a manager that was not
        open at a sample has ``None`` there (an empty CSV field, NaN in :meth:`to_frame`).

        Returns
        -------
        list of dict
            One dict per sample: ``time_s``, the byte counts, and ``ram_bytes[<name>]`` per
            manager.

        Examples
        --------
        >>> import oocarray as oc
        >>> mon = oc.MemoryMonitor()
        >>> with oc.Manager("etl"):
        ...     _ = mon.sample()
        >>> _ = mon.sample()
        >>> [row["ram_bytes[etl]"] for row in mon.rows()]
        [0, None]
        """
        names = self.manager_names()
        return timeline_rows(self.samples, names)

    def to_frame(self) -> Any:
        """The samples as a :class:`pandas.DataFrame` indexed by ``time_s`` (needs pandas).

        Returns
        -------
        pandas.DataFrame
            One row per sample, the columns of :meth:`rows`.

        Raises
        ------
        ImportError
            pandas is not installed.

        Examples
        --------
        >>> import oocarray as oc
        >>> mon = oc.MemoryMonitor()
        >>> _ = mon.sample()
        >>> frame = mon.to_frame()
        >>> (frame.index.name, len(frame), "rss_anon_bytes" in frame.columns)
        ('time_s', 1, True)
        """
        try:
            pd: Any = importlib.import_module("pandas")
        except ImportError as error:
            raise ImportError(
                "MemoryMonitor.to_frame() needs pandas (pip install pandas); "
                "to_csv() and .samples work without it"
            ) from error
        rows = self.rows()
        columns = list(rows[0]) if rows else list(FIXED_COLUMNS)
        return pd.DataFrame(rows, columns=columns).set_index("time_s")

    def to_csv(self, path: str | os.PathLike[str]) -> None:
        """Write the samples to a CSV file: a header, then one row per sample (bytes as
        integers, ``time_s`` in seconds); :meth:`from_csv` reads it back.

        Parameters
        ----------
        path
            The file to write (replaced if it exists).

        Examples
        --------
        >>> import os, tempfile, oocarray as oc
        >>> path = os.path.join(tempfile.mkdtemp(), "memory.csv")
        >>> mon = oc.MemoryMonitor()
        >>> _ = mon.sample()
        >>> mon.to_csv(path)
        >>> with open(path) as f:
        ...     f.readline().split(",")[:2]
        ['time_s', 'rss_anon_bytes']
        """
        write_rows(self.rows(), path)

    @classmethod
    def from_csv(cls, path: str | os.PathLike[str]) -> MemoryMonitor:
        """A stopped monitor holding the samples of a file :meth:`to_csv` wrote (to plot a
        saved timeline).

        Parameters
        ----------
        path
            A CSV file written by :meth:`to_csv`.

        Returns
        -------
        MemoryMonitor
            A stopped monitor with those samples.

        Raises
        ------
        ValueError
            The file lacks the monitor's columns.

        Examples
        --------
        >>> import os, tempfile, oocarray as oc
        >>> path = os.path.join(tempfile.mkdtemp(), "memory.csv")
        >>> mon = oc.MemoryMonitor()
        >>> with oc.Manager("etl"):
        ...     _ = mon.sample()
        >>> mon.to_csv(path)
        >>> again = oc.MemoryMonitor.from_csv(path)
        >>> (len(again.samples), again.manager_names())
        (1, ['etl'])
        """
        monitor = cls()
        monitor._samples = read_samples(path)
        monitor._t0 = 0.0
        return monitor

    def plot(
        self,
        ax: Any = None,
        *,
        managers: bool = True,
        budgets: bool = True,
        title: str | None = "Memory over time",
    ) -> Any:
        """Plot the timeline with matplotlib (imported now; ``pip install matplotlib``).

        Lines: resident memory (anonymous + shared, and with file-backed pages added),
        managed bytes in RAM, bytes on disk, each named manager's RAM (``managers``), and
        budgets as dotted horizontal lines (``budgets``).  Bytes are shown in the unit that
        fits (KiB, MiB or GiB).

        Parameters
        ----------
        ax
            A matplotlib ``Axes`` to draw on; by default a new ``Figure`` is made (not
            registered with pyplot, so nothing stays open; a notebook shows it as the cell's
            result).
        managers
            Draw a line per named manager (default ``True``).
        budgets
            Draw the budgets as dotted lines (default ``True``).
        title
            The plot's title, or ``None`` for none.

        Returns
        -------
        matplotlib.figure.Figure
            The figure drawn on.

        Examples
        --------
        >>> import oocarray as oc
        >>> mon = oc.MemoryMonitor()
        >>> _ = mon.sample(), mon.sample()
        >>> figure = mon.plot(title="two samples")
        >>> figure.axes[0].get_title()
        'two samples'
        """
        from oocarray._diagnostics._plot import plot_timeline

        return plot_timeline(
            self.samples,
            self.budgets,
            ax=ax,
            managers=managers,
            budgets=budgets,
            title=title,
        )

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        count = len(self.samples)
        return f"<oocarray.MemoryMonitor {state}: {count} samples every {self.interval} s>"
