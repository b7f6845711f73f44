"""Zarr (v3 and v2) arrays.

zarr-python parses metadata and creates arrays, so what is written stays plain zarr.  For the
common layouts of a local directory (see :mod:`._layout`) chunks are read directly: their bytes
are read and decoded straight into buffers of the active manager, on every core, without
zarr-python's per-call async machinery (see :mod:`._chunk_reads` and
:mod:`oocarray._storage._reader`); unsharded
ones are written directly too, v2 filters included.  Anything else (other v3 codec chains,
remote stores, writes into shards) goes through zarr-python.
"""

from __future__ import annotations

import json
import math
import os
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np
import zarr
import zarr.codecs

from oocarray._storage import _pool
from oocarray._storage._base import check_dtype
from oocarray._storage._indexing import parse_key
from oocarray._storage._zarr._chunk_files import (
    as_encodable,
    encoded_parts,
    mkstemp_beside,
    written_beside,
    zstd_writer,
)
from oocarray._storage._zarr._chunk_reads import ZarrChunkReads
from oocarray._storage._zarr._groups import array_in_group, is_group
from oocarray._storage._zarr._layout import Layout, layout_of
from oocarray.errors import StoreNotFoundError

__all__ = ["ZarrStore"]


# What zarr-python raises from metadata of the wrong structure, besides its ValueErrors.
_METADATA_DAMAGE = (
    AttributeError,
    TypeError,
    KeyError,
    IndexError,
    ArithmeticError,
    AssertionError,
    RecursionError,
)


