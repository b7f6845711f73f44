"""HDF5 datasets through h5py.  Contiguous, uncompressed datasets are memory-mapped at the
dataset's file offset, so reads are views of the map with no copy.

Chunk-backed ndarrays (``_paged/_hdf5.py``) read chunks straight from the file, where HDF5 says
they are; what they need to know of a dataset is asked here (:meth:`HDF5Store.paging_layout`,
:meth:`HDF5Store.chunk_places`), so that h5py is imported here only.  A write can move a chunk
in the file (a compressed chunk that grows is stored elsewhere, and its old bytes are freed for
reuse), so they register a watcher per dataset (:func:`watch_chunks`), and every write of this
process through an :class:`HDF5Store` tells each one the new bytes before the write (fills
copy them meanwhile) and, once the file is flushed, where the chunks now are."""

from __future__ import annotations

import ctypes
import os
import threading
import weakref
from collections.abc import Sequence
from typing import Any

import h5py
import numpy as np

from oocarray._storage._base import Store, auto_chunks, check_dtype
from oocarray._storage._hdf5_chunks import (
    UNKNOWN,
    NativeChunks,
    NoNativePipeline,
    PagingLayout,
    native_pipeline,
)
from oocarray._storage._indexing import ChunkPiece
from oocarray.errors import CorruptChunkError, StoreNotFoundError

__all__ = ["UNKNOWN", "HDF5Store", "PagingLayout", "watch_chunks", "watch_lock"]


# Names of the common HDF5 filters, by their registered ids (a plugin's own name can be a
# sentence); deflate is shown as h5py names it.
_FILTER_NAMES = {
    1: "gzip",
    2: "shuffle",
    3: "fletcher32",
    4: "szip",
    5: "nbit",
    6: "scaleoffset",
    32000: "lzf",
    32001: "blosc",
    32004: "lz4",
    32008: "bitshuffle",
    32015: "zstd",
}


def _filter_chain(ds: h5py.Dataset) -> str:
    """The dataset's filter pipeline in the order it is applied on write, as
    ``"shuffle+gzip+fletcher32"``; ``"none"`` without filters."""
    plist = ds.id.get_create_plist()
    names = []
    for i in range(plist.get_nfilters()):
        number = plist.get_filter(i)[0]
        names.append(_FILTER_NAMES.get(number, f"filter-{number}"))
    return "+".join(names) or "none"


# Watchers of chunk moves, per dataset (its identity): {key (weak): watcher}.  A watcher has
# moving(key, blocks) -> token before a write and moved(key, token, places) after it.
_watchers: dict[str, weakref.WeakKeyDictionary[Any, Any]] = {}
_watch_lock = threading.RLock()  # writes, and the making of a table and its watcher


def _fresh_watch_lock() -> None:
    global _watch_lock
    _watch_lock = threading.RLock()  # a forked child has one thread: no holder is left


os.register_at_fork(after_in_child=_fresh_watch_lock)


def watch_lock() -> threading.RLock:
    """Held by every write, and while a chunk table is read and its watcher registered, so that
    no write falls in between."""
    return _watch_lock


def watch_chunks(identity: str, key: Any, watcher: Any) -> None:
    """Tell ``watcher`` of every write to the dataset ``identity`` for as long as ``key`` lives."""
    _watchers.setdefault(identity, weakref.WeakKeyDictionary())[key] = watcher


_libhdf5: list[Any] = []


def _hdf5_library() -> Any:
    """The libhdf5 h5py runs on (for H5Pget_chunk_opts, which h5py does not wrap), or None."""
    if not _libhdf5:
        lib = None
        try:
            with open("/proc/self/maps", encoding="utf-8") as maps:
                names = {line.split()[-1] for line in maps if "libhdf5" in line}
            for name in sorted(names):
                base = os.path.basename(name)
                if base.startswith("libhdf5") and not base.startswith("libhdf5_hl"):
                    lib = ctypes.CDLL(name)
                    lib.H5Pget_chunk_opts.argtypes = [ctypes.c_int64, ctypes.POINTER(ctypes.c_uint)]
                    lib.H5Pget_chunk_opts.restype = ctypes.c_int
                    break
        except (OSError, AttributeError):
            lib = None
        _libhdf5.append(lib)
    return _libhdf5[0]


