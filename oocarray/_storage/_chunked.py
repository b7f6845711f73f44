"""``ChunkedArray``: zarr, HDF5 and ``.npy`` data on disk, indexed like a NumPy array.

Reads return ``np.ndarray`` objects allocated in the active manager (or workspace), so budgets,
spill and workspaces apply to them.  ``.npy`` files and contiguous, uncompressed HDF5
datasets are memory-mapped: basic indexing returns views of the map, with no copy.
"""

from __future__ import annotations

import functools
import html
import json
import math
import os
import threading
import weakref
from collections.abc import Mapping
from types import TracebackType
from typing import Any, Self

import numpy as np
import numpy.typing as npt

from oocarray._memory import Manager, active_manager, parse_shape, system
from oocarray._memory._units import format_bytes
from oocarray._storage import _temp_dirs
from oocarray._storage._base import auto_chunks
from oocarray._storage._formats import Store, open_store
from oocarray._storage._indexing import ChunkPiece, Selection, parse_key
from oocarray.errors import ClosedError

__all__ = ["ChunkedArray", "create", "from_dask", "from_numpy", "open", "temp"]

_MODES_OPEN = ("r", "r+")
_WRITE_WAVE = 8  # blocks handed to the store at once by a write
_MODES_CREATE = ("w", "w-", "x")


