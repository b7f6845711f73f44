"""Chunk-backed ndarrays: a plain ``np.ndarray`` over a chunk store, pages filled on touch.

The array's whole address range is reserved up front and registered with Linux userfaultfd
(``native/pager.c``).  The first touch of a page, from any thread or from inside a system call,
makes native threads decode the chunk(s) behind it straight from their files (without the GIL)
and install them; sequential faults read the next chunks ahead.  Resident chunks count against
the active manager's budget, and the least recently filled clean ones are dropped when it is
exceeded (refilled on the next touch).  In ``"r+"`` mode the first write to a chunk is tracked
(a write-protect fault) and dirty chunks are written back, each chunk whole, by
:meth:`ChunkedArray.flush`, ``close()``, the close of the manager the array was made under, and
when the last view of the array goes away; a unit being written back stays in memory until its
chunks are stored.  How, per array (``Pages.native_writeback``):

- zarr: natively (``native/writeback.c``: raw, or zstd at the store's level and checksum, a
  CRC-32C after either when the chain ends with zarr's crc32c codec;
  written beside the chunk's file and renamed, the last one padded with the fill value), and
  also by the pager's workers when a dirty chunk is the least recently filled under budget
  pressure, then dropped, so writing all over an array larger than the budget stays within it.
- HDF5: through the store (h5py: HDF5 decides where a rewritten chunk goes, and the pager
  follows it, ``_hdf5.py``), from Python, one unit at a time per array.  Never under
  budget pressure: dirty chunks stay in memory until written back, so an HDF5 ``"r+"`` view
  written all over grows past its budget until ``flush()`` (a limit of this design).

A failed write-back (a full disk) keeps its chunk dirty and in memory; ``flush()`` raises while
it still fails (a manager's close warns).  A chunk that cannot be read raises
``PagedChunkError`` (a ``CorruptChunkError``) in the Python thread that touches it
(``native/pager_errors.c``).

What is paged: zarr arrays (v2 or v3, sharded or not, read-only for shards) whose chunks span
every axis but the first, so that a chunk is one contiguous run of bytes, stored raw or with
zstd, blosc (any of its compressors and shuffles), numcodecs' lz4, gzip or zlib, optionally
followed by zarr's crc32c codec (checked on every fill; read-only for blosc, lz4 and gzip,
which the native writer does not encode); and chunked HDF5 datasets with such chunks, stored
raw or with HDF5's gzip, shuffle and fletcher32 filters, read and written
(``_hdf5.py``, which also says how HDF5 chunks that move in their file are followed,
and what other HDF5 layouts give).  Other chunkings would
make every page depend on several chunks and cost a decode of a whole band of chunks per
fault; other codecs and filters decode only in Python (or in plugins), which the fault path
cannot call (the faulting thread may hold the GIL).  Both are refused with the rewrite that
makes them pageable.  Each format's checks and chunk table are a :class:`Plan`
(``_plan.py``); the rest is common.
"""

from __future__ import annotations

import atexit
import functools
import math
import mmap
import os
import threading
import warnings
import weakref
from typing import Any

import numpy as np

from oocarray import _native
from oocarray._memory import active_manager, system
from oocarray._storage import _pool
from oocarray._storage._base import Store
from oocarray._storage._paged._plan import ChunkTable, NativeWriter, Plan, check_row_chunks, rewrite
from oocarray.errors import PagingUnavailableError

__all__ = ["DISABLE_ENV", "PagedArrays", "paging_available"]

