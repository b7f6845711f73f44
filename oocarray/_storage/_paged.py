"""Chunk-backed ndarrays: a plain ``np.ndarray`` over a chunk store, pages filled on touch.

The array's whole address range is reserved up front and registered with Linux userfaultfd
(``native/pager.c``).  The first touch of a page, from any thread or from inside a system call,
makes native threads decode the chunk(s) behind it straight from their files (zstd or raw,
without the GIL) and install them; sequential faults read the next chunks ahead.  Resident
chunks count against the active manager's budget, and the least recently filled clean ones are
dropped when it is exceeded (refilled on the next touch).  In ``"r+"`` mode the first write to
a chunk is tracked (a write-protect fault) and dirty chunks are written back natively
(``native/writeback.c``: raw, or zstd at the store's level and checksum; each chunk whole,
written beside its file and renamed, the last one padded with the fill value): by the pager's
workers when they are the least recently filled under budget pressure, and then dropped, so
writing all over an array larger than the budget stays within it; and by
:meth:`ChunkedArray.flush`, ``close()``, the close of the manager it was made under, and when
the last view of the array goes away.  A failed write-back (a full disk) keeps its chunk dirty
and in memory; ``flush()`` raises while it still fails (a manager's close warns).

What is paged: zarr arrays (v2 or v3, sharded or not, read-only for shards) whose chunks span
every axis but the first, so that a chunk is one contiguous run of bytes, stored raw or with
zstd.  Other chunkings would make every page depend on several chunks and cost a decode of a
whole band of chunks per fault; other codecs decode only in Python, which the fault path
cannot call (the faulting thread may hold the GIL).  Both are refused with the rewrite that
makes them pageable.
"""

from __future__ import annotations

import functools
import math
import mmap
import os
import warnings
import weakref
from typing import Any

import numpy as np

from oocarray import _native
from oocarray._memory import active_manager, system
from oocarray._storage import _pool
from oocarray._storage._base import Store
from oocarray.errors import PagingUnavailableError

__all__ = ["DISABLE_ENV", "PagedArrays", "paging_available"]

DISABLE_ENV = "OOCARRAY_USERFAULTFD"  # "0": never page (the kill switch)
_MIN_UNIT_BYTES = 64 << 10  # a fault fills at least this much: small chunks come in groups
_checked: dict[int, tuple[int, bool]] = {}


def paging_available() -> tuple[bool, str]:
    """Whether chunk-backed ndarrays work in this process, and if not, why and how to fix it."""
    if os.environ.get(DISABLE_ENV, "").strip().lower() in ("0", "off", "false", "no"):
        value = os.environ[DISABLE_ENV]
        return False, (
            f"chunk-backed ndarrays are turned off by {DISABLE_ENV}={value!r}: unset it (or set "
            "it to 1) to use them"
        )
    pid = os.getpid()
    if pid not in _checked:
        _checked[pid] = _native.pager_check()
    err, _ = _checked[pid]
    if err == 0:
        return True, ""
    return False, (
        f"userfaultfd with kernel-mode faults is not available to this process "
        f"({os.strerror(err)}): allow it with `sysctl vm.unprivileged_userfaultfd=1`, give the "
        "user read-write access to /dev/userfaultfd (Linux 6.1+), or run with CAP_SYS_PTRACE; "
        "containers need a seccomp profile that allows the userfaultfd system call (Docker's "
        "default blocks it), and gVisor has none.  Meanwhile read the data with x[...] or "
        "x.to_zarr/np.save it raw and memory-map that"
    )


def _require_available() -> None:
    ok, why = paging_available()
    if not ok:
        err = _checked.get(os.getpid(), (0, False))[0] or 1
        raise PagingUnavailableError(err, why)


