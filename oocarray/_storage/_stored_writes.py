"""Writes of a stored array: ``x[...] = value`` (block by block, partly covered blocks read,
updated and written back) and ``append`` (rows added at the end of a zarr array, chunk-atomic).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from oocarray._memory._scratch import scratch_step
from oocarray._storage._indexing import ChunkPiece, Selection, parse_key
from oocarray._storage._stored_base import StoredArrayBase

__all__ = ["StoredArrayWrites"]

_WRITE_WAVE = 8  # blocks handed to the store at once by a write


class StoredArrayWrites(StoredArrayBase):
    """The writes of :class:`~oocarray._storage._chunked.StoredArray`: ``x[...] = value`` and
    :meth:`append`."""

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
            grown = StoredArrayWrites(store.grown(new))  # writes through the longer store
            grown[old:new] = values
            self.chunk_reads += grown.chunk_reads
            self.chunk_writes += grown.chunk_writes
            store.commit_rows(new)


def _numpy_key(selection: Selection) -> tuple[int | slice | np.ndarray, ...]:
    return tuple(axis.index for axis in selection.axes)