DISABLE_ENV = "OOCARRAY_USERFAULTFD"  # "0": never page (the kill switch)
_MIN_UNIT_BYTES = 64 << 10  # a fault fills at least this much: small chunks come in groups
_checked: dict[int, tuple[int, bool]] = {}
# unit bytes, chunk bytes, data bytes, stored dtype, shape: what a write-back through the store
# needs
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
        # each array's writer: None for "r"
        self._pages: weakref.WeakKeyDictionary[Any, _Writer | None] = weakref.WeakKeyDictionary()

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
        writer_options = plan.native_writer._asdict() if plan.native_writer and mode == "r+" else {}
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
                    **writer_options,
                    **_feed_options(chunk_table.feed),
                )
            except BaseException:
                if chunk_table.feed is not None:
                    chunk_table.feed.abandon()
                raise
            else:
                if chunk_table.feed is not None:
                    chunk_table.feed.handed_over(pages)
            finally:
                if chunk_table.fd >= 0:
                    os.close(chunk_table.fd)
            if plan.watch is not None:
                plan.watch(pages)
        writer: _Writer | None = None
        if mode == "r+":
            writer = _Writer(store, (unit, chunk_bytes, nbytes, dtype, shape), chunk_table.feed)
            pages.on_release = writer  # called with pages: no reference cycle
            _alive_at_exit[pages] = (writer, os.getpid())
            _write_back_at_exit_registered()
            if manager is not system():
                pages_ref, writer_ref = weakref.ref(pages), weakref.ref(writer)
                manager._add_close_hook(
                    functools.partial(_write_back_at_close, pages_ref, writer_ref)
                )
        self._pages[pages] = writer
        return np.frombuffer(pages, dtype=dtype, count=math.prod(shape)).reshape(shape)

    def flush(self) -> int:
        """Write back every dirty chunk of every ``"r+"`` ndarray made here; chunks written."""
        written = 0
        for pages, writer in list(self._pages.items()):
            if writer is not None:
                written += writer(pages, _pool.workers())
        return written

    def stats(self) -> list[dict[str, int]]:
        return [pages.stats() for pages in list(self._pages)]


def _feed_options(feed: Any) -> dict[str, Any]:
    if feed is None:
        return {}
    return {"remote_feeder": feed.spec}


