"""How a stored array goes to other processes and libraries: pickled by path (unpickling
opens the same store again) and read as a dask array.
"""

from __future__ import annotations

import os
import uuid
from typing import Any

import numpy as np

from oocarray._storage._formats import open_store
from oocarray._storage._stored_base import StoredArrayBase
from oocarray.errors import StoreNotFoundError

__all__ = ["StoredArrayInterop"]


class StoredArrayInterop(StoredArrayBase):
    """The interop of :class:`~oocarray._storage._chunked.StoredArray`: :meth:`to_dask`,
    pickling by path and dask tokens."""

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


def _reopen(
    path: str,
    mode: str,
    dataset: str | None,
    allow_object: bool,
    temporary: bool,
    array_type: type[StoredArrayInterop],
) -> StoredArrayInterop:
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
    array_type: type[StoredArrayInterop],
) -> StoredArrayInterop:
    """Unpickle a stored array of an object store: open it again from its location."""
    location, dataset, cache = remote
    return array_type(open_store(location, mode, dataset, allow_object, cache))
