"""Damaged chunks: a truncated or corrupt chunk file of any codec oocarray reads gives
``CorruptChunkError`` or the right data, never data read from past the chunk's bytes.

The fuzz tests draw the same examples every run under the "ci" hypothesis profile (the
default, see conftest.py); ``HYPOTHESIS_PROFILE=long`` draws new ones to explore."""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

import h5py
import numcodecs
import numpy as np
import pytest
import zarr
import zarr.codecs
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import oocarray as oc

SHAPE = (32, 6)
CHUNKS = (8, 6)
DATA = np.random.default_rng(5).standard_normal(SHAPE).round(2)  # compresses a little

# Reads that take each path of the reader: whole rows, one row, a piece through a scratch
# buffer, an integer-array gather, and a whole-array read.
READS: list[object] = [
    np.s_[...],
    np.s_[10],
    np.s_[9:15],
    np.s_[9:13, 1:4],
    np.s_[[15, 2, 9], 3],
    np.s_[::3, ::2],
]


def _oc_array(codec: str, shards: tuple[int, ...] | None = None) -> Callable[[Path], str]:
    def make(path: Path) -> str:
        x = oc.create(path, SHAPE, DATA.dtype, chunks=CHUNKS, codec=codec, shards=shards)
        x[...] = DATA
        return "c/1/0" if shards is None else "c/0/0"

    return make


def _zarr_v2_array(compressor: object, filters: object = None) -> Callable[[Path], str]:
    def make(path: Path) -> str:
        z = zarr.create_array(
            path,
            shape=SHAPE,
            chunks=CHUNKS,
            dtype=DATA.dtype,
            zarr_format=2,
            compressors=compressor,  # type: ignore[arg-type]
            filters=filters,  # type: ignore[arg-type]
        )
        z[...] = DATA
        return "1.0"

    return make


def _zarr_v3_array(compressor: object) -> Callable[[Path], str]:
    def make(path: Path) -> str:
        z = zarr.create_array(
            path,
            shape=SHAPE,
            chunks=CHUNKS,
            dtype=DATA.dtype,
            zarr_format=3,
            compressors=compressor,  # type: ignore[arg-type]
        )
        z[...] = DATA
        return "c/1/0"

    return make


ARRAYS: dict[str, Callable[[Path], str]] = {
    "v3-zstd": _oc_array("zstd"),
    "v3-lz4": _oc_array("lz4"),
    "v3-blosc": _oc_array("blosc"),
    "v3-gzip": _oc_array("gzip"),
    "v3-none": _oc_array("none"),
    "v3-zstd-checksum": _zarr_v3_array(zarr.codecs.ZstdCodec(level=1, checksum=True)),
    "v3-sharded-zstd": _oc_array("zstd", shards=(16, 6)),
    "v3-sharded-lz4": _oc_array("lz4", shards=(16, 6)),
    "v3-sharded-none": _oc_array("none", shards=(16, 6)),
    "v2-blosc-lz4": _zarr_v2_array(numcodecs.Blosc(cname="lz4", shuffle=numcodecs.Blosc.SHUFFLE)),
    "v2-blosc-zstd": _zarr_v2_array(
        numcodecs.Blosc(cname="zstd", shuffle=numcodecs.Blosc.BITSHUFFLE)
    ),
    "v2-zstd": _zarr_v2_array(numcodecs.Zstd(level=1)),
    "v2-lz4": _zarr_v2_array(numcodecs.LZ4()),
    "v2-zlib": _zarr_v2_array(numcodecs.Zlib(level=1)),
    "v2-gzip": _zarr_v2_array(numcodecs.GZip(level=1)),
    "v2-none": _zarr_v2_array(None),
    "v2-shuffle-blosc-lz4": _zarr_v2_array(
        numcodecs.Blosc(cname="lz4"), [numcodecs.Shuffle(elementsize=8)]
    ),
    "v2-shuffle": _zarr_v2_array(None, [numcodecs.Shuffle(elementsize=8)]),
}


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, str]]:
    """Every kind of array, written once: its directory and the file of its damaged chunk."""
    root = tmp_path_factory.mktemp("pristine")
    made = {}
    for name, make in ARRAYS.items():
        path = root / f"{name}.zarr"
        made[name] = (path, make(path))
    return made


def _reference(path: Path, key: object) -> np.ndarray | None:
    """What zarr-python decodes from the same bytes, or None when it refuses them."""
    z = zarr.open_array(path, mode="r")
    try:
        return np.asarray(z.oindex[key] if isinstance(key, tuple) else z[key])  # type: ignore[index]
    except Exception:
        return None


def _checksummed(path: Path) -> bool:
    """Whether the array's chunks carry a checksum: zarr's crc32c codec or zstd's own."""
    meta_file = path / "zarr.json"
    if not meta_file.exists():
        return False
    codecs = json.loads(meta_file.read_text())["codecs"]
    if codecs[0]["name"] == "sharding_indexed":
        codecs = codecs[0]["configuration"]["codecs"]
    return any(
        c["name"] == "crc32c" or (c["name"] == "zstd" and c["configuration"].get("checksum"))
        for c in codecs
    )


# The read that takes every chunk it touches whole, which checks its checksum.
WHOLE_CHUNK_READS = (0,)


