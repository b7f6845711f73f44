"""``oocarray convert``: every format to every output, rechunking, recompressing, bad input."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

import oocarray as oc
from tests.cli._helpers import DATA, Result, write

OUTPUTS = {
    "zarr": ("out.zarr", []),
    "zarr-rechunked-lz4": ("out.zarr", ["--chunks", "3,2", "--codec", "lz4"]),
    "zarr-sharded": ("out.zarr", ["--chunks", "2,3", "--shards", "4,6"]),
    "hdf5": ("out.h5", []),
    "hdf5-gzip": ("out.hdf5", ["--codec", "gzip", "--chunks", "5,6"]),
    "npy": ("out.npy", []),
}


def read_back(path: Path, dataset: str | None = None) -> np.ndarray:
    with oc.open(path, dataset=dataset) as x:
        return x[...]


@pytest.mark.parametrize("output", OUTPUTS)
def test_convert_round_trips(
    source: tuple[str, Path], output: str, tmp_path: Path, cli: Callable[..., Result]
) -> None:
    _, src = source
    name, options = OUTPUTS[output]
    dst = tmp_path / "converted" / name
    dst.parent.mkdir()
    result = cli("convert", src, dst, *options, "--max-ram", "32M")
    assert result.code == 0, result.err
    assert f"-> {dst}" in result.out
    assert "budget" in result.out
    dataset = "data" if output.startswith("hdf5") else None
    np.testing.assert_array_equal(read_back(dst, dataset), DATA)
    info = cli("info", dst, *(["--dataset", dataset] if dataset else []), "--json").json()
    if output == "zarr-rechunked-lz4":
        assert (info["chunks"], info["codec"]) == ([3, 2], "blosc(lz4)")
    if output == "zarr-sharded":
        assert (info["chunks"], info["shards"]) == ([2, 3], [4, 6])
    if output == "hdf5-gzip":
        assert (info["chunks"], info["codec"]) == ([5, 6], "gzip")
    assert list(dst.parent.iterdir()) == [dst]  # nothing partial left beside it


def test_convert_keeps_a_zarr_layout_and_back_to_npy(
    tmp_path: Path, cli: Callable[..., Result]
) -> None:
    src = write("zarr3-sharded", tmp_path)
    assert cli("convert", src, tmp_path / "copy.zarr").code == 0
    info = cli("info", tmp_path / "copy.zarr", "--json").json()
    assert (info["chunks"], info["shards"]) == ([4, 3], [8, 6])
    assert cli("convert", tmp_path / "copy.zarr", tmp_path / "back.npy").code == 0
    np.testing.assert_array_equal(np.load(tmp_path / "back.npy"), DATA)


def test_convert_in_blocks_below_the_array(tmp_path: Path, cli: Callable[..., Result]) -> None:
    data = np.random.default_rng(0).standard_normal((4096, 300)).astype(np.float32)  # 4.7 MiB
    np.save(tmp_path / "big.npy", data)
    for dst, options in (
        ("big.h5", ["--chunks", "64,300", "--codec", "lzf"]),
        ("big2.npy", []),
        ("big.zarr", ["--chunks", "100,100", "--shards", "200,300"]),
    ):
        result = cli("convert", tmp_path / "big.npy", tmp_path / dst, *options, "--max-ram", "4M")
        assert result.code == 0, result.err
        np.testing.assert_array_equal(
            read_back(tmp_path / dst, "data" if dst.endswith(".h5") else None), data
        )


def test_convert_scalars_empty_arrays_and_3d(tmp_path: Path, cli: Callable[..., Result]) -> None:
    cube = np.arange(60, dtype=np.int16).reshape(3, 4, 5)
    for name, value in (("s", np.float64(2.5)), ("e", np.zeros((0, 4))), ("c", cube)):
        np.save(tmp_path / f"{name}.npy", value)
        for ext in ("zarr", "h5", "npy"):
            dst = tmp_path / f"{name}-out.{ext}"
            result = cli("convert", tmp_path / f"{name}.npy", dst)
            assert result.code == 0, (name, ext, result.err)
            back = read_back(dst, "data" if ext == "h5" else None)
            assert back.shape == np.shape(value)
            np.testing.assert_array_equal(back, value)


def test_convert_overwrite(tmp_path: Path, cli: Callable[..., Result]) -> None:
    src = write("npy", tmp_path)
    dst = tmp_path / "o.zarr"
    assert cli("convert", src, dst).code == 0
    again = cli("convert", src, dst)
    assert again.code == 1
    assert "--overwrite" in again.one_error_line()
    assert cli("convert", src, dst, "--overwrite", "--codec", "gzip").code == 0
    assert cli("info", dst, "--json").json()["codec"] == "gzip"
    h5 = tmp_path / "o.h5"
    assert cli("convert", src, h5).code == 0
    assert cli("convert", dst, h5, "--overwrite").code == 0
    np.testing.assert_array_equal(read_back(h5, "data"), DATA)


def test_convert_overwrite_replaces_only_an_array_of_the_output_format(
    tmp_path: Path, cli: Callable[..., Result]
) -> None:
    """Issue 21, item 1: --overwrite removed whatever was at DST (``shutil.rmtree``)."""
    src = write("npy", tmp_path)
    papers = tmp_path / "papers.zarr"  # a directory of someone's files, named like an output
    papers.mkdir()
    (papers / "thesis.tex").write_text("years of work")
    zarr_with_notes = tmp_path / "noted.zarr"
    assert cli("convert", src, zarr_with_notes).code == 0
    (zarr_with_notes / "notes.txt").write_text("mine")
    h5 = tmp_path / "two.h5"
    assert cli("convert", src, h5).code == 0
    import h5py

    with h5py.File(h5, "a") as f:
        f["other"] = np.arange(3)
    text = tmp_path / "t.npy"
    text.write_text("not an array")
    group = tmp_path / "g.zarr"
    oc.create(group, (2,), "f4", dataset="a")
    for dst, expected in [
        (papers, "not a zarr array"),
        (zarr_with_notes, "notes.txt"),
        (h5, "'other'"),
        (text, "not a .npy file"),
        (group, "zarr group"),
    ]:
        result = cli("convert", src, dst, "--overwrite")
        assert result.code == 1, (dst, result.err)
        assert expected in result.one_error_line(), result.err
    assert (papers / "thesis.tex").read_text() == "years of work"
    assert (zarr_with_notes / "notes.txt").read_text() == "mine"
    assert text.read_text() == "not an array"
    with h5py.File(h5, "r") as f:
        assert sorted(f) == ["data", "other"]
    assert oc.open(group, dataset="a").shape == (2,)
    empty = tmp_path / "empty.zarr"
    empty.mkdir()
    assert cli("convert", src, empty).code == 0  # an empty directory is no loss


def test_convert_of_strings_to_zarr_prints_no_warning(
    tmp_path: Path, cli: Callable[..., Result]
) -> None:
    """Issue 21, item 10: zarr-python's UnstableSpecificationWarning for string dtypes."""
    for name, values in (("u", np.array(["ab", "cde", "f"])), ("s", np.array([b"ab", b"c"]))):
        np.save(tmp_path / f"{name}.npy", values)
        result = cli("convert", tmp_path / f"{name}.npy", tmp_path / f"{name}.zarr")
        assert result.code == 0, result.err
        assert result.err == ""
        assert "Warning" not in result.out
        np.testing.assert_array_equal(oc.open(tmp_path / f"{name}.zarr")[...], values)