class ChunkedArray:
    """An array stored in chunks on disk (zarr v3/v2, HDF5, ``.npy``).

    Create one with :func:`open`, :func:`create`, :func:`temp`, :func:`from_numpy` or
    :func:`from_dask`.  Indexing supports integers, slices with steps, ``...``, negative
    indices and one integer-array or boolean index on an axis; results are ``np.ndarray``.
    ``x[...] = value`` writes, with broadcasting: chunks a write covers are written without
    being read first, partly covered ones are read, updated and written back.

    Examples
    --------
    >>> import numpy as np, oocarray as oc, tempfile, os
    >>> path = os.path.join(tempfile.mkdtemp(), "demo.zarr")
    >>> x = oc.create(path, (1000, 8), "float32", chunks=(256, 8))
    >>> x[:] = np.arange(8000, dtype=np.float32).reshape(1000, 8)
    >>> x[-1, ::4]
    array([7992., 7996.], dtype=float32)
    >>> oc.open(path)[[0, 999], 0]
    array([   0., 7992.], dtype=float32)
    """

    def __init__(self, store: Store, *, temporary: bool = False) -> None:
        self._store = store
        self._temporary = temporary
        self._closed = False
        # Deletes a temporary array's data once: on close(), or when the last reference goes.
        self._delete_data: weakref.finalize[Any, Any] | None = None
        # Chunks whole along every axis but the first: x[i] and x[i:j] take a short path.
        self._rows_fast = bool(store.shape) and store.chunks[1:] == store.shape[1:]
        self.chunk_reads = 0
        self.chunk_writes = 0

    # ---- description ----

    @property
    def shape(self) -> tuple[int, ...]:
        return self._store.shape

    @property
    def dtype(self) -> np.dtype[Any]:
        return self._store.dtype

    @property
    def chunks(self) -> tuple[int, ...]:
        return self._store.chunks

    @property
    def shards(self) -> tuple[int, ...] | None:
        """The shard shape of a sharded zarr array (chunks are then inside shards), else None."""
        grid = self._store.write_grid
        return None if grid == self._store.chunks else grid

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def nbytes(self) -> int:
        """Logical bytes (as if in memory)."""
        return self.size * self.dtype.itemsize

    @property
    def path(self) -> str:
        return self._store.path

    @property
    def format(self) -> str:
        """``"zarr"``, ``"hdf5"`` or ``"npy"``."""
        return self._store.format

    @property
    def codec(self) -> str:
        return self._store.codec

    @property
    def readonly(self) -> bool:
        return self._store.readonly

    @property
    def location(self) -> str:
        """``"mmap"`` for memory-mapped data, else ``"chunks"``."""
        return "mmap" if self._store.memmap is not None else "chunks"

    def stored_bytes(self) -> int:
        """Bytes the data takes on disk."""
        self._check_open()
        return self._store.stored_bytes()

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d chunked array")
        return self.shape[0]

    # ---- reading and writing ----

    def __getitem__(self, key: object) -> np.ndarray:
        self._check_open()
        memmap = self._store.memmap
        if memmap is not None:
            # Memory-mapped: NumPy indexes the map, and what it selects is copied out, as every
            # format's reads are, so a result never aliases the file; as_ndarray() does.
            picked = memmap.view(np.ndarray)[key]  # type: ignore[call-overload]
            return np.array(picked) if np.may_share_memory(picked, memmap) else picked
        if self._rows_fast and isinstance(key, (int, np.integer, slice)):
            rows = self._read_rows(key)
            if rows is not None:
                return rows
        selection = parse_key(key, self.shape, self.chunks)
        out = np.empty(selection.full_shape, dtype=self.dtype)
        pieces = list(selection.pieces())
        self._store.read_into(pieces, out)
        self.chunk_reads += len(pieces)
        return selection.to_result(out)

    def _read_rows(self, key: int | np.integer[Any] | slice) -> np.ndarray | None:
        """Rows of an array whose other axes fit one chunk: the common ``x[i]`` and
        ``x[i:j]`` of row-wise access, without building a general selection.  None when the
        key needs the general path."""
        store = self._store
        n, per_chunk = store.shape[0], store.chunks[0]
        if isinstance(key, slice):
            start, stop, step = key.indices(n)
            if step != 1:
                return None
            stop = max(start, stop)
        elif isinstance(key, bool):
            return None
        else:
            start = int(key)
            if not -n <= start < n:
                raise IndexError(f"index {start} is out of bounds for axis 0 with size {n}")
            start %= n
            stop = start + 1
        out = np.empty((stop - start, *store.shape[1:]), dtype=store.dtype)
        if not store.read_rows_into(start, out):
            rest = tuple(slice(0, s) for s in store.shape[1:])
            pieces = []
            row = start
            while row < stop:
                c, r = divmod(row, per_chunk)
                take = min(per_chunk - r, stop - row)
                covers = r == 0 and take == min(per_chunk, n - row)
                pieces.append(
                    ChunkPiece(
                        (c,) + (0,) * len(rest),
                        (slice(r, r + take), *rest),
                        (slice(row - start, row - start + take), *rest),
                        covers,
                    )
                )
                row += take
            store.read_into(pieces, out)
        self.chunk_reads += -(-(stop - start) // per_chunk) if stop > start else 0
        return out if isinstance(key, slice) else out[0]

    def __setitem__(self, key: object, value: object) -> None:
        self._check_open()
        self._store.check_writable()
        selection = parse_key(key, self.shape, self._store.write_grid)
        given = np.asarray(value, dtype=self.dtype)
        try:
            values = np.broadcast_to(given, selection.shape)
        except ValueError as error:
            raise ValueError(
                f"cannot write a value of shape {given.shape} into a selection of shape "
                f"{selection.shape}: {error}"
            ) from None
        memmap = self._store.memmap
        if memmap is not None:
            memmap[_numpy_key(selection)] = values
            return
        values = selection.from_value(values)
        # Blocks go to the store a few at a time: enough to keep every core busy encoding,
        # few enough that the blocks read back for partial writes stay small.
        wave: list[ChunkPiece] = []
        for piece in selection.pieces():
            wave.append(piece)
            if len(wave) == _WRITE_WAVE:
                self._write_wave(wave, values)
                wave = []
        if wave:
            self._write_wave(wave, values)

    def _write_wave(self, pieces: list[ChunkPiece], values: np.ndarray) -> None:
        """Write the blocks of ``pieces`` (``values`` laid out as the selection's full shape).
        A block written in part is read, updated and written back; the blocks' locks are held
        from the read to the write, so no other thread's write to them lands in between and
        is lost (whole blocks take them too: a read-modify-write would undo them)."""
        store = self._store
        with store.locked_blocks([piece.chunk for piece in pieces]):
            blocks = []
            for piece in pieces:
                if piece.covers_chunk:
                    block = values[piece.out]
                else:
                    block = store.read_block(piece.chunk)
                    self.chunk_reads += 1
                    block[piece.local] = values[piece.out]
                blocks.append((piece.chunk, block))
            store.write_blocks(blocks)
        self.chunk_writes += len(blocks)

    def __array__(self, dtype: npt.DTypeLike | None = None, copy: bool | None = None) -> np.ndarray:
        """The whole array in memory, allocated in the active manager (its budget applies).

        ``copy=False`` (``np.asarray(x, copy=False)``) never copies, as in NumPy 2: a
        memory-mapped array gives :meth:`as_ndarray`'s view, anything else raises
        ``ValueError``."""
        if copy is False:
            return self._without_copy(dtype)
        data = self[...]
        return data if dtype is None else data.astype(dtype, copy=False)

    def _without_copy(self, dtype: npt.DTypeLike | None) -> np.ndarray:
        if self._store.memmap is not None and (dtype is None or np.dtype(dtype) == self.dtype):
            return self.as_ndarray("r" if self.readonly else "r+")
        where = "in chunks" if self._store.memmap is None else f"as {self.dtype}"
        raise ValueError(
            f"the {self.format} array at {self.path!r} is stored {where}, so it cannot be "
            "made an ndarray without a copy (copy=False); use np.asarray(x) to read it into "
            "memory"
        )

    def as_ndarray(self, mode: str = "r") -> np.ndarray:
        """The whole array as an ``np.ndarray`` over its file's pages, with no copy: the
        explicit zero-copy view of a memory-mapped array (``.npy``, contiguous uncompressed
        HDF5).  Indexing copies what it selects; this does not.

        Parameters
        ----------
        mode
            ``"r"``: a read-only view.  ``"r+"``: writes into the view change the file (the
            array must be open with ``mode="r+"``).

        Raises
        ------
        NotImplementedError
            The array is stored in chunks (zarr, chunked HDF5): read it with ``x[...]``.
        ReadOnlyError
            ``mode="r+"`` on an array opened read-only.

        Examples
        --------
        >>> import numpy as np, oocarray as oc, tempfile, os
        >>> path = os.path.join(tempfile.mkdtemp(), "a.npy")
        >>> np.save(path, np.arange(6.0))
        >>> view = oc.open(path).as_ndarray()
        >>> view[2], oc.location(view), view.flags.writeable
        (np.float64(2.0), 'mmap', False)
        """
        self._check_open()
        if mode not in ("r", "r+"):
            raise ValueError(f"mode must be 'r' or 'r+', got {mode!r}")
        memmap = self._store.memmap
        if memmap is None:
            raise NotImplementedError(
                f"as_ndarray() is a view of a memory-mapped file (.npy, contiguous "
                f"uncompressed HDF5); the {self.format} array at {self.path!r} is stored in "
                "chunks: read it with x[...] instead"
            )
        if mode == "r+":
            self._store.check_writable()
        view = memmap.view(np.ndarray)
        if mode == "r" and view.flags.writeable:
            view = view.view()
            view.flags.writeable = False
        return view

    def __iter__(self) -> Any:
        for i in range(len(self)):
            yield self[i]

    # ---- interop ----

    def to_dask(self) -> Any:
        """A dask array reading this one chunk by chunk (shard by shard for sharded arrays:
        a shard is one file, and its inner chunks decode on all cores within a task)."""
        import dask.array as da

        self._check_open()
        return da.from_array(  # type: ignore[no-untyped-call]
            self,
            chunks=self._store.write_grid,
            asarray=False,
            fancy=False,
            lock=self.format == "hdf5",
            meta=np.empty((0,) * self.ndim, dtype=self.dtype),
        )

    # ---- lifetime ----

    def close(self) -> None:
        """Release open files, and delete the data of a temporary array; later reads and
        writes raise :class:`ClosedError`.  Closing twice does nothing."""
        self._closed = True
        self._store.close()
        if self._delete_data is not None:
            self._delete_data()

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called (a temporary array's data is then deleted)."""
        return self._closed

    def _check_open(self) -> None:
        if not self._closed:
            return
        if self._temporary:
            raise ClosedError(
                f"the temporary array that was at {self.path!r} is closed and its data deleted; "
                "keep the array open while it is used, or make a new one with oc.temp"
            )
        raise ClosedError(
            f"the chunked array at {self.path!r} is closed; open it again with oc.open(path)"
        )

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # ---- presentation ----

    def _summary(self) -> dict[str, str]:
        stored = 0 if self._closed else self.stored_bytes()
        return {
            "shape": str(self.shape),
            "dtype": str(self.dtype),
            "chunks": str(self.chunks) + (f" in shards {self.shards}" if self.shards else ""),
            "codec": self.codec,
            "logical": format_bytes(self.nbytes),
            "on disk": format_bytes(stored),
            "format": self.format + (" (temporary)" if self._temporary else ""),
            "location": f"{self.location} at {self.path}",
            "mode": "closed" if self._closed else "read-only" if self.readonly else "read-write",
        }

    def __repr__(self) -> str:
        s = self._summary()
        return (
            f"<oocarray.ChunkedArray shape={s['shape']} dtype={s['dtype']} chunks={s['chunks']} "
            f"codec={s['codec']} {s['logical']} logical, {s['on disk']} on disk, "
            f"{s['format']}, {s['location']}>"
        )

    def _repr_html_(self) -> str:
        rows = "".join(
            f"<tr><th style='text-align:left'>{html.escape(k)}</th>"
            f"<td style='text-align:left'>{html.escape(v)}</td></tr>"
            for k, v in self._summary().items()
        )
        return f"<table><caption>oocarray.ChunkedArray</caption>{rows}</table>"


def _numpy_key(selection: Selection) -> tuple[int | slice | np.ndarray, ...]:
    return tuple(axis.index for axis in selection.axes)


def open(
    path: str | os.PathLike[str],
    mode: str = "r",
    dataset: str | None = None,
    *,
    allow_object: bool = False,
) -> ChunkedArray:
    """Open an array on disk; its format (zarr v3/v2, HDF5, ``.npy``) comes from its content.

    Parameters
    ----------
    path
        A zarr array directory, an HDF5 file or a ``.npy`` file.
    mode
        ``"r"`` (read-only) or ``"r+"`` (read and write).
    dataset
        The array's path inside an HDF5 file or a zarr group (v3 or v2), e.g. ``"a/b"``; not
        needed when the file or group holds only one.
    allow_object
        Read arrays of Python objects (which can run code when loaded): only for data you trust.

    Raises
    ------
    StoreNotFoundError
        Nothing is at ``path`` (or no such dataset in the HDF5 file or zarr group).
    ValueError
        ``path`` holds no array oocarray reads, or holds objects and ``allow_object`` is off.
    """
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"path must be a str or os.PathLike, got {path!r}")
    if mode not in _MODES_OPEN:
        raise ValueError(f"mode must be one of {_MODES_OPEN} for oc.open, got {mode!r}")
    return ChunkedArray(open_store(path, mode, dataset, allow_object))


def _parse_chunks(
    chunks: object, shape: tuple[int, ...], dtype: np.dtype[Any], name: str = "chunks"
) -> tuple[int, ...]:
    if chunks is None:
        return auto_chunks(shape, dtype.itemsize)
    if isinstance(chunks, (int, np.integer)) and not isinstance(chunks, bool):
        chunks = (int(chunks),) * len(shape)
    if not isinstance(chunks, (tuple, list)) or len(chunks) != len(shape):
        raise ValueError(
            f"{name} must be None, an int, or one positive int per axis ({len(shape)}), "
            f"got {chunks!r}"
        )
    result = []
    for c in chunks:
        if isinstance(c, bool) or not isinstance(c, (int, np.integer)) or c < 1:
            raise ValueError(f"{name} must be positive ints, got {chunks!r}")
        result.append(int(c))
    return tuple(result)


INNER_CHUNK_BYTES = 128 << 10


def _inner_chunks(shards: tuple[int, ...], itemsize: int) -> tuple[int, ...]:
    """Default chunks inside shards: the shard halved along its leading axes (so they divide
    it) until a chunk holds at most INNER_CHUNK_BYTES."""
    chunks = list(shards)
    for axis in range(len(chunks)):
        while math.prod(chunks) * itemsize > INNER_CHUNK_BYTES and chunks[axis] % 2 == 0:
            chunks[axis] //= 2
    return tuple(chunks)


def _parse_dtype(dtype: object) -> np.dtype[Any]:
    try:
        parsed: np.dtype[Any] = np.dtype(dtype)  # type: ignore[call-overload]
    except TypeError as error:
        raise TypeError(f"dtype {dtype!r} is not a NumPy data type (e.g. 'float32')") from error
    if parsed.hasobject:  # allow_object= is for opening existing arrays, never for writing
        raise ValueError(
            f"chunked arrays cannot store Python objects (dtype {parsed}): use a fixed-width "
            "string dtype such as 'U16' or 'S16', or a numeric one"
        )
    if parsed.fields is not None or parsed.subdtype is not None:
        raise TypeError(f"structured and sub-array dtypes are not supported, got {parsed}")
    return parsed


def create(
    path: str | os.PathLike[str],
    shape: object,
    dtype: npt.DTypeLike,
    chunks: object = None,
    codec: str = "zstd",
    mode: str = "w",
    shards: object = None,
    *,
    dimension_names: object = None,
    attributes: object = None,
    dataset: str | None = None,
) -> ChunkedArray:
    """Create a zarr v3 array on disk, filled with zeros, open for reading and writing.

    Parameters
    ----------
    path
        The array's directory, or with ``dataset`` the zarr group that holds it.
    shape, dtype
        As for :func:`numpy.empty`.
    chunks
        Chunk shape; default: about 4 MiB per chunk, trailing axes whole where they fit (with
        ``shards``: at most 128 KiB, halving the shard along its leading axes).
    codec
        ``"zstd"`` (default), ``"lz4"`` or ``"blosc"`` (both Blosc, with byte shuffle),
        ``"gzip"``, or ``"none"``.
    mode
        ``"w"`` replaces what is at ``path``; ``"w-"`` (or ``"x"``) fails if it exists.
    shards
        Shard shape (a multiple of ``chunks`` on every axis), or None for no sharding.  A shard
        is one file holding many small chunks: random reads decode only the small chunks they
        touch, while the files stay few.  Writes are made of whole shards (writing part of one
        rewrites it), so write in shard-sized blocks.
    dimension_names
        One name per axis (xarray's dimensions), e.g. ``("time", "station")``.  Default: none
        for an array of its own, and ``dim_0``, ``dim_1``, ... for an array inside a zarr group
        (what xarray needs to open the group; name them when the group's arrays do not share
        their axes).
    attributes
        JSON-serialisable metadata stored with the array (``units``, ``long_name``, ...);
        xarray shows them as the variable's ``attrs``.
    dataset
        Create the array at this path (``"temperature"``, ``"a/b"``) inside the zarr v3 group at
        ``path``, making the group and the groups on the way if needed; ``mode`` then applies
        to that array alone.  Read it back with ``oc.open(path, dataset=...)``.

    Examples
    --------
    xarray opens zarr groups whose arrays name their dimensions:

    >>> import os, tempfile, numpy as np, xarray as xr, oocarray as oc
    >>> path = os.path.join(tempfile.mkdtemp(), "weather.zarr")
    >>> t = oc.create(path, (365, 40), "float32", dataset="temperature",
    ...               dimension_names=("day", "station"), attributes={"units": "K"})
    >>> t[...] = 280.0
    >>> ds = xr.open_zarr(path, consolidated=False)
    >>> ds["temperature"].dims, ds["temperature"].attrs["units"]
    (('day', 'station'), 'K')
    >>> oc.open(path, dataset="temperature")[0, :3]
    array([280., 280., 280.], dtype=float32)
    """
    from oocarray._storage._zarr import CODECS, ZarrStore, create_zarr, is_group, require_group

    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"path must be a str or os.PathLike, got {path!r}")
    dims = parse_shape(shape)
    parsed = _parse_dtype(dtype)
    shard_shape = None if shards is None else _parse_chunks(shards, dims, parsed, "shards")
    if shard_shape is not None and chunks is None:
        chunk_shape = _inner_chunks(shard_shape, parsed.itemsize)
    else:
        chunk_shape = _parse_chunks(chunks, dims, parsed)
    if shard_shape is not None and any(
        s % c for s, c in zip(shard_shape, chunk_shape, strict=True)
    ):
        raise ValueError(
            f"shards must be a multiple of chunks on every axis, got shards {shard_shape} for "
            f"chunks {chunk_shape}"
        )
    if not isinstance(codec, str) or codec not in CODECS:
        raise ValueError(f"codec must be one of {CODECS}, got {codec!r}")
    if mode not in _MODES_CREATE:
        raise ValueError(f"mode must be one of {_MODES_CREATE} for oc.create, got {mode!r}")
    names = _parse_dimension_names(dimension_names, len(dims))
    attrs = _parse_attributes(attributes)
    if dataset is not None and not isinstance(dataset, str):
        raise TypeError(f"dataset must be a str such as 'temperature' or 'a/b', got {dataset!r}")
    target = os.fspath(path) if dataset is None else require_group(os.fspath(path), dataset)
    if mode != "w" and os.path.exists(target):
        raise FileExistsError(f"{target!r} exists; use mode='w' to replace it")
    if names is None and is_group(os.path.dirname(os.path.abspath(target))):
        names = tuple(f"dim_{axis}" for axis in range(len(dims)))  # xarray's default names
    create_zarr(
        target,
        dims,
        parsed,
        chunk_shape,
        codec,
        overwrite=mode == "w",
        shards=shard_shape,
        dimension_names=names,
        attributes=attrs,
    )
    return ChunkedArray(ZarrStore.open(target, "r+", False))