class PagedArrays:
    """The chunk-backed ndarrays made from one store, for write-back."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self._pages: weakref.WeakKeyDictionary[Any, bool] = weakref.WeakKeyDictionary()  # r+?

    def make(self, mode: str) -> np.ndarray:
        """A new chunk-backed ndarray of the whole array (see :meth:`ChunkedArray.as_ndarray`)."""
        from oocarray._storage._zarr import ZarrStore, _new_file_mode

        store = self._store
        if not isinstance(store, ZarrStore) or store._layout is None:
            raise NotImplementedError(
                f"as_ndarray() pages zarr arrays in a local directory; the {store.format} array "
                f"at {store.path!r} is not one: copy it to zarr first, e.g. "
                f"x.to_zarr('copy.zarr', codec='zstd', chunks=({_suggest_rows(store)}, "
                f"{', '.join(map(str, store.shape[1:]))}))"
            )
        layout = store._layout
        shape, chunks = store.shape, store.chunks
        if shape and tuple(chunks[1:]) != tuple(shape[1:]):
            raise NotImplementedError(
                f"as_ndarray() needs chunks that span every axis but the first (each chunk one "
                f"run of bytes); the array at {store.path!r} has chunks {chunks} for shape "
                f"{shape}, where a page would need a whole band of chunks decoded.  Rewrite it "
                f"with row chunks: x.to_zarr('rows.zarr', chunks=({_suggest_rows(store)}, "
                f"{', '.join(map(str, shape[1:]))}))"
            )
        if layout.native_codec is None:
            raise NotImplementedError(
                f"as_ndarray() decodes chunks in native threads, which read raw and zstd "
                f"chunks; the array at {store.path!r} is stored with {store.codec}.  Rewrite "
                f"it with zstd: x.to_zarr('copy.zarr', codec='zstd')"
            )
        if mode == "r+" and layout.shard is not None:
            raise NotImplementedError(
                f"as_ndarray('r+') writes chunks back one file at a time; the array at "
                f"{store.path!r} is sharded: open it with mode='r', or rewrite it unsharded"
            )
        _require_available()
        dtype = layout.stored_dtype
        nbytes = math.prod(shape) * dtype.itemsize
        if nbytes == 0:
            out = np.empty(shape, dtype=dtype)
            out.flags.writeable = mode == "r+"
            return out
        chunk_bytes = math.prod(chunks) * dtype.itemsize
        page = mmap.PAGESIZE
        if mode == "r+" and chunk_bytes % page:
            rows_per_page = page // math.gcd(page, chunk_bytes // max(chunks[0], 1))
            raise NotImplementedError(
                f"as_ndarray('r+') tracks writes per chunk, which needs chunks of a whole "
                f"number of {page}-byte pages; chunks of {chunks} {dtype} are {chunk_bytes} "
                f"bytes.  Rewrite it with a multiple of {rows_per_page} rows per chunk"
            )
        unit = _unit_bytes(chunk_bytes, page)
        nchunks = -(-shape[0] // chunks[0]) if shape else 1
        paths, table = _chunk_table(store, nchunks)
        manager = active_manager() or system()
        node = manager._node
        readahead = 4
        budget = int(node.max_bytes)
        if budget >= 0:
            readahead = max(0, min(readahead, budget // (4 * unit)))
        fill = np.array(store.fill_value, dtype=dtype).tobytes()
        codec = layout.codec  # numcodecs.Zstd or None: what native_codec says
        pages: Any = _native.Pages(
            paths=paths,
            table=table,
            codec=layout.native_codec,
            chunk_nbytes=chunk_bytes,
            data_nbytes=nbytes,
            unit_nbytes=unit,
            fill=fill,
            writable=mode == "r+",
            node=node,
            readahead=readahead,
            zstd_level=int(getattr(codec, "level", 0)),
            zstd_checksum=bool(getattr(codec, "checksum", False)),
            file_mode=_new_file_mode(),
        )
        if mode == "r+":
            pages.on_release = _write_back_on_release
            if manager is not system():
                manager._add_close_hook(functools.partial(_write_back_at_close, weakref.ref(pages)))
        self._pages[pages] = mode == "r+"
        return np.frombuffer(pages, dtype=dtype, count=math.prod(shape)).reshape(shape)

    def flush(self) -> int:
        """Write back every dirty chunk of every ``"r+"`` ndarray made here; chunks written."""
        written = 0
        for pages, writable in list(self._pages.items()):
            if writable:
                written += _write_back(pages, _pool.workers())
        return written

    def stats(self) -> list[dict[str, int]]:
        return [pages.stats() for pages in list(self._pages)]


def _suggest_rows(store: Store) -> int:
    row_bytes = math.prod(store.shape[1:]) * store.dtype.itemsize if store.shape else 1
    return max(1, (1 << 20) // max(row_bytes, 1))


def _unit_bytes(chunk_bytes: int, page: int) -> int:
    """Bytes one fault fills: whole chunks where chunks are whole pages, else the chunk rounded
    up to pages; at least ``_MIN_UNIT_BYTES``."""
    if chunk_bytes % page == 0:
        return chunk_bytes * max(1, -(-_MIN_UNIT_BYTES // chunk_bytes))
    return max(_MIN_UNIT_BYTES, -(-chunk_bytes // page) * page)


def _chunk_table(store: Any, nchunks: int) -> tuple[list[str], np.ndarray]:
    """For each row chunk: (path number or -1 when absent, offset, stored bytes or -1 for the
    whole file).  Shard indexes are read now; unsharded chunk files are opened at fill time
    (a missing file holds the fill value)."""
    from oocarray._storage._zarr_layout import OpenShard

    layout = store._layout
    rest = store._rest
    table = np.full((nchunks, 3), -1, dtype=np.int64)
    if layout.shard is None:
        paths = [store._chunk_path((i, *rest)) for i in range(nchunks)]
        table[:, 0] = np.arange(nchunks)
        table[:, 1] = 0
        return paths, table
    shard_layout = layout.shard
    per_shard = shard_layout.per_shard[0]
    paths = []
    for key in range(-(-nchunks // per_shard)):
        path = store._chunk_path((key, *rest))
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            continue
        try:
            shard = OpenShard(fd, path, store.path, shard_layout, (key * per_shard, *rest))
            number = len(paths)
            paths.append(path)
            for i in range(key * per_shard, min(nchunks, (key + 1) * per_shard)):
                entry = shard.entry(
                    (i % per_shard) * shard_layout.inner_per_row, (i, *rest), store._chunk_nbytes
                )
                if entry is not None:
                    table[i] = (number, *entry)
        finally:
            os.close(fd)
    return paths, table


def _write_back(pages: Any, runners: int) -> int:
    """Write every dirty unit's chunks back natively (``native/writeback.c``), each chunk whole,
    on up to ``runners`` threads; the chunks written.  A unit is made clean and write-protected
    before it is copied out, so a write meanwhile makes it dirty again; one being written back
    under budget pressure is waited for.  A failure (``OSError``, ``ENOSPC`` on a full disk)
    leaves its unit dirty and in memory."""
    units = pages.dirty_units()
    counts = [0] * len(units)

    def write(i: int, slot: int) -> None:
        counts[i] = pages.write_back(units[i])

    _pool.run_spread(len(units), write, runners)
    return sum(counts)


def _write_back_at_close(ref: weakref.ref[Any]) -> None:
    """The manager the array was made under closes: its dirty chunks go to the store now.  A
    failure leaves them dirty in memory (written by a later flush()) and is a warning: the
    manager still closes."""
    pages = ref()
    if pages is None:
        return
    try:
        _write_back(pages, 1)  # under the manager tree's lock: no other thread is needed
    except OSError as error:
        warnings.warn(
            f"a chunk-backed array's dirty chunks could not be written back when its manager "
            f"closed ({error}); they stay in memory: call flush() on the ChunkedArray again",
            ResourceWarning,
            stacklevel=2,
        )


def _write_back_on_release(pages: Any) -> None:
    # On this thread only: the pool may be gone when the interpreter shuts down.
    _write_back(pages, 1)
