"""How a store is paged (``_arrays.py``): what each format decides, checked before anything is
read, and the chunk table it builds once the pager may run."""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

from oocarray._storage._base import Store

__all__ = ["ChunkTable", "NativeWriter", "Plan", "check_row_chunks", "rewrite", "suggest_rows"]


@dataclasses.dataclass
class ChunkTable:
    """For each row chunk: (path number or -1 when absent, offset, stored bytes or -1 for the
    whole file); an HDF5 chunk's filter mask rides in bits 32-47 of its path number.  ``fd``:
    the file every chunk is read from (the caller closes it once the pager has its own), or -1:
    paths are opened at fill time."""

    paths: list[str]
    table: np.ndarray
    fd: int = -1
    # For an array in an object store: the feeder process that fetches the chunk files on
    # demand (``oocarray/_storage/_zarr/_feeder.py``), whose pipes the pager takes.
    feed: Any = None


class NativeWriter(NamedTuple):
    """How the pager encodes chunks it writes back itself (zarr ``"r+"``: one file per chunk,
    raw or zstd): ``Pages`` keywords."""

    zstd_level: int
    zstd_checksum: bool
    file_mode: int  # given to each new chunk file


@dataclasses.dataclass(frozen=True)
class Plan:
    """One store, found pageable: the bytes' dtype (with the files' byte order), the native
    codec, the table (built with the number of row chunks), and for stores whose chunks can
    move, a guard held from the table's reading until the pager watches writes, and the
    function that makes it watch them.  ``native_writer``: how ``"r+"`` arrays' chunks are
    written back natively, or None where the store must write them (HDF5, from Python).

    Parameters
    ----------
    dtype
        The dtype of the stored bytes, with the files' byte order.
    codec
        The native codec's number.
    table : callable
        Builds the ``ChunkTable`` from the number of row chunks.
    guard : callable
        Makes the context manager held from the table's reading until the pager watches
        writes; by default one that holds nothing (``contextlib.nullcontext``).
    watch : callable, optional
        Makes the pager watch writes that move chunks, or ``None``.
    native_writer : NativeWriter, optional
        How the pager encodes chunks of ``"r+"`` arrays itself, or ``None``.

    Examples
    --------
    Each format's paging check makes one for ``as_ndarray()``; by hand:

    >>> import numpy as np
    >>> from oocarray._storage._paged._plan import Plan
    >>> plan = Plan(np.dtype("<f8"), codec=0, table=lambda rows: None)
    >>> (plan.dtype, plan.watch, plan.native_writer)
    (dtype('float64'), None, None)
    """

    dtype: np.dtype[Any]
    codec: int
    table: Callable[[int], ChunkTable]
    guard: Callable[[], contextlib.AbstractContextManager[Any]] = contextlib.nullcontext
    watch: Callable[[Any], None] | None = None
    native_writer: NativeWriter | None = None


def suggest_rows(store: Store) -> int:
    """Rows of a chunk of about 1 MiB."""
    row_bytes = math.prod(store.shape[1:]) * store.dtype.itemsize if store.shape else 1
    return max(1, (1 << 20) // max(row_bytes, 1))


def rewrite(store: Store, name: str = "copy.zarr", codec: str | None = "zstd") -> str:
    """The call that rewrites ``store`` pageable."""
    rest = "".join(f", {n}" for n in store.shape[1:])
    given = f", codec={codec!r}" if codec else ""
    return f"x.to_zarr({name!r}{given}, chunks=({suggest_rows(store)}{rest}))"


def check_row_chunks(store: Store, where: str) -> None:
    """Refuse chunks that do not span every axis but the first."""
    shape, chunks = store.shape, store.chunks
    if shape and tuple(chunks[1:]) != tuple(shape[1:]):
        raise NotImplementedError(
            f"as_ndarray() needs chunks that span every axis but the first (each chunk one "
            f"run of bytes); {where} has chunks {chunks} for shape {shape}, where a page would "
            f"need a whole band of chunks decoded.  Rewrite it with row chunks: "
            f"{rewrite(store, 'rows.zarr', None)}"
        )
