"""Stored arrays as plain ndarrays without a copy up front: ``as_ndarray`` (a view of a
memory map, or a chunk-backed ndarray), the write-back of its dirty chunks (``flush``) and its
counters (``paging_stats``).
"""

from __future__ import annotations

import numpy as np

from oocarray._storage._paged._arrays import PagedArrays
from oocarray._storage._stored_base import StoredArrayBase

__all__ = ["StoredArrayViews"]


class StoredArrayViews(StoredArrayBase):
    """The ndarray views of :class:`~oocarray._storage._chunked.StoredArray`:
    :meth:`as_ndarray`, :meth:`flush` and :meth:`paging_stats`."""

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