def _check_reads(path: Path, truncated: bool) -> None:
    """Every read gives CorruptChunkError or the right data, and a read of whole chunks with a
    checksum never gives wrong data.  A corrupt payload that no checksum covers may decode to
    other values: then they are exactly the values zarr-python decodes from the same bytes
    (nothing came from outside the chunk).  A read of part of an uncompressed or zstd chunk
    reads only that part, so its checksum, which covers the whole chunk, is not checked
    (README: "Checksums")."""
    x = oc.open(path)
    checksummed = _checksummed(path)
    for number, key in enumerate(READS):
        try:
            got = x[key]
        except oc.CorruptChunkError as error:
            message = str(error)
            assert str(path) in message, message
            continue
        if np.array_equal(got, DATA[key]):
            continue
        assert not (checksummed and number in WHOLE_CHUNK_READS), f"{key}: checksum not checked"
        reference = None if truncated else _reference(path, key)
        if reference is None and checksummed and not truncated:
            continue  # zarr-python checks the checksum of the whole chunk; this read took part
        assert reference is not None, f"{key}: wrong data and no error from a damaged chunk"
        assert np.array_equal(got, reference, equal_nan=True), f"{key}: wrong data"
    # The chunks left alone (in other files) still read right.
    assert np.array_equal(x[16:], DATA[16:])


@settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(name=st.sampled_from(sorted(ARRAYS)), cut=st.floats(0, 1, exclude_max=True))
def test_a_truncated_chunk_is_reported_never_misread(
    pristine: dict[str, tuple[Path, str]], name: str, cut: float
) -> None:
    source, chunk = pristine[name]
    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch) / source.name
        shutil.copytree(source, path)
        damaged = path / chunk
        stored = damaged.read_bytes()
        damaged.write_bytes(stored[: int(cut * len(stored))])
        _check_reads(path, truncated=True)


@settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    name=st.sampled_from(sorted(ARRAYS)),
    edits=st.lists(st.tuples(st.floats(0, 1, exclude_max=True), st.integers(0, 255)), max_size=4),
    appended=st.binary(max_size=8),
)
def test_a_corrupt_chunk_is_reported_or_decoded_from_its_own_bytes(
    pristine: dict[str, tuple[Path, str]],
    name: str,
    edits: list[tuple[float, int]],
    appended: bytes,
) -> None:
    source, chunk = pristine[name]
    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch) / source.name
        shutil.copytree(source, path)
        damaged = path / chunk
        stored = bytearray(damaged.read_bytes())
        for where, value in edits:
            stored[int(where * len(stored))] = value
        damaged.write_bytes(bytes(stored) + appended)
        _check_reads(path, truncated=False)


@pytest.mark.parametrize("codec", ["lz4", "blosc"])
@pytest.mark.parametrize("cut", [1, 2, 100, 0.5])
@pytest.mark.parametrize("checksum", [True, False])
def test_a_blosc_chunk_cut_short_is_corrupt_not_garbage(
    tmp_path: Path, codec: str, cut: float, checksum: bool
) -> None:
    """Blosc's own decoder trusts the sizes in its header and reads past a short buffer.
    Without a checksum (zarr-python's default chain) the header's check finds it; oocarray's
    chains end with the crc32c codec, which finds it first."""
    data = np.random.default_rng(1).standard_normal((256, 64))
    if checksum:
        x = oc.create(tmp_path / "a.zarr", (256, 64), "float64", chunks=(64, 64), codec=codec)
        x[...] = data
    else:
        cname = "lz4" if codec == "lz4" else "zstd"
        z = zarr.create_array(
            tmp_path / "a.zarr",
            shape=(256, 64),
            chunks=(64, 64),
            dtype="float64",
            compressors=zarr.codecs.BloscCodec(cname=cname, shuffle="shuffle"),
        )
        z[...] = data
    found = "CRC-32C" if checksum else "blosc header"
    damaged = tmp_path / "a.zarr" / "c" / "1" / "0"
    stored = damaged.read_bytes()
    keep = int(len(stored) * cut) if isinstance(cut, float) else len(stored) - cut
    damaged.write_bytes(stored[:keep])
    y = oc.open(tmp_path / "a.zarr")
    for key in (np.s_[...], np.s_[64:128], np.s_[70], np.s_[65:70, 3:9]):
        with pytest.raises(oc.CorruptChunkError, match=rf"chunk \(1, 0\).*{found}"):
            y[key]
    assert np.array_equal(y[:64], data[:64])


def test_a_blosc_chunk_under_v2_filters_cut_short_is_corrupt(tmp_path: Path) -> None:
    """Arrays with v2 filters used to be decoded by zarr-python, whose blosc reads past the
    end of a short chunk just the same."""
    _zarr_v2_array(numcodecs.Blosc(cname="lz4"), [numcodecs.Shuffle(elementsize=8)])(
        tmp_path / "a.zarr"
    )
    damaged = tmp_path / "a.zarr" / "1.0"
    damaged.write_bytes(damaged.read_bytes()[:-1])
    x = oc.open(tmp_path / "a.zarr")
    with pytest.raises(oc.CorruptChunkError, match=r"chunk \(1, 0\).*blosc header"):
        x[8:16]
    assert np.array_equal(x[:8], DATA[:8])


@pytest.mark.parametrize("fletcher32", [True, False])
def test_a_corrupt_hdf5_chunk_is_a_corrupt_chunk_error(tmp_path: Path, fletcher32: bool) -> None:
    path = tmp_path / "f.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("x", data=DATA, chunks=CHUNKS, compression="gzip", fletcher32=fletcher32)
        where = f["x"].id.get_chunk_info(1).byte_offset
    stored = bytearray(path.read_bytes())
    for i in range(8):
        stored[where + 8 + i] ^= 0xFF
    path.write_bytes(bytes(stored))
    x = oc.open(path)
    with pytest.raises(oc.CorruptChunkError, match=r"chunk \(1, 0\) of HDF5 dataset 'x'.*gzip"):
        x[8:16]
    assert np.array_equal(x[16:], DATA[16:])
