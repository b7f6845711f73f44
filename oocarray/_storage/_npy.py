"""``.npy`` files, memory-mapped: reads are views of the map, with no copy."""

from __future__ import annotations

import os

import numpy as np

from oocarray._storage._base import Store, auto_chunks, check_dtype

__all__ = ["NpyStore"]


class NpyStore(Store):
    format = "npy"
    codec = "none"

    def __init__(self, path: str, mode: str, allow_object: bool) -> None:
        try:
            self._open(path, mode, allow_object)
        except (OverflowError, AttributeError, KeyError, IndexError) as error:
            # A header whose shape or dtype NumPy cannot map (sizes past the address space).
            raise ValueError(
                f"the .npy file {path!r} has a header no array fits: "
                f"{type(error).__name__}: {error}"
            ) from error

    def _open(self, path: str, mode: str, allow_object: bool) -> None:
        self.path = path
        self.readonly = mode == "r"
        with open(path, "rb") as f:
            version = np.lib.format.read_magic(f)
            read_header = (
                np.lib.format.read_array_header_1_0
                if version == (1, 0)
                else np.lib.format.read_array_header_2_0
            )
            _, _, dtype = read_header(f)
        check_dtype(dtype, allow_object, f".npy file {path!r}")
        if dtype.hasobject:
            self.memmap = np.load(path, allow_pickle=True)
        else:
            self.memmap = np.load(path, mmap_mode="r" if self.readonly else "r+")
        self.shape = tuple(self.memmap.shape)
        self.dtype = self.memmap.dtype
        self.chunks = auto_chunks(self.shape, self.dtype.itemsize)

    def read_chunk(self, chunk: tuple[int, ...]) -> np.ndarray:
        assert self.memmap is not None
        return self.memmap[self.chunk_region(chunk)]

    def write_chunk(self, chunk: tuple[int, ...], data: np.ndarray) -> None:
        self.check_writable()
        assert self.memmap is not None
        self.memmap[self.chunk_region(chunk)] = data

    def stored_bytes(self) -> int:
        return os.path.getsize(self.path)

    def close(self) -> None:
        if isinstance(self.memmap, np.memmap) and not self.readonly:
            self.memmap.flush()