def _partial_unfiltered(plist: Any) -> bool | None:
    """Whether H5D_CHUNK_DONT_FILTER_PARTIAL_CHUNKS is set: partial edge chunks are then stored
    unfiltered, with nothing in their filter mask to say so.  None when it cannot be asked."""
    lib = _hdf5_library()
    if lib is None:
        return None
    opts = ctypes.c_uint(0)
    if lib.H5Pget_chunk_opts(plist.id, ctypes.byref(opts)) < 0:
        return None
    return bool(opts.value & 0x0002)


def _exact_type(ds: h5py.Dataset) -> bool:
    dtype = np.dtype(ds.dtype)
    if dtype.kind not in "biufc":
        return False
    stored = ds.id.get_type()
    candidates = [h5py.h5t.py_create(dtype)]
    if dtype.kind == "c" and hasattr(h5py.h5t, "COMPLEX_IEEE_F64LE"):  # HDF5 2's own complex
        order = "BE" if dtype.byteorder == ">" else "LE"
        native = getattr(h5py.h5t, f"COMPLEX_IEEE_F{dtype.itemsize * 4}{order}", None)
        if native is not None:
            candidates.append(native)
    return any(stored.equal(c) for c in candidates)


def _datasets(group: h5py.Group) -> list[str]:
    names: list[str] = []

    def visit(name: str, obj: Any) -> None:
        if isinstance(obj, h5py.Dataset):
            names.append(name)

    group.visititems(visit)
    return names


