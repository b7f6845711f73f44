"""What a :class:`~oocarray.MemoryMonitor` records: one look at memory (:class:`MemorySample`)
and the highest values of a timeline (:class:`MemoryPeak`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from oocarray._memory import format_bytes

__all__ = ["MemoryPeak", "MemorySample"]


@dataclass(frozen=True, slots=True)
class MemorySample:
    """One look at memory.

    Attributes
    ----------
    time_s
        Seconds since the monitor started.
    rss_anon_bytes, rss_shmem_bytes, rss_file_bytes
        Resident memory of the process: anonymous, shared, file-backed.
    managed_bytes
        Live bytes of every managed array (``ram_bytes + mmap_bytes + spilled_bytes``).
    ram_bytes, mmap_bytes, spilled_bytes
        Where they are: in RAM, placed on disk from the start, moved to disk by a spill.
    spill_file_bytes
        Disk reserved by spill files.
    managers
        RAM bytes of each named manager and workspace open at that moment, by name
        (managers called alike are added up).
    """

    time_s: float
    rss_anon_bytes: int
    rss_shmem_bytes: int
    rss_file_bytes: int
    managed_bytes: int
    ram_bytes: int
    mmap_bytes: int
    spilled_bytes: int
    spill_file_bytes: int
    managers: Mapping[str, int] = field(default_factory=dict)

    @property
    def rss_bytes(self) -> int:
        """All resident memory: anonymous + shared + file-backed."""
        return self.rss_anon_bytes + self.rss_shmem_bytes + self.rss_file_bytes


@dataclass(frozen=True, slots=True)
class MemoryPeak:
    """The highest values a monitor saw (between samples a peak can be missed: sample more
    often, or look at ``oc.memory_report().resident.peak_bytes``, the kernel's own peak).

    :attr:`oocarray.MemoryMonitor.peak` returns it; every field is also an attribute.

    Parameters
    ----------
    rss_bytes, rss_time_s
        Highest resident memory (all kinds) and when.
    rss_anon_bytes
        Highest anonymous + shared resident memory (what spilling can release).
    managed_bytes, ram_bytes, spilled_bytes
        Highest managed bytes, managed bytes in RAM, and spilled bytes.
    managers
        Highest RAM bytes of each named manager.
    duration_s, samples
        How long the monitor ran, and how many samples it took.

    Examples
    --------
    >>> import numpy as np, oocarray as oc
    >>> with oc.MemoryMonitor(interval=0.01) as mon, oc.Manager("etl"):
    ...     a = np.ones(2**20)
    ...     _ = mon.sample()
    >>> peak = mon.peak
    >>> (peak.managers["etl"] >= 8388608, peak.samples >= 3, peak.rss_bytes > 0)
    (True, True, True)
    """

    rss_bytes: int
    rss_time_s: float
    rss_anon_bytes: int
    managed_bytes: int
    ram_bytes: int
    spilled_bytes: int
    managers: Mapping[str, int]
    duration_s: float
    samples: int

    def __str__(self) -> str:
        text = (
            f"peak resident {format_bytes(self.rss_bytes)} at {self.rss_time_s:.2f} s "
            f"(anonymous + shared {format_bytes(self.rss_anon_bytes)}); managed "
            f"{format_bytes(self.managed_bytes)}, in RAM {format_bytes(self.ram_bytes)}, spilled "
            f"{format_bytes(self.spilled_bytes)}; {self.samples} samples over "
            f"{self.duration_s:.2f} s"
        )
        if self.managers:
            text += "; " + ", ".join(f"{k} {format_bytes(v)}" for k, v in self.managers.items())
        return text
