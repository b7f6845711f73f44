"""``oocarray info PATH``: what an array on disk is (format, shape, dtype, chunks, codec, sizes)."""

from __future__ import annotations

import argparse
import math
import os
import warnings
from typing import Any

from oocarray._cli._args import Parser, add_common, storage_options
from oocarray._cli._open import open_array
from oocarray._cli._output import format_bytes, print_json

__all__ = ["add_parser", "describe"]


def add_parser(commands: argparse._SubParsersAction[Parser]) -> None:
    """Register ``info`` on the command line."""
    parser = commands.add_parser(
        "info",
        help="describe an array: format, shape, dtype, chunks, shards, codec, sizes",
        description="Describe an array on disk (zarr v3/v2, sharded zarr, HDF5, .npy): its "
        "format, shape, dtype, chunks and shards, codec, and its sizes stored and in memory. "
        "Nothing but the metadata is read.",
    )
    parser.add_argument("path", help="a zarr directory, an HDF5 file or a .npy file")
    add_common(parser)
    parser.add_argument("--json", action="store_true", help="print the description as JSON")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Print the description of ``args.path``."""
    info = describe(args.path, args.dataset, storage_options(args))
    if args.json:
        print_json(info)
        return 0
    ratio = info["compression_ratio"]
    rows = [
        ["format", info["format"]],
        ["shape", _tuple(info["shape"])],
        ["dtype", info["dtype"]],
        ["chunks", f"{_tuple(info['chunks'])}  ({_count(info['chunk_count'], 'chunk')})"],
    ]
    if info["shards"] is not None:
        shards = f"{_tuple(info['shards'])}  ({_count(info['shard_count'], 'shard')})"
        rows.append(["shards", shards])
    rows += [
        ["codec", info["codec"]],
        ["logical", f"{format_bytes(info['logical_bytes'])} ({info['logical_bytes']:,} bytes)"],
        [
            "stored",
            f"{format_bytes(info['stored_bytes'])} ({info['stored_bytes']:,} bytes"
            + (f", ratio {ratio:.2f})" if ratio else ")"),
        ],
        ["reads", "memory-mapped" if info["memory_mapped"] else "chunk by chunk"],
    ]
    name = info["path"] + (f" [{info['dataset']}]" if info["dataset"] else "")
    print(name)
    for key, value in rows:
        print(f"  {key:<8} {value}")
    return 0


def describe(
    path: str, dataset: str | None = None, options: dict[str, Any] | None = None
) -> dict[str, Any]:
    """A JSON-ready description of the array at ``path``.

    Examples
    --------
    >>> import os, tempfile, numpy as np
    >>> path = os.path.join(tempfile.mkdtemp(), "a.npy")
    >>> np.save(path, np.zeros((3, 4), np.float32))
    >>> info = describe(path)
    >>> info["format"], info["shape"], info["logical_bytes"]
    ('npy', [3, 4], 48)
    """
    with open_array(path, dataset, options) as x:
        fmt = x.format
        codec = x.codec
        if fmt == "zarr":
            version, codec = _zarr_metadata(x, codec)
            fmt = f"zarr v{version}" + (", sharded" if x.shards is not None else "")
        elif fmt == "hdf5":
            fmt = "hdf5, " + ("chunked" if x.location == "chunks" else "contiguous")
        stored = x.stored_bytes()
        grid = [math.ceil(n / c) if c else 0 for n, c in zip(x.shape, x.chunks, strict=True)]
        shard_grid = (
            None
            if x.shards is None
            else [math.ceil(n / s) if s else 0 for n, s in zip(x.shape, x.shards, strict=True)]
        )
        return {
            "path": x.path if "://" in os.fspath(path) else os.fspath(path),  # URLs redacted
            "dataset": dataset,
            "format": fmt,
            "shape": list(x.shape),
            "dtype": str(x.dtype),
            "chunks": list(x.chunks),
            "chunk_count": math.prod(grid),
            "shards": None if x.shards is None else list(x.shards),
            "shard_count": None if shard_grid is None else math.prod(shard_grid),
            "codec": codec,
            "logical_bytes": x.nbytes,
            "stored_bytes": stored,
            "compression_ratio": round(x.nbytes / stored, 3) if stored else None,
            "memory_mapped": x.location == "mmap",
        }


def _count(n: int, what: str) -> str:
    return f"{n:,} {what}" + ("" if n == 1 else "s")


def _tuple(values: list[int]) -> str:
    return "(" + ", ".join(str(v) for v in values) + ("," if len(values) == 1 else "") + ")"


def _zarr_metadata(x: Any, codec: str) -> tuple[int, str]:
    """The zarr format version of the array ``x`` and its codecs in words (``blosc(lz4)``,
    ``sharding(zstd)``), from its metadata (local or in an object store)."""
    metadata = x._store.array.metadata
    if metadata.zarr_format == 2:
        return 2, codec
    try:
        with warnings.catch_warnings():  # a string dtype's "no v3 specification yet"
            warnings.simplefilter("ignore")
            codecs = metadata.to_dict().get("codecs", [])
        return 3, _codec_words(codecs) or codec
    except (ValueError, AttributeError, TypeError, KeyError):
        return 3, codec  # oc.open read it: only the words are lost


def _codec_words(codecs: list[dict[str, Any]]) -> str:
    names = []
    for codec in codecs:
        name = codec["name"]
        config = codec.get("configuration") or {}
        if name in ("bytes", "crc32c"):
            continue
        if name == "sharding_indexed":
            name = f"sharding({_codec_words(config.get('codecs', [])) or 'none'})"
        elif name == "blosc" and "cname" in config:
            name = f"blosc({config['cname']})"
        names.append(name)
    return "+".join(names)