def _parse_dimension_names(names: object, ndim: int) -> tuple[str | None, ...] | None:
    if names is None:
        return None
    if (
        isinstance(names, (str, bytes))
        or not isinstance(names, (tuple, list))
        or len(names) != ndim
        or not all(n is None or isinstance(n, str) for n in names)
    ):
        raise ValueError(
            f"dimension_names must be one str (or None) per axis ({ndim}), e.g. "
            f"{tuple(f'dim_{i}' for i in range(ndim))}; got {names!r}"
        )
    return tuple(names)


def _parse_attributes(attributes: object) -> dict[str, Any] | None:
    if attributes is None:
        return None
    if not isinstance(attributes, Mapping) or not all(isinstance(k, str) for k in attributes):
        raise TypeError(f"attributes must be a mapping with str keys, got {attributes!r}")
    try:
        json.dumps(dict(attributes), allow_nan=False)
    except (TypeError, ValueError) as error:
        raise TypeError(
            f"attributes must be JSON values (str, numbers, bools, None, lists, dicts), got "
            f"{attributes!r}: {error}"
        ) from None
    return dict(attributes)


def temp(
    shape: object, dtype: npt.DTypeLike, chunks: object = None, codec: str = "zstd"
) -> ChunkedArray:
    """A zarr array in the spill directory, owned by the active manager (else the system one).

    It lives like an ndarray the manager allocated: its data is deleted when the last
    reference to it goes, on :meth:`ChunkedArray.close`, or at exit.  Still referenced when its
    manager closes, it escapes to the parent manager (counted in the parent's
    ``stats().escaped``, and refused by ``on_close="raise"`` like any escape).  Its directory
    is private to this process; what a killed process left is removed by the next process
    that makes a temporary array.

    Examples
    --------
    >>> import oocarray as oc
    >>> with oc.Manager("scratch"):
    ...     t = oc.temp((100, 4), "float32")
    ...     t[...] = 1.0
    >>> float(t[...].sum())  # escaped: still valid after the manager closed
    400.0
    >>> t.close()  # deletes the data now; later use raises ClosedError
    """
    directory = _temp_dirs.new_temp_dir()
    try:
        array = create(directory, shape, dtype, chunks=chunks, codec=codec, mode="w")
    except BaseException:
        _temp_dirs.remove_temp_dir(directory, os.getpid())
        raise
    array._temporary = True
    array._delete_data = weakref.finalize(array, _temp_dirs.remove_temp_dir, directory, os.getpid())
    array._delete_data.atexit = False  # the process's session directory goes at exit
    _own_temporary(_open_ancestor(active_manager() or system()), array)
    return array


