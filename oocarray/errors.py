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
    """Root of every error raised by oocarray.

    Examples
    --------
    >>> import oocarray as oc
    >>> m = oc.Manager()
    >>> m.close()
    >>> try:
    ...     m.zeros(3)
    ... except oc.OOCArrayError as error:
    ...     type(error).__name__
    'ClosedError'
    """


class MemoryBudgetError(OOCArrayError, MemoryError):
    """An allocation would exceed the ``max_bytes`` budget of a manager or one of its ancestors.

    The message names the refusing manager, the request, and carries the debug dump of the tree.

    Examples
    --------
    >>> import numpy as np, oocarray as oc
    >>> try:
    ...     with oc.Manager("small", max_bytes="1M", spill="fail"):
    ...         a = np.ones(1_000_000)  # 8 MB
    ... except oc.MemoryBudgetError as error:
    ...     (isinstance(error, MemoryError), "small" in str(error))
    (True, True)
    """


class SpillError(OOCArrayError, OSError):
    """Moving an array to or from disk failed; ``errno`` says why (``ENOSPC`` for a full disk).

    Parameters
    ----------
    err
        The ``errno`` code.
    message
        What failed, and what to do.
    filename
        The file concerned, if any.

    Examples
    --------
    >>> import errno, numpy as np, oocarray as oc
    >>> previous = oc.config().max_spill_bytes
    >>> _ = oc.configure(max_spill_bytes="1M")
    >>> with oc.Manager():
    ...     a = np.ones(1_000_000)
    ...     try:
    ...         oc.spill(a)
    ...     except oc.SpillError as error:
    ...         (errno.errorcode[error.errno], oc.location(a))
    ('ENOSPC', 'ram')
    >>> _ = oc.configure(max_spill_bytes=previous)
    """

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
    """A workspace with ``spill="fail"`` has no room left in its arena.

    Examples
    --------
    >>> import numpy as np, oocarray as oc
    >>> ws = oc.Workspace("step", initial_size="64K", learning="none", spill="fail")
    >>> try:
    ...     with ws:
    ...         a = np.ones(1_000_000)
    ... except oc.WorkspaceFullError as error:
    ...     isinstance(error, MemoryError)
    True
    >>> ws.close()
    """


class WorkspaceLeakError(OOCArrayError, RuntimeError):
    """Arrays allocated in a workspace cycle were still alive when the cycle ended.

    Raised with the workspace's ``on_escape="raise"`` (the default); the arrays stay valid.

    Examples
    --------
    >>> import numpy as np, oocarray as oc
    >>> ws = oc.Workspace("step")
    >>> try:
    ...     with ws:
    ...         kept = np.ones(1000)
    ... except oc.WorkspaceLeakError:
    ...     float(kept.sum())
    1000.0
    >>> ws.close()
    """


class ScopeLeakError(OOCArrayError, RuntimeError):
    """A manager with ``on_close="raise"`` closed while arrays it owns were still referenced.

    The arrays stay valid, handed to the parent manager.

    Examples
    --------
    >>> import numpy as np, oocarray as oc
    >>> try:
    ...     with oc.Manager("strict", on_close="raise"):
    ...         a = np.ones(1000)
    ... except oc.ScopeLeakError:
    ...     float(a.sum())
    1000.0
    """


class ClosedError(OOCArrayError, ValueError):
    """The manager (or store) is closed and refuses the operation.

    Examples
    --------
    >>> import numpy as np, oocarray as oc
    >>> x = oc.from_numpy(np.arange(3))
    >>> x.close()
    >>> try:
    ...     x[0]
    ... except oc.ClosedError:
    ...     "closed"
    'closed'
    """


class CorruptChunkError(OOCArrayError, ValueError):
    """A stored chunk cannot be decoded: it is truncated or corrupt.  The message names the
    chunk and its file.

    Examples
    --------
    >>> import os, tempfile, numpy as np, oocarray as oc
    >>> path = os.path.join(tempfile.mkdtemp(), "x.zarr")
    >>> x = oc.create(path, (4,), "float64", chunks=(4,))
    >>> x[...] = 1.0
    >>> with open(os.path.join(path, "c", "0"), "wb") as chunk:
    ...     _ = chunk.write(b"damaged")
    >>> try:
    ...     oc.open(path)[...]
    ... except oc.CorruptChunkError as error:
    ...     isinstance(error, ValueError)
    True
    """


