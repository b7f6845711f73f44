"""Creating zarr arrays: oocarray's codec names and the metadata zarr-python writes for them."""

from __future__ import annotations

import contextlib
import sys
import warnings
from collections.abc import Iterator
from typing import Any

import numpy as np
import zarr
import zarr.codecs

from oocarray._memory import config

__all__ = ["CODECS", "create_zarr", "unstable_dtypes_known"]


def _compressors(codec: str, itemsize: int) -> tuple[Any, ...]:
    """The bytes-to-bytes codecs of ``codec``, each chain ending with zarr's crc32c codec (a
    CRC-32C of the stored bytes, after them), which every zarr reader checks: a damaged chunk
    is an error, never wrong data (unless ``oc.configure(checksum=False)``).  For zstd too: its
    own frame checksum (XXH64 of the decoded bytes) cost as much to write and over twice as
    much to check per chunk here, and covers only reads that decode a frame to its end, where
    the CRC-32C of the stored bytes is checked whenever they are read."""
    checksum = (zarr.codecs.Crc32cCodec(),) if config().checksum else ()
    if codec == "zstd":
        return (zarr.codecs.ZstdCodec(level=3), *checksum)
    if codec in ("lz4", "blosc"):
        blosc = zarr.codecs.BloscCodec(
            cname="lz4" if codec == "lz4" else "zstd",
            clevel=5,
            shuffle="shuffle",
            typesize=itemsize,
        )
        return (blosc, *checksum)
    if codec == "gzip":
        return (zarr.codecs.GzipCodec(level=5), *checksum)
    if codec == "none":
        return checksum
    raise ValueError(f"codec must be one of {CODECS}, got {codec!r}")


CODECS = ("zstd", "lz4", "blosc", "gzip", "none")


def create_zarr(
    path: Any,
    shape: tuple[int, ...],
    dtype: np.dtype[Any],
    chunks: tuple[int, ...],
    codec: str,
    shards: tuple[int, ...] | None = None,
    dimension_names: tuple[str | None, ...] | None = None,
    attributes: dict[str, Any] | None = None,
    name: str | None = None,
) -> None:
    """Write the metadata of a new zarr v3 array at ``path`` (a directory, or a zarr Store with
    ``name`` the array's path inside it)."""
    zarr.create_array(
        store=path,
        name=name,
        shape=shape,
        chunks=chunks,
        shards=shards,
        dtype=dtype,
        # zarr-python stores little-endian unless told: keep the byte order asked for.
        serializer=zarr.codecs.BytesCodec(endian=_endian(dtype)) if dtype.itemsize > 1 else "auto",
        compressors=_compressors(codec, dtype.itemsize),
        fill_value=0,
        zarr_format=3,
        dimension_names=dimension_names,
        attributes=attributes,
        overwrite=False,  # what may be replaced was removed by the caller (see _replace)
    )


# NumPy kinds whose zarr v3 data types have no specification yet (strings, bytes, raw and
# structured): zarr-python warns when it writes their metadata.
UNSTABLE_KINDS = "OSUV"


@contextlib.contextmanager
def unstable_dtypes_known(dtype: Any = None) -> Iterator[None]:
    """Arrays created inside are of dtypes the caller chose knowingly: zarr-python's warning
    that a dtype (fixed-width strings, ...) has no zarr v3 specification yet is not shown.
    For the command line, whose output must not carry library warnings.  With ``dtype``, only
    where it is such a dtype: the warning filters are the whole process's (and swapping them is
    not thread-safe), so they are left alone wherever zarr-python would not warn."""
    from zarr.errors import UnstableSpecificationWarning

    if dtype is not None and not _unstable(dtype):
        yield
        return
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=UnstableSpecificationWarning)
        yield


def _unstable(dtype: Any) -> bool:
    try:
        return np.dtype(dtype).kind in UNSTABLE_KINDS
    except (TypeError, ValueError):  # not a dtype: the array's creation says so
        return False


def _endian(dtype: np.dtype[Any]) -> str:
    order = dtype.byteorder
    if order == "=":
        order = "<" if sys.byteorder == "little" else ">"
    return "big" if order == ">" else "little"


# Uncompressed reads smaller than this copy on the calling thread: waking helpers costs more
# than it saves (a 2 MiB read over two chunk files: 126 us alone, 157 us on two threads).
