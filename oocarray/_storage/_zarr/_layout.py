"""Where the chunks of a local zarr directory lie and how their bytes decode.

For the common layouts (regular chunks, C order, one compressor at most: zstd, blosc or gzip
in v3, optionally followed by the crc32c codec; any numcodecs compressor and filters in v2; v3
shards of such chunks) chunks are found and decoded without zarr-python; :func:`layout_of`
says None for anything else.  Every header field that decoding trusts is checked against what
was read and what the metadata says, and a chunk's checksum (zstd's, CRC-32C) is verified
whenever the whole chunk is decoded.  Shards, their layout and index, are in :mod:`._shards`.
"""

from __future__ import annotations

import glob
import importlib
import math
import os
import struct
from collections.abc import Callable
from typing import Any, NamedTuple

import google_crc32c
import numcodecs
import numcodecs.zstd
import numpy as np
import zarr
import zarr.codecs

from oocarray import _native
from oocarray._storage._zarr._shards import ShardLayout

__all__ = [
    "BloscExpected",
    "Layout",
    "crc32c_of",
    "layout_of",
]


def layout_of(array: Any) -> Layout | None:
    """The direct layout of a zarr array, or None when zarr-python must read it."""
    if np.dtype(array.dtype).hasobject:
        return None
    return _v3_layout(array) if array.metadata.zarr_format == 3 else _v2_layout(array)


class BloscExpected(NamedTuple):
    """What a blosc chunk's header must say, from the array's metadata: the shuffle (0 none,
    1 byte, 2 bit) and the type size; None where the metadata does not tell (filters before
    blosc in zarr v2 change what blosc sees)."""

    shuffle: int | None
    typesize: int | None


class Layout:
    """How to find, decode and encode one chunk of a local zarr array without zarr-python."""

    def __init__(
        self,
        key: Callable[[tuple[int, ...]], str],
        codec: Any,
        stored_dtype: np.dtype[Any],
        shard: ShardLayout | None = None,
        crc32c: bool = False,
        blosc: BloscExpected | None = None,
    ) -> None:
        self.key = key
        self.codec = codec  # a numcodecs codec, a FilterChain, or None for raw bytes
        self.stored_dtype = stored_dtype  # with the byte order of the files
        self.shard = shard  # set when chunks are inner chunks of shards (read-only path)
        self.crc32c = crc32c  # zarr v3's crc32c codec ends the chain: 4 bytes after the data
        self.blosc = blosc if blosc is not None else BloscExpected(None, None)
        self.decode = _checked(_decoder(codec, self.blosc), crc32c)
        # What the native chunk reader can run itself (see _reader.py), else None.
        self.native_codec = _native_codec(codec, crc32c, self.blosc)


def _load_libraries() -> None:
    """Give the native reader the libraries of numcodecs' blosc and lz4 and google-crc32c's
    CRC-32C (once; a library that cannot be loaded leaves its codec to Python)."""
    global _libraries_loaded
    if _libraries_loaded:
        return
    # Loading again (two threads at once) is harmless: the native side keeps the first.
    for which, module in ((_native.LIB_BLOSC, "blosc"), (_native.LIB_LZ4, "lz4")):
        try:
            extension = importlib.import_module(f"numcodecs.{module}")
        except ImportError:  # numcodecs built without it: Python decodes nothing of it either
            continue
        _native.codec_library(which, str(extension.__file__))
    package = os.path.dirname(google_crc32c.__file__)
    candidates = sorted(glob.glob(os.path.join(package + ".libs", "libcrc32c*.so*")))
    for path in [*candidates, "libcrc32c.so.1"]:  # the wheel's own copy, else the system's
        if _native.codec_library(_native.LIB_CRC32C, path):
            break
    _libraries_loaded = True


_libraries_loaded = False


def _native_codec(codec: Any, crc32c: bool, blosc: BloscExpected) -> int | None:
    """The native reader's number for a chunk codec (oc_codecs.h), or None where only Python
    decodes it."""
    _load_libraries()
    if codec is None:
        number = _native.CODEC_RAW
    elif isinstance(codec, numcodecs.Zstd):
        number = _native.CODEC_ZSTD
    elif isinstance(codec, numcodecs.Blosc):
        shuffle = 3 if blosc.shuffle is None else blosc.shuffle
        number = _native.CODEC_BLOSC | shuffle << 12 | (blosc.typesize or 0) << 16
    elif isinstance(codec, (numcodecs.GZip, numcodecs.Zlib)):
        number = _native.CODEC_GZIP
    elif _is_lz4(codec):
        number = _native.CODEC_LZ4
    else:
        return None
    if crc32c:
        number |= _native.CODEC_CRC32C
    return number if _native.codec_ready(number) else None