class ZarrStore(ZarrChunkReads):
    format = "zarr"
    supports_appends = True
    _local_files = True  # chunks are files of a local directory (see _remote.py for the others)

    def __init__(self, array: Any, path: str, readonly: bool, allow_object: bool) -> None:
        self.array = array
        self.path = path
        self.readonly = readonly
        self.dtype = np.dtype(array.dtype)
        check_dtype(self.dtype, allow_object, f"zarr array {path!r}")
        self.shape = tuple(array.shape)
        self.chunks = tuple(array.chunks)
        self.fill_value = array.fill_value if array.fill_value is not None else 0
        self.zarr_format = array.metadata.zarr_format
        shards = getattr(array, "shards", None)
        self.sharded = shards is not None
        self._write_grid = tuple(shards) if shards is not None else self.chunks
        self._root = os.path.realpath(path) if self._local_files else path
        self._layout = layout_of(array) if not self._local_files or os.path.isdir(path) else None
        if self._layout is not None:
            # zarr-python reopens a big-endian v3 array as little-endian: keep the stored order.
            self.dtype = self._layout.stored_dtype
        stored = self._layout.stored_dtype if self._layout is not None else self.dtype
        self._chunk_nbytes = math.prod(self.chunks) * stored.itemsize
        self._rest = (0,) * (len(self.shape) - 1)  # chunk coordinates after the first
        # Uncompressed, unsharded chunk files (a CRC-32C after each, or not): rows are read in
        # place with ``preadv``.
        layout = self._layout
        self._plain_files = (
            self._local_files
            and layout is not None
            and layout.codec is None
            and layout.shard is None
        )
        # Rows whole in their chunks, stored as read: row reads go straight into the result.
        self._rows_direct = (
            layout is not None
            and layout.stored_dtype == self.dtype
            and self.chunks[1:] == self.shape[1:]
        )
        # Rows of one chunk file that the native reader decodes: read as one job (x[i]).
        self._one_file_rows = (
            self._rows_direct
            and self._local_files
            and layout is not None
            and layout.shard is None
            and layout.native_codec is not None
            and self.dtype.kind not in "mM"
        )
        # The file of row chunk c is head + str(c) + tail (a key is its numbers joined).
        self._row_path = ("", "")
        if self._one_file_rows:
            marker = 987654321987654321
            head, _, tail = self._chunk_path((marker, *self._rest)).partition(str(marker))
            self._row_path = (head, tail)
        self.codec = self._codec_name()
        self._zstd_writer = zstd_writer(layout)
        # Chunk files written past the page cache (see write_direct).
        self._direct = False
        self._thread_reads = threading.local()
        self.supports_partial_reads = self._plain_files
        # a local directory read without zarr-python
        self.supports_paging = layout is not None and self._local_files

    @classmethod
    def open(
        cls, path: str, mode: str, allow_object: bool, dataset: str | None = None
    ) -> ZarrStore:
        """Open the zarr array at ``path``, or the array ``dataset`` of the group there (a group
        holding one array needs no ``dataset``)."""
        if dataset is not None and not isinstance(dataset, str):
            raise TypeError(f"dataset must be a str, got {dataset!r}")
        try:
            if dataset is not None or is_group(path):
                path = array_in_group(path, dataset)
            try:
                array = zarr.open_array(store=path, mode="r" if mode == "r" else "r+")
            except FileNotFoundError as error:
                raise StoreNotFoundError(f"no zarr array at {path!r}") from error
            return cls(array, path, mode == "r", allow_object)
        except _METADATA_DAMAGE as error:
            # zarr-python trusts the JSON's structure (``null`` for zarr.json is an
            # AttributeError deep inside it): say what is wrong, as a ValueError.
            raise ValueError(
                f"the zarr metadata at {path!r} is damaged or not zarr: "
                f"{type(error).__name__}: {error}"
            ) from error

    def _codec_name(self) -> str:
        meta: Any = self.array.metadata
        if self.zarr_format == 2:  # filters, then the compressor, in the order of writing
            chain = [*(meta.filters or ()), meta.compressor]
            return "+".join(str(c.codec_id) for c in chain if c is not None) or "none"
        names = [type(c).__name__.removesuffix("Codec").lower() for c in meta.codecs]
        if names[:1] == ["bytes"]:
            names = names[1:]
        return "+".join(names) or "none"

    @property
    def direct(self) -> bool:
        """Whether chunks are read and written without zarr-python."""
        return self._layout is not None

    # ---- writing ----

    @property
    def write_grid(self) -> tuple[int, ...]:
        return self._write_grid

    def read_block(self, block: tuple[int, ...]) -> np.ndarray:
        if not self.sharded:
            return super().read_block(block)
        region = self.block_region(block)
        selection = parse_key(region, self.shape, self.chunks)
        out = np.empty(selection.full_shape, dtype=self.dtype)
        self.read_into(list(selection.pieces()), out)
        return out

    def write_chunk(self, chunk: tuple[int, ...], data: np.ndarray) -> None:
        self.write_blocks([(chunk, data)])

    def write_direct(self, on: bool) -> None:
        # Unsharded zstd chunk files of this machine's disks (the native writer's) can.
        self._direct = on and self._local_files and self._zstd_writer is not None

    def write_blocks(self, blocks: Sequence[tuple[tuple[int, ...], np.ndarray]]) -> None:
        """Whole blocks of :attr:`write_grid`.  Unsharded chunks are padded and laid out as
        stored here, in the caller's manager, then encoded and written on every core (zstd
        by the native writer, without the GIL); shards go through zarr-python."""
        self.check_writable()
        layout = self._layout
        if layout is None or layout.shard is not None:
            for block, data in blocks:
                self.array[self.block_region(block)] = data  # zarr-python encodes the shard
            return
        stored = [(chunk, self._stored_chunk(layout, data)) for chunk, data in blocks]

        def write(i: int, slot: int) -> None:
            self._write_stored(layout, *stored[i])

        _pool.run_spread(len(stored), write, _pool.workers())

    def _stored_chunk(self, layout: Layout, data: np.ndarray) -> np.ndarray:
        """A whole chunk as its file holds it: padded with the fill value, C order, in the
        stored byte order."""
        if data.shape != self.chunks:
            full = np.full(self.chunks, self.fill_value, dtype=self.dtype)
            full[tuple(slice(0, n) for n in data.shape)] = data
            data = full
        return np.ascontiguousarray(data, dtype=layout.stored_dtype)

    def _write_stored(self, layout: Layout, chunk: tuple[int, ...], data: np.ndarray) -> None:
        """Encode one stored chunk and write its file.  Runs on pool threads: it makes no NumPy
        arrays."""
        with written_beside(self._chunk_path(chunk)) as fd:  # never half a chunk
            data = as_encodable(data)
            if self._zstd_writer is not None:
                # one zstd frame, and the crc32c codec's checksum after it if it follows
                self._zstd_writer.write(fd, data, self._direct)
            else:
                for part in encoded_parts(layout, data):
                    while part:
                        part = part[os.write(fd, part) :]

    # ---- growing along axis 0 (append) ----

    def grown(self, rows: int) -> ZarrStore:
        """A second store of this array whose shape has ``rows`` rows in memory only: appends
        write their chunks through it while the metadata on disk still says the old shape, so
        readers never see rows whose chunks are not written yet."""
        handle = zarr.open_array(store=self.path, mode="r+")
        shape = (rows, *self.shape[1:])
        # What zarr-python's own resize does once it has saved the metadata; nothing is saved
        # here (commit_rows does that, after the data).
        object.__setattr__(handle.async_array, "metadata", handle.metadata.update_shape(shape))
        return ZarrStore(handle, self.path, False, allow_object=True)

    def commit_rows(self, rows: int) -> None:
        """Make the array ``rows`` rows long: its metadata file is rewritten beside itself and
        renamed over the old one (a reader sees the old shape or the new, whole), and this
        store takes the new shape."""
        self.check_writable()
        shape = (rows, *self.shape[1:])
        name = "zarr.json" if self.zarr_format == 3 else ".zarray"
        target = os.path.join(self._root, name)
        with open(target, "rb") as f:
            meta = json.load(f)
        meta["shape"] = list(shape)
        fd, tmp = mkstemp_beside(self._root)
        try:
            with os.fdopen(fd, "w") as f:
                json.dump(meta, f, indent=2)
            os.replace(tmp, target)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise
        self.array = zarr.open_array(store=self.path, mode="r+")
        self.shape = shape

    def stored_bytes(self) -> int:
        total = 0
        for directory, _, files in os.walk(self._root):
            for name in files:
                total += os.path.getsize(os.path.join(directory, name))
        return total
