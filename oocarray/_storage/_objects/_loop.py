"""The event loop object-store requests run on: one thread of the process, started on first
use, so that many requests are in flight while the callers wait without threads of their own.
A forked child starts its own (the parent's thread does not exist there)."""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import contextlib
import os
import threading
from collections.abc import Coroutine, Iterable
from typing import Any, TypeVar

__all__ = ["run", "run_all", "submit"]

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


def run_all(coroutines: Iterable[Coroutine[Any, Any, T]], limit: int) -> list[T]:
    """Run ``coroutines`` on the loop, at most ``limit`` at a time, and wait for them all;
    their results in order."""

    async def gathered() -> list[T]:
        slots = asyncio.Semaphore(limit)

        async def one(coroutine: Coroutine[Any, Any, T]) -> T:
            async with slots:
                return await coroutine

        return list(await asyncio.gather(*(one(c) for c in coroutines)))

    return run(gathered())


def _stop_at_exit() -> None:
    """Cancel what is still running and stop the loop before the interpreter finalizes: a
    request finishing on the object-store library's own threads after that would call into
    a finalized interpreter (an abort)."""
    loop = _loop
    if loop is None or not loop.is_running():
        return

    async def cancel_all() -> None:
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    with contextlib.suppress(Exception):  # at exit: nothing left to report it to
        asyncio.run_coroutine_threadsafe(cancel_all(), loop).result(timeout=10)
    loop.call_soon_threadsafe(loop.stop)


atexit.register(_stop_at_exit)


def _forget_loop() -> None:
    global _loop, _lock
    _loop = None
    _lock = threading.Lock()


os.register_at_fork(after_in_child=_forget_loop)