def crc32c_of(data: Any, crc: int = 0) -> int:
    """The CRC-32C of a buffer's bytes, continuing ``crc`` (that of the bytes before them):
    natively, without a copy, when the library is loaded."""
    _load_libraries()
    if _native.codec_ready(_native.CODEC_RAW | _native.CODEC_CRC32C):
        return int(_native.crc32c(data, crc))
    return int(google_crc32c.extend(crc, bytes(data)))


def _checked(
    decode: Callable[[Any, np.ndarray], None], crc32c: bool
) -> Callable[[Any, np.ndarray], None]:
    """``decode`` after checking and removing the CRC-32C that zarr's crc32c codec appends."""
    if not crc32c:
        return decode

    def checked(raw: Any, out: np.ndarray) -> None:
        view = memoryview(raw).cast("B")
        if len(view) < 4:
            raise ValueError(f"{len(view)} bytes stored, fewer than a CRC-32C checksum")
        stored = int.from_bytes(view[-4:], "little")
        computed = crc32c_of(view[:-4])
        if stored != computed:
            raise ValueError(
                f"the CRC-32C checksum does not match (stored {stored:08x}, computed "
                f"{computed:08x})"
            )
        decode(view[:-4], out)

    return checked


def _decoder(codec: Any, blosc: BloscExpected) -> Callable[[Any, np.ndarray], None]:
    """``decode(raw, out)``: fill all of ``out`` (C-contiguous) from one chunk's stored bytes,
    raising when they hold any other number of bytes."""
    if codec is None:

        def decode(raw: bytes, out: np.ndarray) -> None:
            if len(raw) != out.nbytes:
                raise ValueError(f"{len(raw)} bytes stored, expected {out.nbytes}")
            out.reshape(-1).view(np.uint8)[:] = np.frombuffer(raw, dtype=np.uint8)

    elif isinstance(codec, numcodecs.Zstd):

        def decode(raw: bytes, out: np.ndarray) -> None:
            # The codec fills a larger ``out`` only in part, without a word: decode in place
            # only what the frame header says is exactly the chunk.
            if _zstd_content_size(raw) == out.nbytes:
                numcodecs.zstd.decompress(raw, out)
            else:  # no size in the header, several frames, or the wrong size
                _copy_exact(codec.decode(raw), out)

    elif isinstance(codec, numcodecs.Blosc):

        def decode(raw: bytes, out: np.ndarray) -> None:
            _check_blosc_frame(raw, out.nbytes, True, blosc)
            codec.decode(raw, out=out)

    elif _is_lz4(codec):

        def decode(raw: bytes, out: np.ndarray) -> None:
            # numcodecs allocates what the header declares: check it first
            declared = int.from_bytes(raw[:4], "little") if len(raw) >= 4 else None
            if declared != out.nbytes:
                raise ValueError(f"the lz4 header says {declared} bytes, expected {out.nbytes}")
            _copy_exact(codec.decode(raw), out)

    else:

        def decode(raw: bytes, out: np.ndarray) -> None:
            _copy_exact(codec.decode(raw), out)

    return decode


def _is_lz4(codec: Any) -> bool:
    """Whether ``codec`` is numcodecs' LZ4 (absent from numcodecs built without it)."""
    return type(codec).__name__ == "LZ4" and getattr(codec, "codec_id", None) == "lz4"


_BLOSC_HEADER = struct.Struct("<BBBBIII")  # versions, flags, typesize, nbytes, blocksize, cbytes
_BLOSC_DOSHUFFLE = 0x01  # flag: bytes were shuffled by the type size
_BLOSC_MEMCPYED = 0x02  # flag: the data follows the header uncompressed
_BLOSC_DOBITSHUFFLE = 0x04  # flag: bits were shuffled


