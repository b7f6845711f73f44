"""``StoredArray``: zarr, HDF5 and ``.npy`` data on disk, indexed like a NumPy array.

Reads return ``np.ndarray`` objects allocated in the active manager (or workspace), so budgets,
spill and workspaces apply to them.  This is data access only: the compute layer's
:class:`~oocarray.ChunkedArray`, the type users get, subclasses it with operators and
reductions.  ``.npy`` files and contiguous, uncompressed HDF5
datasets are memory-mapped: basic indexing returns views of the map, with no copy.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import os
import threading
import uuid
import weakref
from collections.abc import Iterable, Iterator
from types import TracebackType
from typing import Any, Self

import numpy as np
import numpy.typing as npt

from oocarray._memory._scratch import scratch_step
from oocarray._memory._units import format_bytes
from oocarray._storage._formats import Store, open_store
from oocarray._storage._html import stored_array_html
from oocarray._storage._indexing import ChunkPiece, Selection, parse_key
from oocarray._storage._paged._arrays import PagedArrays
from oocarray.errors import ClosedError, StoreNotFoundError

__all__ = ["StoredArray"]

_WRITE_WAVE = 8  # blocks handed to the store at once by a write


class StoredArray:
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
        self._append_lock = threading.Lock()  # appends of one array object run one at a time
        self._paged: PagedArrays | None = None  # chunk-backed ndarrays made by as_ndarray()

    # ---- description ----

    @property
    def shape(self) -> tuple[int, ...]:
        """The length of each axis.

        Examples
        --------
        >>> import numpy as np, oocarray as oc
        >>> oc.from_numpy(np.zeros((4, 3))).shape
        (4, 3)
        """
        return self._store.shape

    @property
    def dtype(self) -> np.dtype[Any]:
        """The data type of the elements.

        Examples
        --------
        >>> import numpy as np, oocarray as oc
        >>> oc.from_numpy(np.zeros(3, np.float32)).dtype == np.float32
        True
        """
        return self._store.dtype

    @property
    def chunks(self) -> tuple[int, ...]:
        """The chunk shape: the unit read and decoded (inside shards, for sharded arrays).

        Examples
        --------
        >>> import numpy as np, oocarray as oc
        >>> oc.from_numpy(np.zeros((4, 3)), chunks=(2, 3)).chunks
        (2, 3)
        """
        return self._store.chunks

    @property
    def shards(self) -> tuple[int, ...] | None:
        """The shard shape of a sharded zarr array (chunks are then inside shards), else None.

        Examples
        --------
        >>> import os, tempfile, oocarray as oc
        >>> path = os.path.join(tempfile.mkdtemp(), "s.zarr")
        >>> x = oc.create(path, (64, 64), "uint8", chunks=(8, 64), shards=(32, 64))
        >>> (x.chunks, x.shards)
        ((8, 64), (32, 64))
        """
        grid = self._store.write_grid
        return None if grid == self._store.chunks else grid

    @property
    def ndim(self) -> int:
        """The number of axes.

        Examples
        --------
        >>> import numpy as np, oocarray as oc
        >>> oc.from_numpy(np.zeros((4, 3))).ndim
        2
        """
        return len(self.shape)

    @property
    def size(self) -> int:
        """The number of elements.

        Examples
        --------
        >>> import numpy as np, oocarray as oc
        >>> oc.from_numpy(np.zeros((4, 3))).size
        12
        """
        return math.prod(self.shape)  # Python ints: no overflow, whatever a store says

    @property
    def nbytes(self) -> int:
        """Logical bytes (as if in memory): ``size * dtype.itemsize``.

        Examples
        --------
        >>> import numpy as np, oocarray as oc
        >>> oc.from_numpy(np.zeros((10, 10), np.float32)).nbytes
        400
        """
        return self.size * self.dtype.itemsize

    @property
    def path(self) -> str:
        """Where the array is: its directory or file, or its URL in an object store.

        Examples
        --------
        >>> import os, tempfile, oocarray as oc
        >>> path = os.path.join(tempfile.mkdtemp(), "x.zarr")
        >>> oc.create(path, (3,), "int8").path == path
        True
        """
        return self._store.path

    @property
    def format(self) -> str:
        """The storage format: ``"zarr"``, ``"hdf5"`` or ``"npy"``.

        Examples
        --------
        >>> import numpy as np, oocarray as oc
        >>> oc.from_numpy(np.arange(3)).format
        'zarr'
        """
        return self._store.format

    @property
    def codec(self) -> str:
        """The codecs of the chunks, joined by ``+``: ``"zstd+crc32c"`` (compression and
        checksum), ``"blosc+crc32c"`` for ``codec="lz4"``, ``"none"`` for raw data.

        Examples
        --------
        >>> import numpy as np, oocarray as oc
        >>> oc.from_numpy(np.zeros(3), codec="zstd").codec.split("+")[0]
        'zstd'
        """
        return self._store.codec

    @property
    def readonly(self) -> bool:
        """Whether the array was opened read-only (``mode="r"``).

        Examples
        --------
        >>> import os, tempfile, oocarray as oc
        >>> path = os.path.join(tempfile.mkdtemp(), "x.zarr")
        >>> (oc.create(path, (3,), "int8").readonly, oc.open(path).readonly)
        (False, True)
        """
        return self._store.readonly

    @property
    def location(self) -> str:
        """How the data is read: ``"mmap"`` for memory-mapped data (``.npy``, contiguous
        uncompressed HDF5), else ``"chunks"``.

        Examples
        --------
        >>> import numpy as np, oocarray as oc
        >>> oc.from_numpy(np.arange(3)).location
        'chunks'
        """
        return "mmap" if self._store.memmap is not None else "chunks"

    def stored_bytes(self) -> int:
        """Bytes the data takes on disk.

        Returns
        -------
        int
            The stored (compressed) bytes of the array's chunks and metadata.

        Raises
        ------
        ClosedError
            The array is closed.

        Examples
        --------
        >>> import numpy as np, oocarray as oc
        >>> x = oc.from_numpy(np.zeros(1_000_000))
        >>> x.stored_bytes() < x.nbytes // 100  # zeros compress well
        True
        """
        self._check_open()
        return self._store.stored_bytes()

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d chunked array")
        return self.shape[0]

    def read_ahead(
        self, regions: Iterable[tuple[slice, ...]]
    ) -> contextlib.AbstractContextManager[None]:
        """Inside, reads follow ``regions`` (slices with step 1, one per axis), in order: an
        array in an object store fetches their chunks ahead of the reads.

        Parameters
        ----------
        regions
            The regions about to be read, in order: tuples of slices with step 1, one per axis.

        Returns
        -------
        contextlib.AbstractContextManager
            A context manager; the read-ahead stops when it exits.  Local arrays read as
            usual inside it.

        Examples
        --------
        >>> import numpy as np, oocarray as oc
        >>> x = oc.from_numpy(np.arange(8), chunks=2)
        >>> regions = [(slice(0, 4),), (slice(4, 8),)]
        >>> with x.read_ahead(regions):
        ...     [int(x[r].sum()) for r in regions]
        [6, 22]
        """
        grid = self.chunks

        def chunks() -> Iterator[tuple[int, ...]]:
            for region in regions:
                spans = [
                    range(s.start // g, -(-s.stop // g)) for s, g in zip(region, grid, strict=True)
                ]
                yield from itertools.product(*spans)

        return self._store.read_ahead(chunks())

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
        n = store.shape[0]
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
        self._read_rows_into(start, out)
        return out if isinstance(key, slice) else out[0]

    def _read_rows_into(self, start: int, out: np.ndarray) -> None:
        """Fill ``out`` (C-contiguous, the shape of rows ``start:start + len(out)``) with those
        rows, decoded straight into it on every core where the format can: for an array whose
        other axes fit one chunk (every 1-d array), or a memory-mapped one.  The compute layer
        reads into buffers it reuses this way (a fresh array per read is fresh pages)."""
        self._check_open()
        store = self._store
        stop = start + len(out)
        if store.memmap is not None:
            out[...] = store.memmap.view(np.ndarray)[start:stop]
            return
        per_chunk = store.chunks[0]
        if not store.read_rows_into(start, out):
            rest = tuple(slice(0, s) for s in store.shape[1:])
            pieces = []
            row = start
            while row < stop:
                c, r = divmod(row, per_chunk)
                take = min(per_chunk - r, stop - row)
                covers = r == 0 and take == min(per_chunk, store.shape[0] - row)
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

    def append(self, rows: npt.ArrayLike) -> None:
        """Add ``rows`` at the end of axis 0 of a zarr array (opened ``"r+"`` or created).

        Chunk-atomic: the chunks (shards) the new rows touch are each written whole, beside
        their file and renamed, and only then is the metadata rewritten (the same way) with the
        new length.  A crash at any point leaves the array as it was before the call or as it
        is after it; chunks written past the old end by an append that did not finish hold no
        rows the metadata admits, and a later append writes over them whole.  A last chunk
        that was only partly filled is read, completed and written back.  Appends to one
        array object are serialised; appends from several processes to one array are not
        coordinated.

        Parameters
        ----------
        rows
            An array of ``n`` rows: shape ``(n, *x.shape[1:])`` (for one row, ``row[None]``),
            of a dtype that casts to ``x.dtype`` within its kind (``float64`` into a
            ``float32`` array, not floats into integers).

        Raises
        ------
        TypeError
            The array is not zarr (HDF5 and ``.npy`` do not grow), is 0-d, or ``rows`` has a
            dtype of another kind.
        ValueError
            ``rows`` does not have the array's number of axes or trailing shape.
        ReadOnlyError
            The array was opened read-only.

        Examples
        --------
        >>> import numpy as np, oocarray as oc, tempfile, os
        >>> path = os.path.join(tempfile.mkdtemp(), "log.zarr")
        >>> y = oc.create(path, (0, 3), "float32", chunks=(4, 3))
        >>> y.append(np.ones((5, 3)))
        >>> y.append(np.zeros((2, 3), np.float32))
        >>> y.shape, oc.open(path)[:, 0]
        ((7, 3), array([1., 1., 1., 1., 1., 0., 0.], dtype=float32))
        """
        self._check_open()
        store = self._store
        if not store.supports_appends:
            raise TypeError(
                f"append() grows zarr arrays; {self.path!r} is {self.format}, which does not "
                "grow: copy it to zarr (oc.from_batches or x.to_zarr) and append to that"
            )
        store.check_writable()
        if not self.shape:
            raise TypeError("append() adds rows along axis 0; a 0-d array has none")
        values = np.asarray(rows)
        if values.ndim != self.ndim or values.shape[1:] != self.shape[1:]:
            one = " (for a single row, pass row[None])" if values.shape == self.shape[1:] else ""
            raise ValueError(
                f"append() takes rows of shape (n, {', '.join(map(str, self.shape[1:]))}) for "
                f"an array of shape {self.shape}, got an array of shape {values.shape}{one}"
            )
        if not np.can_cast(values.dtype, self.dtype, "same_kind"):
            raise TypeError(
                f"cannot append {values.dtype} rows to a {self.dtype} array (the cast is not "
                f"within one kind); convert them first, e.g. rows.astype({str(self.dtype)!r})"
            )
        if len(values) == 0:
            return
        with self._append_lock, scratch_step():
            old = self.shape[0]
            new = old + len(values)
            grown = StoredArray(store.grown(new))
            grown[old:new] = values
            self.chunk_reads += grown.chunk_reads
            self.chunk_writes += grown.chunk_writes
            store.commit_rows(new)

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
        """The whole array as a plain ``np.ndarray``, with no copy up front.

        Memory-mapped arrays (``.npy``, contiguous uncompressed HDF5) give a view of their
        file's pages.  Chunked zarr arrays and chunked HDF5 datasets (raw, or with HDF5's gzip,
        shuffle and fletcher32 filters) give a *chunk-backed* ndarray (Linux userfaultfd):
        its address range is reserved, and the first touch of a page, from any thread or
        system call, decodes the chunk behind it into place on native threads (sequential
        access reads the next chunks ahead).  Any NumPy, SciPy or scikit-learn code runs on it
        as on a ``numpy.memmap``; views, ``np.asarray``, pickling (as a plain array) and C
        extensions work.  Resident chunks count against the active manager's budget (the
        root's outside any manager); over it, the least recently filled clean chunks are
        dropped and read again on their next touch.  The mapping lives until the last view of
        the array is gone.

        A chunk that cannot be read (corrupt, truncated, an I/O error) raises
        :class:`CorruptChunkError` (:class:`~oocarray.errors.PagedChunkError`) in the thread
        that touched it, as the C call that touched it returns (after an operator such as
        ``a + 1``, at the next call, function entry or loop iteration; what was computed
        holds ``0xFF`` bytes, NaN for floats, where the chunk could not be read); the chunk is
        read again on its next touch.  A thread with no Python state (a BLAS worker) gets
        ``SIGBUS``, and a system call on the damaged pages fails with ``EFAULT``.  See the
        README (``as_ndarray``, Failures) for exactly what holds.

        Parameters
        ----------
        mode
            ``"r"``: read-only.  ``"r+"``: writes change the store (the array must be open with
            ``mode="r+"``).  For chunk-backed arrays each chunk's first write is tracked, and
            dirty chunks are written back, each whole, by :meth:`flush`, :meth:`close`, the
            close of the manager the view was made under and when the last view is gone; zarr
            arrays' also natively under budget pressure (then dropped: an array written all
            over stays within the budget).  HDF5 arrays are written back through h5py only
            (HDF5 places a rewritten chunk itself), never under budget pressure: their dirty
            chunks stay in memory, so an HDF5 view written all over grows past its budget
            until :meth:`flush`.  Only the process that made the array writes back: a forked
            child's writes stay its own.  Writes through ``x[...]`` reach chunks not resident
            in a view; resident ones keep what was read (HDF5 chunks that such a write moves
            in the file are followed; writes by other processes or through h5py directly are
            not).

        Raises
        ------
        NotImplementedError
            A chunked store that cannot be paged: chunks that do not span every axis but the
            first, zarr codecs other than zstd, blosc, lz4, gzip/zlib or none (each with or
            without the crc32c codec), HDF5 filters other than gzip, shuffle and fletcher32
            (lzf, szip, scaleoffset, nbit, plugins), HDF5 types that are not plain numbers
            (compounds, strings), virtual HDF5 datasets, ``"r+"`` on shards, on blosc, lz4
            and gzip chunks (the native writer encodes raw and zstd), on chunks that are not
            whole pages, on compact HDF5 datasets and on contiguous ones never written.  The
            message says how to rewrite it.
        PagingUnavailableError
            userfaultfd with kernel-mode faults is not permitted here, or turned off with
            ``OOCARRAY_USERFAULTFD=0``; the message says how to enable it.
        ReadOnlyError
            ``mode="r+"`` on an array opened read-only.

        Returns
        -------
        numpy.ndarray
            A view of the file's pages, or a chunk-backed array, of the array's shape and dtype
            (read-only with ``mode="r"``).

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
        if mode == "r+":
            self._store.check_writable()
        memmap = self._store.memmap
        if memmap is None:
            if self._paged is None:
                self._paged = PagedArrays(self._store)
            return self._paged.make(mode)
        view = memmap.view(np.ndarray)
        if mode == "r" and view.flags.writeable:
            view = view.view()
            view.flags.writeable = False
        return view

    def flush(self) -> int:
        """Write back the chunks written through :meth:`as_ndarray` ``("r+")`` views, each
        chunk whole (zarr: written beside its file and renamed; HDF5: through h5py); the number
        of chunks written (those written back under budget pressure before are not counted).

        Returns
        -------
        int
            The number of chunks written.

        Raises
        ------
        OSError
            A full disk (``ENOSPC``): the chunks stay dirty, in memory.
        ClosedError
            The array is closed.

        Examples
        --------
        >>> import numpy as np, oocarray as oc
        >>> x = oc.from_numpy(np.arange(4.0))
        >>> x.flush()  # no view written: nothing to write back
        0
        """
        self._check_open()
        return 0 if self._paged is None else self._paged.flush()

    def paging_stats(self) -> list[dict[str, int]]:
        """Counters of each live chunk-backed ndarray of this array: fills, zero fills,
        read-aheads, evictions, failures, faults, decoded and resident bytes, dirty units,
        write-backs under budget pressure and their failures.

        Returns
        -------
        list of dict
            One dict of counters (name to int) per live :meth:`as_ndarray` view; empty when
            there is none.

        Examples
        --------
        >>> import numpy as np, oocarray as oc
        >>> oc.from_numpy(np.arange(4.0)).paging_stats()
        []
        """
        return [] if self._paged is None else self._paged.stats()

    def __iter__(self) -> Any:
        for i in range(len(self)):
            yield self[i]

    # ---- interop ----

    def to_dask(self) -> Any:
        """A dask array reading this one chunk by chunk (shard by shard for sharded arrays:
        a shard is one file, and its inner chunks decode on all cores within a task).

        Returns
        -------
        dask.array.Array
            The lazy dask array, with this array's chunks (or shards).

        Raises
        ------
        ClosedError
            The array is closed.

        Examples
        --------
        >>> import numpy as np, oocarray as oc
        >>> d = oc.from_numpy(np.arange(6), chunks=3).to_dask()
        >>> (d.chunks, int(d.sum().compute()))
        (((3, 3),), 15)
        """
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

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        """Pickle by path: unpickling reopens the same array (path, format, dataset, mode);
        no data and no store state goes into the pickle.

        This is what lets ``x.to_dask()`` graphs and ``oc.from_dask(d)`` run on a
        ``distributed`` cluster: each task carries the path, and the worker process reads
        (or writes) the chunks itself.  The receiving process must see the same path (one
        machine, or a shared file system); ``"r"`` stays read-only there, ``"r+"`` writable.

        A temporary array (``oc.temp``, ``from_numpy``, ``from_dask``) pickles the same way,
        for processes on this machine: the copy opens the original's directory in the spill
        dir but does not own it.  Its data is still deleted when the original is closed or
        dropped (a copy that reads after that finds no chunks, and gets zeros as zarr does
        for chunks never written), so keep the original referenced while copies are in use
        (the graph of ``x.to_dask()`` holds it; so does ``from_dask`` while it writes).
        Where that path does not exist (another machine, or the original is gone),
        unpickling raises :class:`~oocarray.errors.StoreNotFoundError` saying to write the
        data to a path the workers see with ``to_zarr`` first.  A closed array raises
        :class:`~oocarray.errors.ClosedError`.

        Examples
        --------
        >>> import os, pickle, tempfile, numpy as np, oocarray as oc
        >>> x = oc.create(os.path.join(tempfile.mkdtemp(), "x.zarr"), (4,), "int64")
        >>> x[...] = np.arange(4)
        >>> y = pickle.loads(pickle.dumps(x))  # a second handle on the same store
        >>> y.path == x.path, y[...]
        (True, array([0, 1, 2, 3]))
        """
        self._check_open()
        remote = self._store.reopen_remote()
        if remote is not None:  # an object store: its URL, options and cache, no local path
            return (
                _reopen_remote,
                (remote, "r" if self.readonly else "r+", self.dtype.hasobject, type(self)),
            )
        return (
            _reopen,
            (
                os.path.abspath(self.path),  # the receiver may run in another directory
                "r" if self.readonly else "r+",
                self._store.dataset_name,  # HDF5; a zarr path names its array
                self.dtype.hasobject,  # opened with allow_object=True, or it would not be open
                self._temporary,
                type(self),  # the compute layer's ChunkedArray comes back as one
            ),
        )

    def __dask_tokenize__(self) -> str:
        # A path names a place, not its content (writes change it): without this, dask would
        # name to_dask() graphs by the pickle (the path), and a cluster could hand back
        # results persisted before a write.  A fresh token per graph, as before pickling.
        return uuid.uuid4().hex

    # ---- lifetime ----

    def close(self) -> None:
        """Release open files, and delete the data of a temporary array; later reads and
        writes raise :class:`~oocarray.ClosedError`.  Closing twice does nothing.

        Examples
        --------
        >>> import numpy as np, oocarray as oc
        >>> x = oc.from_numpy(np.arange(3))
        >>> x.close()
        >>> x.closed
        True
        """
        if self._closed:
            return
        if self._paged is not None and not self._temporary:
            self._paged.flush()
        self._closed = True
        self._store.close()
        if self._delete_data is not None:
            self._delete_data()

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called (a temporary array's data is then deleted).

        Examples
        --------
        >>> import numpy as np, oocarray as oc
        >>> oc.from_numpy(np.arange(3)).closed
        False
        """
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
        try:
            stored = format_bytes(0 if self._closed else self.stored_bytes())
        except NotImplementedError:  # a store that cannot list its objects (plain HTTP)
            stored = "unknown size"
        return {
            "shape": str(self.shape),
            "dtype": str(self.dtype),
            "chunks": str(self.chunks) + (f" in shards {self.shards}" if self.shards else ""),
            "codec": self.codec,
            "logical": format_bytes(self.nbytes),
            "on disk": stored,
            "format": self.format + (" (temporary)" if self._temporary else ""),
            "location": f"{self.location} at {self.path}",
            "mode": "closed" if self._closed else "read-only" if self.readonly else "read-write",
        }

    def __repr__(self) -> str:
        s = self._summary()
        return (
            f"<oocarray.{type(self).__name__} shape={s['shape']} dtype={s['dtype']} "
            f"chunks={s['chunks']} "
            f"codec={s['codec']} {s['logical']} logical, {s['on disk']} on disk, "
            f"{s['format']}, {s['location']}>"
        )

    def _repr_html_(self) -> str:
        return stored_array_html(self)


def _reopen(
    path: str,
    mode: str,
    dataset: str | None,
    allow_object: bool,
    temporary: bool,
    array_type: type[StoredArray],
) -> StoredArray:
    """Unpickle a stored array: open its store again by path, as an ``array_type`` (see
    ``__reduce__``)."""
    try:
        return array_type(open_store(path, mode, dataset, allow_object))
    except StoreNotFoundError as error:
        if not temporary:
            raise
        raise StoreNotFoundError(
            f"the temporary array at {path!r} cannot be reopened here: its data lives in the "
            "spill directory of the process that made it, on that machine, and only while "
            "that array is open; write it to a path every worker sees first "
            "(x.to_zarr(path)) and use the array that returns"
        ) from error


def _reopen_remote(
    remote: tuple[Any, str | None, Any],
    mode: str,
    allow_object: bool,
    array_type: type[StoredArray],
) -> StoredArray:
    """Unpickle a stored array of an object store: open it again from its location."""
    location, dataset, cache = remote
    return array_type(open_store(location, mode, dataset, allow_object, cache))


def _numpy_key(selection: Selection) -> tuple[int | slice | np.ndarray, ...]:
    return tuple(axis.index for axis in selection.axes)
