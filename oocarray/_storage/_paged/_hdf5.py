"""Chunk-backed ndarrays over HDF5 datasets (``_arrays.py``).

A chunked dataset whose chunks span every axis but the first is paged like a zarr array: the
chunk table holds, per row chunk, the byte offset and stored size HDF5 reports (absent chunks
hold the fill value), every chunk is read from one descriptor of the file, and native threads
undo the filters HDF5 wrote it with: none, deflate (gzip, any level), shuffle and fletcher32
(checked: a mismatch is a damaged chunk), in any order HDF5 applied them, with each chunk's
filter mask (filters HDF5 skipped for that chunk) and with partial edge chunks stored
unfiltered (``H5D_CHUNK_DONT_FILTER_PARTIAL_CHUNKS``).  Other filters (lzf, szip, blosc and
other plugins, scaleoffset, nbit) and stored types that are not exactly the dtype's bytes
(compounds, strings, integers with padding bits) are refused with the rewrite to zarr.

A write can move a chunk in the file, so each array watches its dataset's writes in this
process (``_hdf5.watch_chunks``): while a chunk is being rewritten its fills copy the new bytes,
and its table entry is updated once the file is flushed.  Writes by other processes, or through
h5py directly, are not seen: chunks they move read as whatever is at the old place.

An ``"r+"`` array's dirty chunks are written back through the store too (``_arrays.py``: h5py
places them, and the moves above follow), from Python, by ``flush()``, ``close()``, the close of
the manager it was made under and its last view: the pager has no native writer for HDF5, so
under budget pressure dirty chunks are never written back or dropped.  That is a limit: an
HDF5 ``"r+"`` view written all over grows past its manager's budget until ``flush()``.

Other layouts: contiguous datasets are memory-mapped by the store (``HDF5Store.memmap``; the
view is ``as_ndarray``'s answer, not this module's); a contiguous dataset never written holds
only its fill value and a compact one at most 64 KiB: both are read into a read-only array
(``"r+"`` is refused, as writes to it could not reach the file); virtual datasets and external
raw files are refused.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from oocarray._storage._hdf5 import UNKNOWN, HDF5Store, watch_chunks, watch_lock
from oocarray._storage._hdf5_chunks import NoNativePipeline, native_pipeline
from oocarray._storage._paged._plan import ChunkTable, Plan, check_row_chunks, rewrite

__all__ = ["plan_hdf5"]


def plan_hdf5(store: HDF5Store, mode: str) -> Plan | np.ndarray:
    """How to page ``store``, or the read-only array it reads as (compact datasets, and
    contiguous ones never written)."""
    where = f"the HDF5 dataset {store.dataset_name!r} in {store.path!r}"
    layout = store.paging_layout()
    if layout.kind in ("compact", "contiguous"):
        return _small(store, mode, where, layout.kind)
    if layout.kind != "chunked":
        what = {
            "virtual": "is a virtual dataset (its data lives in other datasets)",
            "external": "keeps its data in external raw files",
        }.get(layout.kind, f"has the {layout.kind} layout")
        raise NotImplementedError(
            f"as_ndarray() pages chunked and contiguous HDF5 datasets; {where} {what}.  Copy "
            f"it: {rewrite(store)}"
        )
    check_row_chunks(store, where)
    if not hasattr(store.ds.id, "get_chunk_info_by_coord"):
        raise NotImplementedError(
            f"as_ndarray() finds HDF5 chunks in the file with H5Dget_chunk_info_by_coord, which "
            f"h5py offers with HDF5 1.10.5 or later; this h5py runs on an older one.  Copy "
            f"{where}: {rewrite(store)}"
        )
    if not layout.exact_type:
        raise NotImplementedError(
            f"as_ndarray() copies stored bytes into place, which needs a stored type whose "
            f"bytes are the dtype's (booleans, integers, floats, complex numbers); {where} is "
            f"stored as an HDF5 type NumPy reads as {store.dtype} only by converting it.  Read "
            f"it with x[...], or copy it: {rewrite(store)}"
        )
    try:
        codec, nsteps = native_pipeline(layout, store.dtype)
    except NoNativePipeline as refusal:
        if refusal.kind == "filter":
            raise NotImplementedError(
                f"as_ndarray() decodes chunks in native threads, which undo HDF5's gzip, "
                f"shuffle and fletcher32 filters; {where} is stored with {refusal.name} "
                f"({store.codec}).  Rewrite it with zstd: {rewrite(store)}"
            ) from None
        if refusal.kind == "zlib":
            raise NotImplementedError(
                f"as_ndarray() inflates gzip chunks with the system's zlib (libz.so.1), which "
                f"cannot be loaded here; {where} is stored with {store.codec}.  Rewrite it with "
                f"zstd: {rewrite(store)}"
            ) from None
        raise NotImplementedError(
            f"as_ndarray() does not undo the filters of {where} ({store.codec}, shuffle of "
            f"{refusal.elsize} bytes).  Rewrite it with zstd: {rewrite(store)}"
        ) from None
    rows = store.chunks[0] if store.shape else 1
    partial = bool(store.shape) and store.shape[0] % rows != 0
    if partial and nsteps and layout.partial_unfiltered is None:
        raise NotImplementedError(
            f"as_ndarray() cannot tell how the partial last chunk of {where} is stored: HDF5 "
            f"may keep it unfiltered without saying so, and its libhdf5 cannot be asked "
            f"(H5Pget_chunk_opts).  Rewrite it with zstd: {rewrite(store)}"
        )
    watcher = _Watcher(store, nsteps, bool(partial and layout.partial_unfiltered))
    return Plan(
        dtype=store.dtype,
        codec=codec,
        table=watcher.table,
        guard=watch_lock,
        watch=lambda pages: watch_chunks(store.identity, pages, watcher),
    )


def _small(store: HDF5Store, mode: str, where: str, kind: str) -> np.ndarray:
    if store.dtype.hasobject:
        raise NotImplementedError(
            f"as_ndarray() does not page Python objects; {where} holds {store.dtype}: read it "
            f"with x[...]"
        )
    if mode == "r+":
        why = (
            "is compact (kept in the file's metadata)"
            if kind == "compact"
            else "was never written (no storage is allocated)"
        )
        raise NotImplementedError(
            f"as_ndarray('r+') writes through to the file; {where} {why}, so no view of it "
            f"can reach the file.  Write it with x[...] = values (a contiguous dataset is "
            f"memory-mapped once written and reopened)"
        )
    if kind == "compact":
        out = np.array(store.ds[()], dtype=store.dtype).reshape(store.shape)
    elif store.ds.id.get_offset() is None:
        out = np.full(store.shape, store.fill_value, dtype=store.dtype)
    else:
        raise NotImplementedError(
            f"{where} was written since it was opened, when it had no storage yet: open it "
            f"again, and as_ndarray() gives a view of its memory-mapped data"
        )
    out.flags.writeable = False
    return out


class _Watcher:
    """The chunk table of one dataset's arrays, and its upkeep while the dataset is written."""

    def __init__(self, store: HDF5Store, nsteps: int, last_unfiltered: bool) -> None:
        self._store = store
        self._rows = store.chunks[0] if store.shape else 1
        self._all = (1 << nsteps) - 1
        self._nchunks = -(-store.shape[0] // self._rows) if store.shape else 1
        self._last_unfiltered = last_unfiltered

    def _entry(self, chunk: int, place: Any) -> tuple[int, int, int]:
        if place is None:
            return (-1, 0, -1)
        if place == UNKNOWN:
            return (0, -1, -1)  # its fills fail, saying why
        mask, offset, size = place
        mask &= self._all
        if self._last_unfiltered and chunk == self._nchunks - 1:
            mask = self._all
        return (mask << 32, offset, size)

    def table(self, nchunks: int) -> ChunkTable:
        store = self._store
        store.flush_file()  # chunks in HDF5's cache are written, and placed
        table = np.empty((nchunks, 3), dtype=np.int64)
        table[:] = self._entry(0, None)
        for first, mask, offset, size in store.chunk_places():
            chunk = first // self._rows
            if 0 <= chunk < nchunks:
                table[chunk] = self._entry(chunk, (mask, offset, size))
        fd = os.open(store.path, os.O_RDONLY | os.O_CLOEXEC)
        return ChunkTable([store.path], table, fd)

    # called by HDF5Store.write_blocks, under its lock

    def moving(self, pages: Any, blocks: list[tuple[tuple[int, ...], np.ndarray]]) -> Any:
        ids: list[tuple[int, int]] = []
        try:
            for block, data in blocks:
                ids.append((block[0], pages.move_begin(block[0], data)))
        except BaseException:
            for _, move in ids:
                pages.move_end(move, None)
            raise
        return ids

    def moved(self, pages: Any, ids: Any, places: dict[tuple[int, ...], Any]) -> None:
        rest = (0,) * max(0, len(self._store.shape) - 1)
        for chunk, move in ids:
            pages.move_end(move, self._entry(chunk, places.get((chunk, *rest), UNKNOWN)))
