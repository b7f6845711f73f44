"""The process's resident memory (:class:`ResidentMemory`, the one type every layer reads it
as), the memory the machine has available, and the ``max_physical_bytes`` watcher that keeps
resident memory under a limit.

A daemon thread reads the kernel's resident-set counters (``/proc/self/status``: anonymous,
file-backed and shared-memory pages, each on its own) ten times a second, and a hundred times a
second once resident memory is above half the limit.  When anonymous plus
shared-memory residency goes over the limit it spills managed arrays, oldest first, until it
is back under a lower watermark (90% of the limit), so it does not thrash around the limit.
When the file-backed pages of on-disk arrays push the total over the limit it drops them from
the process (their data stays in the files).  When nothing can be spilled (an arena alone over
the limit, say) it looks less and less often, up to once a second, until something changes.

Between two looks, allocations hold the limit themselves: each new array in RAM adds to an
estimate of resident memory kept by the extension, and an allocation that takes it over the limit
measures, spills, and if that is not enough places the new array on disk.

A forked child gets a watcher of its own.
"""

from __future__ import annotations

import contextlib
import os
import threading
from dataclasses import dataclass

from oocarray import _native
from oocarray._memory import _config, _events

__all__ = [
    "ResidentMemory",
    "WatcherStats",
    "available_memory",
    "cgroup_memory_limit",
    "resident_memory",
    "watcher_stats",
]

INTERVAL_S = 0.1
# Near the limit the watcher looks ten times as often: memory can grow by gigabytes a second.
NEAR_INTERVAL_S = 0.01
NEAR_FRACTION = 0.5
LOW_WATERMARK = 0.9
# When a round frees nothing, the wait doubles up to this.
MAX_BACKOFF_S = 1.0


@dataclass(frozen=True, slots=True)
class WatcherStats:
    """What the watcher did: how often it acted, and the bytes it spilled."""

    limit_bytes: int | None
    checks: int
    spill_rounds: int
    spilled_bytes: int
    page_drops: int


def status_bytes(*keys: str) -> dict[str, int]:
    """Size fields of ``/proc/self/status`` (``RssAnon``, ``VmHWM``, ...) in bytes; 0 for a
    field this kernel does not report.  Raises OSError where ``/proc`` is missing."""
    values = dict.fromkeys(keys, 0)
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            key, _, rest = line.partition(":")
            if key in values:
                values[key] = int(rest.split()[0]) * 1024
    return values


@dataclass(frozen=True, slots=True)
class ResidentMemory:
    """The process's resident memory, as the kernel counts it (``/proc/self/status``).

    ``MemoryReport.resident`` holds one; every field is also an attribute.

    Parameters
    ----------
    anon_bytes
        Anonymous pages (``RssAnon``): the heap, NumPy arrays in RAM, arenas.
    shmem_bytes
        Shared memory (``RssShmem``): tmpfs files and shared anonymous mappings.
    file_bytes
        Pages of mapped files (``RssFile``): libraries, memory-mapped ``.npy`` files, arrays
        on disk whose pages are being read.  The kernel can drop these at will.
    peak_bytes
        The highest resident memory of the process so far (``VmHWM``).
    swap_bytes
        Anonymous memory swapped out (``VmSwap``).
    pss_bytes
        Proportional set size (``/proc/self/smaps_rollup``: shared pages divided among the
        processes sharing them), or ``None`` where it was not read.

    Examples
    --------
    >>> import oocarray as oc
    >>> resident = oc.memory_report().resident
    >>> resident.total_bytes >= resident.owned_bytes > 0
    True
    """

    anon_bytes: int
    shmem_bytes: int
    file_bytes: int
    peak_bytes: int
    swap_bytes: int
    pss_bytes: int | None = None

    @property
    def owned_bytes(self) -> int:
        """What the process owns and the kernel cannot drop: anonymous + shared.

        Examples
        --------
        >>> import oocarray as oc
        >>> r = oc.memory_report().resident
        >>> r.owned_bytes == r.anon_bytes + r.shmem_bytes
        True
        """
        return self.anon_bytes + self.shmem_bytes

    @property
    def total_bytes(self) -> int:
        """Everything resident: anonymous + shared + file-backed (``VmRSS``).

        Examples
        --------
        >>> import oocarray as oc
        >>> r = oc.memory_report().resident
        >>> r.total_bytes == r.anon_bytes + r.shmem_bytes + r.file_bytes
        True
        """
        return self.anon_bytes + self.shmem_bytes + self.file_bytes


_STATUS_FIELDS = {
    "RssAnon": "anon_bytes",
    "RssShmem": "shmem_bytes",
    "RssFile": "file_bytes",
    "VmHWM": "peak_bytes",
    "VmSwap": "swap_bytes",
}


def resident_memory(*, rollup: bool = False) -> ResidentMemory:
    """Read the resident memory of this process; ``rollup`` also reads the slower
    ``smaps_rollup`` (its proportional set size).  Zeros where ``/proc`` is missing."""
    try:
        status = status_bytes(*_STATUS_FIELDS)
    except OSError:
        status = dict.fromkeys(_STATUS_FIELDS, 0)
    values = {name: status[key] for key, name in _STATUS_FIELDS.items()}
    pss: int | None = None
    if rollup:
        try:
            with open("/proc/self/smaps_rollup", encoding="ascii") as smaps:
                for line in smaps:
                    if line.startswith("Pss:"):
                        pss = int(line.split()[1]) * 1024
                        break
        except OSError:
            pss = None
    return ResidentMemory(pss_bytes=pss, **values)


