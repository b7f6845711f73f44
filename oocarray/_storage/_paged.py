"""Chunk-backed ndarrays: a plain ``np.ndarray`` over a chunk store, pages filled on touch.

The array's whole address range is reserved up front and registered with Linux userfaultfd
(``native/pager.c``).  The first touch of a page, from any thread or from inside a system call,
makes native threads decode the chunk(s) behind it straight from their files (without the GIL)
and install them; sequential faults read the next chunks ahead.  Resident chunks count against
the active manager's budget, and the least recently filled clean ones are dropped when it is
exceeded (refilled on the next touch).  In ``"r+"`` mode the first write to a chunk is tracked
(a write-protect fault) and dirty chunks are written back, each chunk whole (through the
store: zarr writes it beside its file and renames it), by :meth:`ChunkedArray.flush`,
``close()`` and when the last view of the array goes away; a unit being written back stays in
memory until its chunks are stored.

What is paged: zarr arrays (v2 or v3, sharded or not, read-only for shards) whose chunks span
every axis but the first, so that a chunk is one contiguous run of bytes, stored raw or with
zstd; and chunked HDF5 datasets with such chunks, stored raw or with HDF5's gzip, shuffle and
fletcher32 filters, read and written (``_paged_hdf5.py``, which also says how HDF5 chunks that
move in their file are followed, and what other HDF5 layouts give).  Other chunkings would
make every page depend on several chunks and cost a decode of a whole band of chunks per
fault; other codecs and filters decode only in Python (or in plugins), which the fault path
cannot call (the faulting thread may hold the GIL).  Both are refused with the rewrite that
makes them pageable.  Each format's checks and chunk table are a :class:`Plan`
(``_paged_plan.py``); the rest is common.
"""

from __future__ import annotations

import math
import mmap
import os
import weakref
from typing import Any

import numpy as np

from oocarray import _native
from oocarray._memory import active_manager, system
from oocarray._storage._base import Store
from oocarray._storage._paged_plan import ChunkTable, Plan, check_row_chunks, rewrite
from oocarray.errors import PagingUnavailableError

__all__ = ["DISABLE_ENV", "PagedArrays", "paging_available"]

DISABLE_ENV = "OOCARRAY_USERFAULTFD"  # "0": never page (the kill switch)
_MIN_UNIT_BYTES = 64 << 10  # a fault fills at least this much: small chunks come in groups
_checked: dict[int, tuple[int, bool]] = {}
# unit bytes, chunk bytes, data bytes, stored dtype, shape: what write-back needs
Geometry = tuple[int, int, int, np.dtype[Any], tuple[int, ...]]


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
        self._pages: weakref.WeakKeyDictionary[Any, Geometry | None] = weakref.WeakKeyDictionary()

    def make(self, mode: str) -> np.ndarray:
        """A new chunk-backed ndarray of the whole array (see :meth:`ChunkedArray.as_ndarray`)."""
        store = self._store
        plan = _plan(store, mode)
        if isinstance(plan, np.ndarray):
            return plan  # small HDF5 datasets, read whole
        _require_available()
        shape, chunks, dtype = store.shape, store.chunks, plan.dtype
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
        manager = active_manager() or system()
        node = manager._node
        readahead = 4
        budget = int(node.max_bytes)
        if budget >= 0:
            readahead = max(0, min(readahead, budget // (4 * unit)))
        fill = np.array(store.fill_value, dtype=dtype).tobytes()
        with plan.guard():  # no write moves a chunk between the table and the watch
            chunk_table = plan.table(nchunks)
            try:
                pages: Any = _native.Pages(
                    paths=chunk_table.paths,
                    table=chunk_table.table,
                    codec=plan.codec,
                    chunk_nbytes=chunk_bytes,
                    data_nbytes=nbytes,
                    unit_nbytes=unit,
                    fill=fill,
                    writable=mode == "r+",
                    node=node,
                    readahead=readahead,
                    fd=chunk_table.fd,
                )
            finally:
                if chunk_table.fd >= 0:
                    os.close(chunk_table.fd)
            if plan.watch is not None:
                plan.watch(pages)
        geometry: Geometry | None = None
        if mode == "r+":
            geometry = (unit, chunk_bytes, nbytes, dtype, shape)
            pages.on_release = _write_back_on_release(store, geometry)
        self._pages[pages] = geometry
        return np.frombuffer(pages, dtype=dtype, count=math.prod(shape)).reshape(shape)

    def flush(self) -> int:
        """Write back every dirty chunk of every ``"r+"`` ndarray made here; chunks written."""
        written = 0
        for pages, geometry in list(self._pages.items()):
            if geometry is not None:
                written += _write_back(pages, self._store, geometry)
        return written

    def stats(self) -> list[dict[str, int]]:
        return [pages.stats() for pages in list(self._pages)]


def _plan(store: Store, mode: str) -> Plan | np.ndarray:
    """What each format decides: refusals first, before anything is read."""
    from oocarray._storage._zarr import ZarrStore

    if store.format == "hdf5":  # h5py is optional: imported only for HDF5 stores
        from oocarray._storage._paged_hdf5 import plan_hdf5

        return plan_hdf5(store, mode)  # type: ignore[arg-type]
    if not isinstance(store, ZarrStore) or store._layout is None:
        raise NotImplementedError(
            f"as_ndarray() pages zarr arrays in a local directory and HDF5 datasets; the "
            f"{store.format} array at {store.path!r} is not one: copy it to zarr first, e.g. "
            f"{rewrite(store)}"
        )
    layout = store._layout
    check_row_chunks(store, f"the array at {store.path!r}")
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
    return Plan(
        dtype=layout.stored_dtype,
        codec=layout.native_codec,
        table=lambda nchunks: ChunkTable(*_chunk_table(store, nchunks)),
    )


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


def _write_back(pages: Any, store: Any, geometry: Geometry) -> int:
    """Write every dirty unit's chunks, each whole: the unit is made clean and write-protected
    first, so a write while it is copied out makes it dirty again, and it stays in memory until
    its chunks are stored (dropped and refilled before, it would show the old ones)."""
    unit, chunk_bytes, nbytes, dtype, shape = geometry
    rest = (0,) * (len(shape) - 1)
    data = np.frombuffer(pages, dtype=np.uint8)
    written = 0
    for u in pages.dirty_units():
        if not pages.begin_writeback(u):
            continue
        try:
            blocks = []
            first = u * unit // chunk_bytes
            for c in range(first, first + unit // chunk_bytes):
                lo = c * chunk_bytes
                if lo >= nbytes:
                    break
                hi = min(lo + chunk_bytes, nbytes)
                block = data[lo:hi].view(dtype).copy()
                blocks.append(((c, *rest), block.reshape(-1, *shape[1:]) if shape else block[0]))
            store.write_blocks(blocks)
        except BaseException:
            pages.abort_writeback(u)
            raise
        pages.end_writeback(u)  # stored: the unit may be dropped again
        written += len(blocks)
    return written


def _write_back_on_release(store: Any, geometry: Geometry) -> Any:
    def release(pages: Any) -> None:
        _write_back(pages, store, geometry)

    return release
