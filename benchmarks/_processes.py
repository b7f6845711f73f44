"""The processes below a benchmark's side, found cheaply enough to ask 100 times a second.

A memory sampler adds the side's children to its peak (a feeder process, DataLoader workers).
psutil's ``children(recursive=True)`` reads every process on the machine for that: 1.2 ms of CPU
a call on the project's guest (67 processes), 12 % of a core at 100 calls a second, taken from
the side it measures on two cores.  The kernel keeps each thread's children in
``/proc/PID/task/TID/children``: a few small reads (0.024 ms).  psutil has no call for it, so
it is read here.
"""

from __future__ import annotations

import contextlib
import os

__all__ = ["descendants"]


def descendants(pid: int) -> list[int]:
    """The processes below ``pid`` (children, theirs, ...); psutil's way where the kernel keeps
    no children lists (built without ``CONFIG_PROC_CHILDREN``)."""
    if not os.path.exists(f"/proc/{pid}/task/{pid}/children"):
        import psutil

        with contextlib.suppress(psutil.Error):
            return [p.pid for p in psutil.Process(pid).children(recursive=True)]
        return []
    found: list[int] = []
    todo = [pid]
    while todo:
        parent = todo.pop()
        try:
            tids = os.listdir(f"/proc/{parent}/task")
        except OSError:  # gone meanwhile
            continue
        for tid in tids:
            try:
                with open(f"/proc/{parent}/task/{tid}/children") as f:
                    kids = [int(k) for k in f.read().split()]
            except (OSError, ValueError):
                continue
            found += kids
            todo += kids
    return found
