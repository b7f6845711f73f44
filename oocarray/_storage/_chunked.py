"""``StoredArray``: zarr, HDF5 and ``.npy`` data on disk, indexed like a NumPy array.

Reads return ``np.ndarray`` objects allocated in the active manager (or workspace), so budgets,
spill and workspaces apply to them.  This is data access only: the compute layer's
:class:`~oocarray.ChunkedArray`, the type users get, subclasses it with operators and
reductions.  ``.npy`` files and contiguous, uncompressed HDF5
datasets are memory-mapped: basic indexing returns views of the map, with no copy.

Here are the reads; the class joins its parts, each in its module: the store, description
and lifetime (:mod:`._stored_base`), writes and appends (:mod:`._stored_writes`), ndarray
views (:mod:`._stored_views`), pickling and dask (:mod:`._stored_interop`).
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np
import numpy.typing as npt

from oocarray._memory._units import format_bytes
from oocarray._storage._html import stored_array_html
from oocarray._storage._indexing import ChunkPiece, parse_key
from oocarray._storage._stored_interop import StoredArrayInterop
from oocarray._storage._stored_views import StoredArrayViews
from oocarray._storage._stored_writes import StoredArrayWrites

__all__ = ["StoredArray"]


class StoredArray(StoredArrayWrites, StoredArrayViews, StoredArrayInterop):
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

    # ---- reading ----

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

    def __iter__(self) -> Any:
        for i in range(len(self)):
            yield self[i]

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
