"""The exceptions oocarray raises.

Every exception derives from :class:`OOCArrayError` and also from the builtin exception a user
would catch anyway, so ``except MemoryError`` still sees a budget refusal.

Examples
--------
>>> import oocarray as oc
>>> issubclass(oc.MemoryBudgetError, MemoryError)
True
"""

from __future__ import annotations

import errno as _errno

__all__ = [
    "ClosedError",
    "CompressedSpillFallbackWarning",
    "CorruptChunkError",
    "MemoryBudgetError",
    "OOCArrayError",
    "ObjectStoreError",
    "PagedChunkError",
    "PagingUnavailableError",
    "ReadOnlyError",
    "ScopeLeakError",
    "SpillError",
    "StoreAccessError",
    "StoreExistsError",
    "StoreNotFoundError",
    "WorkspaceFullError",
    "WorkspaceLeakError",
]


class OOCArrayError(Exception):
    """Root of every error raised by oocarray."""


class MemoryBudgetError(OOCArrayError, MemoryError):
    """An allocation would exceed the ``max_bytes`` budget of a manager or one of its ancestors.

    The message names the refusing manager, the request, and carries the debug dump of the tree.
    """


class SpillError(OOCArrayError, OSError):
    """Moving an array to or from disk failed; ``errno`` says why (``ENOSPC`` for a full disk)."""

    def __init__(self, err: int, message: str, filename: str | None = None) -> None:
        super().__init__(err, message)
        self.errno = err
        self.strerror = message
        self.filename = filename

    def __str__(self) -> str:
        name = _errno.errorcode.get(self.errno or 0, str(self.errno))
        where = f" ({self.filename})" if self.filename else ""
        return f"[{name}] {self.strerror}{where}"


class WorkspaceFullError(OOCArrayError, MemoryError):
    """A workspace with ``spill="fail"`` has no room left in its arena."""


class WorkspaceLeakError(OOCArrayError, RuntimeError):
    """Arrays allocated in a workspace cycle were still alive when the cycle ended."""


class ScopeLeakError(OOCArrayError, RuntimeError):
    """A manager with ``on_close="raise"`` closed while arrays it owns were still referenced."""


class ClosedError(OOCArrayError, ValueError):
    """The manager (or store) is closed and refuses the operation."""


class CorruptChunkError(OOCArrayError, ValueError):
    """A stored chunk cannot be decoded: it is truncated or corrupt.  The message names the
    chunk and its file."""


class PagedChunkError(CorruptChunkError):
    """A chunk-backed ndarray (``x.as_ndarray()``, compressed spill) was touched where its chunk
    cannot be read (corrupt, truncated, an I/O error).  Raised in the thread that touched it,
    as soon as the call that touched it returns (see the README on ``as_ndarray``); the message
    names the bytes, the chunk, its file and the decoder's or system's error."""

    def __init__(self, *args: object) -> None:
        if not args:  # raised by the pager: the reason is this thread's record
            from oocarray import _native

            why = _native.pager_take_fault() or "the reason was taken already"
            args = (
                f"a chunk-backed ndarray was touched where its data cannot be read ({why}); "
                "the operation that touched it was abandoned",
            )
        super().__init__(*args)


class StoreNotFoundError(OOCArrayError, FileNotFoundError):
    """No array store exists at the given path."""


class StoreExistsError(OOCArrayError, FileExistsError):
    """Something is already at the path an array was to be created at, and the mode does not
    allow replacing it (only ``mode="w"`` replaces, and only a zarr array)."""


class ObjectStoreError(OOCArrayError, OSError):
    """An object store (S3, GCS, Azure, HTTP) failed a request after its retries: the server
    kept answering 5xx or throttling, the connection kept failing, or a body arrived
    truncated.  The message names the URL without credentials."""


class StoreAccessError(ObjectStoreError, PermissionError):
    """An object store refused access (403, expired or missing credentials, requester-pays
    bucket without ``requester_pays``); the message names the URL without credentials."""


class ReadOnlyError(OOCArrayError, ValueError):
    """A write was attempted on an array opened read-only."""


class PagingUnavailableError(OOCArrayError, OSError):
    """Chunk-backed ndarrays (``x.as_ndarray()`` over chunks) need Linux userfaultfd with
    kernel-mode faults, which this process may not use; ``errno`` says why, the message how to
    enable it."""

    def __init__(self, err: int, message: str) -> None:
        super().__init__(err, message)
        self.errno = err
        self.strerror = message

    def __str__(self) -> str:
        return self.strerror or ""


class CompressedSpillFallbackWarning(RuntimeWarning):
    """``spill="zarr"`` or ``location="zarr"`` (compressed spill) was asked for where Linux
    userfaultfd with kernel-mode and write-protect faults is not available (or
    ``OOCARRAY_USERFAULTFD=0``): ``"mmap"`` (raw temporary files) is used instead.  Issued once
    per process."""
