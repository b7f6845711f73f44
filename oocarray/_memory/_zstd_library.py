"""The libzstd that the native code (chunk reads and writes, compressed spill) and the streamed
rechunk codec use: numcodecs' own copy where it has one, else the system's libzstd.so.1.

Why numcodecs' copy first: it is the library that zarr-python encodes and decodes chunks with,
it is there wherever zarr is (no system package needed), and it is often newer than the
system's: 1.5.6 against Debian 12's 1.5.4 here, which encodes the random float32 chunks of the
rechunk benchmark about 10 % faster and decodes them 3-7 % faster, into the same bytes.

Its path is found without importing numcodecs (not a cheap import) and given to the native
module before zstd's first use (the memory layer's import); the first library bound stays.
"""

from __future__ import annotations

import functools
import importlib.machinery
import importlib.util
import os
from collections.abc import Iterator

from oocarray import _native

__all__ = ["SYSTEM_ZSTD", "zstd_library"]

SYSTEM_ZSTD = "libzstd.so.1"


def _numcodecs_zstd() -> Iterator[str]:
    """The file of numcodecs' zstd extension module (it exports libzstd's functions)."""
    try:
        spec = importlib.util.find_spec("numcodecs")
    except (ImportError, ValueError):
        return
    for folder in (spec.submodule_search_locations or []) if spec is not None else []:
        for suffix in importlib.machinery.EXTENSION_SUFFIXES:
            path = os.path.join(folder, "zstd" + suffix)
            if os.path.isfile(path):
                yield path


@functools.cache
def zstd_library() -> str:
    """The path (or name) of the libzstd in use, bound on the first call."""
    for path in _numcodecs_zstd():
        if _native.codec_library(_native.LIB_ZSTD, path):
            return path
    return SYSTEM_ZSTD