def _open_ancestor(manager: Manager) -> Manager:
    while manager.closed and manager.parent is not None:
        manager = manager.parent
    return manager


# The temporary arrays each open manager owns, held weakly (so an array goes as soon as the
# user drops it), with one close hook per manager that hands the survivors to its parent.
_temporaries: weakref.WeakKeyDictionary[Manager, weakref.WeakSet[ChunkedArray]] = (
    weakref.WeakKeyDictionary()
)
_temporaries_lock = threading.Lock()


def _own_temporary(manager: Manager, array: ChunkedArray) -> None:
    """Make ``manager`` the owner of a temporary array: when it closes while the array is
    still referenced, the array escapes to its parent, which owns it from then on."""
    if manager.parent is None:
        return  # the system manager never closes
    with _temporaries_lock:
        owned = _temporaries.get(manager)
        if owned is None:
            owned = _temporaries[manager] = weakref.WeakSet()
            manager._add_close_hook(functools.partial(_hand_to_parent, weakref.ref(manager)))
        owned.add(array)


def _hand_to_parent(manager_ref: weakref.ref[Manager]) -> tuple[int, int] | None:
    """The close hook: the closing manager's temporary arrays still referenced escape to its
    parent, counted like ndarray escapes (their logical bytes)."""
    manager = manager_ref()
    if manager is None or manager.parent is None:
        return None
    with _temporaries_lock:
        owned = _temporaries.pop(manager, None)
    escaped = [array for array in list(owned or ()) if not array._closed]
    new_owner = _open_ancestor(manager.parent)
    for array in escaped:
        _own_temporary(new_owner, array)
    return len(escaped), sum(array.nbytes for array in escaped)


def from_numpy(a: npt.ArrayLike, chunks: object = None, codec: str = "zstd") -> ChunkedArray:
    """A temporary chunked copy of ``a`` (see :func:`temp` for its lifetime)."""
    data = np.asarray(a)
    result = temp(data.shape, data.dtype, chunks=chunks, codec=codec)
    try:
        result[...] = data
    except BaseException:
        result.close()
        raise
    return result


def from_dask(d: Any, chunks: object = None, codec: str = "zstd") -> ChunkedArray:
    """Compute a dask array into a temporary chunked array (see :func:`temp` for its
    lifetime), chunk by chunk, on dask's scheduler."""
    result = temp(d.shape, d.dtype, chunks=chunks or d.chunksize, codec=codec)
    try:
        d.rechunk(result.chunks).store(result, lock=False)
    except BaseException:
        result.close()
        raise
    return result
