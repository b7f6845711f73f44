"""The base of :class:`~oocarray._storage._chunked.StoredArray`: the store it reads and writes,
what it describes (shape, dtype, chunks, path, format, ...) and its lifetime (close, ``with``).

The parts of a stored array (writes, ndarray views, pickling and dask) subclass it, and
:class:`~oocarray._storage._chunked.StoredArray` joins them.
"""

from __future__ import annotations

import math
import threading
import weakref
from types import TracebackType
from typing import Any, Self

import numpy as np

from oocarray._storage._formats import Store
from oocarray._storage._paged._arrays import PagedArrays
from oocarray.errors import ClosedError

__all__ = ["StoredArrayBase"]


class StoredArrayBase:
    """A stored array's store, description and lifetime: what every part of
    :class:`~oocarray._storage._chunked.StoredArray` builds on."""

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