def _check_blosc_frame(raw: Any, expected: int, exact: bool, written: BloscExpected) -> None:
    """Raise unless ``raw`` is framed as one blosc buffer of ``expected`` decoded bytes (at
    most ``expected`` unless ``exact``), written as the array's metadata says.

    c-blosc trusts its header: it reads ``cbytes`` bytes whatever the buffer holds, so a
    truncated chunk would be decoded from memory past its end, and the flags and type size
    choose how the decoded bytes are unshuffled, so one bit flipped there decodes the whole
    chunk wrong without an error.  Every field is checked against what was read and what the
    metadata says before the decoder sees it (native/codecs.c checks the same)."""
    if len(raw) < _BLOSC_HEADER.size:
        raise ValueError(
            f"{len(raw)} bytes stored, fewer than a blosc header ({_BLOSC_HEADER.size})"
        )
    version, _, flags, typesize, nbytes, blocksize, cbytes = _BLOSC_HEADER.unpack_from(raw)
    if version not in (1, 2):
        raise ValueError(f"the blosc header says format version {version} (1 or 2 expected)")
    if nbytes > expected or (exact and nbytes != expected):
        bound = "" if exact else "at most "
        raise ValueError(
            f"the blosc header says {nbytes} bytes decoded, expected {bound}{expected}"
        )
    if cbytes != len(raw):
        raise ValueError(f"the blosc header says {cbytes} bytes stored, {len(raw)} were read")
    if nbytes and (blocksize == 0 or blocksize > nbytes):
        raise ValueError(
            f"the blosc header says blocks of {blocksize} bytes for {nbytes} decoded bytes"
        )
    if flags & _BLOSC_MEMCPYED and cbytes != _BLOSC_HEADER.size + nbytes:
        raise ValueError(
            f"the blosc header says {nbytes} bytes stored uncompressed, but {cbytes} are stored"
        )
    bit, byte = bool(flags & _BLOSC_DOBITSHUFFLE), bool(flags & _BLOSC_DOSHUFFLE)
    shuffle = -1 if bit and byte else 2 if bit else int(byte)
    if written.shuffle is not None and shuffle != written.shuffle:
        raise ValueError(
            f"the blosc header's flags (0x{flags:02x}) say shuffle {shuffle}, the array's "
            f"codec {written.shuffle}"
        )
    if written.typesize is not None and typesize != written.typesize:
        raise ValueError(
            f"the blosc header says a type size of {typesize}, the array's codec {written.typesize}"
        )


def _copy_exact(decoded: Any, out: np.ndarray) -> None:
    if isinstance(decoded, np.ndarray):  # what filters decode to, of any dtype
        flat = np.ascontiguousarray(decoded).reshape(-1).view(np.uint8)
    else:
        flat = np.frombuffer(decoded, dtype=np.uint8)
    if flat.nbytes != out.nbytes:
        raise ValueError(f"decoded {flat.nbytes} bytes, expected {out.nbytes}")
    out.reshape(-1).view(np.uint8)[:] = flat


_ZSTD_MAGIC = 0xFD2FB528


def _zstd_content_size(raw: bytes) -> int | None:
    """The decoded size the first zstd frame's header declares, or None when it declares none
    or ``raw`` is no zstd frame."""
    if len(raw) < 6 or int.from_bytes(raw[:4], "little") != _ZSTD_MAGIC:
        return None
    descriptor = raw[4]
    size_flag, single_segment, dict_flag = descriptor >> 6, (descriptor >> 5) & 1, descriptor & 3
    position = 5 + (0 if single_segment else 1) + (0, 1, 2, 4)[dict_flag]
    width = (1 if single_segment else 0, 2, 4, 8)[size_flag]
    if width == 0 or position + width > len(raw):
        return None
    size = int.from_bytes(raw[position : position + width], "little")
    return size + 256 if width == 2 else size


