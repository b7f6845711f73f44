"""``oocarray info``: every format, groups, JSON, and bad input."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from tests.cli._helpers import DATA, Result, write

EXPECTED = {
    "npy": ("npy", [20, 6], None, "none"),
    "hdf5": ("hdf5, contiguous", [20, 6], None, "none"),
    "zarr3": ("zarr v3", [8, 6], None, "zstd"),
    "zarr3-sharded": ("zarr v3, sharded", [4, 3], [8, 6], "sharding(zstd)"),
    "zarr2": ("zarr v2", [8, 6], None, "zstd"),
}


def test_info_json_on_every_format(source: tuple[str, Path], cli: Callable[..., Result]) -> None:
    fmt, path = source
    result = cli("info", path, "--json")
    assert result.code == 0, result.err
    info = result.json()
    expected_format, chunks, shards, codec = EXPECTED[fmt]
    assert info["format"] == expected_format
    assert info["shape"] == [20, 6]
    assert info["dtype"] == "float32"
    assert info["chunks"] == chunks
    assert info["shards"] == shards
    assert info["codec"] == codec
    assert info["logical_bytes"] == DATA.nbytes
    assert info["stored_bytes"] > 0
    assert info["memory_mapped"] == (fmt in ("npy", "hdf5"))


def test_info_text_on_every_format(source: tuple[str, Path], cli: Callable[..., Result]) -> None:
    fmt, path = source
    result = cli("info", path)
    assert result.code == 0, result.err
    assert result.out.startswith(str(path))
    assert EXPECTED[fmt][0] in result.out
    assert "(20, 6)" in result.out
    assert "float32" in result.out
    assert "logical" in result.out
    assert "stored" in result.out
    assert ("shards" in result.out) == (fmt == "zarr3-sharded")


def test_info_chooses_a_dataset_in_an_hdf5_file(tmp_path: Path, cli: Callable[..., Result]) -> None:
    import h5py

    path = tmp_path / "two.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("x", data=DATA)
        f.create_dataset("g/y", data=DATA, chunks=(5, 6), compression="gzip")
    result = cli("info", path)
    assert result.code == 1
    assert "choose one with --dataset NAME" in result.one_error_line()
    result = cli("info", path, "--dataset", "g/y", "--json")
    assert result.code == 0, result.err
    info = result.json()
    assert (info["format"], info["chunks"], info["codec"]) == ("hdf5, chunked", [5, 6], "gzip")
    assert cli("info", path, "--dataset", "nope").code == 1


def test_info_in_a_zarr_group(tmp_path: Path, cli: Callable[..., Result]) -> None:
    import oocarray as oc

    oc.create(tmp_path / "g.zarr", (4,), "int16", dataset="a/b", codec="lz4")
    result = cli("info", tmp_path / "g.zarr", "--dataset", "a/b", "--json")
    assert result.code == 0, result.err
    assert result.json()["codec"] == "blosc(lz4)"
    assert result.json()["dataset"] == "a/b"


def test_info_bad_input(tmp_path: Path, cli: Callable[..., Result]) -> None:
    assert cli("info", tmp_path / "missing.npy").code == 1
    (tmp_path / "notes.txt").write_text("hello")
    result = cli("info", tmp_path / "notes.txt")
    assert result.code == 1
    assert "not an array store" in result.one_error_line()
    (tmp_path / "empty").mkdir()
    assert "not a zarr array" in cli("info", tmp_path / "empty").one_error_line()
    npy = write("npy", tmp_path)
    npy.write_bytes(npy.read_bytes()[:20])  # the header cut off
    result = cli("info", npy)
    assert result.code == 1
    result.one_error_line()
    zarr = write("zarr3", tmp_path)
    (zarr / "zarr.json").write_text("{not json")
    result = cli("info", zarr)
    assert result.code == 1
    result.one_error_line()


def test_info_of_a_scalar_and_an_empty_array(tmp_path: Path, cli: Callable[..., Result]) -> None:
    np.save(tmp_path / "s.npy", np.float64(3.5))
    np.save(tmp_path / "e.npy", np.zeros((0, 3), np.int8))
    assert cli("info", tmp_path / "s.npy", "--json").json()["shape"] == []
    assert cli("info", tmp_path / "e.npy", "--json").json()["shape"] == [0, 3]


@pytest.mark.parametrize("fmt", ["hdf5", "zarr3"])
def test_info_on_a_truncated_file(fmt: str, tmp_path: Path, cli: Callable[..., Result]) -> None:
    path = write(fmt, tmp_path)
    if fmt == "hdf5":
        path.write_bytes(path.read_bytes()[:600])
    else:
        (path / "zarr.json").write_text('{"zarr_format": 3, "node_type": "array"}')
    result = cli("info", path)
    assert result.code == 1
    result.one_error_line()