class PagedChunkError(CorruptChunkError):
    """A chunk-backed ndarray (``x.as_ndarray()``, compressed spill) was touched where its chunk
    cannot be read (corrupt, truncated, an I/O error).  Raised in the thread that touched it,
    as soon as the call that touched it returns (see the README on ``as_ndarray``); the message
    names the bytes, the chunk, its file and the decoder's or system's error.

    Parameters
    ----------
    *args
        The message; none when the pager raises it (the message then comes from this
        thread's record of the fault).

    Examples
    --------
    >>> import oocarray as oc
    >>> error = oc.errors.PagedChunkError("chunk (0,) of x.zarr cannot be read")
    >>> [base.__name__ for base in type(error).__mro__[:3]]
    ['PagedChunkError', 'CorruptChunkError', 'OOCArrayError']
    >>> str(error)
    'chunk (0,) of x.zarr cannot be read'
    """

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
    """No array store exists at the given path.

    Examples
    --------
    >>> import os, tempfile, oocarray as oc
    >>> try:
    ...     oc.open(os.path.join(tempfile.mkdtemp(), "missing.zarr"))
    ... except oc.StoreNotFoundError as error:
    ...     isinstance(error, FileNotFoundError)
    True
    """


class StoreExistsError(OOCArrayError, FileExistsError):
    """Something is already at the path an array was to be created at, and the mode does not
    allow replacing it (only ``mode="w"`` replaces, and only a zarr array).

    Examples
    --------
    >>> import os, tempfile, oocarray as oc
    >>> path = os.path.join(tempfile.mkdtemp(), "x.zarr")
    >>> _ = oc.create(path, (4,), "int8")
    >>> try:
    ...     oc.create(path, (4,), "int8")
    ... except oc.StoreExistsError as error:
    ...     isinstance(error, FileExistsError)
    True
    >>> oc.create(path, (2,), "int8", mode="w").shape
    (2,)
    """


class ObjectStoreError(OOCArrayError, OSError):
    """An object store (S3, GCS, Azure, HTTP) failed a request after its retries: the server
    kept answering 5xx or throttling, the connection kept failing, or a body arrived
    truncated.  The message names the URL without credentials.

    Examples
    --------
    Catch it (and :class:`StoreAccessError`, a subclass) around reads from an object store:

    >>> import oocarray as oc
    >>> (issubclass(oc.ObjectStoreError, OSError), issubclass(oc.StoreAccessError,
    ...                                                      oc.ObjectStoreError))
    (True, True)
    """


class StoreAccessError(ObjectStoreError, PermissionError):
    """An object store refused access (403, expired or missing credentials, requester-pays
    bucket without ``requester_pays``); the message names the URL without credentials.

    Examples
    --------
    It is also a :class:`PermissionError`:

    >>> import oocarray as oc
    >>> issubclass(oc.StoreAccessError, PermissionError)
    True
    """


class ReadOnlyError(OOCArrayError, ValueError):
    """A write was attempted on an array opened read-only.

    Examples
    --------
    >>> import os, tempfile, oocarray as oc
    >>> path = os.path.join(tempfile.mkdtemp(), "x.zarr")
    >>> _ = oc.create(path, (4,), "int8")
    >>> try:
    ...     oc.open(path)[0] = 1  # mode="r"
    ... except oc.ReadOnlyError:
    ...     oc.open(path, mode="r+")[0] = 1
    >>> oc.open(path)[...]
    array([1, 0, 0, 0], dtype=int8)
    """


class PagingUnavailableError(OOCArrayError, OSError):
    """Chunk-backed ndarrays (``x.as_ndarray()`` over chunks) need Linux userfaultfd with
    kernel-mode faults, which this process may not use; ``errno`` says why, the message how to
    enable it.

    Parameters
    ----------
    err
        The ``errno`` code of the refusal (``EPERM`` when not permitted).
    message
        Why, and how to enable it.

    Examples
    --------
    >>> import errno, oocarray as oc
    >>> error = oc.PagingUnavailableError(errno.EPERM, "userfaultfd is not permitted")
    >>> (isinstance(error, OSError), error.errno == errno.EPERM, str(error))
    (True, True, 'userfaultfd is not permitted')
    """

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
    per process.

    Examples
    --------
    Where compressed spill is available the policy stays ``"zarr"``; elsewhere the warning is
    issued (once) and it is ``"mmap"``:

    >>> import warnings, oocarray as oc
    >>> with warnings.catch_warnings():
    ...     warnings.simplefilter("ignore", oc.CompressedSpillFallbackWarning)
    ...     m = oc.Manager(spill="zarr")
    >>> m.spill_policy in ("zarr", "mmap")
    True
    >>> m.close()
    """