def available_memory() -> int:
    """The memory this process could have without swapping: the kernel's estimate
    (``MemAvailable`` of ``/proc/meminfo``), or its memory cgroup's limit where that is lower
    (a container's: the page cache of its files counts against it too); 0 where neither can
    be read.

    Examples
    --------
    >>> from oocarray._memory._physical import available_memory
    >>> available_memory() >= 0
    True
    """
    available = 0
    try:
        with open("/proc/meminfo", encoding="ascii") as info:
            for line in info:
                if line.startswith("MemAvailable:"):
                    available = int(line.split()[1]) * 1024
                    break
    except (OSError, ValueError, IndexError):
        pass
    limit = cgroup_memory_limit()
    if limit is None:
        return available
    return limit if available == 0 else min(available, limit)


# This process's cgroups; where each hierarchy is mounted, and the file of its memory limit.
_PROC_CGROUP = "/proc/self/cgroup"
_CGROUP_V2 = ("/sys/fs/cgroup", "memory.max")
_CGROUP_V1 = ("/sys/fs/cgroup/memory", "memory.limit_in_bytes")
# cgroup v1 says "no limit" with a number near 2**63.
_NO_LIMIT = 1 << 62


def cgroup_memory_limit() -> int | None:
    """The lowest memory limit of this process's cgroup and its ancestors (cgroup v2
    ``memory.max``, else v1 ``memory.limit_in_bytes``); None where there is none or it cannot
    be read.

    Examples
    --------
    >>> from oocarray._memory._physical import cgroup_memory_limit
    >>> limit = cgroup_memory_limit()
    >>> limit is None or limit > 0
    True
    """
    try:
        with open(_PROC_CGROUP, encoding="ascii") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    places = []
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controllers == "":
            places.append((_CGROUP_V2, path))
        elif "memory" in controllers.split(","):
            places.append((_CGROUP_V1, path))
    lowest: int | None = None
    for (root, name), path in places:
        parts = [part for part in path.split("/") if part]
        for depth in range(len(parts), -1, -1):
            try:
                with open(os.path.join(root, *parts[:depth], name), encoding="ascii") as f:
                    text = f.read().strip()
            except OSError:
                continue  # (no such file: not this hierarchy's, or the controller is off)
            if text.isdigit() and int(text) < _NO_LIMIT:
                lowest = int(text) if lowest is None else min(lowest, int(text))
    return lowest


class _Watcher:
    def __init__(self) -> None:
        self.limit: int | None = None
        self.checks = 0
        self.spill_rounds = 0
        self.spilled_bytes = 0
        self.page_drops = 0
        self._backoff_s = 0.0
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def set_limit(self, limit: int | None) -> None:
        with self._lock:
            self.limit = limit
            _native.set_physical_limit(-1 if limit is None else limit)
            if limit is not None and (self._thread is None or not self._thread.is_alive()):
                self._thread = threading.Thread(
                    target=self._run, name="oocarray-physical-watcher", daemon=True
                )
                self._thread.start()
        self._wake.set()

    def restart_in_child(self) -> None:
        """After fork: the parent's thread did not come along, and its lock may be held."""
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._thread = None
        self._backoff_s = 0.0
        self.set_limit(self.limit)

    def check(self) -> float:
        """One look at resident memory, acting if it is over the limit; returns the seconds
        to wait before the next look."""
        limit = self.limit
        if limit is None:
            return INTERVAL_S
        self.checks += 1
        rss = resident_memory()
        unreclaimable = rss.owned_bytes
        released = 0
        if unreclaimable > limit:
            target = int(limit * LOW_WATERMARK)
            _native.scratch(True)  # idle threads' scratch and cached free regions go first
            excess = resident_memory().anon_bytes + rss.shmem_bytes - target
            if excess > 0:
                self.spill_rounds += 1
                with contextlib.suppress(OSError):  # the disk refused: nothing more to move now
                    released = _native.evict(excess)
                self.spilled_bytes += released
                if released and _events.listeners:
                    _events.emit("spill", None, bytes=released, reason="max_physical_bytes")
        _native.physical_sample(unreclaimable - released)
        total = rss.total_bytes
        if total > limit:
            self.page_drops += 1
            _native.drop_disk_pages()
        if unreclaimable > limit and released == 0:
            # Nothing could move (an arena alone over the limit): look less often.
            self._backoff_s = min(MAX_BACKOFF_S, max(NEAR_INTERVAL_S, self._backoff_s * 2))
            return self._backoff_s
        self._backoff_s = 0.0
        return NEAR_INTERVAL_S if total > limit * NEAR_FRACTION else INTERVAL_S

    def _run(self) -> None:
        while self.limit is not None:
            wait = self.check()
            self._wake.wait(wait)
            self._wake.clear()


_watcher = _Watcher()
os.register_at_fork(after_in_child=_watcher.restart_in_child)


def apply_settings(settings: _config.Config) -> None:
    _watcher.set_limit(settings.max_physical_bytes)


def watcher_stats() -> WatcherStats:
    """Counters of the ``max_physical_bytes`` watcher."""
    w = _watcher
    return WatcherStats(w.limit, w.checks, w.spill_rounds, w.spilled_bytes, w.page_drops)


def check_now() -> None:
    """Run one check in the calling thread (tests and benchmarks use it to skip the wait)."""
    _watcher.check()