def test_urls_name_no_credentials_in_errors_and_file_urls_are_paths(
    tmp_path: Path, cli: Callable[..., Result]
) -> None:
    """Issue 21, item 10 and issue 23: a URL's credentials and signature never reach an error
    line.  The endpoint is a closed port on loopback: nothing leaves the machine."""
    src = write("npy", tmp_path)
    secret = "s3://AKIAKEY:hunter2@bucket/x.zarr?X-Amz-Signature=abc"
    closed = ["--storage-option", "endpoint=http://127.0.0.1:1", "--storage-option", "retries=0"]
    for args in (("info", secret), ("stats", secret), ("convert", src, secret)):
        result = cli(*args, *closed)
        assert result.code == 1
        line = result.one_error_line()
        assert "s3://bucket/x.zarr" in line
        assert "hunter2" not in line and "AKIAKEY" not in line and "Signature" not in line
    url = "file://" + str(tmp_path / "via-url.zarr")
    assert cli("convert", f"file://{src}", url).code == 0
    np.testing.assert_array_equal(oc.open(tmp_path / "via-url.zarr")[...], DATA)


@pytest.mark.parametrize(
    ("dst", "options", "code", "message"),
    [
        ("out.txt", [], 2, "cannot tell the output format"),
        ("out.h5", ["--codec", "zstd"], 2, "HDF5 outputs take --codec"),
        ("out.h5", ["--shards", "4,6"], 2, "--shards applies to zarr"),
        ("out.zarr", ["--codec", "brotli"], 2, "zarr outputs take --codec"),
        ("out.npy", ["--chunks", "4,6"], 2, "does not apply to a .npy"),
        ("out.npy", ["--codec", "gzip"], 2, "not compressed"),
        ("out.zarr", ["--chunks", "4"], 2, "one length per axis"),
        ("out.zarr", ["--chunks", "4,4", "--shards", "6,6"], 1, "multiple of chunks"),
        ("missing/out.zarr", [], 1, "does not exist"),
        ("out", ["--to", "parquet"], 2, "invalid choice"),
    ],
)
def test_convert_bad_arguments(
    dst: str,
    options: list[str],
    code: int,
    message: str,
    tmp_path: Path,
    cli: Callable[..., Result],
) -> None:
    src = write("npy", tmp_path)
    result = cli("convert", src, tmp_path / dst, *options)
    assert result.code == code
    assert message in result.one_error_line()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.npy"]


def test_convert_bad_sources(tmp_path: Path, cli: Callable[..., Result]) -> None:
    assert "does not exist" in cli("convert", tmp_path / "no.npy", tmp_path / "o.zarr").err
    src = write("npy", tmp_path)
    same = cli("convert", src, src, "--overwrite")
    assert same.code == 2
    assert "the same" in same.one_error_line()
    (tmp_path / "t.txt").write_text("text")
    assert cli("convert", tmp_path / "t.txt", tmp_path / "o.zarr").code == 1


@pytest.mark.parametrize("dst", ["o.zarr", "o.h5", "o.npy"])
def test_convert_of_a_damaged_source_leaves_nothing(
    dst: str, tmp_path: Path, cli: Callable[..., Result]
) -> None:
    src = write("zarr3", tmp_path)
    chunk = sorted(p for p in src.rglob("*") if p.is_file() and p.name != "zarr.json")[-1]
    chunk.write_bytes(b"not zstd at all")
    result = cli("convert", src, tmp_path / dst)
    assert result.code == 1
    result.one_error_line()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.zarr"]