class HDF5Store(Store):
    format = "hdf5"

    def __init__(self, path: str, mode: str, dataset: str | None, allow_object: bool) -> None:
        self._native: NativeChunks | None = None
        self._native_decided = False
        try:
            self._open(path, mode, dataset, allow_object)
        except (RuntimeError, AttributeError, KeyError, IndexError, ArithmeticError) as error:
            if isinstance(error, KeyError) and dataset is not None:
                raise
            # HDF5 reports damaged metadata (object headers, B-trees, heaps) as RuntimeError.
            raise ValueError(
                f"the HDF5 file {path!r} is damaged: {type(error).__name__}: {error}"
            ) from error

    def _open(self, path: str, mode: str, dataset: str | None, allow_object: bool) -> None:
        self.path = path
        self.readonly = mode == "r"
        self.file = h5py.File(path, "r" if self.readonly else "r+")
        try:
            self.dataset_name = self._pick(dataset)
            ds = self.file[self.dataset_name]
            check_dtype(ds.dtype, allow_object, f"HDF5 dataset {self.dataset_name!r} in {path!r}")
            if ds.shape is None:
                raise ValueError(
                    f"HDF5 dataset {self.dataset_name!r} in {path!r} has a null dataspace: no "
                    "shape and no elements (h5py.Empty), so there is no array to open; read "
                    "it with h5py"
                )
        except BaseException:
            self.file.close()
            raise
        self.ds = ds
        self.shape = tuple(ds.shape)
        self.dtype = np.dtype(ds.dtype)
        self.fill_value = ds.fillvalue
        self.codec = _filter_chain(ds)
        # Chunked datasets page (``_paged/_hdf5.py`` refuses the filters it cannot decode);
        # contiguous ones are memory-mapped, compact ones copied.
        self.supports_paging = ds.chunks is not None
        offset = ds.id.get_offset()
        if (
            ds.chunks is None
            and ds.compression is None
            and offset is not None
            and not ds.dtype.hasobject
        ):
            self.memmap = np.memmap(
                path,
                dtype=self.dtype,
                mode="r" if self.readonly else "r+",
                offset=offset,
                shape=self.shape,
            )
            self.chunks = auto_chunks(self.shape, self.dtype.itemsize)
        else:
            self.chunks = (
                tuple(ds.chunks) if ds.chunks else auto_chunks(self.shape, self.dtype.itemsize)
            )

    @property
    def identity(self) -> str:
        return f"{super().identity}::{self.dataset_name}"

    def _pick(self, dataset: str | None) -> str:
        if dataset is not None:
            if not isinstance(dataset, str):
                raise TypeError(f"dataset must be a str, got {dataset!r}")
            link = self.file.get(dataset, getlink=True)
            if link is None:
                raise StoreNotFoundError(
                    f"no dataset {dataset!r} in {self.path!r}; it has {_datasets(self.file)}"
                )
            if isinstance(link, h5py.ExternalLink):
                raise ValueError(
                    f"dataset {dataset!r} in {self.path!r} is an external link to another "
                    "file; open that file directly"
                )
            if not isinstance(self.file[dataset], h5py.Dataset):
                raise ValueError(f"{dataset!r} in {self.path!r} is a group, not a dataset")
            return dataset
        names = _datasets(self.file)
        if len(names) == 1:
            return names[0]
        raise ValueError(
            f"{self.path!r} has {len(names)} datasets {names}; choose one with dataset=..."
        )

    def _native_chunks(self) -> NativeChunks | None:
        """The native reader of this dataset's chunks, where it can read them (made once);
        None: h5py reads them (see :mod:`._hdf5_chunks`)."""
        if self._native is not None and self._native.stale:
            self._native.close()  # a write moved chunks where it could not tell: look again
            self._native, self._native_decided = None, False
        if not self._native_decided:
            self._native_decided = True
            try:
                self._native = self._make_native_chunks()
            except (NoNativePipeline, OSError, RuntimeError, ValueError):
                self._native = None  # h5py reads it, and reports damage in its own words
        return self._native

    def _make_native_chunks(self) -> NativeChunks | None:
        if not self.readonly or self.ds.chunks is None or not hasattr(self.ds.id, "chunk_iter"):
            return None
        layout = self.paging_layout()
        if layout.kind != "chunked" or not layout.exact_type:
            return None
        codec = native_pipeline(layout, self.dtype)
        partial = any(s % n for s, n in zip(self.shape, self.chunks, strict=True))
        if partial and codec[1] and layout.partial_unfiltered is None:
            return None  # how its edge chunks are stored cannot be told
        places: dict[tuple[int, ...], tuple[int, int, int]] = {}
        chunks = self.chunks

        def place(info: Any) -> None:
            key = tuple(o // n for o, n in zip(info.chunk_offset, chunks, strict=True))
            places[key] = (int(info.filter_mask), int(info.byte_offset), int(info.size))

        with watch_lock():  # no write between the table and its watcher
            # Another handle of this process may hold writes in HDF5's cache (HDF5 shares the
            # file between them): written out, and placed, first.
            self.file.flush()
            self.ds.id.chunk_iter(place)
            native = NativeChunks(
                path=self.path,
                shape=self.shape,
                chunks=chunks,
                dtype=self.dtype,
                fill_value=self.fill_value,
                codec=codec,
                codec_name=self.codec,
                partial_unfiltered=bool(layout.partial_unfiltered),
                places=places,
                guard=watch_lock,
                name=f"HDF5 dataset {self.dataset_name!r} in {self.path!r}",
            )
            watch_chunks(self.identity, native, native.watcher)
        return native

    def read_into(self, pieces: Sequence[ChunkPiece], out: np.ndarray) -> None:
        native = self._native_chunks() if self.memmap is None else None
        if native is None:
            super().read_into(pieces, out)
        else:
            native.read_into(pieces, out)

    def read_chunk(self, chunk: tuple[int, ...]) -> np.ndarray:
        region = self.chunk_region(chunk)
        if self.memmap is not None:
            return self.memmap[region]
        out = np.empty(tuple(r.stop - r.start for r in region), dtype=self.dtype)
        native = self._native_chunks()
        if native is not None:
            local = tuple(slice(0, r.stop - r.start) for r in region)
            native.read_into([ChunkPiece(chunk, local, local, True)], out)
            return out
        try:
            self.ds.read_direct(out, source_sel=region)
        except OSError as error:
            # HDF5 says only that a filter (inflate, a checksum, ...) failed on the chunk.
            if "filter returned failure" not in str(error):
                raise
            raise CorruptChunkError(
                f"chunk {chunk} of HDF5 dataset {self.dataset_name!r} in {self.path!r} cannot "
                f"be decoded ({self.codec}): it is corrupt or truncated ({error})"
            ) from error
        except RuntimeError as error:
            # Damaged metadata on the way to the chunk (its B-tree, the heap).
            raise CorruptChunkError(
                f"chunk {chunk} of HDF5 dataset {self.dataset_name!r} in {self.path!r} cannot "
                f"be found: the file is damaged ({error})"
            ) from error
        return out

    def write_blocks(self, blocks: Any) -> None:
        """Write the blocks; with chunk-backed ndarrays of this dataset alive, tell them (see the
        module's docstring), and flush the file so that they read what was written."""
        with _watch_lock:
            watched = list(_watchers.get(self.identity, {}).items())
            if not watched:
                super().write_blocks(blocks)
                return
            self.check_writable()
            # The new bytes, contiguous and in the stored dtype: what the moves hand to fills.
            blocks = [(b, np.array(data, dtype=self.dtype, order="C")) for b, data in blocks]
            tokens: list[tuple[Any, Any, Any]] = []
            flushed = False
            try:
                for key, watcher in watched:
                    tokens.append((key, watcher, watcher.moving(key, blocks)))
                super().write_blocks(blocks)
                self.file.flush()
                flushed = True
            finally:
                if not flushed:
                    try:
                        self.file.flush()
                        flushed = True
                    except Exception:  # the write's own error is raised
                        pass
                places = {block: self._place_after(block, flushed) for block, _ in blocks}
                for key, watcher, token in tokens:
                    watcher.moved(key, token, places)

    # ---- for chunk-backed ndarrays ----

    def paging_layout(self) -> PagingLayout:
        plist = self.ds.id.get_create_plist()
        filters = []
        for i in range(plist.get_nfilters()):
            number, _flags, values, name = plist.get_filter(i)
            label = _FILTER_NAMES.get(number) or name.decode(errors="replace") or f"filter-{number}"
            filters.append((int(number), label, tuple(int(v) for v in values)))
        layout = plist.get_layout()
        kind = {
            h5py.h5d.CHUNKED: "chunked",
            h5py.h5d.CONTIGUOUS: "contiguous",
            h5py.h5d.COMPACT: "compact",
            h5py.h5d.VIRTUAL: "virtual",
        }.get(layout, f"layout-{layout}")
        if kind == "contiguous" and plist.get_external_count() > 0:
            kind = "external"
        partial = _partial_unfiltered(plist) if kind == "chunked" and filters else False
        return PagingLayout(kind, filters, _exact_type(self.ds), partial)

    def chunk_places(self) -> list[tuple[int, int, int, int]]:
        """(first row, filter mask, byte offset, stored bytes) of every chunk stored in the
        file; a chunk not listed was never written (it holds the fill value)."""
        out: list[tuple[int, int, int, int]] = []
        dsid = self.ds.id
        if hasattr(dsid, "chunk_iter"):  # one pass over the chunk index (HDF5 1.14)
            dsid.chunk_iter(
                lambda info: out.append(
                    (info.chunk_offset[0], info.filter_mask, info.byte_offset, info.size)
                )
            )
            return out
        rows = self.chunks[0]
        for first in range(0, self.shape[0] if self.shape else 1, rows):
            place = self.chunk_place((first // rows, *(0,) * (len(self.shape) - 1)))
            if place is not None:
                out.append((first, *place))
        return out

    def chunk_place(self, chunk: tuple[int, ...]) -> tuple[int, int, int] | None:
        """(filter mask, byte offset, stored bytes) of one chunk, None when not stored."""
        coords = tuple(c * n for c, n in zip(chunk, self.chunks, strict=True))
        info = self.ds.id.get_chunk_info_by_coord(coords)
        if info.byte_offset is None:
            return None
        return int(info.filter_mask), int(info.byte_offset), int(info.size)

    def _place_after(self, chunk: tuple[int, ...], flushed: bool) -> Any:
        if not flushed:
            return UNKNOWN  # a chunk left in HDF5's cache can move at any later write
        try:
            return self.chunk_place(chunk)
        except Exception:  # damaged metadata: its fills fail, saying so
            return UNKNOWN

    def flush_file(self) -> None:
        if not self.readonly:
            self.file.flush()

    def write_chunk(self, chunk: tuple[int, ...], data: np.ndarray) -> None:
        self.check_writable()
        region = self.chunk_region(chunk)
        if self.memmap is not None:
            self.memmap[region] = data
        else:
            self.ds[region] = data

    def stored_bytes(self) -> int:
        try:
            return int(self.ds.id.get_storage_size())
        except RuntimeError:  # damaged metadata: the file's size is the best answer left
            return os.path.getsize(self.path)

    def close(self) -> None:
        if self._native is not None:
            self._native.close()
        self._native = None
        if isinstance(self.memmap, np.memmap) and not self.readonly:
            self.memmap.flush()
        self.memmap = None
        self.file.close()
