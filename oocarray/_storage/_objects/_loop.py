"""The event loop object-store requests run on: one thread of the process, started on first
use, so that many requests are in flight while the callers wait without threads of their own.
A forked child starts its own (the parent's thread does not exist there)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

__all__ = ["run", "submit"]

T = TypeVar("T")

_lock = threading.Lock()
_loop: asyncio.AbstractEventLoop | None = None


def _running_loop() -> asyncio.AbstractEventLoop:
    global _loop
    with _lock:
        if _loop is None:
            loop = asyncio.new_event_loop()
            thread = threading.Thread(target=loop.run_forever, name="oocarray-objects", daemon=True)
            thread.start()
            _loop = loop
        return _loop


def submit(coroutine: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
    """Start ``coroutine`` on the loop; its future."""
    return asyncio.run_coroutine_threadsafe(coroutine, _running_loop())


def run(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run ``coroutine`` on the loop and wait for it (never from the loop's own thread).  An
    interrupt while waiting cancels it."""
    future = submit(coroutine)
    try:
        return future.result()
    except BaseException:
        future.cancel()
        raise


def _forget_loop() -> None:
    global _loop, _lock
    _loop = None
    _lock = threading.Lock()


os.register_at_fork(after_in_child=_forget_loop)
