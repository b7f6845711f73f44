"""A sampled peak of the process's owned resident memory (anonymous + shared), overall and
per step, for the demo; and a reset of the kernel's own peak (VmHWM).

Anonymous + shared (:attr:`~oocarray._memory._physical.ResidentMemory.owned_bytes`) is the
memory the process owns: NumPy arrays, the interpreter's heap, arenas.  File-backed pages
(shared libraries, memory-mapped files read from the page cache) are the kernel's to drop, so
VmHWM (:attr:`~oocarray._memory._physical.ResidentMemory.peak_bytes`), which counts them too,
is the larger of the two.
"""

from __future__ import annotations

import threading
from types import TracebackType
from typing import Self

from oocarray._memory._physical import resident_memory

__all__ = ["ResidentSampler", "reset_peak"]


def reset_peak() -> bool:
    """Reset the kernel's peak resident memory (VmHWM) to the current one; False where the
    kernel does not allow it."""
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as f:
            f.write("5")
    except OSError:
        return False
    return True


class ResidentSampler:
    """A thread sampling :func:`resident_memory` every ``interval`` seconds while it is entered.

    ``peak_bytes`` is the highest anonymous + shared resident memory seen; :meth:`step`
    starts a new step and returns the peak of the one that ended.

    Examples
    --------
    >>> with ResidentSampler(0.01) as sampler:
    ...     first = sampler.step()
    >>> sampler.peak_bytes >= first > 0
    True
    """

    def __init__(self, interval: float = 0.02) -> None:
        self.interval = interval
        self.peak_bytes = 0
        self._step_peak = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def sample(self) -> None:
        """Take one sample now."""
        now = resident_memory().owned_bytes
        with self._lock:
            self.peak_bytes = max(self.peak_bytes, now)
            self._step_peak = max(self._step_peak, now)

    def step(self) -> int:
        """End the current step: its peak (after a last sample); a new step begins."""
        self.sample()
        with self._lock:
            peak, self._step_peak = self._step_peak, 0
        return peak

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()

    def __enter__(self) -> Self:
        self.sample()
        self._thread = threading.Thread(target=self._run, name="oocarray-rss", daemon=True)
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.sample()
