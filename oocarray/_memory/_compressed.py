"""Compressed spill (``spill="zarr"``, ``location="zarr"``): whether it works in this process.

Arrays a manager places on disk this way are written as compressed chunks (a byte shuffle and
zstd level 1, one frame per 1 MiB, on every core) into an unnamed file in the private spill
directory, and paged back on touch at the same address through userfaultfd (``native/zspill.c``
on top of the chunk pager, ``native/pager.c``).  Everything runs in the extension: the codec
and the page-in are C, so this layer needs nothing from the storage layer above it.

Where kernel-mode userfaultfd is missing or not permitted, or ``OOCARRAY_USERFAULTFD=0`` (the
chunk pager's kill switch), both fall back to ``"mmap"`` with one warning per process.
"""

from __future__ import annotations

import os
import warnings

from oocarray import _native
from oocarray.errors import CompressedSpillFallbackWarning

__all__ = ["DISABLE_ENV", "available", "effective"]

DISABLE_ENV = "OOCARRAY_USERFAULTFD"  # the chunk pager's kill switch ("0": never page)

_checked: dict[int, tuple[bool, str]] = {}
_warned: set[int] = set()


def available() -> tuple[bool, str]:
    """Whether compressed spill works in this process, and if not, why."""
    value = os.environ.get(DISABLE_ENV, "").strip().lower()
    if value in ("0", "off", "false", "no"):
        return False, f"userfaultfd is turned off by {DISABLE_ENV}={os.environ[DISABLE_ENV]!r}"
    pid = os.getpid()
    if pid not in _checked:
        err = int(_native.zspill_check())
        if err == 0:
            _checked[pid] = (True, "")
        else:
            _checked[pid] = (
                False,
                f"userfaultfd with kernel-mode and write-protect faults is not available "
                f"({os.strerror(err)}): allow it with `sysctl vm.unprivileged_userfaultfd=1`, "
                "read-write access to /dev/userfaultfd (Linux 6.1+) or CAP_SYS_PTRACE",
            )
    ok, why = _checked[pid]
    _native.set_zspill(ok)
    return ok, why


def effective(value: str, what: str) -> str:
    """``value`` (a spill policy or location), with ``"zarr"`` turned into ``"mmap"`` where
    compressed spill cannot work (warning once per process)."""
    if value != "zarr":
        return value
    ok, why = available()
    if ok:
        return value
    pid = os.getpid()
    if pid not in _warned:
        _warned.add(pid)
        warnings.warn(
            f'{what}="zarr" (compressed spill) is not available here: {why}. Using "mmap" '
            "(raw temporary files) instead.",
            CompressedSpillFallbackWarning,
            stacklevel=4,
        )
    return "mmap"
