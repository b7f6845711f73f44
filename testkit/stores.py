"""One factory per storage format, for the store contract
(``tests/storage/test_store_contract.py``).

A :class:`Format` writes given data in its format with the format's own library (zarr-python,
h5py, NumPy; ``oc.create`` for zarr v3, which oocarray writes itself), reads it back with that
library, opens it with ``oc.open``, and says what the contract may expect of it: whether
``as_ndarray()`` pages it from chunks or maps the file, whether ``as_ndarray("r+")`` writes
back, how to damage one chunk and what a chunk that was never written holds.

A new backend (an object store behind an emulator, say) joins the contract by adding one
:class:`Format` to :data:`FORMATS`: ``write`` puts the data where it lives and returns what
``oc.open`` takes (a URL), ``read`` reads it back with the backend's own client.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

import oocarray as oc

# (start row, stop row, value): the rows a sparse store was written with; the rest never were.
Blocks = Sequence[tuple[int, int, int]]
Sparse = Callable[[Path, tuple[int, ...], str, int, int, Blocks], str]


@dataclass(frozen=True)
class Format:
    """How the contract makes, reads back and damages one kind of store.

    Attributes
    ----------
    name
        The test id.
    write
        ``write(directory, data, rows)``: ``data`` stored under ``directory`` in chunks of
        ``rows`` rows (all of every other axis) where the format has chunks; returns the
        target ``oc.open`` takes.
    read
        The target's data read by the format's own library, not by oocarray.
    paged
        ``as_ndarray()`` gives a chunk-backed ndarray (userfaultfd); else a view of the file's
        pages (``oc.location`` "mmap").
    writes_back
        ``as_ndarray("r+")`` is allowed (pages whose chunks must be whole pages).
    damage
        ``damage(target, chunk)`` damages the stored bytes of chunk ``chunk`` (along the first
        axis) so that decoding it fails; returns a word the error names.  None: the format
        stores raw bytes and cannot tell.
    write_sparse
        ``write_sparse(directory, shape, dtype, rows, fill_value, blocks)``: a store of which
        only ``blocks`` were written, the other chunks absent; None where every byte is stored.
    """

    name: str
    write: Callable[[Path, np.ndarray, int], str]
    read: Callable[[str], np.ndarray]
    paged: bool = True
    writes_back: bool = True
    damage: Callable[[str, int], str] | None = None
    write_sparse: Sparse | None = None

    def open(self, target: str, mode: str = "r") -> oc.ChunkedArray:
        return oc.open(target, mode=mode)

    def __str__(self) -> str:
        return self.name


def sample(shape: tuple[int, ...], dtype: str, seed: int = 0) -> np.ndarray:
    """Half noise, half runs of zeros (chunks that compress, and chunks that do not), of any
    number type, bool and complex included."""
    rng = np.random.default_rng(seed)
    raw = rng.integers(-(2**20), 2**20, size=shape) * (rng.random(shape) < 0.5)
    if np.dtype(dtype).kind == "c":
        return (raw + 1j * raw[::-1]).astype(dtype)
    if np.dtype(dtype).kind == "b":
        return raw > 0
    return raw.astype(dtype)


def round_trip(x: oc.ChunkedArray) -> oc.ChunkedArray:
    """``x`` through pickle, checked to be a new array on the same store (path, format, mode,
    shape, chunks, location), never its data."""
    import pickle

    blob = pickle.dumps(x)
    assert len(blob) < 1000  # the path and a few flags, never the data
    copy = pickle.loads(blob)
    assert isinstance(copy, oc.ChunkedArray) and copy is not x
    assert (copy.path, copy.format, copy.readonly) == (x.path, x.format, x.readonly)
    assert (copy.shape, copy.dtype, copy.chunks, copy.shards) == (
        x.shape,
        x.dtype,
        x.chunks,
        x.shards,
    )
    assert copy.location == x.location
    return copy


def _chunks(data_shape: tuple[int, ...], rows: int) -> tuple[int, ...]:
    return (min(rows, max(data_shape[0], 1)), *data_shape[1:])


def _truncate(path: str | os.PathLike[str]) -> None:
    with open(path, "r+b") as f:
        f.truncate(50)


def _flip(path: str | os.PathLike[str], offset: int, length: int) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        stored = f.read(length)
        f.seek(offset)
        f.write(bytes(b ^ 0x5A for b in stored))


# ---- zarr v3 (written by oocarray) ----


def _zarr3(codec: str, shards: int | None = None) -> Callable[[Path, np.ndarray, int], str]:
    def write(directory: Path, data: np.ndarray, rows: int) -> str:
        chunks = _chunks(data.shape, rows)
        sharded = None if shards is None else (chunks[0] * shards, *chunks[1:])
        path = str(directory / "a.zarr")
        x = oc.create(path, data.shape, data.dtype, chunks=chunks, codec=codec, shards=sharded)
        x[...] = data
        x.close()
        return path

    return write


def _zarr_sparse(
    zarr_format: Literal[2, 3], codec: str = "zstd", shards: int | None = None
) -> Sparse:
    def write(
        directory: Path, shape: tuple[int, ...], dtype: str, rows: int, fill: int, blocks: Blocks
    ) -> str:
        import numcodecs
        import zarr
        import zarr.codecs

        compressor: Any = None
        if codec == "zstd":
            compressor = numcodecs.Zstd(level=1) if zarr_format == 2 else zarr.codecs.ZstdCodec()
        chunks = _chunks(shape, rows)
        path = str(directory / f"sparse{zarr_format}.zarr")
        z = zarr.create_array(
            store=path,
            shape=shape,
            chunks=chunks,
            shards=None if shards is None else (chunks[0] * shards, *chunks[1:]),
            dtype=dtype,
            fill_value=fill,
            zarr_format=zarr_format,
            compressors=compressor,
        )
        for start, stop, value in blocks:
            z[start:stop] = value
        return path

    return write


def _read_zarr(target: str) -> np.ndarray:
    import zarr

    return np.asarray(zarr.open_array(target, mode="r")[...])


def _damage_zarr3(target: str, chunk: int) -> str:
    _truncate(Path(target, "c", str(chunk), "0"))
    return "cannot be decoded"


def _damage_sharded(target: str, chunk: int) -> str:
    """Bytes at the start of the shard that holds ``chunk`` (its first chunk): the CRC-32C
    of the chunk no longer matches."""
    assert chunk % 2 == 0, "a shard of two chunks: damage the first one"
    _flip(Path(target, "c", str(chunk // 2), "0"), 10, 30)
    return "CRC-32C"


# ---- zarr v2 (written by zarr-python) ----


def _zarr2(directory: Path, data: np.ndarray, rows: int) -> str:
    import numcodecs
    import zarr

    path = str(directory / "v2.zarr")
    z = zarr.create_array(
        store=path,
        shape=data.shape,
        chunks=_chunks(data.shape, rows),
        dtype=data.dtype,
        zarr_format=2,
        compressors=numcodecs.Zstd(level=1),
    )
    z[...] = data
    return path


def _damage_zarr2(target: str, chunk: int) -> str:
    (name,) = [n for n in os.listdir(target) if n.split(".")[0] == str(chunk) and "." in n]
    _truncate(Path(target, name))
    return "cannot be decoded"


# ---- HDF5 (written by h5py) ----

# Filter chains as h5py writes them (shuffle, then the compressor, then the checksum).
H5_CHAINS: dict[str, dict[str, object]] = {
    "none": {},
    "gzip1": {"compression": "gzip", "compression_opts": 1},
    "gzip4": {"compression": "gzip"},
    "gzip9": {"compression": "gzip", "compression_opts": 9},
    "shuffle+gzip": {"compression": "gzip", "shuffle": True},
    "fletcher32": {"fletcher32": True},
    "shuffle": {"shuffle": True},
    "shuffle+gzip+fletcher32": {"compression": "gzip", "shuffle": True, "fletcher32": True},
    "shuffle+fletcher32": {"shuffle": True, "fletcher32": True},
}


def _hdf5(chain: str | None) -> Callable[[Path, np.ndarray, int], str]:
    """Chunked with the filters of ``chain``, or contiguous (``None``)."""

    def write(directory: Path, data: np.ndarray, rows: int) -> str:
        import h5py

        path = str(directory / "a.h5")
        with h5py.File(path, "w") as f:
            if chain is None:
                f["a"] = data
            else:
                chunks = _chunks(data.shape, rows)
                f.create_dataset("a", data=data, chunks=chunks, **H5_CHAINS[chain])
        return path

    return write


def _hdf5_sparse(chain: str) -> Sparse:
    def write(
        directory: Path, shape: tuple[int, ...], dtype: str, rows: int, fill: int, blocks: Blocks
    ) -> str:
        import h5py

        path = str(directory / "sparse.h5")
        with h5py.File(path, "w") as f:
            d = f.create_dataset(
                "a",
                shape=shape,
                dtype=dtype,
                chunks=_chunks(shape, rows),
                fillvalue=fill,
                **H5_CHAINS[chain],
            )
            for start, stop, value in blocks:
                d[start:stop] = value
        return path

    return write


def read_hdf5(target: str, name: str = "a") -> np.ndarray:
    """Dataset ``name`` of ``target`` as h5py reads it."""
    import h5py

    with h5py.File(target, "r") as f:
        return np.asarray(f[name][()])


def flip_hdf5_chunk(target: str, name: str, chunk: int) -> int:
    """Change a byte in the middle of stored chunk ``chunk`` of dataset ``name``; returns the
    chunk's byte offset in the file."""
    import h5py

    with h5py.File(target, "r") as f:
        info = f[name].id.get_chunk_info(chunk)
    _flip(target, info.byte_offset + info.size // 2, 1)
    return int(info.byte_offset)


def _damage_hdf5(target: str, chunk: int) -> str:
    flip_hdf5_chunk(target, "a", chunk)
    return "fletcher32"


# ---- .npy (written by NumPy) ----


def _npy(directory: Path, data: np.ndarray, rows: int) -> str:
    path = str(directory / "a.npy")
    np.save(path, data)
    return path


def _read_npy(target: str) -> np.ndarray:
    return np.asarray(np.load(target))


FORMATS: list[Format] = [
    Format(
        "zarr3-zstd",
        _zarr3("zstd"),
        _read_zarr,
        damage=_damage_zarr3,
        write_sparse=_zarr_sparse(3),
    ),
    Format(
        "zarr3-none",
        _zarr3("none"),
        _read_zarr,
        damage=_damage_zarr3,
        write_sparse=_zarr_sparse(3, "none"),
    ),
    Format(
        "zarr3-sharded",
        _zarr3("zstd", shards=2),
        _read_zarr,
        writes_back=False,
        damage=_damage_sharded,
        write_sparse=_zarr_sparse(3, shards=2),
    ),
    Format("zarr2-zstd", _zarr2, _read_zarr, damage=_damage_zarr2, write_sparse=_zarr_sparse(2)),
    Format("hdf5-chunked", _hdf5("none"), read_hdf5, write_sparse=_hdf5_sparse("none")),
    Format(
        "hdf5-shuffle+gzip+fletcher32",
        _hdf5("shuffle+gzip+fletcher32"),
        read_hdf5,
        damage=_damage_hdf5,
        write_sparse=_hdf5_sparse("shuffle+gzip+fletcher32"),
    ),
    Format("hdf5-contiguous", _hdf5(None), read_hdf5, paged=False),
    Format("npy", _npy, _read_npy, paged=False),
]


def remote_array(
    bucket: Any, name: str, data: np.ndarray, chunks: Any, shards: Any = None, codec: str = "zstd"
) -> Any:
    """``data`` written as the zarr array ``name`` of an object-store bucket (a
    :class:`testkit.objects.Bucket`), then opened read-only from it."""
    x = oc.create(
        bucket.url(name),
        data.shape,
        data.dtype,
        chunks=chunks,
        shards=shards,
        codec=codec,
        storage_options=bucket.storage_options,
    )
    x[...] = data
    return oc.open(bucket.url(name), storage_options=bucket.storage_options)
