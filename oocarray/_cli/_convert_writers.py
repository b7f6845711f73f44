"""The writers of ``oocarray convert``: an opened array copied into a zarr (sharded or not),
HDF5 or ``.npy`` output, block by block.

Unsharded zarr outputs are written by the compute layer (``to_zarr``: chunks read, encoded and
written in parallel in a workspace); sharded zarr, HDF5 and ``.npy`` outputs by a loop over
blocks of whole chunks or shards of the output's write grid, as many as fit the limit.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

import oocarray as oc
from oocarray._cli._args import UsageError
from oocarray._compute._progress import progress_bar

__all__ = ["write_hdf5", "write_npy", "write_zarr"]

_PROG = "oocarray convert"


def _source_chunks(x: oc.ChunkedArray) -> tuple[int, ...] | None:
    """The source's chunks when it is chunked (zarr, chunked HDF5), else None."""
    return None if x.location == "mmap" or x.format == "npy" else x.chunks


def write_zarr(
    x: oc.ChunkedArray,
    path: str,
    chunks: tuple[int, ...] | None,
    shards: tuple[int, ...] | None,
    codec: str,
    progress: bool,
    mode: str = "w-",
    storage_options: dict[str, Any] | None = None,
) -> None:
    _check_ndim(x, chunks, "--chunks")
    _check_ndim(x, shards, "--shards")
    if chunks is None and shards is None:  # keep the source's layout
        chunks, shards = _source_chunks(x), x.shards
    if chunks is not None:
        chunks = tuple(min(c, max(n, 1)) for c, n in zip(chunks, x.shape, strict=True))
    if shards is None:
        source: Any = x  # the compute layer's methods
        source.to_zarr(
            path,
            codec=codec,
            chunks=chunks,
            mode=mode,
            progress=progress,
            storage_options=storage_options,
        ).close()
        return
    # Sharded: whole shards, one block of them at a time.
    with oc.create(
        path,
        x.shape,
        x.dtype,
        chunks=chunks,
        codec=codec,
        shards=shards,
        mode=mode,
        storage_options=storage_options,
    ) as out:
        grid = out.shards or out.chunks
        block = _block_shape(x.shape, grid, x.dtype.itemsize, 0)
        _copy(x, block, out.__setitem__, progress)


def write_hdf5(
    x: oc.ChunkedArray,
    path: str,
    name: str,
    chunks: tuple[int, ...] | None,
    codec: str,
    limit_bytes: int,
    progress: bool,
) -> None:
    try:
        import h5py
    except ImportError:
        raise ImportError(
            "HDF5 outputs need h5py: pip install 'oocarray[hdf5]' (or pip install h5py)"
        ) from None
    _check_ndim(x, chunks, "--chunks")
    compression = None if codec == "none" else codec
    # Contiguous (memory-mapped when read) unless chunks or compression are asked for;
    # compression keeps the source's chunks, or h5py picks some.
    layout: Any = chunks if chunks is not None or compression is None else _source_chunks(x)
    if x.size == 0 or x.ndim == 0:
        layout = None
    elif layout is not None:
        layout = tuple(min(c, n) for c, n in zip(layout, x.shape, strict=True))
    elif compression is not None:
        layout = True
    if layout is None and compression is not None and x.ndim == 0:
        compression = None  # a scalar has no chunks to compress
    with h5py.File(path, "w") as f:
        dataset = f.create_dataset(
            name, shape=x.shape, dtype=x.dtype, chunks=layout, compression=compression
        )
        unit = dataset.chunks or (1, *x.shape[1:])
        block = _block_shape(x.shape, unit, x.dtype.itemsize, limit_bytes)
        _copy(x, block, dataset.__setitem__, progress)


def write_npy(x: oc.ChunkedArray, path: str, limit_bytes: int, progress: bool) -> None:
    header = {
        "descr": np.lib.format.dtype_to_descr(x.dtype),
        "fortran_order": False,
        "shape": x.shape,
    }
    with open(path, "wb") as f:
        try:
            np.lib.format.write_array_header_1_0(f, header)
        except ValueError:  # a header over 64 KiB
            np.lib.format.write_array_header_2_0(f, header)
        # Whole rows in order: the file is written front to back, nothing is mapped.
        block = _block_shape(x.shape, (1, *x.shape[1:]), x.dtype.itemsize, limit_bytes)

        def write(region: tuple[slice, ...], values: np.ndarray) -> None:
            np.ascontiguousarray(values).tofile(f)

        _copy(x, block, write, progress)


def _check_ndim(x: oc.ChunkedArray, shape: tuple[int, ...] | None, option: str) -> None:
    if shape is not None and len(shape) != x.ndim:
        raise UsageError(
            f"{option} needs one length per axis ({x.ndim} for shape {x.shape}), got "
            f"{','.join(map(str, shape))}",
            _PROG,
        )


def _block_shape(
    shape: tuple[int, ...], unit: tuple[int, ...], itemsize: int, limit_bytes: int
) -> tuple[int, ...]:
    """Blocks of whole ``unit``s (the output's chunks or shards), as many along the first axis
    as fit ``limit_bytes`` (at least one unit).

    Examples
    --------
    >>> _block_shape((1000, 10), (10, 10), 8, 4000)
    (50, 10)
    """
    if not shape:
        return ()
    unit = tuple(max(1, min(u, n)) for u, n in zip(unit, shape, strict=True))
    unit_bytes = math.prod(unit) * itemsize
    count = max(1, limit_bytes // unit_bytes) if unit_bytes else 1
    return (min(unit[0] * count, max(shape[0], 1)), *unit[1:])


def _regions(shape: tuple[int, ...], block: tuple[int, ...]) -> Iterator[tuple[slice, ...]]:
    """The blocks of ``shape``, in C order."""
    if not shape:
        yield ()
        return
    if 0 in shape:
        return
    grid = [range(0, n, b) for n, b in zip(shape, block, strict=True)]
    for corner in np.ndindex(*(len(g) for g in grid)):
        yield tuple(
            slice(g[i], min(g[i] + b, n))
            for g, i, b, n in zip(grid, corner, block, shape, strict=True)
        )


def _copy(
    x: oc.ChunkedArray,
    block: tuple[int, ...],
    write: Callable[[tuple[slice, ...], np.ndarray], Any],
    progress: bool,
) -> None:
    """Read ``x`` block by block and hand each block to ``write``."""
    regions = list(_regions(x.shape, block))
    with progress_bar(
        total=len(regions), desc="convert", nbytes=x.nbytes, disable=not progress
    ) as bar:
        for region in regions:
            write(region, x[region])  # the block is freed before the next read
            bar.update()
