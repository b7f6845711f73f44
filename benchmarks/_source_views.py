"""A zarr v3 array's chunk files seen as the peers that cannot open it as it is need them:
described as zarr v2 (rechunker pins zarr<3), or as the one variable of an xarray dataset
(xarray-beam).  The views hard-link the same files, so every side reads the same bytes and
shares one page cache, and nothing is copied.

The v2 view works where the v3 codecs have a v2 equal that leaves the stored bytes as they
are: the little-endian ``bytes`` codec, then ``zstd``, then optionally ``crc32c`` (v2 applies
its filters before its compressor, so zstd becomes a filter and crc32c, which appends its
checksum, the compressor).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np


def _v2_codecs(codecs: list[dict[str, Any]]) -> tuple[list[dict[str, Any]] | None, dict[str, Any]]:
    names = [c["name"] for c in codecs]
    if names not in (["bytes", "zstd"], ["bytes", "zstd", "crc32c"]):
        raise ValueError(f"no zarr v2 equal of the codecs {names}")
    if codecs[0].get("configuration", {}).get("endian", "little") != "little":
        raise ValueError("no zarr v2 equal of big-endian bytes here")
    zstd = {"id": "zstd", **codecs[1].get("configuration", {})}
    if len(codecs) == 2:
        return None, zstd
    return [zstd], {"id": "crc32c", "location": "end"}


def _link_chunks(source: str, into: Path) -> None:
    """Hard-link ``source``'s chunk files (under ``c/``) into ``into``, keeping their paths."""
    chunks = Path(source) / "c"
    for directory, _, files in os.walk(chunks):
        linked = into / Path(directory).relative_to(chunks)
        linked.mkdir(parents=True, exist_ok=True)
        for name in files:
            os.link(Path(directory) / name, linked / name)


def xarray_view(source: str, view: str, name: str = "x") -> None:
    """Make ``view`` a zarr v3 group holding ``source``'s array as the variable ``name``, its
    dimensions named ``dim_0``, ``dim_1``, ..."""
    meta = json.loads((Path(source) / "zarr.json").read_text())
    meta["dimension_names"] = [f"dim_{axis}" for axis in range(len(meta["shape"]))]
    group = {"zarr_format": 3, "node_type": "group", "attributes": {}}
    array = Path(view) / name
    array.mkdir(parents=True)
    (Path(view) / "zarr.json").write_text(json.dumps(group))
    (array / "zarr.json").write_text(json.dumps(meta))
    _link_chunks(source, array / "c")


def zarr_v2_view(source: str, view: str) -> None:
    """Make ``view`` a zarr v2 array of ``source``'s (a zarr v3 array's) chunk files."""
    meta = json.loads((Path(source) / "zarr.json").read_text())
    if meta["chunk_key_encoding"] != {"name": "default", "configuration": {"separator": "/"}}:
        raise ValueError(f"chunk keys {meta['chunk_key_encoding']} have no v2 equal here")
    filters, compressor = _v2_codecs(meta["codecs"])
    root = Path(view)
    root.mkdir(parents=True)
    zarray = {
        "zarr_format": 2,
        "shape": meta["shape"],
        "chunks": meta["chunk_grid"]["configuration"]["chunk_shape"],
        "dtype": np.dtype(meta["data_type"]).newbyteorder("<").str,
        "compressor": compressor,
        "filters": filters,
        "fill_value": meta["fill_value"],
        "order": "C",
        "dimension_separator": "/",
    }
    (root / ".zarray").write_text(json.dumps(zarray))
    (root / ".zattrs").write_text(json.dumps(meta.get("attributes", {})))
    _link_chunks(source, root)
