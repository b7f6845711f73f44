"""Streaming ingest: a stream of row blocks written to a chunked zarr array in bounded memory.

Blocks of any size arrive; whole rows of the write grid (chunks, or shards of sharded arrays)
are appended as they become complete.  Rows that do not fill a grid row yet wait in one buffer
of exactly one grid row, so memory stays at one grid row plus the block being handed over,
however long the stream.  A block holding whole grid rows is appended straight from the block,
without a copy.  Readers where a library does the parsing (Parquet through pyarrow) yield
such blocks.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from oocarray._compute import ChunkedArray, create
from oocarray._memory import scratch_step
from oocarray._storage._base import auto_chunks
from oocarray._storage._objects._urls import Remote, locate
from oocarray._storage._replace import prepare_target
from oocarray._storage._zarr._groups import is_group, refresh_consolidated
from oocarray._storage._zarr._remote_create import check_remote_target

__all__ = ["from_batches", "read_parquet"]


def _check_group_target(location: Any, dataset: object, mode: str) -> None:
    """Refuse, before a stream is read, a ``dataset=`` write into a plain array or over an
    array that ``mode`` keeps; a remote group is checked when the array is made."""
    if isinstance(location, Remote):
        return
    if not isinstance(dataset, str):
        raise TypeError(f"dataset must be a str such as 'temperature' or 'a/b', got {dataset!r}")
    if not is_group(location) and any(
        os.path.isfile(os.path.join(location, name)) for name in ("zarr.json", ".zarray")
    ):
        raise ValueError(f"{location!r} is a zarr array; dataset= needs a zarr group there")
    inner = os.path.join(location, *dataset.strip("/").split("/"))
    if is_group(location) and os.path.exists(inner) and mode != "w":
        prepare_target(inner, mode, "oc.from_batches")


def from_batches(
    blocks: Iterable[npt.ArrayLike],
    path: Any,
    chunks: object = None,
    shards: object = None,
    codec: str = "zstd",
    *,
    dtype: npt.DTypeLike | None = None,
    mode: str = "w-",
    dimension_names: object = None,
    attributes: object = None,
    storage_options: Mapping[str, Any] | None = None,
    dataset: str | None = None,
    coords: object = None,
) -> ChunkedArray:
    """Write a stream of row blocks to a new zarr array, in bounded memory.

    Blocks may have any number of rows (zero too); they must share the number of axes and the
    trailing shape of the first.  The array is appended to (see :meth:`ChunkedArray.append`)
    each time a whole row of its write grid is complete, so a crash leaves a valid array of
    the rows written so far, and memory holds at most one grid row besides the block given.

    Parameters
    ----------
    blocks
        An iterable of arrays (``(n, ...)``); a generator reading files, a database cursor,
        :func:`read_parquet`.
    path
        Where the zarr v3 array goes: a local path, or an object-store URL (with
        ``storage_options``, as for :func:`oocarray.open`).
    chunks, shards, codec
        As for :func:`oocarray.create`.  Default chunks: about 4 MiB, whole along the trailing
        axes.  For random row access give ``shards`` (e.g. ``shards=(16384, 256)``): small
        chunks inside large files.
    dtype
        The array's dtype; default: the first block's.  Later blocks are cast to it when the
        cast stays within a kind (``float64`` to ``float32``); otherwise ``TypeError``.
    mode
        ``"w-"`` (default): raise :class:`~oocarray.StoreExistsError` if something is at
        ``path``; ``"w"``: replace a zarr array there.  Nothing but a zarr array is ever
        replaced (see :func:`oocarray.create`).
    dimension_names, attributes
        As for :func:`oocarray.create`.
    storage_options
        For URLs: the object store's settings (see :func:`oocarray.open`).
    dataset
        The array's name inside the zarr group at ``path`` (``"events"`` or ``"a/b"``), as
        for :func:`oocarray.create`: the group is made if needed and its other arrays stay,
        so several outputs share one group that ``xarray.open_zarr(path)`` opens as a
        Dataset (name the axes with ``dimension_names``).  ``mode`` applies to that array.
    coords
        Coordinate arrays written into the group, as for :func:`oocarray.create` (those
        along the streamed axis must have its final length, so they suit the other axes).

    Returns
    -------
    ChunkedArray
        The written array, open for reading and writing.

    Raises
    ------
    ValueError
        No blocks at all, a block without axes, or a block whose trailing shape differs from
        the first's.
    TypeError
        A block of a dtype that does not cast to the array's within a kind.
    StoreExistsError
        Something is at ``path`` that ``mode`` may not replace; checked before the first
        block is read.

    Examples
    --------
    >>> import numpy as np, oocarray as oc, tempfile, os
    >>> path = os.path.join(tempfile.mkdtemp(), "events.zarr")
    >>> parts = (np.full((n, 4), n, np.float32) for n in (3, 10, 1, 6))
    >>> y = oc.from_batches(parts, path, chunks=(8, 4))
    >>> y.shape, y.chunks, y[:, 0]
    ((20, 4), (8, 4), array([ 3.,  3.,  3., 10., 10., 10., 10., 10., 10., 10., 10., 10., 10.,
            1.,  6.,  6.,  6.,  6.,  6.,  6.], dtype=float32))
    """
    if mode in ("w", "w-", "x"):  # a path that may not be written fails before the stream runs
        location = locate(path, storage_options, "path", writing=True)
        if dataset is not None:
            _check_group_target(location, dataset, mode)
        elif isinstance(location, Remote):
            check_remote_target(location, mode, "oc.from_batches")
        else:
            prepare_target(location, mode, "oc.from_batches")
    stream = iter(blocks)
    try:
        first = np.asarray(next(stream))
    except StopIteration:
        raise ValueError(
            "from_batches got an empty iterable: there is nothing to infer the trailing shape "
            "and dtype from; to make an empty array use oc.create(path, (0, ...), dtype, "
            "chunks=...) and append to it"
        ) from None
    if first.ndim == 0:
        raise ValueError(
            "from_batches takes blocks of rows (arrays with at least one axis), got a 0-d "
            "block first; wrap scalars as np.array([value])"
        )
    target = np.dtype(dtype) if dtype is not None else first.dtype
    trailing = first.shape[1:]
    if chunks is None and shards is None:
        # Sized for a long array of these rows, not for the 0 rows it starts with.
        chunks = auto_chunks((1 << 40, *trailing), target.itemsize)
    y = create(
        path,
        (0, *trailing),
        target,
        chunks=chunks,
        codec=codec,
        mode=mode,
        shards=shards,
        dimension_names=dimension_names,
        attributes=attributes,
        dataset=dataset,
        storage_options=storage_options,
        coords=coords,
    )
    writer = _GridRowWriter(y)
    number = 0
    block: np.ndarray = first
    with scratch_step():  # the appends' encode scratch is given back once, at the end
        while True:
            writer.add(_checked(block, number, trailing, target))
            number += 1
            try:
                block = np.asarray(next(stream))
            except StopIteration:
                break
        writer.finish()
    if dataset is not None and not isinstance(locate(path, storage_options, "path"), Remote):
        refresh_consolidated(str(locate(path, storage_options, "path")))  # the grown shape
    return y


def _checked(
    block: np.ndarray, number: int, trailing: tuple[int, ...], dtype: np.dtype[Any]
) -> np.ndarray:
    if block.ndim == 0 or block.shape[1:] != trailing:
        raise ValueError(
            f"block {number} has shape {block.shape}, but the blocks must be (n, "
            f"{', '.join(map(str, trailing))}) like the first one"
        )
    if not np.can_cast(block.dtype, dtype, "same_kind"):
        raise TypeError(
            f"block {number} is {block.dtype}, which does not cast to the array's {dtype} "
            f"within a kind; convert it first (block.astype({str(dtype)!r})) or pass dtype="
        )
    return block


class _GridRowWriter:
    """Appends whole rows of the write grid; keeps the rest in a one-grid-row buffer."""

    def __init__(self, y: ChunkedArray) -> None:
        self._y = y
        grid = y.shards or y.chunks
        self._rows = grid[0]
        self._buffer: np.ndarray | None = None
        self._filled = 0

    def add(self, block: np.ndarray) -> None:
        at = 0
        n = len(block)
        if self._filled:
            at = self._fill(block, 0)
        whole = (n - at) // self._rows * self._rows
        if whole:
            self._y.append(block[at : at + whole])
            at += whole
        if at < n:
            self._fill(block, at)

    def _fill(self, block: np.ndarray, at: int) -> int:
        if self._buffer is None:
            self._buffer = np.empty((self._rows, *self._y.shape[1:]), dtype=self._y.dtype)
        take = min(self._rows - self._filled, len(block) - at)
        self._buffer[self._filled : self._filled + take] = block[at : at + take]
        self._filled += take
        if self._filled == self._rows:
            self._y.append(self._buffer)
            self._filled = 0
        return at + take

    def finish(self) -> None:
        if self._filled:
            assert self._buffer is not None
            self._y.append(self._buffer[: self._filled])
            self._filled = 0
        self._buffer = None


def read_parquet(
    path: str | os.PathLike[str],
    columns: Sequence[str] | None = None,
    batch_rows: int = 65_536,
    dtype: npt.DTypeLike | None = None,
) -> Iterator[np.ndarray]:
    """Blocks of rows of a Parquet file, as 2-D arrays (rows by columns), read by pyarrow.

    Needs pyarrow (``pip install "oocarray[parquet]"``).  Only ``batch_rows`` rows are in
    memory at a time, so the blocks can feed :func:`from_batches` for a file of any size.
    One column of fixed-size lists (an embedding per row) gives ``(rows, list size)``.

    Parameters
    ----------
    path
        A Parquet file.
    columns
        The columns to read, in this order; default: all.
    batch_rows
        Rows per block (the last may have fewer).
    dtype
        The blocks' dtype; default: NumPy's common type of the columns.

    Raises
    ------
    ImportError
        pyarrow is not installed.
    TypeError
        A column that is not numeric or boolean (strings, nested types), or has nulls in
        a type without NaN.

    Examples
    --------
    >>> import numpy as np, oocarray as oc, tempfile, os
    >>> import pyarrow as pa, pyarrow.parquet as pq
    >>> path = os.path.join(tempfile.mkdtemp(), "t.parquet")
    >>> pq.write_table(pa.table({"a": np.arange(5.0), "b": np.arange(5) * 10}), path)
    >>> [block.tolist() for block in oc.read_parquet(path, ["b", "a"], batch_rows=3)]
    [[[0.0, 0.0], [10.0, 1.0], [20.0, 2.0]], [[30.0, 3.0], [40.0, 4.0]]]
    """
    try:
        import pyarrow.parquet as pq  # type: ignore[import-untyped]
    except ImportError as error:
        raise ImportError(
            'read_parquet needs pyarrow: pip install "oocarray[parquet]" (or pyarrow)'
        ) from error
    if isinstance(batch_rows, bool) or not isinstance(batch_rows, int) or batch_rows < 1:
        raise ValueError(f"batch_rows must be a positive int, got {batch_rows!r}")
    wanted = None if columns is None else list(columns)
    with pq.ParquetFile(os.fspath(path)) as source:
        for batch in source.iter_batches(batch_size=batch_rows, columns=wanted):
            yield _block_of(batch, dtype)


def _block_of(batch: Any, dtype: npt.DTypeLike | None) -> np.ndarray:
    import pyarrow as pa

    names = batch.schema.names
    if len(names) == 1 and pa.types.is_fixed_size_list(batch.column(0).type):
        column = batch.column(0)
        if column.null_count:
            raise TypeError(f"column {names[0]!r} has null lists; fill or drop them first")
        flat: np.ndarray = column.flatten().to_numpy(zero_copy_only=False)
        block = flat.reshape(len(column), column.type.list_size)
        return block if dtype is None else block.astype(dtype, copy=False)
    arrays = []
    for name, column in zip(names, batch.columns, strict=True):
        kind = column.type
        if not (
            pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_boolean(kind)
        ):
            raise TypeError(
                f"column {name!r} is {kind}; read_parquet makes numeric blocks: choose numeric "
                "columns with columns=[...]"
            )
        if column.null_count and not pa.types.is_floating(kind):
            # pyarrow would make them floats with NaN, or objects: neither is what was stored.
            raise TypeError(f"column {name!r} ({kind}) has nulls; fill or drop them first")
        values = column.to_numpy(zero_copy_only=False)
        arrays.append(values)
    target = np.result_type(*arrays) if dtype is None else np.dtype(dtype)
    out = np.empty((batch.num_rows, len(arrays)), dtype=target)
    for i, values in enumerate(arrays):
        out[:, i] = values
    return out
