"""Temporary chunked arrays (``oc.temp``, ``from_numpy``, ``from_dask``) and their lifetime.

A temporary belongs to the manager active when it was made.  Managers hold their temporaries
weakly: one still referenced when its manager closes escapes to the parent like an ndarray
(counted there), and its data is deleted when its last reference goes, or at exit.
"""

from __future__ import annotations

import functools
import os
import threading
import weakref
from typing import Any

import numpy as np
import numpy.typing as npt

from oocarray._memory import Manager, active_manager, system
from oocarray._storage import _temp_dirs
from oocarray._storage._chunked import StoredArray
from oocarray._storage._create import create
from oocarray._storage._zarr._create import unstable_dtypes_known

__all__ = ["from_dask", "from_numpy", "temp"]


def temp(
    shape: object,
    dtype: npt.DTypeLike,
    chunks: object = None,
    codec: str = "zstd",
    *,
    array_type: type[StoredArray] = StoredArray,
) -> StoredArray:
    """A zarr array in the spill directory, owned by the active manager (else the system one).

    It lives like an ndarray the manager allocated: its data is deleted when the last
    reference to it goes, on :meth:`ChunkedArray.close`, or at exit.  Still referenced when its
    manager closes, it escapes to the parent manager (counted in the parent's
    ``stats().escaped``, and refused by ``on_close="raise"`` like any escape).  Its directory
    is private to this process; what a killed process left is removed by the next process
    that makes a temporary array.

    Parameters
    ----------
    shape, dtype
        As for :func:`numpy.empty`.
    chunks
        Chunk shape; default: about 4 MiB per chunk (see :func:`~oocarray.create`).
    codec
        ``"zstd"`` (default), ``"lz4"``, ``"blosc"``, ``"gzip"`` or ``"none"``.

    Returns
    -------
    ChunkedArray
        The new array, zero-filled, open for reading and writing.

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
    # array_type: the class of the result (oc.temp passes the compute layer's ChunkedArray).
    directory = _temp_dirs.new_temp_dir()
    try:
        # Only oocarray reads a temporary array: zarr-python's warning that other libraries may
        # not read a dtype without a zarr v3 specification (fixed-width strings) is moot.
        with unstable_dtypes_known(dtype):
            array = create(
                directory, shape, dtype, chunks=chunks, codec=codec, mode="w", array_type=array_type
            )
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
_temporaries: weakref.WeakKeyDictionary[Manager, weakref.WeakSet[StoredArray]] = (
    weakref.WeakKeyDictionary()
)
_temporaries_lock = threading.Lock()


def _own_temporary(manager: Manager, array: StoredArray) -> None:
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


def from_numpy(
    a: npt.ArrayLike,
    chunks: object = None,
    codec: str = "zstd",
    *,
    array_type: type[StoredArray] = StoredArray,
) -> StoredArray:
    """A temporary chunked copy of ``a`` (see :func:`~oocarray.temp` for its lifetime).

    Parameters
    ----------
    a
        An array, or anything :func:`numpy.asarray` takes.
    chunks
        Chunk shape; default: about 4 MiB per chunk.
    codec
        ``"zstd"`` (default), ``"lz4"``, ``"blosc"``, ``"gzip"`` or ``"none"``.

    Returns
    -------
    ChunkedArray
        A temporary zarr array holding a copy of ``a``.

    Examples
    --------
    >>> import numpy as np, oocarray as oc
    >>> x = oc.from_numpy(np.arange(10), chunks=5)
    >>> (x.chunks, int(x.sum()))
    ((5,), 45)
    """
    # array_type: the class of the result (oc.from_numpy passes the compute layer's one).
    data = np.asarray(a)
    result = temp(data.shape, data.dtype, chunks=chunks, codec=codec, array_type=array_type)
    try:
        result[...] = data
    except BaseException:
        result.close()
        raise
    return result


def from_dask(
    d: Any,
    chunks: object = None,
    codec: str = "zstd",
    *,
    array_type: type[StoredArray] = StoredArray,
) -> StoredArray:
    """Compute a dask array into a temporary chunked array, chunk by chunk, on dask's
    scheduler (see :func:`~oocarray.temp` for its lifetime).

    Parameters
    ----------
    d : dask.array.Array
        The array to compute.
    chunks
        Chunk shape of the result; default: ``d``'s largest chunk.
    codec
        ``"zstd"`` (default), ``"lz4"``, ``"blosc"``, ``"gzip"`` or ``"none"``.

    Returns
    -------
    ChunkedArray
        A temporary zarr array holding ``d``'s values.

    Examples
    --------
    >>> import dask.array as da, oocarray as oc
    >>> x = oc.from_dask(da.arange(10, chunks=5))
    >>> (x.chunks, x[...].tolist())
    ((5,), [0, 1, 2, 3, 4, 5, 6, 7, 8, 9])
    """
    # array_type: the class of the result (oc.from_dask passes the compute layer's one).
    result = temp(
        d.shape, d.dtype, chunks=chunks or d.chunksize, codec=codec, array_type=array_type
    )
    try:
        d.rechunk(result.chunks).store(result, lock=False)
    except BaseException:
        result.close()
        raise
    return result
