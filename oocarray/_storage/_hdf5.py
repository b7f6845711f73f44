"""HDF5 datasets through h5py.  Contiguous, uncompressed datasets are memory-mapped at the
dataset's file offset, so reads are views of the map with no copy."""

from __future__ import annotations

import os
from typing import Any

import h5py
import numpy as np

from oocarray._storage._base import Store, auto_chunks, check_dtype
from oocarray.errors import CorruptChunkError, StoreNotFoundError

__all__ = ["HDF5Store"]


# Names of the common HDF5 filters, by their registered ids (a plugin's own name can be a
# sentence); deflate is shown as h5py names it.
_FILTER_NAMES = {
    1: "gzip",
    2: "shuffle",
    3: "fletcher32",
    4: "szip",
    5: "nbit",
    6: "scaleoffset",
    32000: "lzf",
    32001: "blosc",
    32004: "lz4",
    32008: "bitshuffle",
    32015: "zstd",
}


def _filter_chain(ds: h5py.Dataset) -> str:
    """The dataset's filter pipeline in the order it is applied on write, as
    ``"shuffle+gzip+fletcher32"``; ``"none"`` without filters."""
    plist = ds.id.get_create_plist()
    names = []
    for i in range(plist.get_nfilters()):
        number = plist.get_filter(i)[0]
        names.append(_FILTER_NAMES.get(number, f"filter-{number}"))
    return "+".join(names) or "none"


def _datasets(group: h5py.Group) -> list[str]:
    names: list[str] = []

    def visit(name: str, obj: Any) -> None:
        if isinstance(obj, h5py.Dataset):
            names.append(name)

    group.visititems(visit)
    return names


class HDF5Store(Store):
    format = "hdf5"

    def __init__(self, path: str, mode: str, dataset: str | None, allow_object: bool) -> None:
        try:
            self._open(path, mode, dataset, allow_object)
        except (RuntimeError, AttributeError, KeyError, IndexError, ArithmeticError) as error:
            if isinstance(error, KeyError) and dataset is not None:
                raise
            # HDF5 reports damaged metadata (object headers, B-trees, heaps) as RuntimeError.
            raise ValueError(
                f"the HDF5 file {path!r} is damaged: {type(error).__name__}: {error}"
            ) from error

    def _open(self, path: str, mode: str, dataset: str | None, allow_object: bool) -> None:
        self.path = path
        self.readonly = mode == "r"
        self.file = h5py.File(path, "r" if self.readonly else "r+")
        try:
            self.dataset_name = self._pick(dataset)
            ds = self.file[self.dataset_name]
            check_dtype(ds.dtype, allow_object, f"HDF5 dataset {self.dataset_name!r} in {path!r}")
            if ds.shape is None:
                raise ValueError(
                    f"HDF5 dataset {self.dataset_name!r} in {path!r} has a null dataspace: no "
                    "shape and no elements (h5py.Empty), so there is no array to open; read "
                    "it with h5py"
                )
        except BaseException:
            self.file.close()
            raise
        self.ds = ds
        self.shape = tuple(ds.shape)
        self.dtype = np.dtype(ds.dtype)
        self.fill_value = ds.fillvalue
        self.codec = _filter_chain(ds)
        offset = ds.id.get_offset()
        if (
            ds.chunks is None
            and ds.compression is None
            and offset is not None
            and not ds.dtype.hasobject
        ):
            self.memmap = np.memmap(
                path,
                dtype=self.dtype,
                mode="r" if self.readonly else "r+",
                offset=offset,
                shape=self.shape,
            )
            self.chunks = auto_chunks(self.shape, self.dtype.itemsize)
        else:
            self.chunks = (
                tuple(ds.chunks) if ds.chunks else auto_chunks(self.shape, self.dtype.itemsize)
            )

    @property
    def identity(self) -> str:
        return f"{super().identity}::{self.dataset_name}"

    def _pick(self, dataset: str | None) -> str:
        if dataset is not None:
            if not isinstance(dataset, str):
                raise TypeError(f"dataset must be a str, got {dataset!r}")
            link = self.file.get(dataset, getlink=True)
            if link is None:
                raise StoreNotFoundError(
                    f"no dataset {dataset!r} in {self.path!r}; it has {_datasets(self.file)}"
                )
            if isinstance(link, h5py.ExternalLink):
                raise ValueError(
                    f"dataset {dataset!r} in {self.path!r} is an external link to another "
                    "file; open that file directly"
                )
            if not isinstance(self.file[dataset], h5py.Dataset):
                raise ValueError(f"{dataset!r} in {self.path!r} is a group, not a dataset")
            return dataset
        names = _datasets(self.file)
        if len(names) == 1:
            return names[0]
        raise ValueError(
            f"{self.path!r} has {len(names)} datasets {names}; choose one with dataset=..."
        )

    def read_chunk(self, chunk: tuple[int, ...]) -> np.ndarray:
        region = self.chunk_region(chunk)
        if self.memmap is not None:
            return self.memmap[region]
        out = np.empty(tuple(r.stop - r.start for r in region), dtype=self.dtype)
        try:
            self.ds.read_direct(out, source_sel=region)
        except OSError as error:
            # HDF5 says only that a filter (inflate, a checksum, ...) failed on the chunk.
            if "filter returned failure" not in str(error):
                raise
            raise CorruptChunkError(
                f"chunk {chunk} of HDF5 dataset {self.dataset_name!r} in {self.path!r} cannot "
                f"be decoded ({self.codec}): it is corrupt or truncated ({error})"
            ) from error
        except RuntimeError as error:
            # Damaged metadata on the way to the chunk (its B-tree, the heap).
            raise CorruptChunkError(
                f"chunk {chunk} of HDF5 dataset {self.dataset_name!r} in {self.path!r} cannot "
                f"be found: the file is damaged ({error})"
            ) from error
        return out

    def write_chunk(self, chunk: tuple[int, ...], data: np.ndarray) -> None:
        self.check_writable()
        region = self.chunk_region(chunk)
        if self.memmap is not None:
            self.memmap[region] = data
        else:
            self.ds[region] = data

    def stored_bytes(self) -> int:
        try:
            return int(self.ds.id.get_storage_size())
        except RuntimeError:  # damaged metadata: the file's size is the best answer left
            return os.path.getsize(self.path)

    def close(self) -> None:
        if isinstance(self.memmap, np.memmap) and not self.readonly:
            self.memmap.flush()
        self.memmap = None
        self.file.close()
