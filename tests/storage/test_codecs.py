"""Every chunk codec oocarray reads, on every read path: eager ``x[...]`` (the native chunk
reader and the Python decoders), streaming reads, and ``as_ndarray()`` (the pager's native
decoders), against zarr-python's reads; headers and checksums that catch damage.

What oocarray writes carries a checksum every zarr reader checks (zarr's crc32c codec); a
damaged chunk is ``CorruptChunkError``, never wrong data, whenever a read takes the whole
chunk or its compressed bytes (a read of part of an uncompressed chunk reads only that
part)."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import numcodecs
import numpy as np
import pytest
import zarr
import zarr.codecs as zc
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import oocarray as oc
from oocarray import _native
from oocarray._storage._paged._arrays import paging_available
from testkit.children import run_python

needs_paging = pytest.mark.skipif(
    not paging_available()[0], reason=f"no chunk-backed ndarrays here: {paging_available()[1]}"
)

# zarr v3 bytes-to-bytes chains (each also tried with the crc32c codec after it) and zarr v2
# compressors: every codec oocarray reads natively.
V3_CHAINS: dict[str, list[Any]] = {
    "none": [],
    "zstd": [zc.ZstdCodec(level=1)],
    "zstd-checksum": [zc.ZstdCodec(level=1, checksum=True)],
    "blosc-lz4-shuffle": [zc.BloscCodec(cname="lz4", shuffle="shuffle")],
    "blosc-zstd-bitshuffle": [zc.BloscCodec(cname="zstd", shuffle="bitshuffle")],
    "blosc-blosclz-noshuffle": [zc.BloscCodec(cname="blosclz", shuffle="noshuffle")],
    "gzip": [zc.GzipCodec(level=1)],
}
V2_COMPRESSORS: dict[str, Any] = {
    "none": None,
    "zstd": numcodecs.Zstd(level=1),
    "blosc-lz4-auto": numcodecs.Blosc(cname="lz4", shuffle=numcodecs.Blosc.AUTOSHUFFLE),
    "blosc-zstd-bitshuffle": numcodecs.Blosc(cname="zstd", shuffle=numcodecs.Blosc.BITSHUFFLE),
    "gzip": numcodecs.GZip(level=1),
    "zlib": numcodecs.Zlib(level=1),
    "lz4": numcodecs.LZ4(),
}
CHAINS = [
    *((3, name, crc) for name in V3_CHAINS for crc in (False, True)),
    *((2, name, False) for name in V2_COMPRESSORS),
]
OC_CODECS = ["zstd", "lz4", "blosc", "gzip", "none"]


def _zarr_store(
    path: Path,
    values: np.ndarray,
    rows: int,
    chain: tuple[int, str, bool],
    shards: int | None = None,
) -> str:
    """``values`` written by zarr-python with row chunks of ``rows`` and the chain asked."""
    zarr_format, name, crc = chain
    if zarr_format == 3:
        compressors: Any = [*V3_CHAINS[name], *([zc.Crc32cCodec()] if crc else [])] or None
    else:
        compressors = V2_COMPRESSORS[name]
    z = zarr.create_array(
        path,
        shape=values.shape,
        chunks=(rows, *values.shape[1:]),
        shards=(shards, *values.shape[1:]) if shards else None,
        dtype=values.dtype,
        zarr_format=zarr_format,  # type: ignore[arg-type]
        compressors=compressors,
        fill_value=0,
    )
    z[...] = values
    return str(path)


def test_every_chain_is_decoded_natively(tmp_path: Path) -> None:
    """No chain here falls back to Python: the pager can page every one."""
    values = np.arange(64, dtype=np.float32).reshape(16, 4)
    for i, chain in enumerate(CHAINS):
        path = _zarr_store(tmp_path / f"{i}.zarr", values, 4, chain)
        layout = oc.open(path)._store._layout  # type: ignore[attr-defined]
        assert layout.native_codec is not None, chain
        assert layout.crc32c == chain[2]


@needs_paging
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    chain=st.sampled_from(CHAINS),
    sharded=st.booleans(),
    shape=st.tuples(st.integers(1, 300), st.integers(1, 12)),
    rows=st.integers(1, 64),
    dtype=st.sampled_from(["float32", "int16", "uint8", "float64"]),
    data=st.data(),
)
def test_every_codec_pages_and_reads_as_zarr_python_does(
    chain: tuple[int, str, bool],
    sharded: bool,
    shape: tuple[int, int],
    rows: int,
    dtype: str,
    data: st.DataObject,
) -> None:
    rows = min(rows, shape[0])
    rng = np.random.default_rng(shape[0] * 13 + rows)
    values = (rng.standard_normal(shape) * 50).astype(dtype)
    shards = 2 * rows if sharded and chain[0] == 3 else None
    with tempfile.TemporaryDirectory() as tmp:
        path = _zarr_store(Path(tmp) / "a.zarr", values, rows, chain, shards)
        expected = zarr.open_array(path, mode="r")[...]
        assert np.array_equal(expected, values)
        start = data.draw(st.integers(0, shape[0] - 1))
        stop = data.draw(st.integers(start, shape[0]))
        step = data.draw(st.integers(1, 5))
        x = oc.open(path)
        assert np.array_equal(x[...], expected)
        assert np.array_equal(x[start:stop:step], expected[start:stop:step])
        view = x.as_ndarray()
        assert np.array_equal(view[start:stop:step], expected[start:stop:step])
        assert np.array_equal(view, expected)


def _flip(path: Path, at: int, bit: int) -> bytes:
    """Flip one bit of a file; its bytes before."""
    before = path.read_bytes()
    damaged = bytearray(before)
    damaged[at] ^= 1 << bit
    path.write_bytes(bytes(damaged))
    return before


@pytest.mark.parametrize(
    "blosc",
    [
        zc.BloscCodec(cname="lz4", shuffle="shuffle"),
        zc.BloscCodec(cname="zstd", shuffle="bitshuffle"),
        zc.BloscCodec(cname="blosclz", shuffle="noshuffle"),
    ],
    ids=["lz4-shuffle", "zstd-bitshuffle", "blosclz-noshuffle"],
)
def test_every_bit_of_a_blosc_header_is_checked(tmp_path: Path, blosc: Any) -> None:
    """Without a checksum, one flipped bit in a blosc header's flags or type size used to
    decode the whole chunk wrong without an error: now every bit of the 16-byte header either
    reads right or is CorruptChunkError, through the native reader (which the pager uses) and
    through Python's decoder."""
    values = (np.random.default_rng(3).standard_normal((4096, 16)) * 100).astype(np.float32)
    z = zarr.create_array(
        tmp_path / "a.zarr", shape=values.shape, chunks=(4096, 16), dtype="f4", compressors=blosc
    )
    z[...] = values
    chunk = tmp_path / "a.zarr" / "c" / "0" / "0"
    pristine = chunk.read_bytes()
    x = oc.open(tmp_path / "a.zarr")
    layout = x._store._layout  # type: ignore[attr-defined]
    for bit in range(16 * 8):
        _flip(chunk, bit // 8, bit % 8)
        try:
            got = x[...]
        except oc.CorruptChunkError as error:
            message = str(error)
        else:
            assert np.array_equal(got, values), f"header bit {bit} decoded wrong, no error"
            message = f"chunk (0, 0) {chunk}"
        assert "chunk (0, 0)" in message and str(chunk) in message
        out = np.empty_like(values)
        try:
            layout.decode(chunk.read_bytes(), out)  # the Python path on its own
        except (ValueError, RuntimeError):
            pass
        else:
            assert np.array_equal(out, values), f"header bit {bit}: Python decoded it wrong"
        chunk.write_bytes(pristine)


@pytest.mark.parametrize(
    ("chain", "header"),
    [
        ((3, "zstd", False), 10),
        ((2, "zstd", False), 10),
        ((2, "lz4", False), 4),
        ((3, "gzip", False), 10),
        ((2, "gzip", False), 10),
        ((2, "zlib", False), 2),
    ],
    ids=["v3-zstd", "v2-zstd", "v2-lz4", "v3-gzip", "v2-gzip", "v2-zlib"],
)
def test_every_bit_of_other_headers_is_checked(
    tmp_path: Path, chain: tuple[int, str, bool], header: int
) -> None:
    """zstd's frame header (its declared size above all), numcodecs' lz4 size prefix and the
    gzip and zlib headers: a flipped bit reads right or is CorruptChunkError, with no checksum
    in the chain."""
    values = (np.random.default_rng(10).standard_normal((2048, 16)) * 100).astype(np.float32)
    path = Path(_zarr_store(tmp_path / "a.zarr", values, 2048, chain))
    chunk = path / ("c/0/0" if chain[0] == 3 else "0.0")
    pristine = chunk.read_bytes()
    for bit in range(header * 8):
        _flip(chunk, bit // 8, bit % 8)
        try:
            got = oc.open(path)[...]
        except oc.CorruptChunkError:
            pass
        else:
            assert np.array_equal(got, values), f"header bit {bit} decoded wrong, no error"
        chunk.write_bytes(pristine)


@pytest.mark.parametrize("codec", OC_CODECS)
def test_a_flipped_bit_anywhere_in_what_oocarray_writes_is_an_error(
    tmp_path: Path, codec: str
) -> None:
    """Before, stores written with the defaults carried no checksum: a flipped payload bit
    read back as wrong values for zstd, lz4, blosc and uncompressed chunks.  Now every chain
    ends with the crc32c codec."""
    values = np.random.default_rng(4).standard_normal((512, 32)).astype(np.float32)
    x = oc.create(tmp_path / "a.zarr", values.shape, values.dtype, chunks=(128, 32), codec=codec)
    x[...] = values
    chunk = tmp_path / "a.zarr" / "c" / "1" / "0"
    size = chunk.stat().st_size
    layout = oc.open(tmp_path / "a.zarr")._store._layout  # type: ignore[attr-defined]
    for at in (0, 5, 20, size // 3, size // 2, size - 9, size - 5, size - 1):
        pristine = _flip(chunk, at, at % 8)
        y = oc.open(tmp_path / "a.zarr")
        with pytest.raises(oc.CorruptChunkError, match=r"chunk \(1, 0\).*c/1/0"):
            y[...]
        with pytest.raises(oc.CorruptChunkError, match=r"chunk \(1, 0\).*c/1/0"):
            y[128:256]
        with pytest.raises(oc.CorruptChunkError, match=r"chunk \(1, 0\).*c/1/0"):
            y.sum()  # a streaming read
        if codec != "none":  # compressed bytes are read whole, and checked, for any read
            with pytest.raises(oc.CorruptChunkError, match=r"chunk \(1, 0\).*c/1/0"):
                y[130]
        with pytest.raises((ValueError, RuntimeError)):  # the Python decoder finds it too
            layout.decode(chunk.read_bytes(), np.empty((128, 32), np.float32))
        assert np.array_equal(y[:128], values[:128])  # the other chunks still read
        chunk.write_bytes(pristine)
    assert np.array_equal(oc.open(tmp_path / "a.zarr")[...], values)


@needs_paging
@pytest.mark.parametrize("codec", OC_CODECS)
def test_a_damaged_chunk_under_as_ndarray_never_reads_wrong(tmp_path: Path, codec: str) -> None:
    """The pager decodes and checks every chunk it fills whole: a damaged chunk raises
    CorruptChunkError in the thread that touched it, never wrong values, and the process
    lives."""
    values = np.random.default_rng(6).standard_normal((4096, 32)).astype(np.float32)
    path = tmp_path / "a.zarr"
    # 64 KiB chunks: one fault fills one chunk
    x = oc.create(path, values.shape, values.dtype, chunks=(512, 32), codec=codec)
    x[...] = values
    chunk = path / "c" / "4" / "0"
    _flip(chunk, chunk.stat().st_size // 2, 3)
    code = (
        "import numpy as np, oocarray as oc\n"
        f"v = oc.open({str(path)!r}).as_ndarray()\n"
        "print('first', float(v[:512].sum()), flush=True)\n"  # chunk 0 is whole
        "try:\n"
        "    total = float(v[2048:2560].sum())\n"
        "except oc.CorruptChunkError as error:\n"
        "    print('raised', error, flush=True)\n"
        "else:\n"
        "    print('read', total, flush=True)\n"
    )
    result = run_python(code, keep_settings=True)
    assert f"first {float(values[:512].sum())}" in result.stdout, result.stderr
    assert result.returncode == 0, result.stderr
    assert not any(line.startswith("read ") for line in result.stdout.splitlines())
    assert "raised" in result.stdout and "chunk 4" in result.stdout, result.stdout


@needs_paging
@pytest.mark.parametrize("codec", ["zstd", "none"])
def test_chunks_written_back_keep_their_checksum(tmp_path: Path, codec: str) -> None:
    """as_ndarray('r+') writes chunks back natively with the chain's crc32c codec's checksum,
    which zarr-python checks when it reads them."""
    values = np.random.default_rng(8).standard_normal((512, 32)).astype(np.float32)
    path = tmp_path / "a.zarr"
    x = oc.create(path, values.shape, values.dtype, chunks=(128, 32), codec=codec)
    x[...] = values
    y = oc.open(path, mode="r+")
    view = y.as_ndarray("r+")
    view[130:140] = -1.0
    values[130:140] = -1.0
    assert y.flush() >= 1  # the chunks of the unit written in
    assert np.array_equal(zarr.open_array(path, mode="r")[...], values)
    assert np.array_equal(oc.open(path)[...], values)
    _flip(path / "c" / "1" / "0", 40, 1)
    with pytest.raises(oc.CorruptChunkError):
        oc.open(path)[...]


@pytest.mark.parametrize("codec", ["lz4", "blosc", "gzip"])
def test_r_plus_paging_of_codecs_the_writer_cannot_encode_says_how_to_rewrite(
    tmp_path: Path, codec: str
) -> None:
    x = oc.create(tmp_path / "a.zarr", (512, 32), "float32", chunks=(128, 32), codec=codec)
    del x
    with pytest.raises(NotImplementedError, match=r"mode='r'.*codec='zstd'"):
        oc.open(tmp_path / "a.zarr", mode="r+").as_ndarray("r+")


def test_the_native_reader_checks_what_the_pager_fills(tmp_path: Path) -> None:
    """The pager's codec asks the native decoder to check a chunk's checksum even for a part
    of it (OC_CODEC_VERIFY); an eager read of part of a chunk reads only that part."""
    values = np.random.default_rng(9).standard_normal((256, 16)).astype(np.float32)
    x = oc.create(tmp_path / "a.zarr", values.shape, values.dtype, chunks=(256, 16), codec="none")
    x[...] = values
    chunk = tmp_path / "a.zarr" / "c" / "0" / "0"
    _flip(chunk, 3000, 2)  # in row 46
    layout = oc.open(tmp_path / "a.zarr")._store._layout  # type: ignore[attr-defined]
    codec = layout.native_codec
    fd = chunk.open("rb")
    try:
        for flags, fails in ((0, False), (_native.CODEC_VERIFY, True)):
            dest = np.zeros(64 * 16, np.float32)
            row = [0, 0, -1, 64 * 64, 0, 0, dest.nbytes, codec | flags, values.nbytes]
            jobs = np.array([row], np.int64)
            failed, _ = _native.read_chunks(jobs, [fd.fileno()], [dest], 1)
            if fails:
                assert len(failed) == 1 and "CRC-32C" in failed[0][1]
            else:  # rows 64-127: untouched by the damage, read without the rest
                assert failed == [] and np.array_equal(dest, values[64:128].ravel())
    finally:
        fd.close()


@pytest.mark.parametrize("codec", OC_CODECS)
def test_configure_checksum_false_writes_chains_without_the_crc(tmp_path: Path, codec: str) -> None:
    """``oc.configure(checksum=False)`` (or ``OOCARRAY_CHECKSUM=0``) leaves the crc32c codec out
    of the arrays created meanwhile; they read as before, and arrays created before keep it."""
    values = np.random.default_rng(9).standard_normal((1024, 16)).astype(np.float32)
    previous = oc.config().checksum
    oc.configure(checksum=False)
    try:
        x = oc.create(
            tmp_path / "plain.zarr", values.shape, values.dtype, chunks=(128, 16), codec=codec
        )
    finally:
        oc.configure(checksum=previous)
    x[...] = values
    codecs = zarr.open_array(tmp_path / "plain.zarr").metadata.codecs
    assert not any(isinstance(c, zc.Crc32cCodec) for c in codecs)
    assert "crc32c" not in oc.open(tmp_path / "plain.zarr").codec
    assert np.array_equal(zarr.open_array(tmp_path / "plain.zarr")[...], values)
    assert np.array_equal(oc.open(tmp_path / "plain.zarr")[...], values)
    checked = oc.create(tmp_path / "checked.zarr", (8,), "f4", codec=codec)
    assert checked.codec.endswith("crc32c")


def test_checksum_setting_is_validated_and_read_from_the_environment() -> None:
    with pytest.raises(TypeError, match="checksum must be True or False"):
        oc.configure(checksum="no")
    code = "import oocarray as oc; print(oc.config().checksum)"
    for value, expected in (("0", "False"), ("1", "True")):
        done = run_python(code, env={"OOCARRAY_CHECKSUM": value}, keep_settings=True)
        assert done.stdout.strip() == expected, done.stderr
