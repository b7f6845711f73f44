"""Ctrl-C held back to the points where a pool of worker threads can stop cleanly.

Python raises ``KeyboardInterrupt`` in the main thread at whatever bytecode runs when SIGINT
arrives.  Inside ``ThreadPoolExecutor.submit`` that can be ``Thread.start()`` waiting for the
new thread: the thread then runs, but its pool never learns of it, does not join it, and the
caller's clean-up (destroying the workers' workspaces) races a block still being computed.
While a pool runs, :class:`DeferredInterrupt` records SIGINT instead, and the loop that feeds
the pool raises ``KeyboardInterrupt`` itself where it waits (:meth:`DeferredInterrupt.check`),
so an interrupt never lands halfway through starting a thread or handing out a block.
"""

from __future__ import annotations

import signal
import threading
from types import FrameType, TracebackType
from typing import Any

__all__ = ["DeferredInterrupt"]


class DeferredInterrupt:
    """Records SIGINT while active (main thread only) and delivers it at :meth:`check`.

    The handler that was installed (Python's ``default_int_handler``, which raises
    ``KeyboardInterrupt``, or the program's own) is called at the next ``check()`` or when
    the block is left, never in between.  Elsewhere than in the main thread, and where SIGINT
    is ignored or left to the system (``SIG_IGN``, ``SIG_DFL``), it changes nothing.
    Nested uses share the outermost one's record.
    """

    _active: DeferredInterrupt | None = None  # the one installed, main thread only

    def __init__(self) -> None:
        self._previous: Any = None
        self._installed = False
        self._nested = False
        self._pending: tuple[int, FrameType | None] | None = None

    def __enter__(self) -> DeferredInterrupt:
        if threading.current_thread() is not threading.main_thread():
            return self
        if DeferredInterrupt._active is not None:
            self._nested = True  # the outer one records, check() asks it
            return self
        previous = signal.getsignal(signal.SIGINT)
        if not callable(previous):
            return self  # ignored or the system default: nothing to defer
        self._previous = signal.signal(signal.SIGINT, self._record)
        self._installed = True
        DeferredInterrupt._active = self
        return self

    def _record(self, signum: int, frame: FrameType | None) -> None:
        if self._pending is None:
            self._pending = (signum, frame)

    def check(self) -> None:
        """Calls the program's SIGINT handler now if SIGINT arrived (it raises
        ``KeyboardInterrupt`` by default)."""
        owner = self if self._installed else DeferredInterrupt._active if self._nested else None
        if owner is None or owner._pending is None:
            return
        signum, frame = owner._pending
        owner._pending = None
        owner._previous(signum, frame)

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._nested = False
        if not self._installed:
            return
        DeferredInterrupt._active = None
        signal.signal(signal.SIGINT, self._previous)
        self._installed = False
        pending, self._pending = self._pending, None
        if pending is not None and exc_type is None:
            self._previous(*pending)