def _v3_layout(array: Any) -> Layout | None:
    meta: Any = array.metadata
    codecs = list(meta.codecs)
    shard = None
    if len(codecs) == 1 and isinstance(codecs[0], zarr.codecs.ShardingCodec):
        sharding = codecs[0]
        index_codecs = list(sharding.index_codecs)
        little = all(
            getattr(getattr(c, "endian", None), "value", "little") == "little"
            for c in index_codecs
            if isinstance(c, zarr.codecs.BytesCodec)
        )
        extra = [c for c in index_codecs if not isinstance(c, zarr.codecs.BytesCodec)]
        if not little or any(not isinstance(c, zarr.codecs.Crc32cCodec) for c in extra):
            return None
        outer = tuple(meta.chunk_grid.chunk_shape)
        inner = tuple(sharding.chunk_shape)
        shard = ShardLayout(
            tuple(o // i for o, i in zip(outer, inner, strict=True)),
            str(getattr(sharding.index_location, "value", sharding.index_location)) == "end",
            bool(extra),
        )
        codecs = list(sharding.codecs)
    if not codecs or not isinstance(codecs[0], zarr.codecs.BytesCodec):
        return None
    endian = codecs[0].endian
    dtype = np.dtype(array.dtype)
    little = endian is None or getattr(endian, "value", endian) == "little"
    stored = dtype.newbyteorder("<" if little else ">") if dtype.itemsize > 1 else dtype
    rest = codecs[1:]
    crc32c = bool(rest) and isinstance(rest[-1], zarr.codecs.Crc32cCodec)
    if crc32c:
        rest = rest[:-1]
    codec: Any = None
    blosc = None
    if len(rest) > 1:
        return None
    if rest:
        c = rest[0]
        if isinstance(c, zarr.codecs.ZstdCodec):
            codec = numcodecs.Zstd(level=c.level, checksum=c.checksum)
        elif isinstance(c, zarr.codecs.BloscCodec):
            shuffle = {"noshuffle": 0, "shuffle": 1, "bitshuffle": 2}[str(c.shuffle.value)]
            codec = numcodecs.Blosc(
                cname=str(c.cname.value), clevel=c.clevel, shuffle=shuffle, blocksize=c.blocksize
            )
            # numcodecs encodes with the stored array's item size; c-blosc caps it at 255
            typesize = dtype.itemsize if dtype.itemsize <= 255 else 1
            blosc = BloscExpected(shuffle, c.typesize if c.typesize is not None else typesize)
        elif isinstance(c, zarr.codecs.GzipCodec):
            codec = numcodecs.GZip(level=c.level)
        else:
            return None
    encoding = meta.chunk_key_encoding
    separator = getattr(encoding, "separator", "/")
    if separator not in ("/", "."):
        return None
    if type(encoding).__name__ == "DefaultChunkKeyEncoding":

        def key(chunk: tuple[int, ...]) -> str:
            return "c" + (separator + separator.join(map(str, chunk)) if chunk else "")

    elif type(encoding).__name__ == "V2ChunkKeyEncoding":

        def key(chunk: tuple[int, ...]) -> str:
            return separator.join(map(str, chunk)) if chunk else "0"

    else:
        return None
    return Layout(key, codec, stored, shard, crc32c, blosc)


class FilterChain:
    """The codecs of a zarr v2 array with filters, as one numcodecs-like codec: on write the
    filters in order, then the compressor (if any); on read the reverse.  A blosc compressor's
    framing is checked before it decodes (see :func:`_check_blosc_frame`)."""

    def __init__(self, filters: tuple[Any, ...], compressor: Any, chunk_nbytes: int) -> None:
        self.filters = filters
        self.compressor = compressor
        # What blosc saw was the filters' output: its type size is not known here.
        shuffle = getattr(compressor, "shuffle", -1)
        self._blosc = BloscExpected(shuffle if shuffle >= 0 else None, None)
        # Filters may widen or narrow the data (AsType, PackBits): bound what blosc may
        # declare, so a damaged header cannot ask for any amount of memory.
        self._decoded_limit = 8 * chunk_nbytes + 4096

    def encode(self, data: np.ndarray) -> Any:
        encoded: Any = data
        for codec in self.filters:
            encoded = codec.encode(encoded)
        if self.compressor is not None:
            return self.compressor.encode(encoded)
        array = np.ascontiguousarray(encoded)
        return array.reshape(-1).view(np.uint8)

    def decode(self, raw: bytes) -> Any:
        decoded: Any = raw
        if isinstance(self.compressor, numcodecs.Blosc):
            _check_blosc_frame(raw, self._decoded_limit, False, self._blosc)
        if self.compressor is not None:
            decoded = self.compressor.decode(raw)
        for codec in reversed(self.filters):
            decoded = codec.decode(decoded)
        return decoded


def _v2_layout(array: Any) -> Layout | None:
    meta: Any = array.metadata
    if meta.order != "C":
        return None
    separator = meta.dimension_separator or "."
    if separator not in ("/", "."):
        return None

    def key(chunk: tuple[int, ...]) -> str:
        return separator.join(map(str, chunk)) if chunk else "0"

    dtype = (
        np.dtype(meta.dtype.to_native_dtype())
        if hasattr(meta.dtype, "to_native_dtype")
        else np.dtype(array.dtype)
    )
    codec = meta.compressor
    blosc = None
    if meta.filters:
        codec = FilterChain(tuple(meta.filters), codec, math.prod(meta.chunks) * dtype.itemsize)
    elif isinstance(codec, numcodecs.Blosc):
        # numcodecs encodes with the chunk's item size (c-blosc caps it at 255), resolving
        # AUTOSHUFFLE by it: bit shuffle for 1-byte items, else byte shuffle
        typesize = dtype.itemsize if dtype.itemsize <= 255 else 1
        shuffle = codec.shuffle if codec.shuffle >= 0 else (2 if dtype.itemsize == 1 else 1)
        blosc = BloscExpected(shuffle, typesize)
    return Layout(key, codec, dtype, blosc=blosc)