def _plan(store: Store, mode: str) -> Plan | np.ndarray:
    """What each format decides: refusals first, before anything is read."""
    from oocarray._storage._zarr._chunk_files import new_file_mode
    from oocarray._storage._zarr._store import ZarrStore

    if store.format == "hdf5":  # h5py is optional: imported only for HDF5 stores
        from oocarray._storage._paged._hdf5 import plan_hdf5

        return plan_hdf5(store, mode)  # type: ignore[arg-type]
    if not store.supports_paging:
        raise NotImplementedError(
            f"as_ndarray() pages zarr arrays in a local directory and HDF5 datasets; the "
            f"{store.format} array at {store.path!r} is not one: copy it to zarr first, e.g. "
            f"{rewrite(store)}"
        )
    assert isinstance(store, ZarrStore) and store._layout is not None
    layout = store._layout
    if not store.shape:  # one element, in a chunk of its own key: read it, there is no paging
        if mode == "r+":
            raise NotImplementedError(
                f"as_ndarray('r+') writes chunks back; the array at {store.path!r} is 0-d, "
                f"one element: write it with x[...] = value"
            )
        out = np.array(store.read_chunk(()), dtype=store.dtype).reshape(())
        out.flags.writeable = False
        return out
    check_row_chunks(store, f"the array at {store.path!r}")
    if layout.native_codec is None:
        raise NotImplementedError(
            f"as_ndarray() decodes chunks in native threads, which read raw, zstd, blosc, "
            f"lz4 and gzip chunks (optionally with zarr's crc32c codec after them, given "
            f"numcodecs' extensions and google-crc32c's C library); the array at "
            f"{store.path!r} is stored with {store.codec}.  Rewrite it with zstd: "
            f"x.to_zarr('copy.zarr', codec='zstd')"
        )
    if mode == "r+" and layout.shard is not None:
        raise NotImplementedError(
            f"as_ndarray('r+') writes chunks back one file at a time; the array at "
            f"{store.path!r} is sharded: open it with mode='r', or rewrite it unsharded"
        )
    kind = layout.native_codec & 0xFF
    if mode == "r+" and kind not in (_native.CODEC_RAW, _native.CODEC_ZSTD):
        raise NotImplementedError(
            f"as_ndarray('r+') writes chunks back natively, raw or zstd; the array at "
            f"{store.path!r} is stored with {store.codec}: open it with mode='r', or rewrite "
            f"it with zstd (x.to_zarr('copy.zarr', codec='zstd')) or uncompressed "
            f"(codec='none') to write into it"
        )
    codec = layout.codec  # numcodecs.Zstd or None where written back: what native_codec says
    if store.reopen_remote() is not None:  # in an object store: chunks fetched on demand
        from oocarray._storage._zarr._feeder import feeder_table

        return Plan(
            dtype=layout.stored_dtype,
            codec=layout.native_codec | _native.CODEC_VERIFY,
            table=lambda nchunks: feeder_table(store, nchunks, read_ahead=mode == "r"),
            native_writer=NativeWriter(
                zstd_level=int(getattr(codec, "level", 0)),
                zstd_checksum=bool(getattr(codec, "checksum", False)),
                file_mode=0o600,  # files of a private directory, uploaded by flush()
            ),
        )
    return Plan(
        dtype=layout.stored_dtype,
        # The pager fills whole units: chunks it decodes in part are decoded whole anyway, to
        # check their checksums.
        codec=layout.native_codec | _native.CODEC_VERIFY,
        table=lambda nchunks: ChunkTable(*_chunk_table(store, nchunks)),
        native_writer=NativeWriter(
            zstd_level=int(getattr(codec, "level", 0)),
            zstd_checksum=bool(getattr(codec, "checksum", False)),
            file_mode=new_file_mode(),
        ),
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
    from oocarray._storage._zarr._shards import OpenShard

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


class _Writer:
    """Writes one ``"r+"`` array's dirty units back; called with its ``Pages`` (and the threads
    to use), also as its ``on_release``.  Natively where the pager writes the chunk files itself
    (zarr), else through the store (HDF5), one write-back of the array at a time."""

    def __init__(self, store: Store, geometry: Geometry, feed: Any = None) -> None:
        self._store = store
        self._geometry = geometry
        self._feed = feed  # an array in an object store: its chunk files are then uploaded
        self._lock = threading.Lock()

    def __call__(self, pages: Any, runners: int = 1) -> int:
        # on_release passes no runners: this thread only (the pool may be gone at shutdown)
        if pages.native_writeback:
            written = _write_back(pages, runners)
            if self._feed is not None:
                with self._lock:  # also what the pager wrote back under budget pressure
                    written = max(written, self._feed.upload(self._store))
            return written
        with self._lock:
            return _write_back_through_store(pages, self._store, self._geometry)


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


def _write_back_through_store(pages: Any, store: Any, geometry: Geometry) -> int:
    """Write every dirty unit's chunks through the store, each whole (HDF5: h5py places them,
    and the array follows the moves); the chunks written.  The unit is made clean and
    write-protected first, so a write while it is copied out makes it dirty again, and it stays
    in memory until its chunks are stored (dropped and refilled before, it would show the old
    ones).  A failure leaves the unit dirty."""
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


# "r+" arrays alive, each with its writer and the process that made it: written back at exit
_alive_at_exit: weakref.WeakKeyDictionary[Any, tuple[_Writer, int]] = weakref.WeakKeyDictionary()


@functools.cache
def _write_back_at_exit_registered() -> None:
    # Registered with the first "r+" array, after its chunk files' finalizer (weakref.finalize
    # registers its own exit hook with the first finalizer): atexit runs the newest first.
    atexit.register(_write_back_at_exit)


def _write_back_at_exit() -> None:
    """Every "r+" array still alive at interpreter exit is written back while the interpreter
    still starts threads (an array in an object store uploads through its event loop's) and
    before the finalizers remove its chunk files: at module teardown, its last release would
    hang or find them gone.  A failure is a warning (where chunks could not be put in an
    object store, their files are kept and named).  A forked child that exits normally writes
    back nothing of its parent's arrays."""
    for pages, (writer, maker) in list(_alive_at_exit.items()):
        if maker != os.getpid():
            continue
        pages.on_release = None  # not again at teardown
        _write_back_or_warn(pages, writer, "at exit", "", stacklevel=2)


def _write_back_at_close(pages_ref: weakref.ref[Any], writer_ref: weakref.ref[_Writer]) -> None:
    """The manager the array was made under closes: its dirty chunks go to the store now.  A
    failure leaves them dirty in memory (written by a later flush()) and is a warning: the
    manager still closes."""
    pages, writer = pages_ref(), writer_ref()  # the writer lives as long as the pages
    if pages is None or writer is None:
        return
    _write_back_or_warn(
        pages,
        writer,
        "when its manager closed",
        "; they stay in memory: call flush() on the ChunkedArray again",
        stacklevel=3,
    )


def _write_back_or_warn(pages: Any, writer: _Writer, when: str, then: str, stacklevel: int) -> None:
    """Written back in this thread alone (the pool may be gone, or its lock held); a failure
    is a warning, as the manager's close or the interpreter's exit goes on."""
    try:
        writer(pages, 1)
    except Exception as error:  # OSError (a full disk), or the store's own (a closed file)
        warnings.warn(
            f"a chunk-backed array's dirty chunks could not be written back {when} ({error}){then}",
            ResourceWarning,
            stacklevel=stacklevel,
        )
